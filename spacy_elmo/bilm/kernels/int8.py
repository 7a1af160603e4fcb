"""The int8 products of a layer's steps: ``precision = "int8"``, inference on a CPU (see :mod:`.int8_packs`).

Each step's gates come from one product, of the step's input beside the previous output (rows,
input_dim + projection_dim), by both weights stacked, with the bias: no window of input gates to
keep and no pass adding the recurrent product to them, at the cost of one activation scale for
both halves (within the accuracy contract). Each direction runs all its steps before the other
(:data:`.steps.EACH`, in the loop every CPU kernel runs: :mod:`.steps`),
so a step reads one direction's weights, which can stay in the CPU's cache. The packs are scaled
for :func:`.cell.cell_in_place` (exact in their power-of-two scales).
"""

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..memory.weight_copies import WeightCopies
from . import int8_packs
from .cell import double_cell_input_
from .layer import BY_RULE, KernelChoice, LSTMLayer, Result
from .steps import EACH, infer_layer

# Per direction: the gates' pack (the input weight over the recurrent one, with the bias), then the projection's.
Packs = Tuple[Tuple[int8_packs.Packed, ...], Tuple[int8_packs.Packed, ...]]


class Int8Kernel:
    """The int8 kernel (a :class:`~spacy_elmo.bilm.kernels.LayerKernel`), without autograd: it
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
        with torch.no_grad():
            written = infer_layer(
                layer,
                inputs.shape[0],
                active,
                hidden,
                memory,
                EACH,
                lambda directions: _StackedSteps(
                    layer, inputs[:, directions.start], hidden[directions], packs, directions.start
                ),
            )
        return written, hidden, memory


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


class _StackedSteps:
    """:class:`Int8Kernel`'s products for one direction's run of :func:`.steps.infer_layer` (a
    :class:`.steps.StepProducts`): ``inputs`` (time, batch, input_dim), ``hidden`` (1, batch,
    projection_dim) its start state.

    ``step_inputs`` (batch, input_dim + projection_dim) holds each step's input beside the previous
    output (:attr:`state` is its second part, which the loop writes each step's output into: the
    rows that stop keep their last). Each product keeps its kernel input buffer over the steps
    (:class:`.int8_packs.StagedRows`).
    """

    def __init__(self, layer: LSTMLayer, inputs: Tensor, hidden: Tensor, packs: Packs, direction: int) -> None:
        self.inputs = inputs
        batch, self.input_dim = inputs.shape[1:]
        self.step_inputs = torch.cat([inputs.new_zeros(batch, self.input_dim), hidden[0]], dim=1)
        self.state = self.step_inputs[None, :, self.input_dim :]
        self.gates_pack, self.projection_pack = packs[0][direction], packs[1][direction]
        self.gates_rows = int8_packs.StagedRows(batch, self.step_inputs.shape[1], self.gates_pack.layout)
        self.projection_rows = int8_packs.StagedRows(batch, layer.lstm_dim, self.projection_pack.layout)

    def gates(self, step: int, running: int) -> Tensor:
        self.step_inputs[:running, : self.input_dim] = self.inputs[step, :running]
        return self.gates_rows.linear(self.step_inputs[:running], self.gates_pack).unsqueeze(0)

    def project(self, halved_output: Tensor) -> Tensor:
        return self.projection_rows.linear(halved_output[0], self.projection_pack).unsqueeze(0)
