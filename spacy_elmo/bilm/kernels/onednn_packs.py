"""bf16 products for inference on a CPU, by weights prepacked once for oneDNN's linear.

``torch.bmm`` in bf16 on a CPU runs oneDNN's matmul on the weight as it lies in memory, every call.
Packed once into oneDNN's own blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, as
torch's compiler packs the weights of the linears it fuses) and multiplied by
``torch.ops.mkldnn._linear_pointwise``, the same products run much faster wherever the rows are
few, and no slower for batches, which is what a service's calls of one or a few sentences need
(the figures per shape and row count: project/docs/lab-notebook.md, "A service's request"). Each
product takes the same kernel whatever its rows, so a row's result does not depend on its
companions (tests/bilm/kernels/test_own_rows.py).

Small weights stay in the CPU's cache, and there the two calls per product (one per direction)
and the stacking of their results cost more than the packing saves (the bundled ``en`` ran
slower packed). So a weight is packed from :data:`MIN_PACKED_VALUES` values per direction (the
Small and bundled sizes keep plain copies, the Original packs all three of a layer's weights), a
rule of the shapes alone: every process and call multiplies a weight the same way, so that
results do not depend on which one ran.

The packs are opaque tensors (no storage to pickle or copy): they live in the stack's
:class:`~..memory.weight_copies.WeightCopies`, which starts empty after a pickle or a deep copy.
Where this torch build or CPU cannot (:func:`available`: no oneDNN, or a CPU where bf16 is
emulated), the bf16 kernel multiplies by plain copies.
"""

import functools
from typing import Callable, NamedTuple, Tuple

import torch
from torch import Tensor

# The values per direction from which a weight is packed (2 MiB in bf16).
MIN_PACKED_VALUES = 2**20


def _linear(x: Tensor, pack: Tensor) -> Tensor:
    """(rows, in) -> (rows, out), no bias, no fused activation."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), pack, None, "none", [], "")


@functools.lru_cache(maxsize=None)
def available(linear: Callable[[Tensor, Tensor], Tensor] = _linear) -> bool:
    """Whether this torch build packs and runs oneDNN's bf16 linears on this CPU: tried once, by
    ``linear``, on a small weight (oneDNN refuses bf16 packs on a CPU without AVX512-BW/VL/DQ or
    AVX-NE-CONVERT, or when ``ONEDNN_MAX_CPU_ISA`` caps it below them)."""
    mkldnn, names = torch.ops.mkldnn, ("_reorder_linear_weight", "_linear_pointwise")
    if not (torch.backends.mkldnn.is_available() and all(hasattr(mkldnn, name) for name in names)):
        return False
    try:
        linear(torch.ones(1, 16, dtype=torch.bfloat16), mkldnn._reorder_linear_weight(torch.ones(8, 16).bfloat16()))
    except RuntimeError:
        return False
    return True


def serves(weight: Tensor, min_values: int = MIN_PACKED_VALUES, linear: Callable = _linear) -> bool:
    """Whether inference's bf16 products by ``weight`` (2, in, out) run packed: on a CPU where
    oneDNN's linear runs (:func:`available`), from ``min_values`` values per direction."""
    return weight.device.type == "cpu" and weight[0].numel() >= min_values and available(linear)


class DirectionPacks(NamedTuple):
    """A product weight, each direction's (out, in) prepacked for oneDNN's linear."""

    packs: Tuple[Tensor, ...]

    def product(self, x: Tensor) -> Tensor:
        """``x @ weight`` in ``x``'s dtype: (2, rows, in) -> (2, rows, out)."""
        return torch.stack([_linear(x[d], pack) for d, pack in enumerate(self.packs)])


def pack_directions(
    weight: Tensor, dtype: torch.dtype, scale: Callable[[Tensor], Tensor] = lambda copy: copy
) -> DirectionPacks:
    """``weight`` (2, in, out), as a product weight takes it, cast to ``dtype``, each direction's
    (out, in) copy passed through ``scale`` (which may change it in place), and packed."""
    with torch.no_grad():  # one direction's copy at a time
        copies = (scale(w.T.to(dtype, memory_format=torch.contiguous_format, copy=True)) for w in weight.detach())
        return DirectionPacks(tuple(torch.ops.mkldnn._reorder_linear_weight(copy) for copy in copies))
