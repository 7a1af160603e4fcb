"""How close the biLM runs to this machine's own matrix-product rate: the roofline of ``spacy-elmo bench``.

:func:`.bilm.flops.flops_per_token` counts the products of one token from the options; :func:`product_rates`
times this machine's products, per dtype, at the shapes the biLM multiplies; the biLM's rate is
its tokens/s times its FLOP per token, and its fraction of the best product rate says how much of
the machine it uses. The products are timed in the same run as the biLM, at the same thread
count, so that a busy machine slows both alike.
"""

import math
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Dict, List, Sequence

import torch

from ..kernels import int8_packs, onednn_packs
from ..model.options import ElmoOptions
from .flops import FlopCount
from .kinds import PRODUCT_PRECISIONS, product_precision
from .resolved import own_precision
from .timed_passes import Clock

# The precisions timed with ``torch.bmm``, and the dtype of each; the others through their kernel.
DTYPES = {name: kind.roofline_dtype for name, kind in PRODUCT_PRECISIONS.items() if kind.roofline_dtype is not None}
LARGE_ROWS = 1024  # rows of the large product: what the LSTM's input product reaches with long batches
MIN_SECONDS = 0.2  # each product is timed at least this long (after one untimed call) ...
MIN_REPEATS, MAX_REPEATS = 3, 50  # ... and at least 3 times; its rate is that of its fastest call


@dataclass(frozen=True)
class Product:
    """A product the biLM makes: ``batch`` independent (rows x inner) @ (inner x cols) products."""

    label: str
    batch: int
    rows: int
    inner: int
    cols: int
    char_cnn: bool = False  # a product of the char CNN, which int8 mode runs in bf16 or fp32 (encodes_tokens)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.rows * self.inner * self.cols

    def describe(self) -> str:
        shape = f"({self.rows} x {self.inner}) @ ({self.inner} x {self.cols})"
        return f"{self.label}: {self.batch} x {shape}" if self.batch > 1 else f"{self.label}: {shape}"


def bilm_products(
    options: ElmoOptions, n_sentences: int, n_positions: int, n_distinct: int, large_rows: int = LARGE_ROWS
) -> List[Product]:
    """The biLM's products for a batch of ``n_sentences`` of ``n_positions`` positions each
    (boundaries included) holding ``n_distinct`` distinct tokens, and a large product of the
    LSTM's input shape at ``large_rows`` rows, nearer what the machine can do.

    The LSTM multiplies both directions at once (a batch of 2): its input product at every
    position of the batch, its recurrent and projection products at one step (a row per
    sentence). The highway runs once per distinct token.
    """
    p, g = options.projection_dim, 4 * options.lstm_dim
    return [
        Product("LSTM input", 2, n_sentences * n_positions, p, g),
        Product("LSTM recurrent, per step", 2, n_sentences, p, g),
        Product("LSTM projection, per step", 2, n_sentences, options.lstm_dim, p),
        Product("highway", 1, n_distinct, options.n_filters, options.n_filters, char_cnn=True),
        Product("large", 1, large_rows, p, g),
    ]


def product_rates(
    products: Sequence[Product], precisions: Sequence[str], seconds: float = MIN_SECONDS
) -> Dict[str, Dict[Product, float]]:
    """FLOP/s of each product in each precision, each timed for ``seconds`` (:func:`time_product`):
    ``torch.bmm`` on random tensors of the dtype, for bf16 also by packed weights (:mod:`..kernels.onednn_packs`);
    for int8 the biLM's own kernel (dynamic quantization, :func:`.bilm.int8.linear`: activations quantized per call)."""
    rates: Dict[str, Dict[Product, float]] = {}
    with torch.no_grad():
        for precision in precisions:
            rates[precision] = {product: _rate(product, precision, seconds) for product in products}
    return rates


