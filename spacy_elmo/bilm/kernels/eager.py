"""A layer's float32 products by windows of input gates: training's loop (autograd), and inference's steps.

Per window of timesteps, the input half of the gate pre-activations is one large product over
the window's positions; the steps then do only the recurrent product and the cell, for both
directions at once and, rows sorted longest first, only for the rows still running, so padding
costs no recurrent work. With autograd, each weight's gradient is gathered over the steps into a
few large products (:mod:`..gathered_gradients`). Without, the steps run in :mod:`.steps`' loop,
the weight copies scaled for it, and every window's gates go into one workspace that all layers
of a pass reuse (a fresh allocation this large costs page faults). :class:`~.bf16.Bf16Kernel`
replaces the products and the weights they multiply by.
"""

from functools import partial
from typing import Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch.nn import functional as F

from ..memory.weight_copies import WeightCopies
from .cell import cell, double_cell_input_
from .gathered_gradients import GatheredWeight
from .layer import BY_RULE, KernelChoice, LSTMLayer, Result
from .onednn_packs import DirectionPacks
from .steps import BOTH, infer_layer

# A product weight, the direction first: a tensor; in training such a tensor whose gradient is
# gathered over the steps; in bf16 inference on a CPU, each direction packed for oneDNN.
Weight = Union[Tensor, GatheredWeight, DirectionPacks]


class LSTMWeights(NamedTuple):
    """A layer's product weights. Shapes (direction first): ``input`` (2, input_dim [+ 1 bias
    row], 4 * lstm_dim), ``hidden`` (2, projection_dim, 4 * lstm_dim), ``projection`` (2,
    lstm_dim, projection_dim); ``bias``, float32 (2, 1, 4 * lstm_dim), where the input product
    leaves it to add (else None: it rides in ``input``). Inference's are scaled for
    :func:`.cell.cell_in_place`: the cell input's columns of ``input``, ``hidden`` and ``bias``
    doubled, ``projection`` doubled."""

    input: Weight
    hidden: Weight
    projection: Weight
    bias: Optional[Tensor] = None


