"""bf16 and int8 products on a CPU see a bounded set of row counts (see spacy_elmo.bilm.kernels.row_buckets)."""

from typing import List

import pytest
import torch

from spacy_elmo.bilm.kernels import int8_packs
from spacy_elmo.bilm.kernels.row_buckets import on_padded_rows, padded_rows


def test_padded_rows_are_few_and_at_most_an_eighth_more() -> None:
    counts = [padded_rows(rows) for rows in range(1, 2049)]
    assert len(set(counts)) == 72
    assert all(rows <= padded <= rows * 9 / 8 for rows, padded in zip(range(1, 2049), counts))
    assert counts[:15] == list(range(1, 16))


@pytest.mark.parametrize("dim", [0, 1])
def test_a_product_on_padded_rows_gives_the_rows_it_was_given(dim: int) -> None:
    torch.manual_seed(0)
    weight = torch.randn(2, 5, 3)
    seen: List[int] = []

    def product(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.shape[dim])
        return torch.bmm(x, weight) if dim == 1 else torch.bmm(x.transpose(0, 1), weight).transpose(0, 1)

    x = torch.randn(2, 37, 5) if dim == 1 else torch.randn(37, 2, 5)
    out = on_padded_rows(product, x, dim)
    assert seen == [40]
    assert out.shape == product(x).shape
    # float32's rounding only: a BLAS may block (and so sum) 40 rows otherwise than 37 (MKL's AVX2
    # kernels do), so the given rows' values may differ in the last bit.
    torch.testing.assert_close(out, product(x))


def test_the_int8_kernel_sees_padded_rows_and_returns_the_given_ones(monkeypatch) -> None:
    if not int8_packs.int8_available():
        pytest.skip("this torch build has no int8 kernels")
    torch.manual_seed(0)
    packed = int8_packs.pack(torch.randn(16, 8), torch.randn(16))
    seen: List[int] = []
    kernel = torch.ops.quantized.linear_dynamic

    class Recording:
        def linear_dynamic(self, x, pack, reduce_range):
            seen.append(x.shape[0])
            return kernel(x, pack, reduce_range)

    x = torch.randn(19, 8)
    expected = torch.cat([int8_packs.linear(x[i : i + 1], packed) for i in range(len(x))])  # each row alone
    monkeypatch.setattr(torch.ops, "quantized", Recording())
    out = int8_packs.linear(x, packed)
    assert seen == [20] and out.shape == (19, 16)
    torch.testing.assert_close(out, expected)


def test_a_bf16_pass_multiplies_only_padded_row_counts(monkeypatch) -> None:
    from ...helpers import random_bilm

    bilm = random_bilm(precision="bf16", cache_size=0).eval()
    rows_seen = set()
    products = {"bmm": torch.bmm, "linear": torch.nn.functional.linear}

    def recording(name: str, rows_dim: int):
        def product(x, *args, **kwargs):
            if x.dtype == torch.bfloat16:
                rows_seen.add(x.shape[rows_dim] if x.dim() == 3 else x.shape[0])
            return products[name](x, *args, **kwargs)

        return product

    monkeypatch.setattr(torch, "bmm", recording("bmm", 1))
    monkeypatch.setattr(torch.nn.functional, "linear", recording("linear", 0))
    with torch.no_grad():
        for n_sentences in (3, 17, 23):
            bilm([["word"] * (5 + i % 7) for i in range(n_sentences)])
    assert rows_seen and all(rows == padded_rows(rows) for rows in rows_seen)