def _rate(product: Product, precision: str, seconds: float) -> float:
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(product.batch, product.rows, product.inner, generator=generator)
    b = torch.randn(product.batch, product.inner, product.cols, generator=generator)
    dtype = product_precision(precision).roofline_dtype
    if dtype is None:  # int8: its own kernel
        packs = [int8_packs.pack(b[i].T, None) for i in range(product.batch)]

        def run() -> None:
            for i in range(product.batch):
                int8_packs.linear(a[i], packs[i])

        return time_product(run, product.flops, seconds=seconds)
    runs = [partial(torch.bmm, a.to(dtype), b.to(dtype))]
    # The weight stored (in, out), (out, in) read through its transposed view, and in bf16 packed
    # for oneDNN's linear, as the biLM's copies are on a CPU: the machine's rate is the fastest's.
    runs.append(partial(torch.bmm, a.to(dtype), b.transpose(1, 2).to(dtype).contiguous().transpose(1, 2)))
    if dtype == torch.bfloat16 and onednn_packs.available():
        runs.append(partial(onednn_packs.pack_directions(b, dtype).product, a.to(dtype)))
    with own_precision(torch.device("cpu"), dtype):
        return max(time_product(run, product.flops, seconds=seconds) for run in runs)


def time_product(
    run: Callable[[], object], flops: int, clock: Clock = time.perf_counter, seconds: float = MIN_SECONDS
) -> float:
    """FLOP/s of ``run``'s fastest call, after one untimed call (kernel choice, packing, caches),
    over at least :data:`MIN_REPEATS` calls and ``seconds``."""
    run()
    best, spent, repeats = math.inf, 0.0, 0
    while repeats < MIN_REPEATS or (spent < seconds and repeats < MAX_REPEATS):
        start = clock()
        run()
        took = clock() - start
        best, spent, repeats = min(best, took), spent + took, repeats + 1
    return flops / max(best, 1e-12)


@dataclass(frozen=True)
class Roofline:
    """One precision's place against the machine: the biLM's rate and the best product rate."""

    precision: str
    tokens_per_s: float
    flops_per_s: float  # the biLM's: tokens/s x FLOP per token
    best_rate: float  # the fastest of the measured products in this precision
    best_product: Product

    @property
    def fraction(self) -> float:
        return self.flops_per_s / self.best_rate


def roofline(precision: str, tokens_per_s: float, count: FlopCount, rates: Dict[Product, float]) -> Roofline:
    """``precision``'s line: the best rate is over the products it runs in that precision (int8
    leaves the char CNN's in fp32: it does not encode tokens)."""
    encodes_tokens = product_precision(precision).encodes_tokens
    own = [product for product in rates if encodes_tokens or not product.char_cnn]
    best = max(own, key=lambda product: rates[product])
    return Roofline(precision, tokens_per_s, tokens_per_s * count.total, rates[best], best)


def report(count: FlopCount, rates: Dict[str, Dict[Product, float]], lines: Dict[str, Roofline]) -> List[str]:
    """The roofline as text: the FLOP count, a table of product rates per precision, and a table
    of the biLM's rate against the best of them."""
    precisions = list(rates)
    products = list(next(iter(rates.values())))
    out = [f"FLOP per token, from the options: {count.describe()}"]
    out.append("| this machine's product rate, GFLOP/s | " + " | ".join(precisions) + " |")
    out.append("|---|" + "---|" * len(precisions))
    for product in products:
        out.append(
            f"| {product.describe()} | " + " | ".join(f"{rates[p][product] / 1e9:,.1f}" for p in precisions) + " |"
        )
    out.append("| precision | tokens/s | biLM GFLOP/s | best product GFLOP/s | fraction of it |")
    out.append("|---|---|---|---|---|")
    for line in lines.values():
        out.append(
            f"| {line.precision} | {line.tokens_per_s:,.0f} | {line.flops_per_s / 1e9:,.1f} | "
            f"{line.best_rate / 1e9:,.1f} ({line.best_product.label}) | {line.fraction:.2f} |"
        )
    for name in lines:
        if not product_precision(name).encodes_tokens:
            out.append(
                f"({name} runs the LSTM's products in {name}, the char CNN's in bf16 or fp32: "
                "its best rate is of the LSTM's shapes)"
            )
    return out
