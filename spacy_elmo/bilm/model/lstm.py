"""The bidirectional stack of LSTMs with projection, clipping and skip connections.

Both directions of a layer are one module whose parameters are stacked along a leading
direction axis of size 2 (0 = forward, 1 = backward). The backward direction reads every
sentence reversed *within its own length*, so both directions step through time together and
padding never reaches a state. Rows are sorted longest first, so the rows still running at any
step are a prefix. How a layer's time loop runs (eager in float32 or bf16, int8, fused on a GPU)
is its kernel's (:mod:`.kernels`), chosen once per pass; the stack keeps the weight copies the
kernels multiply by.
"""

from dataclasses import dataclass
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..kernels import KernelChoice, kernel_for
from ..memory.weight_copies import WeightCopies
from .options import ElmoOptions


class LSTMState(NamedTuple):
    """The recurrent state of every layer and direction.

    Shapes: ``hidden`` (n_layers, 2, batch, projection_dim), ``memory`` (n_layers, 2, batch, lstm_dim).
    """

    hidden: Tensor
    memory: Tensor


@dataclass
class BiLMOutput:
    """What one forward pass gives.

    ``layers``: (n_layers + 1, batch, time, 2 * projection_dim), boundary positions included:
    position 0 is the sentence start, position ``lengths[b] - 1`` the sentence end. Layer 0 is
    the token encoding duplicated, layers 1.. are [forward; backward] LSTM outputs; of a pass
    with ``mix``, their weighted sum alone, (1, batch, time, 2 * projection_dim). Positions
    past a row's length are zero. ``lengths``: (batch,) int64, number of tokens + 2.
    ``state``: the LSTM states after each row's last token.
    """

    layers: Tensor
    lengths: Tensor
    state: LSTMState


class ProjectedLSTM(nn.Module):
    """One layer's parameters, both directions: an LSTM with cell clipping and a clipped output
    projection, run by a kernel (:mod:`.kernels`).

    Gate columns follow TensorFlow's order i, j, f, o. Shapes: ``input_weight`` (2, input_dim,
    4 * lstm_dim), ``hidden_weight`` (2, projection_dim, 4 * lstm_dim), ``bias`` (2, 4 *
    lstm_dim), ``projection`` (2, lstm_dim, projection_dim). ``bias`` is the bias stored in the
    weight file; TensorFlow's forget bias of 1.0 is added at run time (:meth:`gate_bias`), never stored.
    """

    forget_bias: Tensor  # a buffer, (4 * lstm_dim,): 1.0 at the forget gate's columns

    def __init__(self, input_dim: int, lstm_dim: int, projection_dim: int, cell_clip: float, proj_clip: float) -> None:
        super().__init__()
        self.lstm_dim = lstm_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.input_weight = nn.Parameter(torch.empty(2, input_dim, 4 * lstm_dim))
        self.hidden_weight = nn.Parameter(torch.empty(2, projection_dim, 4 * lstm_dim))
        self.bias = nn.Parameter(torch.zeros(2, 4 * lstm_dim))
        self.projection = nn.Parameter(torch.empty(2, lstm_dim, projection_dim))
        forget_bias = torch.zeros(4 * lstm_dim)
        forget_bias[2 * lstm_dim : 3 * lstm_dim] = 1.0
        self.register_buffer("forget_bias", forget_bias, persistent=False)
        for weight in (self.input_weight, self.hidden_weight, self.projection):
            nn.init.uniform_(weight, -0.05, 0.05)

    def gate_bias(self) -> Tensor:
        """The bias the gates add, (2, 4 * lstm_dim) float32: the stored one plus the forget bias."""
        return self.bias + self.forget_bias


