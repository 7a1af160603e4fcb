"""The int8 time loop of a layer: ``precision = "int8"``, inference on a CPU (see :mod:`.int8_packs`).

Each step's gates come from one product, of the step's input beside the previous output (rows,
input_dim + projection_dim), by both weights stacked, with the bias: no window of input gates to
keep and no pass adding the recurrent product to them, at the cost of one activation scale for
both halves (within the accuracy contract). Each direction runs all its steps before the other,
so a step reads one direction's weights, which can stay in the CPU's cache. The packs are scaled
for :func:`.cell.cell_in_place` (exact in their power-of-two scales).
"""

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..memory.weight_copies import WeightCopies
from . import int8_packs
from .cell import cell_in_place, double_cell_input_
from .layer import BY_RULE, KernelChoice, LSTMLayer, Result

# Per direction: the gates' pack (the input weight over the recurrent one, with the bias), then the projection's.
Packs = Tuple[Tuple[int8_packs.Packed, ...], Tuple[int8_packs.Packed, ...]]


class Int8Kernel:
    """The int8 loop (a :class:`~spacy_elmo.bilm.kernels.LayerKernel`), without autograd: it
    refuses gradients. ``packs``: where each layer's packs are kept, named by its index, for the
    engine they are packed for (:attr:`.layer.KernelChoice.int8_engine`, :func:`.int8_packs.pack_engine`)."""

    def __init__(self, packs: WeightCopies, choice: KernelChoice = BY_RULE) -> None:
        self.packs = packs
        self.engine = choice.int8_engine or int8_packs.pack_engine()

    def __call__(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Result:
        sources = list(layer.parameters())
        int8_packs.check_no_gradient(sources)
        packs = self.packs.get(str(index), self.engine, sources, lambda: make_packs(layer, self.engine))
        outputs = hidden.new_zeros((*inputs.shape[:3], hidden.shape[-1]))  # (time, 2, batch, projection_dim)
        with torch.no_grad():
            for d in range(2):
                _direction(layer, inputs[:, d], active, hidden[d], memory[d], packs[0][d], packs[1][d], outputs[:, d])
        return outputs, hidden, memory


def make_packs(layer: LSTMLayer, engine: Optional[str] = None) -> Packs:
    """The layer's int8 packs for ``engine``, per direction, each (out, in): the gates' and the
    projection's, scaled for :func:`.cell.cell_in_place`."""
    bias = double_cell_input_(layer.gate_bias().detach())
    # One direction's stacked float32 weight (out, in) at a time, the only transient copy, freed once
    # packed: packing adds one direction's weight to the peak memory, not both directions'.
    stacked = (torch.cat([layer.input_weight[d].T, layer.hidden_weight[d].T], 1).detach() for d in range(2))
    return (
        tuple(int8_packs.pack(double_cell_input_(w, dim=0), bias[d], engine=engine) for d, w in enumerate(stacked)),
        tuple(int8_packs.pack(layer.projection[d].T.detach() * 2.0, None, engine=engine) for d in range(2)),
    )


def _direction(
    layer: LSTMLayer,
    inputs: Tensor,
    active: Sequence[int],
    hidden: Tensor,
    memory: Tensor,
    gates_pack: int8_packs.Packed,
    projection_pack: int8_packs.Packed,
    outputs: Tensor,
) -> None:
    """One direction's steps, in place: ``hidden`` (batch, projection_dim) and ``memory`` (batch,
    lstm_dim) become the final states, and each step writes its running rows of ``outputs``
    (time, batch, projection_dim), which stay as they are past each row's length. ``inputs``:
    (time, batch, input_dim).

    ``step_inputs`` (batch, input_dim + projection_dim) holds each step's input beside the previous
    output, where the step writes its output: the rows that stop keep their last. Each product
    keeps its kernel input buffer over the steps (:class:`.int8_packs.StagedRows`). The memory is
    kept doubled over the steps (:func:`.cell.cell_in_place`).
    """
    n_steps, batch, input_dim = inputs.shape
    step_inputs = torch.cat([inputs.new_zeros(batch, input_dim), hidden], dim=1)
    gates_rows = int8_packs.StagedRows(batch, step_inputs.shape[1], gates_pack.layout)
    projection_rows = int8_packs.StagedRows(batch, layer.lstm_dim, projection_pack.layout)
    halved_output = memory.new_empty((1, batch, layer.lstm_dim))
    memory.mul_(2.0)
    for step in range(n_steps):
        running = active[step]
        step_inputs[:running, :input_dim] = inputs[step, :running]
        gates = gates_rows.linear(step_inputs[:running], gates_pack).unsqueeze(0)  # (1, running, 4 * lstm_dim)
        cell_output = cell_in_place(gates, memory[None, :running], halved_output[:, :running], layer.cell_clip)[0]
        output = outputs[step, :running]
        output.copy_(projection_rows.linear(cell_output, projection_pack)).clamp_(-layer.proj_clip, layer.proj_clip)
        step_inputs[:running, input_dim:] = output
    memory.mul_(0.5)
    hidden.copy_(step_inputs[:, input_dim:])
