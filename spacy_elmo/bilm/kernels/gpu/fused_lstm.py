"""The LSTM time loop of inference on a GPU, with the cell fused into two Triton kernels.

Eager, one step of a :class:`~.lstm.ProjectedLSTM` is about a dozen CUDA kernels over the
(2, rows, 4 * lstm_dim) gates: the bias and recurrent additions, three sigmoids, two tanhs,
products, clipping, conversions and state copies, each a full pass through GPU memory and a launch
from Python. At the Original size these elementwise passes took most of the GPU's time, and the
launches as much host time again (benchmarks/results/gpu_h200_fused.txt). Here a step is four kernels:

1. the recurrent product ``hidden @ W_h`` (cuBLAS, in the product dtype);
2. :func:`.triton_kernels._cell_kernel`: the input product of the step + bias + the recurrent product, the four
   gates, the clipped memory (updated in place) and the cell output, in one pass;
3. the projection product (cuBLAS);
4. :func:`.triton_kernels._project_kernel`: the clipped projection, written into the layer's output at this step
   (float32) and into the next step's product input (product dtype).

The arithmetic is the eager path's, in the same order and roundings: in bf16 each product is
rounded to bf16 as cuBLAS returns it, and everything else is float32. ``tanh`` is computed as
``2 * sigmoid(2x) - 1`` (Triton has no portable tanh), which differs from ``torch.tanh`` by a
float32 rounding or two. Only inference (no autograd) takes this path; training keeps the eager
one, whose autograd graph it needs. :func:`padded_layer` is the loop that CUDA graphs capture
(:mod:`.cuda_graphs`).

With ``TRITON_INTERPRET=1`` the kernels also run on CPU tensors (slowly), which is how the CPU
test suite checks this path against the eager one.
"""

import importlib
import importlib.util
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ...precision.kinds import of_dtype
from ...settings import switches

# Positions (steps x rows) whose input products are computed in one product on a GPU: 0.5 GB of
# bf16 gates at the Original size (1 GB in float32). A GPU gains from fewer, larger products; a CPU from windows
# that stay in its cache (kernels.layer.WINDOW_GATES_BYTES).
GPU_PRECOMPUTED_POSITIONS = 8192

HAS_TRITON = importlib.util.find_spec("triton") is not None


def use_fused_lstm(device: torch.device, dtype: torch.dtype, triton: bool = HAS_TRITON) -> bool:
    """Whether a forward pass takes the fused loop: inference (no autograd) on a CUDA device in products
    it fuses (those of a precision whose record says so, :attr:`.precision.kinds.ProductPrecision.fused_on_gpu`:
    float32 or bf16), with Triton (``triton``), unless ``SPACY_ELMO_FUSED_LSTM=0``."""
    kind = of_dtype(dtype) if triton and device.type == "cuda" else None
    return kind is not None and kind.fused_on_gpu and not torch.is_grad_enabled() and switches().fused_lstm


class LayerBuffers(NamedTuple):
    """What one layer's padded, masked loop (:func:`padded_layer`) reads and writes: the static
    buffers a CUDA graph of it is captured over (:mod:`.cuda_graphs`).

    Shapes: ``inputs`` (time, 2, rows, input_dim) float32, direction 1 reversed; ``lengths``
    (rows,) int32, 0 for a padding row; ``hidden`` (2, rows, projection_dim) and ``memory`` (2,
    rows, lstm_dim) float32, the initial states (``memory`` becomes the final one, in place);
    ``bias`` (2, 4 * lstm_dim) float32, the forget bias included; ``outputs`` (time, 2, rows,
    projection_dim) and ``final_hidden`` (2, rows, projection_dim) float32, written.
    """

    inputs: Tensor
    lengths: Tensor
    hidden: Tensor
    memory: Tensor
    bias: Tensor
    outputs: Tensor
    final_hidden: Tensor


class _Loop(NamedTuple):
    """The tensors of one run of the time loop; shapes as in :class:`LayerBuffers`, ``state``
    (2, rows, projection_dim) and ``cell_out`` (2, rows, lstm_dim) in the product dtype."""

    lowered: Tensor
    state: Tensor
    memory: Tensor
    cell_out: Tensor
    outputs: Tensor
    final_hidden: Tensor
    lengths: Optional[Tensor]


