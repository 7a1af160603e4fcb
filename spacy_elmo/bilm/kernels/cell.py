"""One step of the LSTM cell, from the step's gate pre-activations: the arithmetic every CPU kernel shares.

Gate columns follow TensorFlow's order i, j, f, o. The memory is clipped to ``cell_clip``, the
projected output to ``proj_clip``. The projection product is the kernel's (``project``): in its
own dtype, or a direction's int8 pack.

Inference steps in place (:func:`cell_in_place`) on scaled values, so that a step dispatches as
few operations as it can: the cell input's gate pre-activations come doubled (the weights and
bias that make them are, :func:`double_cell_input_`), the memory is kept doubled from a layer's
first step to its last, and the cell output comes halved, which a doubled projection weight
makes whole. Each scaling is by a power of two, exact in floating point and in int8's
power-of-two scales, so the results are those of the unscaled arithmetic to the bit: four
operations fewer a step.
"""

from typing import Callable, Tuple

import torch
from torch import Tensor


def cell(
    gates: Tensor, memory: Tensor, project: Callable[[Tensor], Tensor], cell_clip: float, proj_clip: float
) -> Tuple[Tensor, Tensor]:
    """One step as new tensors (what autograd needs), from ``gates`` (2, rows, 4 * lstm_dim) and
    ``memory`` (2, rows, lstm_dim), ``project`` the kernel's projection product (2, rows, lstm_dim)
    -> (2, rows, projection_dim), float32. Returns the clipped projected output and the clipped memory."""
    in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
    new_memory = torch.sigmoid(in_gate) * torch.tanh(cell_input) + torch.sigmoid(forget_gate) * memory
    new_memory = new_memory.clamp(-cell_clip, cell_clip)
    cell_output = torch.sigmoid(out_gate) * torch.tanh(new_memory)
    return project(cell_output).clamp(-proj_clip, proj_clip), new_memory


def cell_in_place(gates: Tensor, doubled_memory: Tensor, halved_output: Tensor, cell_clip: float) -> Tensor:
    """:func:`cell` without its projection, in the storage of ``gates`` (2, rows, 4 * lstm_dim),
    whose cell-input columns come doubled; the new memory, doubled, written over
    ``doubled_memory`` (2, rows, lstm_dim), and half the cell output into ``halved_output`` (2,
    rows, lstm_dim), in the dtype of the projection's product. Returns ``halved_output``.

    Each tanh is computed through the sigmoid, ``tanh(x) / 2 = sigmoid(2x) - 1/2`` (as the GPU's
    fused kernels do), so that the four gates go through one sigmoid over contiguous memory:
    torch's CPU tanh runs several times slower than its sigmoid. The results differ from
    :func:`cell`'s by float32 roundings.
    """
    in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
    gates.sigmoid_()
    half_tanh = cell_input.sub_(0.5)  # tanh of the cell input, halved
    doubled_memory.mul_(forget_gate).addcmul_(in_gate, half_tanh, value=4.0).clamp_(-2 * cell_clip, 2 * cell_clip)
    half_squashed = torch.sigmoid(doubled_memory, out=cell_input).sub_(0.5)  # tanh of the memory, halved
    return torch.mul(out_gate, half_squashed, out=halved_output)


def double_cell_input_(gate_values: Tensor, dim: int = -1) -> Tensor:
    """``gate_values`` with its cell input's quarter along ``dim`` (of i, j, f, o) multiplied by 2,
    in place: a weight (or bias) making the gates :func:`cell_in_place` takes. Returns ``gate_values``."""
    width = gate_values.shape[dim] // 4
    gate_values.narrow(dim, width, width).mul_(2.0)
    return gate_values
