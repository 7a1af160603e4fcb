"""Dynamic int8 products for inference: ``precision = "int8"``.

The LSTM's products, which dominate inference from the Small size up, run on PyTorch's
dynamic-quantization kernels (``torch.ops.quantized.linear_dynamic``: oneDNN's where the CPU has
VNNI or AMX int8, else the current engine's, fbgemm on x86: see :func:`pack_engine`): at each step
one product of the step's input beside the previous output by the input and recurrent weights
stacked (see :mod:`.int8`), and the output projection. Each weight is quantized once per output
channel to int8 (:func:`channel_scales`) and prepacked for the kernel; each call quantizes its
activations per row (token) to uint8, so that a row's result is its own whatever its batch
(:func:`linear`), accumulates in int32 and returns float32, to which the float32 bias is added.
How the 8-bit values are used depends on how the kernel sums them (:class:`Int8Layout`, measured
by :func:`sums_int8_products_exactly`): x86 CPUs without VNNI or AMX sum pairs of products in
saturating int16 first, and get rows and weights that keep those pairs within it. The gates,
cell state, clipping, skip connections and outputs stay float32, as in bf16 mode.

The char CNN does not run in int8: int8 highways and projection lose too much (its inputs, the
filters' maxima, have outliers that one per-tensor scale serves badly; project/docs/lab-notebook.md,
"Speed experiments retired from benchmarks/"), while the LSTM products keep the accuracy contract.
It runs in bf16 where the CPU multiplies bf16 in hardware, else in float32
(:meth:`~.precision.ResolvedPrecision.token_encoder_dtype`).

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

from ..precision.hardware import MACHINE, Hardware
from .row_buckets import padded_rows

# What `torch.backends.quantized.engine` must be for prepacked int8 linears: fbgemm on x86 (the
# "x86" engine picks fbgemm or onednn), qnnpack on ARM.
INT8_ENGINES = ("x86", "fbgemm", "onednn", "qnnpack")

# The CPU features (as torch.cpu.get_capabilities() names them) for whose int8 dot products the
# weights are packed for oneDNN's kernels: its dynamic int8 linear runs the LSTM's wide products
# faster there than fbgemm's, and only it uses AMX's int8 tiles (docs/bilm.md has the figures).
ONEDNN_FEATURES = ("avx512_vnni", "amx_int8")
# Process-wide by nature: torch's quantized engine is one setting of the process, which packing
# for another engine switches (:func:`_packing_for`), whichever biLM packs.
_engine_lock = threading.Lock()

# The values each row of a product's input carries beyond its own, by weights of zero: they fix the
# kernel's activation range to [0, 255/128], so its scale to 2^-7 and its zero point to 0 (see
# StagedRows). Four keep a width divisible by four so.
PIN_COLUMNS = 4
PIN_VALUES = torch.tensor([0.0, 255 / 128, 0.0, 0.0])
TINY = torch.finfo(torch.float32).tiny  # an all-zero row's magnitude: its values stay 0, not NaN
# Products of up to this many rows run on fbgemm's packs where the weights are packed for oneDNN:
# fbgemm's dynamic linear is faster at few rows, oneDNN's from some tens of rows (docs/bilm.md);
# both give the same results to the bit (see pack).
FEW_ROWS = 16


class Int8Layout(NamedTuple):
    """How a pack's products use the kernel's 8-bit values, so that their sums stay exact.

    Rows: a row divided by its magnitude lies in [-1, 1]; times ``half_width``, plus ``zero``, in
    ``[zero - half_width, zero + half_width]``, 128 times which are its 8-bit values (scale 2^-7,
    zero point 0, see :class:`StagedRows`). ``over_half_width``: what each magnitude is multiplied
    by, a hair over 1 / ``half_width``: by 1 / ``half_width`` exactly, in float32 a row's largest
    value came out one ulp over the range for a fifth of magnitudes, and the pins must stay the
    tensor's extremes.

    Weights (:func:`channel_scales`): ``pair_sum`` None, each channel's scale a power of two, its
    int8 values within [-127, 127]; else free scales such that the magnitudes of each pair of
    adjacent int8 weights sum to at most ``pair_sum``."""

    half_width: float
    zero: float
    pair_sum: Optional[int]
    over_half_width: Tensor
    zero_value: Tensor

    @classmethod
    def of(cls, half_width: float, zero: float, pair_sum: Optional[int] = None) -> "Int8Layout":
        return cls(half_width, zero, pair_sum, torch.tensor(1 / half_width * (1 + 2**-20)), torch.tensor(zero))


# For kernels whose int8 products sum in int32 (VNNI, AMX): rows at the 8-bit values 1 to 255, 128
# for zero, and power-of-two weight scales, so that every engine gives a product to the bit.
FULL_LAYOUT = Int8Layout.of(127 / 128, 1.0)
# For kernels that sum each pair of adjacent u8 x s8 products in saturating int16 first (x86 without
# VNNI: vpmaddubsw), where 255 x 127 twice reaches 64,770. Rows at the values 1 to 181, 91 for zero,
# and each pair of int8 weights of at most 181 in magnitude together: a pair's sum then stays within
# 181 x 181 = 32,761, under int16's 32,767. Values and weights each give up half a bit, where 7-bit
# rows alone (1 to 129 by weights of 127) would give up a whole one on the rows.
PAIR_SAFE_LAYOUT = Int8Layout.of(90 / 128, 91 / 128, 181)


def int8_available() -> bool:
    """Whether this torch build has the int8 kernels and an engine to run them on this CPU."""
    quantized = getattr(torch.ops, "quantized", None)
    return torch.backends.quantized.engine in INT8_ENGINES and hasattr(quantized, "linear_dynamic")


def check_no_gradient(tensors: Sequence[Tensor]) -> None:
    """Refuse int8 where a gradient is wanted (training: a thinc update with ``freeze = false``,
    pretraining, with gradients enabled on parameters that require them): its products have none."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise ValueError(
            "precision 'int8' is for inference only: its products have no gradient, so the biLM cannot "
            'be trained in it. Set precision = "auto" (or "fp32" / "bf16") to fine-tune or pretrain, '
            "or freeze the biLM (freeze = true, or run it under torch.no_grad())"
        )


