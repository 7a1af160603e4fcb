"""The int8 time loop of a layer: ``precision = "int8"``, inference on a CPU (see :mod:`spacy_elmo.bilm.int8`).

Each step's gates come from one product, of the step's input beside the previous output (rows,
input_dim + projection_dim), by both weights stacked, with the bias: no window of input gates to
keep and no pass adding the recurrent product to them, at the cost of one activation scale for
both halves (within the accuracy contract). Each direction runs all its steps before the other,
so a step reads one direction's weights, which can stay in the CPU's cache.
"""

from typing import List, Sequence, Tuple

import torch
from torch import Tensor
from torch.nn import functional as F

from .. import int8
from .cell import cell_in_place
from .layer import LSTMLayer

# Per direction: the gates' pack (the input weight over the recurrent one, with the bias), then the projection's.
Packs = Tuple[Tuple[int8.Packed, ...], Tuple[int8.Packed, ...]]
Result = Tuple[Tensor, Tensor, Tensor]


class Int8Kernel:
    """The int8 loop (a :class:`~spacy_elmo.bilm.kernels.LayerKernel`), without autograd: it
    refuses gradients. ``packs``: where each layer's packs are kept, named by its index."""

    def __init__(self, packs: int8.Int8Weights) -> None:
        self.packs = packs

    def __call__(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Result:
        packs = self.packs.get(str(index), list(layer.parameters()), lambda: make_packs(layer))  # refuses gradients
        with torch.no_grad():
            runs = [
                _direction(layer, inputs[:, d], active, hidden[d], memory[d], packs[0][d], packs[1][d])
                for d in range(2)
            ]
        outputs, final_hidden, final_memory = zip(*runs)
        return torch.stack(outputs, dim=1), torch.stack(final_hidden), torch.stack(final_memory)


def make_packs(layer: LSTMLayer) -> Packs:
    """The layer's int8 packs, per direction, each (out, in): the gates' and the projection's."""
    bias = layer.gate_bias()
    # One direction's stacked float32 weight at a time, made (out, in) as the pack reads it: the
    # only transient copy of a weight (64 MB at the Original size), freed once packed.
    return (
        tuple(int8.pack(torch.cat([layer.input_weight[d].T, layer.hidden_weight[d].T], 1), bias[d]) for d in range(2)),
        tuple(int8.pack(layer.projection[d].T, None) for d in range(2)),
    )


def _direction(
    layer: LSTMLayer,
    inputs: Tensor,
    active: Sequence[int],
    hidden: Tensor,
    memory: Tensor,
    gates_pack: int8.Packed,
    projection_pack: int8.Packed,
) -> Result:
    """One direction's steps. Shapes: ``inputs`` (time, batch, input_dim), ``hidden`` (batch,
    projection_dim), ``memory`` (batch, lstm_dim); returns the outputs (time, batch,
    projection_dim), zero past each row's length, and the final states."""
    n_steps, batch, _ = inputs.shape
    hidden, memory = hidden.clone(), memory.clone()

    def project(cell_output: Tensor) -> Tensor:  # (1, rows, lstm_dim) -> (1, rows, projection_dim)
        return int8.linear(cell_output[0], projection_pack).unsqueeze(0)

    outputs: List[Tensor] = []
    for step in range(n_steps):
        running = active[step]
        # (running, input_dim + projection_dim)
        step_inputs = torch.cat([inputs[step, :running], hidden[:running]], dim=1)
        gates = int8.linear(step_inputs, gates_pack).unsqueeze(0)  # (1, running, 4 * lstm_dim)
        new_hidden = cell_in_place(gates, memory[None, :running], project, layer.cell_clip, layer.proj_clip)[0]
        hidden[:running] = new_hidden
        outputs.append(F.pad(new_hidden, (0, 0, 0, batch - running)))
    return torch.stack(outputs), hidden, memory