class BiLSTMStack(nn.Module):
    """``n_layers`` of :class:`ProjectedLSTM`; layers after the first add their input to their output."""

    def __init__(self, options: ElmoOptions) -> None:
        super().__init__()
        self.options = options
        self.layers = nn.ModuleList(
            ProjectedLSTM(
                options.projection_dim, options.lstm_dim, options.projection_dim, options.cell_clip, options.proj_clip
            )
            for _ in range(options.n_layers)
        )
        self.dropout = nn.Dropout(0.0)
        # The weight copies the kernels multiply by (bf16 copies, int8 packs), of every layer, named by
        # its index; kept while the parameters are unchanged, never pickled nor deep-copied.
        self.copies = WeightCopies()
        self.kernels = KernelChoice()  # which loop a pass takes: the rules', unless the stack is given another

    def release_copies(self) -> None:
        """Forget the kernels' weight copies; the next pass remakes those of its precision."""
        self.copies.clear()

    def layer(self, index: int) -> ProjectedLSTM:
        """Layer ``index`` (0 reads the token vectors)."""
        layer = self.layers[index]
        assert isinstance(layer, ProjectedLSTM)
        return layer

    def zero_state(self, batch: int, like: Tensor) -> LSTMState:
        """All-zero states for ``batch`` rows, on the device and dtype of ``like``."""
        opts = self.options
        return LSTMState(
            like.new_zeros((opts.n_layers, 2, batch, opts.projection_dim)),
            like.new_zeros((opts.n_layers, 2, batch, opts.lstm_dim)),
        )

    def forward(
        self,
        tokens: Tensor,
        lengths: Tensor,
        state: LSTMState,
        dtype: torch.dtype = torch.float32,
        out: Optional[Tensor] = None,
        mix: Optional[Sequence[float]] = None,
    ) -> Tuple[Tensor, LSTMState]:
        """Run the stack over a batch of sentences, boundaries included, products in ``dtype``.

        Shapes: ``tokens`` (time, batch, projection_dim); ``lengths`` (batch,) int64, each at
        least 1, best on the CPU (see :meth:`run`). Returns the layers, (n_layers, batch, time,
        2 * projection_dim) = [forward; backward], written into ``out`` when given (a view of the
        caller's output: the layers are not copied to lay them out), and the final state. With
        ``mix``, one weight per layer, their weighted sum is added to ``out`` instead, (batch, time,
        2 * projection_dim), which the caller initializes, each layer freed once added. Positions
        past a row's length hold undefined values.
        """
        n_steps, batch, width = tokens.shape
        rows = RowOrder.of(lengths, n_steps, tokens.device)
        reverse_index = _reverse_index(lengths.to(tokens.device), n_steps)  # (time, batch)
        if out is None:
            shape = (batch, n_steps, 2 * width)
            out = tokens.new_zeros(shape if mix is not None else (len(self.layers), *shape))
        layers, final_state = self._run_sorted(_sorted_inputs(tokens, rows, reverse_index), rows, state, dtype)
        # Where each output position reads, in a layer's sorted output seen as (time * 2 * batch) rows.
        sources = _output_sources(reverse_index, rows.restore)
        for index in range(len(layers)):
            layer = layers.pop(0).reshape(-1, width)  # freed once placed
            if mix is None:
                _gather_rows(layer, sources, out[index].view(-1, width))
            else:
                out.view(-1, width).add_(layer.index_select(0, sources), alpha=mix[index])
        return out, final_state

    def run(
        self, inputs: Tensor, lengths: Tensor, state: LSTMState, dtype: torch.dtype = torch.float32
    ) -> Tuple[List[Tensor], LSTMState]:
        """Run both directions over inputs already in each direction's reading order.

        Shapes: ``inputs`` (time, 2, batch, projection_dim), direction 1 already reversed, so
        the two directions may read different text (language-model training feeds the backward
        LM its own reversed stream); ``lengths`` (batch,) int64, best on the CPU. Returns one tensor per layer,
        (time, 2, batch, projection_dim) in reading order, and the final state. ``dtype``: of the
        products (see :mod:`.precision`); inputs, states and outputs are float32.
        """
        rows = RowOrder.of(lengths, inputs.shape[0], inputs.device)
        layers, final_state = self._run_sorted(inputs.index_select(2, rows.order), rows, state, dtype)
        return [y.index_select(2, rows.restore) for y in layers], final_state

    def _run_sorted(
        self, x: Tensor, rows: "RowOrder", state: LSTMState, dtype: torch.dtype = torch.float32
    ) -> Tuple[List[Tensor], LSTMState]:
        """:meth:`run` over inputs ``x`` whose rows are already sorted (``rows.order``), its layers
        left sorted: a caller places the rows in its own layout in one gather (:meth:`forward`).
        ``state`` and the final state are in batch order. Inputs passed as a temporary are freed
        after the first layer (on Python 3.11 and later, whose calls hand their arguments over)."""
        outputs: List[Tensor] = []
        final = LSTMState(*(s.new_empty(s.shape) for s in state))  # state may be a broadcast view
        kernel = kernel_for(dtype, x.device, self.copies, self.kernels)
        for index in range(len(self.layers)):
            # The layer's states in the rows' order: the kernel's own, which it may overwrite.
            hidden, memory = (s[index].index_select(1, rows.order) for s in state)
            y, hidden, memory = kernel(index, self.layer(index), self.dropout(x), rows.active, hidden, memory)
            if index > 0 and self.options.use_skip_connections:
                y = y + x if torch.is_grad_enabled() else y.add_(x)  # y is the kernel's own
            outputs.append(y)
            final.hidden[index].index_copy_(1, rows.order, hidden)  # back in batch order
            final.memory[index].index_copy_(1, rows.order, memory)
            x = y
        return outputs, final