def pack_engine(hardware: Hardware = MACHINE) -> str:
    """The quantized engine the weights are packed for: ``onednn`` where the CPU of ``hardware`` has
    int8 dot products that oneDNN runs (:data:`ONEDNN_FEATURES`) and torch has the engine, else
    torch's current engine. A pack carries its engine: :func:`linear` runs it whatever the current one."""
    capabilities = hardware.cpu_capabilities()
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
    with its float32 bias (out,) or None, and its :class:`Int8Layout`. ``few_rows``: the same
    weight packed for fbgemm, for products of up to :data:`FEW_ROWS` rows, where the main pack is
    oneDNN's and of the full layout (else None). Concurrent calls on one pack get what serial calls
    get on either engine (tests/bilm/kernels/test_own_rows.py, from 8 threads), so no lock guards them."""

    prepacked: Any
    bias: Optional[Tensor]
    layout: Int8Layout
    few_rows: Any = None


def _per_channel(weight: Tensor, scales: Tensor) -> Tensor:
    """``weight`` (out, in) float32 quantized to int8 per output channel by ``scales`` (out,), zero points 0."""
    with warnings.catch_warnings():  # the quantized tensor type is deprecated; the kernels are not
        warnings.filterwarnings("ignore", message=".*quantize_per_channel.*deprecated")
        return torch.quantize_per_channel(weight, scales, torch.zeros(len(weight), dtype=torch.long), 0, torch.qint8)


def sums_int8_products_exactly(engine: str) -> bool:
    """Whether ``engine``'s int8 product sums u8 x s8 products without saturating, at the full
    8-bit range: a row of 255s by weights of 127, whose pairs reach 64,770.

    Measured, not read from the CPU's features: fbgemm and oneDNN pick their instructions from the
    CPU and from their own caps (``FBGEMM_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``). Without
    VNNI or AMX both sum pairs in int16 first; oneDNN uses AVX-VNNI where a CPU has only that,
    fbgemm does not (docs/bilm.md). One product of a (1, 8) row by an (8, 8) weight, once per pack."""
    quantized = _per_channel(torch.ones(8, 8), torch.full((8,), 1 / 127, dtype=torch.double))
    with _packing_for(engine):
        probe = torch.ops.quantized.linear_prepack(quantized, None)
    row = torch.full((1, 8), 255 / 128)
    row[0, 0] = 0.0  # the range's minimum: scale 2^-7, zero point 0, as the pins make it
    return bool((torch.ops.quantized.linear_dynamic(row, probe, False) == 7 * 255 / 128).all())


def channel_scales(weight: Tensor, layout: Int8Layout) -> Tensor:
    """Each output channel's scale (out,) float64 for ``weight`` (out, in), as ``layout`` says.

    The full layout's: the channel's largest magnitude / 127, rounded up to a power of two, so that
    the kernel's result is its int32 sum times powers of two, exact in float32 (while the sum stays
    under 2^24) and the same from every engine and row count; they use 64 to 127 of int8's levels.
    The pair-safe layout's: the largest sum of a pair of adjacent magnitudes / (``pair_sum`` - 1),
    the 1 for the two values' roundings, and at least the largest magnitude / 127."""
    magnitudes = weight.abs().double()
    largest = magnitudes.amax(dim=1) / 127.0  # TINY, a power of two, is an all-zero channel's scale
    if layout.pair_sum is None:
        return torch.exp2(torch.ceil(torch.log2(largest))).clamp_min(TINY)
    pairs = torch.nn.functional.pad(magnitudes, (0, weight.shape[1] % 2)).view(weight.shape[0], -1, 2).sum(dim=2)
    return torch.maximum(pairs.amax(dim=1) / (layout.pair_sum - 1), largest).clamp_min(TINY)


