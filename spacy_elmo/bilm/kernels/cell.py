"""One step of the LSTM cell, from the step's gate pre-activations: the arithmetic every CPU kernel shares.

Gate columns follow TensorFlow's order i, j, f, o. The memory is clipped to ``cell_clip``, the
projected output to ``proj_clip``. The projection product is the kernel's (``project``): in its
own dtype, or a direction's int8 pack.
"""

from typing import Callable, Tuple

import torch
from torch import Tensor

# The projection product of a kernel: cell output (directions, rows, lstm_dim) float32 ->
# (directions, rows, projection_dim) float32.
Project = Callable[[Tensor], Tensor]


def cell(gates: Tensor, memory: Tensor, project: Project, cell_clip: float, proj_clip: float) -> Tuple[Tensor, Tensor]:
    """One step as new tensors (what autograd needs), from ``gates`` (2, rows, 4 * lstm_dim) and
    ``memory`` (2, rows, lstm_dim). Returns the clipped projected output (2, rows, projection_dim)
    and the clipped memory."""
    in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
    new_memory = torch.sigmoid(in_gate) * torch.tanh(cell_input) + torch.sigmoid(forget_gate) * memory
    new_memory = new_memory.clamp(-cell_clip, cell_clip)
    cell_output = torch.sigmoid(out_gate) * torch.tanh(new_memory)
    return project(cell_output).clamp(-proj_clip, proj_clip), new_memory


def cell_in_place(gates: Tensor, memory: Tensor, project: Project, cell_clip: float, proj_clip: float) -> Tensor:
    """:func:`cell` computed in the storage of ``gates``, the new memory written over ``memory``
    (without autograd); returns the new output (directions, rows, projection_dim).

    Each tanh is computed as ``2 sigmoid(2x) - 1`` (as the GPU's fused kernels do), so that the
    four gates go through one sigmoid over contiguous memory: torch's CPU tanh runs several times
    slower than its sigmoid. The results differ from :func:`cell`'s by float32 roundings.
    """
    in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
    cell_input.mul_(2.0)
    gates.sigmoid_()
    cell_input.mul_(2.0).sub_(1.0)  # tanh of the cell input
    memory.mul_(forget_gate).addcmul_(in_gate, cell_input).clamp_(-cell_clip, cell_clip)
    squashed = torch.mul(memory, 2.0, out=cell_input).sigmoid_().mul_(2.0).sub_(1.0)  # tanh(memory)
    cell_output = out_gate.mul_(squashed)
    return project(cell_output).clamp_(-proj_clip, proj_clip)
