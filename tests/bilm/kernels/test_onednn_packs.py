"""bf16 products by weights packed for oneDNN's linear (onednn_packs): the bf16 product, per direction."""

import pytest
import torch

from spacy_elmo.bilm.kernels import Bf16Kernel, KernelChoice, onednn_packs
from spacy_elmo.bilm.memory.weight_copies import WeightCopies

from ...helpers import random_bilm

pytestmark = pytest.mark.skipif(not onednn_packs.available(), reason="this torch build has no oneDNN linear")


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_a_packed_product_is_each_directions_bf16_product(rows: int) -> None:
    torch.manual_seed(rows)
    weight, x = torch.randn(2, 64, 96), torch.randn(2, rows, 64).to(torch.bfloat16)
    found = onednn_packs.pack_directions(weight, torch.bfloat16).product(x)
    expected = torch.bmm(x.float(), weight.to(torch.bfloat16).float())  # exact products, float32 sums
    assert found.dtype == torch.bfloat16 and found.shape == (2, rows, 96)
    torch.testing.assert_close(found.float(), expected, rtol=2**-7, atol=1e-2)  # the output's bf16 rounding


def test_a_rows_result_is_its_own_alone_and_among_others() -> None:
    """Within the output's bf16 rounding: a CPU may sum a lone row in another order than many
    (the model-level bound, 1e-4 of a doc's largest value, is test_own_rows')."""
    torch.manual_seed(0)
    packs = onednn_packs.pack_directions(torch.randn(2, 256, 1024), torch.bfloat16)
    x = torch.randn(2, 24, 256).to(torch.bfloat16)
    together = packs.product(x).float()
    for row in (0, 7, 23):
        alone, among = packs.product(x[:, row : row + 1]).float(), together[:, row : row + 1]
        assert float(((alone - among).abs() / among.abs().clamp_min(1e-2)).max()) <= 2**-7
        assert float((alone != among).float().mean()) < 0.01


def refuse(*args: object) -> torch.Tensor:
    """oneDNN's linear on a CPU without the features of bf16 packs."""
    raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx512bw")


def test_large_weights_are_packed_small_ones_keep_plain_copies() -> None:
    large = torch.zeros(2, 1024, onednn_packs.MIN_PACKED_VALUES // 1024)
    assert onednn_packs.serves(large) and not onednn_packs.serves(large[:, :, :-1])
    assert not onednn_packs.serves(large.to("meta"))  # a CPU's only
    assert not onednn_packs.serves(large, linear=refuse)  # where oneDNN's linear is not available


def test_the_kernel_multiplies_by_packs_kept_with_the_stacks_copies() -> None:
    layer = random_bilm().lstm.layers[0]
    copies, every_weight = WeightCopies(), KernelChoice(packed_from=0)
    weights = Bf16Kernel(copies, out_major=True, choice=every_weight).weights(0, layer)
    products = (weights.input, weights.hidden, weights.projection)
    assert all(isinstance(w, onednn_packs.DirectionPacks) for w in products) and len(copies) == 3
    again = Bf16Kernel(copies, out_major=True, choice=every_weight).weights(0, layer)
    assert again.hidden is weights.hidden  # kept, not packed again
    with torch.no_grad():
        layer.hidden_weight.add_(1.0)  # a changed parameter is packed again
    assert Bf16Kernel(copies, out_major=True, choice=every_weight).weights(0, layer).hidden is not weights.hidden


def test_a_cpu_that_refuses_bf16_packs_multiplies_by_plain_copies() -> None:
    assert not onednn_packs.available(refuse)
    assert not onednn_packs.serves(torch.zeros(2, 1024, 1024), linear=refuse)
    assert onednn_packs.available()  # this CPU's own linear is tried apart
