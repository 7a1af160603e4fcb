"""Dynamic int8 products for inference: ``precision = "int8"``.

The LSTM's products, which dominate inference from the Small size up, run on PyTorch's
dynamic-quantization kernels (``torch.ops.quantized.linear_dynamic``: oneDNN's where the CPU has
VNNI or AMX int8, else the current engine's, fbgemm on x86: see :func:`pack_engine`): at each step
one product of the step's input beside the previous output by the input and recurrent weights
stacked (see :mod:`.int8`), and the output projection. Each weight is quantized once per output
channel to int8 (scale: the channel's largest magnitude / 127) and prepacked for the kernel; each
call quantizes its activations per row (token) to uint8, so that a row's result is its own
whatever its batch (:func:`linear`), accumulates in int32 and returns float32, to which the
float32 bias is added. The gates, cell state, clipping, skip connections and outputs stay
float32, as in bf16 mode.

The char CNN does not run in int8: int8 highways and projection lose too much (mean per-token
cosine of layer 0 to float32 0.9965 on the bundled ``en`` biLM, below the 0.999 contract; its
inputs, the filters' maxima, have outliers that one per-tensor scale serves badly), while the LSTM
products keep 0.9999 (``benchmarks/int8_char_cnn.py``). It runs in bf16 where the CPU multiplies
bf16 in hardware, else in float32 (:attr:`~.precision.ResolvedPrecision.token_encoder_dtype`).

There is no gradient through int8 products: training refuses the precision
(:func:`check_no_gradient`). torch has deprecated its quantized tensor type (``quantize_per_channel``
warns), not yet the kernels; where they are missing, :func:`int8_available` says so and ``auto``
leaves int8 out.
"""

import contextlib
import threading
import warnings
from typing import Any, Iterator, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from ..precision import compat
from .row_buckets import padded_rows

# What `torch.backends.quantized.engine` must be for prepacked int8 linears: fbgemm on x86 (the
# "x86" engine picks fbgemm or onednn), qnnpack on ARM.
INT8_ENGINES = ("x86", "fbgemm", "onednn", "qnnpack")

# The CPU features (as torch.cpu.get_capabilities() names them) for whose int8 dot products the
# weights are packed for oneDNN's kernels: its dynamic int8 linear runs the LSTM's wide products
# faster there than fbgemm's, and only it uses AMX's int8 tiles (docs/bilm.md has the figures).
ONEDNN_FEATURES = ("avx512_vnni", "amx_int8")
_engine_lock = threading.Lock()

# The values each row of a product's input carries beyond its own, by weights of zero: they fix the
# kernel's activation range to [0, 255/128], so its scale to 2^-7 and its zero point to 0 (see
# StagedRows). Four keep a width divisible by four so.
PIN_COLUMNS = 4
PIN_VALUES = torch.tensor([0.0, 255 / 128, 0.0, 0.0])
# A row's values, divided by its magnitude, lie in [-1, 1]; times this, plus 1, in [1/128, 255/128]:
# the kernel's 8-bit values 1 to 255, 128 for zero.
ROW_RANGE = 127 / 128
# Each magnitude is multiplied by this, a hair over 1 / ROW_RANGE: by 1 / ROW_RANGE in float32 a
# row's largest value came out one ulp over ROW_RANGE for a fifth of magnitudes, and the pins must
# stay the tensor's extremes.
_OVER_ROW_RANGE, _ONE = torch.tensor(1 / ROW_RANGE * (1 + 2**-20)), torch.tensor(1.0)
TINY = torch.finfo(torch.float32).tiny  # an all-zero row's magnitude: its values stay 0, not NaN
# Products of up to this many rows run on fbgemm's packs where the weights are packed for oneDNN:
# fbgemm's dynamic linear is about twice as fast at few rows (the Original size's gates, 16,384 x
# 1,028: 149 against 269 us at one row, 376 against 731 at 8), oneDNN's from 64 rows (3,063 against
# 3,299 us); both give the same results to the bit (see pack).
FEW_ROWS = 16