class RowOrder(NamedTuple):
    """A batch's rows longest first, so that the rows still running at any step are a prefix:
    ``order`` (batch,) the rows in that order, ``restore`` its inverse, both int64 on the
    batch's device, and ``active[t]`` the number of rows still running at step t."""

    order: Tensor
    restore: Tensor
    active: List[int]

    @classmethod
    def of(cls, lengths: Tensor, n_steps: int, device: torch.device) -> "RowOrder":
        """The order of rows of ``lengths`` (batch,); worked out on the host: reading a GPU's
        lengths back would wait for all queued work."""
        host_lengths = lengths.cpu()
        host_order = torch.argsort(host_lengths, descending=True, stable=True)
        order = host_order.to(device)
        return cls(order, torch.argsort(order), _active_rows(host_lengths[host_order].tolist(), n_steps))


def _active_rows(sorted_lengths: Sequence[int], n_steps: int) -> List[int]:
    """For rows sorted by length, longest first: how many are still running at each step."""
    running = len(sorted_lengths)
    active: List[int] = []
    for step in range(n_steps):
        while running and sorted_lengths[running - 1] <= step:
            running -= 1
        active.append(running)
    return active


def _reverse_index(lengths: Tensor, n_steps: int) -> Tensor:
    """Index that reverses each column's first ``length`` steps and leaves padding in place.

    Shape: (time, batch). It is its own inverse.
    """
    steps = torch.arange(n_steps, device=lengths.device).unsqueeze(1)  # (time, 1)
    reversed_steps = lengths.unsqueeze(0) - 1 - steps  # (time, batch)
    return torch.where(reversed_steps >= 0, reversed_steps, steps.expand_as(reversed_steps))


def _sorted_inputs(tokens: Tensor, rows: RowOrder, reverse_index: Tensor) -> Tensor:
    """Both directions' inputs, rows in ``rows.order``: the backward direction reads each row
    reversed within its length. Shapes: ``tokens`` (time, batch, dim), ``reverse_index`` (time,
    batch) -> (time, 2, batch, dim)."""
    sorted_tokens = tokens.index_select(1, rows.order)
    backward_steps = reverse_index.index_select(1, rows.order).unsqueeze(-1).expand_as(sorted_tokens)
    return torch.stack([sorted_tokens, sorted_tokens.gather(0, backward_steps)], dim=1)


def _output_sources(reverse_index: Tensor, restore: Tensor) -> Tensor:
    """For each position of a layer laid out (batch, time, [forward; backward]), its row in the
    layer's sorted output (time, 2, batch, width) seen as rows: the forward direction at (time,
    0, restore[b]), the backward one at (reverse_index[time, b], 1, restore[b]).

    Shapes: ``reverse_index`` (time, batch), ``restore`` (batch,); returns (batch * time * 2,) int64.
    """
    n_steps, batch = reverse_index.shape
    steps = torch.arange(n_steps, device=restore.device).unsqueeze(0)  # (1, time)
    rows = restore.unsqueeze(1)  # (batch, 1)
    forward = steps * (2 * batch) + rows  # (batch, time)
    backward = reverse_index.T * (2 * batch) + batch + rows
    return torch.stack([forward, backward], dim=-1).reshape(-1)


def _gather_rows(source: Tensor, index: Tensor, out: Tensor) -> None:
    """``out[:] = source[index]``: (rows, width) from (n, width). Without autograd, straight into
    ``out``; with it, through a temporary (``index_select`` into ``out`` has no gradient, and
    refuses an ``out`` that needs one)."""
    if torch.is_grad_enabled():
        out.copy_(source.index_select(0, index))
    else:
        torch.index_select(source, 0, index, out=out)
