"""The eager time loop of a layer, products in float32: training's, with autograd, and inference's, in place.

Per window of timesteps, the input half of the gate pre-activations is one large product over
the window's positions; the loop then steps through time doing only the recurrent product and the
cell, for both directions at once and, rows sorted longest first, only for the prefix of rows still
running, so padding costs no recurrent work. With autograd, each weight's gradient is gathered
over the steps into a few large products (:mod:`..gathered_gradients`). Without, each step writes
its gates and states in place, and every window's gates go into one workspace that all layers of
a pass reuse (a fresh allocation this large costs page faults).

:class:`~.bf16.Bf16Kernel` runs this loop with its products in bf16: the methods it replaces are
the products and the weights they multiply by.
"""

from functools import partial
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union, cast

import torch
from torch import Tensor
from torch.nn import functional as F

from ..memory.weight_copies import WeightCopies, gradient_reaches
from .cell import Project, cell, cell_in_place
from .gathered_gradients import GatheredWeight
from .layer import LSTMLayer
from .onednn_packs import DirectionPacks

# The float32 gates of a window of timesteps whose input products are computed in one product:
# small enough to stay in a CPU's cache between the product that writes them and the steps that
# read them (larger windows made the additions over them run at memory speed). At the Original
# size this is 128 positions, a product of 128 rows, still efficient; a batch of more rows takes
# one step.
WINDOW_GATES_BYTES = 16 * 2**20

# A product weight, the direction first: a tensor; in training such a tensor whose gradient is
# gathered over the steps; in bf16 inference on a CPU, each direction packed for oneDNN.
Weight = Union[Tensor, GatheredWeight, DirectionPacks]
Result = Tuple[Tensor, Tensor, Tensor]


class LSTMWeights(NamedTuple):
    """A layer's product weights. Shapes (direction first): ``input`` (2, input_dim [+ 1 bias
    row], 4 * lstm_dim), ``hidden`` (2, projection_dim, 4 * lstm_dim), ``projection`` (2,
    lstm_dim, projection_dim)."""

    input: Weight
    hidden: Weight
    projection: Weight