class Float32Kernel:
    """The eager loop with float32 products (a :class:`~spacy_elmo.bilm.kernels.LayerKernel`).

    The bias rides in the input product as the weight of one more input that is always 1: cheaper
    than broadcasting it into the gates before the product. One kernel serves one pass: it keeps
    the workspace its layers share. ``choice``: its sizes (:attr:`.layer.KernelChoice.window_bytes`).
    """

    def __init__(self, copies: Optional[WeightCopies] = None, choice: KernelChoice = BY_RULE) -> None:
        self.copies = WeightCopies() if copies is None else copies
        self.choice = choice
        self._workspace: Optional[Tensor] = None

    def __call__(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Result:
        if torch.is_grad_enabled():
            return self._loop(layer, inputs, active, hidden, memory)
        return self._infer(index, layer, inputs, active, hidden, memory)

    # -------------------------------------------------------------- the products, in float32
    def weights(self, index: int, layer: LSTMLayer) -> LSTMWeights:
        """Inference's product weights, scaled for :func:`.cell.cell_in_place`, the input weight
        with the bias row (+ forget bias); kept in :attr:`copies` while the parameters are
        unchanged (the float32 parameters then move to disk where frozen). Made at every call,
        the input weight alone was copied whole for every layer of every call."""

        def kept(name: str, sources: List[Tensor], make: Callable[[], Tensor]) -> Tensor:
            return self.copies.get(f"{index}.{name}.scaled", torch.float32, sources, make)

        return LSTMWeights(
            kept("input_weight+bias", [layer.input_weight, layer.bias], lambda: double_cell_input_(_with_bias(layer))),
            kept(
                "hidden_weight", [layer.hidden_weight], lambda: double_cell_input_(layer.hidden_weight.detach().clone())
            ),
            kept("projection", [layer.projection], lambda: layer.projection.detach() * 2.0),
        )

    def gathered_weights(self, layer: LSTMLayer) -> LSTMWeights:
        """The product weights of a pass with autograd, unscaled (it steps by :func:`.cell.cell`),
        the input weight with the bias row: each weight whose parameters are trained is a
        :class:`GatheredWeight`, its gradient gathered over the steps."""
        input_weight, hidden, projection = (
            GatheredWeight(s, s.detach()) if s.requires_grad else s.detach()
            for s in (_with_bias(layer), layer.hidden_weight, layer.projection)
        )
        return LSTMWeights(input_weight, hidden, projection)

    def lowered_inputs(self, inputs: Tensor) -> Tensor:
        """The inputs of the input product: here with the constant-1 input of the bias row
        appended, (time, 2, batch, input_dim + 1)."""
        n_steps, _, batch, _ = inputs.shape
        return torch.cat([inputs, inputs.new_ones(n_steps, 2, batch, 1)], dim=-1)

    def lowered_state(self, hidden: Tensor) -> Tensor:
        """The recurrent product's input in inference, which each step writes its output into:
        here ``hidden`` (2, batch, projection_dim) itself, so the steps keep it current."""
        return hidden

    def product(self, x: Tensor, weight: Weight) -> Tensor:
        """``torch.bmm(x, weight)``: the gradient gathered where ``weight`` is a :class:`GatheredWeight`,
        oneDNN's linear where it is :class:`DirectionPacks`. Shape: (2, rows, in) -> (2, rows, out)."""
        if isinstance(weight, GatheredWeight):
            return weight(x)
        return weight.product(x) if isinstance(weight, DirectionPacks) else torch.bmm(x, weight)

    def input_gates(self, flat: Tensor, weight: Weight, bias: Optional[Tensor], out: Optional[Tensor]) -> Tensor:
        """The input half of a window's gates, float32, into ``out`` if given: (2, n, input_dim) ->
        (2, n, 4 * lstm_dim). ``bias``: what the weight leaves to add (none here)."""
        if out is None:
            return self.product(flat, weight)
        assert isinstance(weight, Tensor)  # a workspace serves inference only: no gathered gradient
        return torch.bmm(flat, weight, out=out)

    def recurrent(self, hidden: Tensor, weight: Weight) -> Tensor:
        """``hidden @ weight``: (2, rows, projection_dim) float32 -> (2, rows, 4 * lstm_dim)."""
        return self.product(hidden, weight)

    def project(self, cell_output: Tensor, weight: Weight) -> Tensor:
        """(2, rows, lstm_dim) float32 -> (2, rows, projection_dim) float32."""
        return self.product(cell_output, weight)

    # -------------------------------------------------------------- the loop
    def _windows(
        self, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], weights: LSTMWeights, in_place: bool
    ) -> Iterator[Tuple[int, Tensor]]:
        """Each window's first step and its input gates, (2, window steps, the window's rows, 4 *
        lstm_dim) float32; ``in_place``: in the workspace of every window, made at the pass's first
        layer (all have the same gate width)."""
        lowered = self.lowered_inputs(inputs)
        n_steps, _, batch, _ = inputs.shape
        chunk = window_steps(n_steps, batch, layer.lstm_dim, self.choice.window_bytes)
        workspace, size = (self._workspace if in_place else None), 2 * chunk * batch * 4 * layer.lstm_dim
        if in_place and (workspace is None or workspace.numel() < size):
            workspace = self._workspace = inputs.new_empty(size, dtype=torch.float32)
        for start in range(0, n_steps, chunk):
            rows = active[start]  # the window's later steps need no more rows than its first
            window = lowered[start : start + chunk, :, :rows]
            flat = window.transpose(0, 1).reshape(2, -1, window.shape[-1])
            out = None
            if workspace is not None:
                out = workspace[: 2 * flat.shape[1] * 4 * layer.lstm_dim].view(2, flat.shape[1], -1)
            yield start, self.input_gates(flat, weights.input, weights.bias, out).view(2, window.shape[0], rows, -1)

    def _loop(self, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor) -> Result:
        """The loop with autograd, on fresh tensors: the steps' outputs stacked."""
        weights = self.gathered_weights(layer)
        batch = inputs.shape[2]
        project = partial(self.project, weight=weights.projection)
        steps: List[Tensor] = []
        for start, pre_gates in self._windows(layer, inputs, active, weights, in_place=False):
            # Each step's view by unbind: its backward stacks the steps' gradients once, where an
            # index per step would write a window-sized gradient (zeros and one step) per step.
            for offset, step_gates in enumerate(pre_gates.unbind(1)):
                running = active[start + offset]
                gates = step_gates[:, :running] + self.recurrent(hidden[:, :running], weights.hidden)
                new_hidden, new_memory = cell(gates, memory[:, :running], project, layer.cell_clip, layer.proj_clip)
                hidden, memory = _update_rows(hidden, new_hidden), _update_rows(memory, new_memory)
                steps.append(F.pad(new_hidden, (0, 0, 0, batch - running)))
        return torch.stack(steps), hidden, memory

    def _infer(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Result:
        """The loop without autograd, in place (:func:`.steps.infer_layer`), both directions at once:
        each window's gates in the workspace, each step's recurrent product added over its own."""
        steps = _WindowSteps(self, layer, inputs, active, self.weights(index, layer), self.lowered_state(hidden))
        written = infer_layer(layer, inputs.shape[0], active, hidden, memory, BOTH, lambda directions: steps)
        return written, hidden, memory


class _WindowSteps:
    """:class:`Float32Kernel`'s products for :func:`.steps.infer_layer` (a :class:`.steps.StepProducts`):
    a window's input gates in one product (:meth:`Float32Kernel._windows`), then at each step the
    recurrent product of :attr:`state` added to the step's own."""

    def __init__(
        self,
        kernel: Float32Kernel,
        layer: LSTMLayer,
        inputs: Tensor,
        active: Sequence[int],
        weights: LSTMWeights,
        state: Tensor,
    ) -> None:
        self.kernel = kernel
        self.weights = weights
        self.state = state
        self._windows = kernel._windows(layer, inputs, active, weights, in_place=True)
        self._start, self._window = 0, inputs.new_empty((2, 0))

    def gates(self, step: int, running: int) -> Tensor:
        if step >= self._start + self._window.shape[1]:  # the next window's, over the workspace
            self._start, self._window = next(self._windows)
        gates = self._window[:, step - self._start, :running]
        return gates.add_(self.kernel.product(self.state[:, :running], self.weights.hidden))

    def project(self, halved_output: Tensor) -> Tensor:
        return self.kernel.product(halved_output, self.weights.projection)


def _with_bias(layer: LSTMLayer) -> Tensor:
    """The input weight with the bias row (+ forget bias) below it: (2, input_dim + 1, 4 * lstm_dim)."""
    return torch.cat([layer.input_weight, layer.gate_bias().unsqueeze(1)], dim=1)


def window_steps(n_steps: int, batch: int, lstm_dim: int, window_bytes: int) -> int:
    """Timesteps whose input products are computed together: gates of at most ``window_bytes``."""
    positions = window_bytes // (2 * 4 * lstm_dim * 4)  # both directions, 4 gates, float32
    return min(n_steps, max(1, positions // batch))


def _update_rows(state: Tensor, new_rows: Tensor) -> Tensor:
    """``state`` (2, batch, width) with its first ``new_rows.shape[1]`` rows replaced, as a new
    tensor: autograd still needs the old state."""
    running = new_rows.shape[1]
    if running == state.shape[1]:
        return new_rows
    return torch.cat([new_rows, state[:, running:]], dim=1)