def pack(
    weight: Tensor, bias: Optional[Tensor], layout: Optional[Int8Layout] = None, engine: Optional[str] = None
) -> Packed:
    """A float32 weight (out, in) quantized per output channel to int8 (:func:`channel_scales`) and
    prepacked for ``engine`` (:func:`pack_engine`'s), with its bias (out,); :data:`PIN_COLUMNS` zero
    columns appended. ``layout``: by default the one its engine sums exactly (the full one where
    :func:`sums_int8_products_exactly`, else the pair-safe one).

    The kernel's bias takes away what the inputs' shift adds (the layout's zero times the
    channel's weights, see :class:`StagedRows`). Where the main pack is oneDNN's, products of few
    rows run on fbgemm's pack of the same weight (:data:`FEW_ROWS`), in the full layout only:
    there both engines give every product to the bit.
    """
    weight = torch.cat([weight.detach().float(), weight.new_zeros(weight.shape[0], PIN_COLUMNS)], dim=1)
    engine = engine or pack_engine()
    layout = layout or (FULL_LAYOUT if sums_int8_products_exactly(engine) else PAIR_SAFE_LAYOUT)
    scales = channel_scales(weight, layout)
    quantized = _per_channel(weight, scales)
    # the layout's zero (its 8-bit value x 2^-7, the input's scale) x the channel's int8 weights x its scale
    shift = -(quantized.int_repr().sum(dim=1).double() * scales * layout.zero).float()
    with _packing_for(engine):
        prepacked = torch.ops.quantized.linear_prepack(quantized, shift)
    few_rows = None
    fbgemm_here = "fbgemm" in torch.backends.quantized.supported_engines
    if engine == "onednn" and layout is FULL_LAYOUT and fbgemm_here and sums_int8_products_exactly("fbgemm"):
        with _packing_for("fbgemm"):
            few_rows = torch.ops.quantized.linear_prepack(quantized, shift)
    return Packed(prepacked, None if bias is None else bias.detach().float(), layout, few_rows)


def linear(x: Tensor, packed: Packed) -> Tensor:
    """``x @ weight.T + bias`` through the int8 kernel, each row's activations quantized with a
    scale of its own, so that a row's result does not depend on the others (see
    :class:`StagedRows`, which a loop of many products keeps). Shape: (n, in) float32 -> (n, out) float32."""
    return StagedRows(x.shape[0], x.shape[1], packed.layout).linear(x, packed)


class StagedRows:
    """The kernel's input buffer of products of up to ``rows`` rows of ``width`` values on packs of
    one :class:`Int8Layout`, kept across the steps of a loop so that each product writes its scaled
    rows into it in one pass.

    The kernel quantizes its input to 8 bits with one scale and zero point per tensor, from the
    tensor's minimum and maximum. Each row is divided by its largest magnitude over the range's
    half width and shifted by its zero, so its values lie in the range, and every row carries
    :data:`PIN_COLUMNS` more values, 0 and 255/128 among them, whose weights are zero: those are
    then the tensor's minimum and maximum whatever the other rows, so every row is quantized with
    the scale 2^-7 and the zero point 0, which is its own once the pack's bias has taken the shift
    away and the result is multiplied back by its magnitude. Products run on :mod:`.row_buckets`'
    padded counts: the rows past a product's own hold the shifted zero or an earlier product's
    rows, within the range too, and their results are cut off.
    """

    def __init__(self, rows: int, width: int, layout: Int8Layout) -> None:
        self.width = width
        self.layout = layout
        self.scaled = torch.full((padded_rows(rows), width + PIN_COLUMNS), layout.zero)  # (padded rows, width + pins)
        self.scaled[:, width:] = PIN_VALUES

    def linear(self, x: Tensor, packed: Packed) -> Tensor:
        """``x @ weight.T + bias`` through the int8 kernel: (n, width) float32, n at most the
        buffer's rows -> (n, out) float32, on a pack of this buffer's layout."""
        if packed.layout is not self.layout:
            raise ValueError("a pack's rows need a buffer of its layout: StagedRows(rows, width, pack.layout)")
        rows = x.shape[0]
        # (n, 1); torch's infinity norm over rows ran several times slower
        magnitudes = x.abs().amax(dim=1, keepdim=True).clamp_min_(TINY).mul_(self.layout.over_half_width)
        # divided, then shifted in place (addcdiv ran slower); by 0-dim tensors, which a Python
        # number would be converted to at each call
        torch.div(x, magnitudes, out=self.scaled[:rows, : self.width]).add_(self.layout.zero_value)
        result = _product(self.scaled[: padded_rows(rows)], packed)[:rows]
        if packed.bias is None:
            return result.mul_(magnitudes)
        return torch.addcmul(packed.bias, result, magnitudes, out=result)  # in place: no fresh buffer to fault in


def _product(x: Tensor, packed: Packed) -> Tensor:
    """The kernel's product of ``x`` (n, in) by the pack, (n, out): on its fbgemm pack for up to
    :data:`FEW_ROWS` rows where it has one."""
    if packed.few_rows is not None and x.shape[0] <= FEW_ROWS:
        return torch.ops.quantized.linear_dynamic(x, packed.few_rows, False)
    return torch.ops.quantized.linear_dynamic(x, packed.prepacked, False)