class Float32Kernel:
    """The eager loop with float32 products (a :class:`~spacy_elmo.bilm.kernels.LayerKernel`).

    The bias rides in the input product as the weight of one more input that is always 1: cheaper
    than broadcasting it into the gates before the product. One kernel serves one pass: it keeps
    the workspace its layers share.
    """

    def __init__(self, copies: Optional[WeightCopies] = None) -> None:
        self.copies = WeightCopies() if copies is None else copies
        self._workspace: Optional[Tensor] = None

    def __call__(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Result:
        if torch.is_grad_enabled():
            return self._loop(layer, inputs, active, hidden, memory, self.gathered_weights(index, layer), None)
        workspace = self._workspace_for(inputs, layer.lstm_dim)
        weights = self.weights(index, layer)
        return self._loop(layer, inputs, active, hidden, memory, weights, workspace)

    # -------------------------------------------------------------- the products, in float32
    def weights(self, index: int, layer: LSTMLayer) -> LSTMWeights:
        """Inference's product weights; the input weight with the bias row (+ forget bias), kept
        in :attr:`copies` while the parameters are unchanged (made afresh in a pass with gradients):
        made at every call, it copied 4 MB a layer at the bundled size, 67 MB at the Original's."""

        def with_bias() -> Tensor:
            return torch.cat([layer.input_weight, layer.gate_bias().unsqueeze(1)], dim=1)

        sources = [layer.input_weight, layer.bias]
        if gradient_reaches(sources):
            input_weight = with_bias()
        else:
            input_weight = self.copies.get(f"{index}.input_weight+bias", torch.float32, sources, with_bias)
        return LSTMWeights(input_weight, layer.hidden_weight, layer.projection)

    def gathered_weights(self, index: int, layer: LSTMLayer) -> LSTMWeights:
        """:meth:`weights` for a pass with autograd: each weight whose parameters are trained is a
        :class:`GatheredWeight`, its gradient gathered over the steps."""
        sources = [cast(Tensor, weight) for weight in self.weights(index, layer)]  # plain tensors, as made above
        return LSTMWeights(*(GatheredWeight(s, s.detach()) if s.requires_grad else s.detach() for s in sources))

    def lowered_inputs(self, inputs: Tensor, layer: LSTMLayer) -> Tuple[Tensor, Optional[Tensor]]:
        """The inputs of the input product and the bias it leaves to add: here the constant-1
        input of the bias row appended, (time, 2, batch, input_dim + 1), and no bias."""
        n_steps, _, batch, _ = inputs.shape
        return torch.cat([inputs, inputs.new_ones(n_steps, 2, batch, 1)], dim=-1), None

    def product(self, x: Tensor, weight: Weight) -> Tensor:
        """``torch.bmm(x, weight)``: the gradient gathered where ``weight`` is a :class:`GatheredWeight`,
        oneDNN's linear where it is :class:`DirectionPacks`. Shape: (2, rows, in) -> (2, rows, out)."""
        if isinstance(weight, GatheredWeight):
            return weight(x)
        return weight.product(x) if isinstance(weight, DirectionPacks) else torch.bmm(x, weight)

    def input_gates(self, flat: Tensor, weight: Weight, bias: Optional[Tensor], out: Optional[Tensor]) -> Tensor:
        """The input half of a window's gates, float32, into ``out`` if given: (2, n, input_dim) ->
        (2, n, 4 * lstm_dim). ``bias``: what :meth:`lowered_inputs` left to add (none here)."""
        if out is None:
            return self.product(flat, weight)
        assert isinstance(weight, Tensor)  # a workspace serves inference only: no gathered gradient
        return torch.bmm(flat, weight, out=out)

    def recurrent(self, hidden: Tensor, weight: Weight) -> Tensor:
        """``hidden @ weight``: (2, rows, projection_dim) float32 -> (2, rows, 4 * lstm_dim)."""
        return self.product(hidden, weight)

    def add_recurrent_(self, gates: Tensor, hidden: Tensor, weight: Weight) -> Tensor:
        """``gates += hidden @ weight``, in the storage of ``gates`` (2, rows, 4 * lstm_dim): the
        product apart, then added. A step's gates are a strided view of its window's, which
        ``baddbmm_`` multiplies into one direction at a time (at one row of the bundled size, 97 us
        against 60)."""
        return gates.add_(self.recurrent(hidden, weight))

    def project(self, cell_output: Tensor, weight: Weight) -> Tensor:
        """(2, rows, lstm_dim) float32 -> (2, rows, projection_dim) float32."""
        return self.product(cell_output, weight)

    # -------------------------------------------------------------- the loop
    def _workspace_for(self, inputs: Tensor, lstm_dim: int) -> Tensor:
        """The gates buffer of every window, float32, made at the pass's first layer (all have
        the same gate width)."""
        n_steps, _, batch, _ = inputs.shape
        size = 2 * window_steps(n_steps, batch, lstm_dim) * batch * 4 * lstm_dim
        if self._workspace is None or self._workspace.numel() < size:
            self._workspace = inputs.new_empty(size, dtype=torch.float32)
        return self._workspace

    def _loop(
        self,
        layer: LSTMLayer,
        inputs: Tensor,
        active: Sequence[int],
        hidden: Tensor,
        memory: Tensor,
        weights: LSTMWeights,
        workspace: Optional[Tensor],
    ) -> Result:
        """Windows of input gates, then the steps; in place in ``hidden``, ``memory`` and
        ``workspace`` where a workspace is given (no autograd), else on fresh tensors."""
        lowered, bias = self.lowered_inputs(inputs, layer)
        n_steps, _, batch, _ = inputs.shape
        chunk = window_steps(n_steps, batch, layer.lstm_dim)
        project = partial(self.project, weight=weights.projection)
        # In place, each step writes its rows of one zeroed output; with autograd, the steps are stacked.
        written = hidden.new_zeros((n_steps, 2, batch, hidden.shape[-1])) if workspace is not None else None
        steps: List[Tensor] = []
        for start in range(0, n_steps, chunk):
            rows = active[start]  # the window's later steps need no more rows than its first
            window = lowered[start : start + chunk, :, :rows]
            flat = window.transpose(0, 1).reshape(2, -1, window.shape[-1])
            out = None
            if workspace is not None:
                out = workspace[: 2 * flat.shape[1] * 4 * layer.lstm_dim].view(2, flat.shape[1], -1)
            pre_gates = self.input_gates(flat, weights.input, bias, out).view(2, window.shape[0], rows, -1)
            # Each step's view by unbind: its backward stacks the steps' gradients once, where an
            # index per step would write a window-sized gradient (zeros and one step) per step.
            for offset, step_gates in enumerate(pre_gates.unbind(1)):
                running = active[start + offset]
                gates = step_gates[:, :running]
                if written is not None:
                    written[start + offset, :, :running] = self._step_in_place(
                        layer, gates, hidden, memory, weights, project
                    )
                else:
                    new_hidden, new_memory = self._step(layer, gates, hidden, memory, weights, project)
                    hidden, memory = _update_rows(hidden, new_hidden), _update_rows(memory, new_memory)
                    steps.append(F.pad(new_hidden, (0, 0, 0, batch - running)))
        return written if written is not None else torch.stack(steps), hidden, memory

    def _step(
        self, layer: LSTMLayer, gates: Tensor, hidden: Tensor, memory: Tensor, weights: LSTMWeights, project: Project
    ) -> Tuple[Tensor, Tensor]:
        """One step of the running rows (``gates``' rows), as new tensors: output and memory."""
        running = gates.shape[1]
        gates = gates + self.recurrent(hidden[:, :running], weights.hidden)
        return cell(gates, memory[:, :running], project, layer.cell_clip, layer.proj_clip)

    def _step_in_place(
        self, layer: LSTMLayer, gates: Tensor, hidden: Tensor, memory: Tensor, weights: LSTMWeights, project: Project
    ) -> Tensor:
        """One step of the running rows, over ``gates``, the rows of ``hidden`` and ``memory``
        overwritten; returns the output."""
        running = gates.shape[1]
        gates = self.add_recurrent_(gates, hidden[:, :running], weights.hidden)
        new_hidden = cell_in_place(gates, memory[:, :running], project, layer.cell_clip, layer.proj_clip)
        hidden[:, :running] = new_hidden
        return new_hidden


def window_steps(n_steps: int, batch: int, lstm_dim: int) -> int:
    """Timesteps whose input products are computed together (see ``WINDOW_GATES_BYTES``)."""
    positions = WINDOW_GATES_BYTES // (2 * 4 * lstm_dim * 4)  # both directions, 4 gates, float32
    return min(n_steps, max(1, positions // batch))


def _update_rows(state: Tensor, new_rows: Tensor) -> Tensor:
    """``state`` (2, batch, width) with its first ``new_rows.shape[1]`` rows replaced, as a new
    tensor: autograd still needs the old state."""
    running = new_rows.shape[1]
    if running == state.shape[1]:
        return new_rows
    return torch.cat([new_rows, state[:, running:]], dim=1)