def int8_available() -> bool:
    """Whether this torch build has the int8 kernels and an engine to run them on this CPU."""
    quantized = getattr(torch.ops, "quantized", None)
    return torch.backends.quantized.engine in INT8_ENGINES and hasattr(quantized, "linear_dynamic")


def check_no_gradient(tensors: Sequence[Tensor]) -> None:
    """Refuse int8 where a gradient is wanted: its products have none.

    Raised in training (a thinc update with ``freeze = false``, pretraining), which runs with
    gradients enabled on parameters that require them.
    """
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise ValueError(
            "precision 'int8' is for inference only: its products have no gradient, so the biLM cannot "
            'be trained in it. Set precision = "auto" (or "fp32" / "bf16") to fine-tune or pretrain, '
            "or freeze the biLM (freeze = true, or run it under torch.no_grad())"
        )


def pack_engine() -> str:
    """The quantized engine the weights are packed for: ``onednn`` where this CPU has int8 dot
    products that oneDNN runs (:data:`ONEDNN_FEATURES`) and torch has the engine, else torch's
    current engine. A pack carries its engine: :func:`linear` runs it whatever the current one."""
    capabilities = compat.cpu_capabilities()
    native = any(capabilities.get(feature, False) for feature in ONEDNN_FEATURES)
    if native and "onednn" in torch.backends.quantized.supported_engines:
        return "onednn"
    return torch.backends.quantized.engine


@contextlib.contextmanager
def _packing_for(engine: str) -> Iterator[None]:
    """torch's quantized engine set to ``engine`` while a pack is made (it is process-wide: other
    threads' quantized calls meanwhile use it too), then restored."""
    with _engine_lock:
        current = torch.backends.quantized.engine
        torch.backends.quantized.engine = engine
        try:
            yield
        finally:
            torch.backends.quantized.engine = current


class Packed(NamedTuple):
    """A weight quantized per output channel to int8 and prepacked for :func:`pack_engine`
    (``torch.ops.quantized.linear_prepack``, the pins' correction as its bias, see :func:`pack`),
    with its float32 bias (out,) or None. ``few_rows``: the same weight packed for fbgemm, for
    products of up to :data:`FEW_ROWS` rows, where the main pack is oneDNN's (else None).

    ``lock``: held around each product by a oneDNN pack. oneDNN's dynamic int8 linear keeps one
    primitive per pack, made at its first call and reused by later calls at the same torch thread
    count; calls on one pack from several threads at once, each at two or more torch threads, then
    give some of them wrong results (token cosine down to 0.88 at the Original size). fbgemm's
    packs keep no such state and take no lock. The pack's input width is the weight's plus
    :data:`PIN_COLUMNS`, their weights zero (see :func:`linear`)."""

    prepacked: Any
    bias: Optional[Tensor]
    lock: Optional[threading.Lock]
    few_rows: Any = None


def pack(weight: Tensor, bias: Optional[Tensor]) -> Packed:
    """A float32 weight (out, in) quantized per output channel to int8 and prepacked for
    :func:`pack_engine`, with its bias (out,); :data:`PIN_COLUMNS` zero columns appended.

    Each channel's scale is a power of two (its largest magnitude / 127, rounded up), and the
    kernel's bias takes away what the inputs' shift adds (128 times the channel's int8 weights,
    see :class:`StagedRows`). With the input's scale 2^-7 and its zero point 0, the kernel's result
    is then its int32 sum times powers of two, exact in float32 (while the sum stays under 2^24),
    so that every engine and row count gives it to the bit: fbgemm's packs can serve few rows
    beside oneDNN's (:data:`FEW_ROWS`). The scales use 64 to 127 of int8's levels where free ones
    would use 127: the bundled ``en`` biLM's LSTM layers still keep a mean per-token cosine of
    0.99996 to float32 (the tests' real sentences), above the 0.999 contract.
    """
    weight = torch.cat([weight.detach().float(), weight.new_zeros(weight.shape[0], PIN_COLUMNS)], dim=1)
    tiny = torch.finfo(torch.float32).tiny  # a power of two: an all-zero channel's scale
    scales = torch.exp2(torch.ceil(torch.log2(weight.abs().amax(dim=1).double() / 127.0))).clamp_min(tiny)
    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # the quantized tensor type is deprecated; the kernels are not
        warnings.filterwarnings("ignore", message=".*quantize_per_channel.*deprecated")
        quantized = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
    # 128 (the shifted zero) x 2^-7 (the input's scale) x the channel's int8 weights x its scale
    shift = -(quantized.int_repr().sum(dim=1).double() * scales).float()
    engine = pack_engine()
    with _packing_for(engine):
        prepacked = torch.ops.quantized.linear_prepack(quantized, shift)
    few_rows = None
    if engine == "onednn" and "fbgemm" in torch.backends.quantized.supported_engines:
        with _packing_for("fbgemm"):
            few_rows = torch.ops.quantized.linear_prepack(quantized, shift)
    lock = threading.Lock() if engine == "onednn" else None
    return Packed(prepacked, None if bias is None else bias.detach().float(), lock, few_rows)