def fused_layer(
    inputs: Tensor,
    active: Sequence[int],
    hidden: Tensor,
    memory: Tensor,
    weights: Tuple[Tensor, Tensor, Tensor],
    bias: Tensor,
    cell_clip: float,
    proj_clip: float,
    window_positions: int = GPU_PRECOMPUTED_POSITIONS,
) -> Tuple[Tensor, Tensor, Tensor]:
    """One layer, both directions, launched step by step; no autograd. Arguments and results as a
    :class:`~spacy_elmo.bilm.kernels.LayerKernel`'s (``active[0] == batch``); ``weights``: the
    input, recurrent and projection weights as stored (:class:`..layer.LSTMLayer`), in the product
    dtype; ``bias`` (2, 4 * lstm_dim) float32, the forget bias included. Step t computes rows
    ``:active[t]`` only, all live: the kernels need no lengths, and each row's last step writes its
    final hidden state."""
    dtype = weights[1].dtype
    n_steps, _, batch, _ = inputs.shape
    loop = _Loop(
        lowered=inputs.to(dtype),
        state=hidden.to(dtype, copy=True).contiguous(),  # the recurrent product's input; written per step
        memory=memory.contiguous().clone(),
        cell_out=inputs.new_empty((2, batch, memory.shape[2]), dtype=dtype),
        outputs=inputs.new_zeros((n_steps, 2, batch, hidden.shape[2])),
        final_hidden=hidden.new_empty(hidden.shape),  # every row has at least one step
        lengths=None,
    )
    _run_steps(loop, active, weights, bias, cell_clip, proj_clip, window_positions)
    return loop.outputs, loop.final_hidden, loop.memory


def padded_layer(
    buffers: LayerBuffers,
    weights: Tuple[Tensor, Tensor, Tensor],
    cell_clip: float,
    proj_clip: float,
    window_positions: int = GPU_PRECOMPUTED_POSITIONS,
) -> None:
    """:func:`fused_layer` over a padded batch, every row at every step, in place in ``buffers``.

    The shapes are fixed by ``buffers`` alone, whatever the lengths: what a CUDA graph needs. The
    kernels mask each row by ``buffers.lengths``: past its length it keeps its memory and state
    and writes a zero output, so on the real rows the results are :func:`fused_layer`'s, the
    final states simply those after the last step. ``buffers.outputs`` is written whole.
    """
    dtype = weights[1].dtype
    n_steps, _, batch, _ = buffers.inputs.shape
    buffers.final_hidden.copy_(buffers.hidden)  # a padding row (length 0) keeps its initial state
    loop = _Loop(
        lowered=buffers.inputs.to(dtype),
        state=buffers.hidden.to(dtype, copy=True),
        memory=buffers.memory,
        cell_out=buffers.memory.new_zeros(buffers.memory.shape, dtype=dtype),
        outputs=buffers.outputs,
        final_hidden=buffers.final_hidden,
        lengths=buffers.lengths,
    )
    _run_steps(loop, [batch] * n_steps, weights, buffers.bias, cell_clip, proj_clip, window_positions)


def _run_steps(
    loop: _Loop,
    active: Sequence[int],
    weights: Tuple[Tensor, Tensor, Tensor],
    bias: Tensor,
    cell_clip: float,
    proj_clip: float,
    window_positions: int,
) -> None:
    """The time loop: per window of steps the input products of rows ``:active[start]`` (at most
    ``window_positions`` positions), then per step t the four kernels over rows ``:active[t]``."""
    w_input, w_hidden, w_projection = weights
    n_steps, _, batch, _ = loop.lowered.shape
    lstm_dim = loop.memory.shape[2]
    kernels = importlib.import_module(".triton_kernels", __package__)
    window = min(n_steps, max(1, window_positions // batch))
    for start in range(0, n_steps, window):
        rows = active[start]
        steps = min(window, n_steps - start)
        flat = loop.lowered[start : start + steps, :, :rows].transpose(0, 1).reshape(2, steps * rows, -1)
        pre = torch.bmm(flat, w_input).view(2, steps, rows, 4 * lstm_dim)
        for offset in range(steps):
            step, running = start + offset, active[start + offset]
            rec = torch.bmm(loop.state[:, :running], w_hidden)
            kernels.fused_cell(
                pre[:, offset, :running], rec, bias, loop.memory, cell_clip, loop.cell_out, loop.lengths, step
            )
            kernels.fused_projection(
                torch.bmm(loop.cell_out[:, :running], w_projection),
                proj_clip,
                loop.outputs[step],
                loop.state,
                loop.final_hidden,
                loop.lengths,
                step,
            )
