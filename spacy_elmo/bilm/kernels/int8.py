"""The int8 time loop of a layer: ``precision = "int8"``, inference on a CPU (see :mod:`.int8_packs`).

Per window of timesteps, the input half of the gates (bias included) is one product over the
window's positions, each row's activations quantized with a scale of its own
(:func:`.int8_packs.linear`). Each step then runs two products, the recurrent one and the
projection, on inputs whose range the model bounds: the previous output lies in
[-proj_clip, proj_clip] (it is clipped), the cell output in [-1, 1] (a sigmoid times a tanh). So
these products quantize with a fixed scale, set by one row that holds both bounds (the pin,
row 0 of a buffer whose other rows are the states): no per-row work at each step, and a row's
result is its own whatever runs beside it. Each direction runs all its steps before the other,
so a step reads one direction's weights, which can stay in the CPU's cache.
"""

from typing import NamedTuple, Sequence, Tuple

import torch
from torch import Tensor

from ..memory.weight_copies import WeightCopies
from . import int8_packs
from .cell import cell_in_place
from .eager import window_steps
from .layer import LSTMLayer
from .row_buckets import padded_rows

Result = Tuple[Tensor, Tensor, Tensor]


class DirectionPacks(NamedTuple):
    """One direction's packs, each (out, in): the input weight with the gate bias, the recurrent
    weight, the projection."""

    input: int8_packs.Packed
    hidden: int8_packs.Packed
    projection: int8_packs.Packed


Packs = Tuple[DirectionPacks, DirectionPacks]


class Int8Kernel:
    """The int8 loop (a :class:`~spacy_elmo.bilm.kernels.LayerKernel`), without autograd: it
    refuses gradients. ``packs``: where each layer's packs are kept, named by its index, for the
    engine they are packed for (:func:`.int8_packs.pack_engine`)."""

    def __init__(self, packs: WeightCopies) -> None:
        self.packs = packs

    def __call__(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Result:
        sources = list(layer.parameters())
        int8_packs.check_no_gradient(sources)
        packs: Packs = self.packs.get(str(index), int8_packs.pack_engine(), sources, lambda: make_packs(layer))
        n_steps, _, batch, _ = inputs.shape
        outputs = hidden.new_zeros((n_steps, 2, batch, hidden.shape[-1]))
        with torch.no_grad():
            for d in range(2):
                _direction(layer, inputs[:, d], active, hidden[d], memory[d], packs[d], outputs[:, d])
        return outputs, hidden, memory


def make_packs(layer: LSTMLayer) -> Packs:
    """The layer's int8 packs, per direction."""
    bias = layer.gate_bias()
    return (
        DirectionPacks(
            int8_packs.pack(layer.input_weight[0].T, bias[0]),
            int8_packs.pack(layer.hidden_weight[0].T, None),
            int8_packs.pack(layer.projection[0].T, None),
        ),
        DirectionPacks(
            int8_packs.pack(layer.input_weight[1].T, bias[1]),
            int8_packs.pack(layer.hidden_weight[1].T, None),
            int8_packs.pack(layer.projection[1].T, None),
        ),
    )


def pinned(rows: Tensor, bound: float) -> Tensor:
    """``rows`` (n, width) below a pin row (``bound`` in the first column, ``-bound`` in the last),
    zero rows after them up to :func:`.row_buckets.padded_rows` of n + 1: (padded, width). The
    pin fixes the kernel's activation range to [-bound, bound] while every row lies within it."""
    buffer = rows.new_zeros((padded_rows(rows.shape[0] + 1), rows.shape[1]))
    buffer[0, 0], buffer[0, -1] = bound, -bound
    buffer[1 : rows.shape[0] + 1] = rows
    return buffer


def _direction(
    layer: LSTMLayer,
    inputs: Tensor,
    active: Sequence[int],
    hidden: Tensor,
    memory: Tensor,
    packs: DirectionPacks,
    outputs: Tensor,
) -> None:
    """One direction's steps, in place: ``hidden`` (batch, projection_dim) and ``memory`` (batch,
    lstm_dim) become the final states, and each step writes its running rows of ``outputs``
    (time, batch, projection_dim), which stay as they are past each row's length. ``inputs``:
    (time, batch, input_dim).

    The states live in pinned buffers (:func:`pinned`): ``states`` holds the outputs, ``cells``
    the cell outputs; a step multiplies the first rows of each, as many as its running rows need
    (rows past them hold finished rows' states, within the bounds too)."""
    n_steps, batch, _ = inputs.shape
    states = pinned(hidden, layer.proj_clip)
    cells = pinned(memory.new_zeros(memory.shape), 1.0)

    def project(cell_output: Tensor) -> Tensor:  # (1, running, lstm_dim) -> (1, running, projection_dim)
        running = cell_output.shape[1]
        cells[1 : running + 1] = cell_output[0]
        return _rows_of(cells, running, packs.projection).unsqueeze(0)

    chunk = window_steps(n_steps, batch, layer.lstm_dim)
    for start in range(0, n_steps, chunk):
        rows = active[start]  # the window's later steps need no more rows than its first
        window = inputs[start : start + chunk, :rows]
        gates_in = int8_packs.linear(window.reshape(-1, window.shape[-1]), packs.input).view(window.shape[0], rows, -1)
        for offset in range(window.shape[0]):
            running = active[start + offset]
            gates = gates_in[offset, :running].add_(_rows_of(states, running, packs.hidden))  # (running, 4 * lstm_dim)
            new_hidden = cell_in_place(gates[None], memory[None, :running], project, layer.cell_clip, layer.proj_clip)[
                0
            ]
            states[1 : running + 1] = new_hidden
            outputs[start + offset, :running] = new_hidden
    hidden.copy_(states[1 : batch + 1])


def _rows_of(buffer: Tensor, running: int, packed: int8_packs.Packed) -> Tensor:
    """The product of a pinned buffer's first ``running`` state rows by ``packed``: (running, out)."""
    return int8_packs.product(buffer[: padded_rows(running + 1)], packed)[1 : running + 1]