def linear(x: Tensor, packed: Packed) -> Tensor:
    """``x @ weight.T + bias`` through the int8 kernel, each row's activations quantized with a
    scale of its own, so that a row's result does not depend on the others (see
    :class:`StagedRows`, which a loop of many products keeps). Shape: (n, in) float32 -> (n, out) float32."""
    return StagedRows(x.shape[0], x.shape[1]).linear(x, packed)


class StagedRows:
    """The kernel's input buffer of products of up to ``rows`` rows of ``width`` values, kept
    across the steps of a loop so that each product writes its scaled rows into it in one pass.

    The kernel quantizes its input to 8 bits with one scale and zero point per tensor, from the
    tensor's minimum and maximum. Each row is divided by its largest magnitude over
    :data:`ROW_RANGE` and shifted by 1, so its values lie in [1/128, 255/128], and every row
    carries :data:`PIN_COLUMNS` more values, 0 and 255/128 among them, whose weights are zero: those
    are then the tensor's minimum and maximum whatever the other rows, so every row is quantized
    with the scale 2^-7 and the zero point 0, which is its own once the pack's bias has taken the
    shift away and the result is multiplied back by its magnitude. Products run on
    :mod:`.row_buckets`' padded counts: the rows past a product's own hold the shifted zero or an
    earlier product's rows, within the range too, and their results are cut off.
    """

    def __init__(self, rows: int, width: int) -> None:
        self.width = width
        self.scaled = torch.ones(padded_rows(rows), width + PIN_COLUMNS)  # (padded rows, width + pins)
        self.scaled[:, width:] = PIN_VALUES

    def linear(self, x: Tensor, packed: Packed) -> Tensor:
        """``x @ weight.T + bias`` through the int8 kernel: (n, width) float32, n at most the
        buffer's rows -> (n, out) float32."""
        rows = x.shape[0]
        # (n, 1); torch's infinity norm over rows ran 14x slower (349 against 25 us at 64 x 4096)
        magnitudes = x.abs().amax(dim=1, keepdim=True).clamp_min_(TINY).mul_(_OVER_ROW_RANGE)
        # divided, then shifted in place (addcdiv ran 4-5x slower); by 0-dim tensors, which a
        # Python number would be converted to at each call
        torch.div(x, magnitudes, out=self.scaled[:rows, : self.width]).add_(_ONE)
        result = _product(self.scaled[: padded_rows(rows)], packed)[:rows]
        if packed.bias is None:
            return result.mul_(magnitudes)
        return torch.addcmul(packed.bias, result, magnitudes, out=result)  # in place: no fresh buffer to fault in


def _product(x: Tensor, packed: Packed) -> Tensor:
    """The kernel's product of ``x`` (n, in) by the pack, (n, out): on its fbgemm pack for up to
    :data:`FEW_ROWS` rows where it has one, else under the pack's lock if it has one."""
    if packed.few_rows is not None and x.shape[0] <= FEW_ROWS:
        return torch.ops.quantized.linear_dynamic(x, packed.few_rows, False)
    with packed.lock or contextlib.nullcontext():
        return torch.ops.quantized.linear_dynamic(x, packed.prepacked, False)
