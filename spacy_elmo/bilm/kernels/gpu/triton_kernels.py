"""The two Triton kernels of the fused LSTM step (see :mod:`.fused_lstm`), and their launchers.

A module of its own, imported at the first fused step only: a CPU-only install never imports
Triton, and Triton reads ``TRITON_INTERPRET`` when the kernels are defined, so that tests can run
them on CPU tensors in its interpreter.

Both kernels take an optional per-row length tensor (``MASKED``), for the CUDA graphs'
:func:`.fused_lstm.padded_layer`: a row at or past its length keeps its memory and state and
writes a zero output. The launched loop computes only the rows still running and passes none.
"""

from typing import Optional

import triton
import triton.language as tl
from torch import Tensor

BLOCK = 1024  # memory cells (or projection outputs) per program


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def _gate(pre, bias, rec, k, width, valid):
    """Gate ``k``'s pre-activation: (input product + bias) + recurrent product, in float32."""
    p = tl.load(pre + k * width, mask=valid, other=0.0).to(tl.float32)
    b = tl.load(bias + k * width, mask=valid, other=0.0)
    r = tl.load(rec + k * width, mask=valid, other=0.0).to(tl.float32)
    return (p + b) + r


@triton.jit
def _live(cols, width, lengths_ptr, row, step, MASKED: tl.constexpr):
    """The columns this program reads and writes: those inside ``width``, none where the row has
    ended (``MASKED``: its length is at most ``step``)."""
    if MASKED:
        # One comparison, not `(cols < width) & (step < length)`: Triton 3.9's interpreter makes
        # that an int32 mask, which its loads refuse.
        return cols < tl.where(step < tl.load(lengths_ptr + row), width, 0)
    return cols < width


@triton.jit(do_not_specialize=["step"])
def _cell_kernel(
    pre_ptr,
    pre_dir_stride,
    pre_row_stride,
    rec_ptr,
    bias_ptr,
    memory_ptr,
    memory_dir_stride,
    out_ptr,
    out_dir_stride,
    lengths_ptr,
    step,
    rows,
    width,
    cell_clip,
    MASKED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One program: one row of one direction, ``BLOCK`` of its ``width`` memory cells.

    Gates i, j, f, o (TensorFlow's order), each ``width`` wide: memory = clip(sigmoid(i) *
    tanh(j) + sigmoid(f) * memory), out = sigmoid(o) * tanh(memory). A row that has ended
    reads and writes nothing.
    """
    program = tl.program_id(0)
    direction = program // rows
    row = program % rows
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    valid = _live(cols, width, lengths_ptr, row, step, MASKED)
    pre = pre_ptr + direction * pre_dir_stride + row * pre_row_stride + cols
    rec = rec_ptr + program * 4 * width + cols
    bias = bias_ptr + direction * 4 * width + cols
    in_gate = _sigmoid(_gate(pre, bias, rec, 0, width, valid))
    cell_input = _tanh(_gate(pre, bias, rec, 1, width, valid))
    forget_gate = _sigmoid(_gate(pre, bias, rec, 2, width, valid))
    out_gate = _sigmoid(_gate(pre, bias, rec, 3, width, valid))
    memory_at = memory_ptr + direction * memory_dir_stride + row * width + cols
    memory = in_gate * cell_input + forget_gate * tl.load(memory_at, mask=valid, other=0.0)
    memory = tl.minimum(tl.maximum(memory, -cell_clip), cell_clip)
    tl.store(memory_at, memory, mask=valid)
    out = out_gate * _tanh(memory)
    tl.store(out_ptr + direction * out_dir_stride + row * width + cols, out.to(out_ptr.dtype.element_ty), mask=valid)


@triton.jit(do_not_specialize=["step"])
def _project_kernel(
    proj_ptr,
    output_ptr,
    output_dir_stride,
    hidden_ptr,
    hidden_dir_stride,
    final_ptr,
    final_dir_stride,
    lengths_ptr,
    step,
    rows,
    width,
    proj_clip,
    MASKED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """clip(proj) into the layer's output (float32), the next step's product input and the final
    hidden state (float32); a row that has ended writes a zero output only."""
    program = tl.program_id(0)
    direction = program // rows
    row = program % rows
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    valid = cols < width
    live = _live(cols, width, lengths_ptr, row, step, MASKED)
    proj = tl.load(proj_ptr + program * width + cols, mask=live, other=0.0).to(tl.float32)
    proj = tl.minimum(tl.maximum(proj, -proj_clip), proj_clip)  # 0 where the row has ended
    tl.store(output_ptr + direction * output_dir_stride + row * width + cols, proj, mask=valid)
    hidden_at = hidden_ptr + direction * hidden_dir_stride + row * width + cols
    tl.store(hidden_at, proj.to(hidden_ptr.dtype.element_ty), mask=live)
    tl.store(final_ptr + direction * final_dir_stride + row * width + cols, proj, mask=live)


def fused_cell(
    pre: Tensor,
    rec: Tensor,
    bias: Tensor,
    memory: Tensor,
    cell_clip: float,
    out: Tensor,
    lengths: Optional[Tensor],
    step: int,
) -> None:
    """Gates to memory (in place) and cell output (into ``out``), one kernel.

    Shapes: ``pre`` (2, rows, 4 * width) and ``rec`` (2, rows, 4 * width), any float dtype,
    ``rec`` contiguous; ``bias`` (2, 4 * width) float32, contiguous; ``memory`` (2, >= rows,
    width) float32; ``out`` (2, >= rows, width), in the dtype of the next product. Directions may
    be strided in all but ``rec``; rows in ``pre`` too; every last dimension is contiguous.
    ``lengths`` (>= rows,) int32, or None where every row runs: a row whose length is at most
    ``step`` is left alone.
    """
    rows, width = rec.shape[1], memory.shape[2]
    grid = (2 * rows, triton.cdiv(width, BLOCK))
    _cell_kernel[grid](
        pre,
        pre.stride(0),
        pre.stride(1),
        rec,
        bias,
        memory,
        memory.stride(0),
        out,
        out.stride(0),
        lengths,
        step,
        rows,
        width,
        cell_clip,
        MASKED=lengths is not None,
        BLOCK=BLOCK,
    )


def fused_projection(
    proj: Tensor, proj_clip: float, output: Tensor, hidden: Tensor, final: Tensor, lengths: Optional[Tensor], step: int
) -> None:
    """Clipped ``proj`` (2, rows, width), contiguous, into ``output`` (float32), ``hidden`` (the
    product dtype) and ``final`` (float32), each (2, >= rows, width), rows contiguous; one kernel.
    ``lengths`` as in :func:`fused_cell`: a row that has ended gets a zero ``output`` only."""
    rows, width = proj.shape[1], proj.shape[2]
    grid = (2 * rows, triton.cdiv(width, BLOCK))
    _project_kernel[grid](
        proj,
        output,
        output.stride(0),
        hidden,
        hidden.stride(0),
        final,
        final.stride(0),
        lengths,
        step,
        rows,
        width,
        proj_clip,
        MASKED=lengths is not None,
        BLOCK=BLOCK,
    )
