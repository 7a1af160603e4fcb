"""The bidirectional stack of LSTMs with projection, clipping and skip connections.

Both directions of a layer are one module whose parameters are stacked along a leading
direction axis of size 2 (0 = forward, 1 = backward). The backward direction reads every
sentence reversed *within its own length*, so both directions step through time together and
padding never reaches a state. Per layer, the input half of the gate pre-activations is
computed before the time loop, in large matrix products over many timesteps; the time loop
only does the recurrent product, for both directions and the whole batch at once.
"""

from typing import List, NamedTuple, Tuple

import torch
from torch import Tensor, nn

from .options import ElmoOptions

# Positions (steps x batch) whose input projections are computed in one product: large enough
# for an efficient matrix product, small enough to bound memory (268 MB at the Original size).
PRECOMPUTED_POSITIONS = 2048


class LSTMState(NamedTuple):
    """The recurrent state of every layer and direction.

    Shapes: ``hidden`` (n_layers, 2, batch, projection_dim), ``memory`` (n_layers, 2, batch, lstm_dim).
    """

    hidden: Tensor
    memory: Tensor


class ProjectedLSTM(nn.Module):
    """One layer, both directions: LSTM with cell clipping and a clipped output projection.

    Gate columns follow TensorFlow's order i, j, f, o. ``bias`` is the bias stored in the
    weight file; TensorFlow's forget bias of 1.0 is added at run time, never stored.
    """

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

    def forward(self, inputs: Tensor, lengths: Tensor, hidden: Tensor, memory: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Run both directions over a batch.

        Shapes: ``inputs`` (time, 2, batch, input_dim), already reversed for direction 1;
        ``lengths`` (batch,) int64 on the inputs' device; ``hidden`` (2, batch, projection_dim);
        ``memory`` (2, batch, lstm_dim). Returns the outputs (time, 2, batch, projection_dim),
        and the states after each row's last valid step (rows do not update past their length).
        """
        n_steps, _, batch, input_dim = inputs.shape
        bias = (self.bias + self.forget_bias).unsqueeze(1)  # (2, 1, 4 * lstm_dim)
        shortest = int(lengths.min())
        # Without autograd, each step overwrites its slice of the precomputed gates in place,
        # saving passes over (2, batch, 4 * lstm_dim) per step; autograd needs fresh tensors.
        in_place = not torch.is_grad_enabled()
        chunk = max(1, PRECOMPUTED_POSITIONS // batch)
        outputs: List[Tensor] = []
        for start in range(0, n_steps, chunk):
            window = inputs[start : start + chunk]
            flat = window.transpose(0, 1).reshape(2, -1, input_dim)
            pre_gates = torch.baddbmm(bias, flat, self.input_weight).view(2, window.shape[0], batch, -1)
            for offset in range(window.shape[0]):
                step = start + offset
                if in_place:
                    gates = pre_gates[:, offset].baddbmm_(hidden, self.hidden_weight)
                    new_hidden, new_memory = self._cell_in_place(gates, memory)
                else:
                    gates = torch.baddbmm(pre_gates[:, offset], hidden, self.hidden_weight)
                    new_hidden, new_memory = self._cell(gates, memory)
                if step < shortest:
                    hidden, memory = new_hidden, new_memory
                else:
                    running = (lengths > step).view(1, batch, 1)
                    hidden = torch.where(running, new_hidden, hidden)
                    memory = torch.where(running, new_memory, memory)
                outputs.append(new_hidden)
        return torch.stack(outputs), hidden, memory

    def _cell(self, gates: Tensor, memory: Tensor) -> Tuple[Tensor, Tensor]:
        """One step from gate pre-activations (2, batch, 4 * lstm_dim) and memory (2, batch, lstm_dim).

        Returns the clipped projected output (2, batch, projection_dim) and the clipped memory.
        """
        in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
        new_memory = torch.sigmoid(in_gate) * torch.tanh(cell_input) + torch.sigmoid(forget_gate) * memory
        new_memory = new_memory.clamp(-self.cell_clip, self.cell_clip)
        cell_output = torch.sigmoid(out_gate) * torch.tanh(new_memory)
        new_hidden = torch.bmm(cell_output, self.projection).clamp(-self.proj_clip, self.proj_clip)
        return new_hidden, new_memory

    def _cell_in_place(self, gates: Tensor, memory: Tensor) -> Tuple[Tensor, Tensor]:
        """:meth:`_cell` computed in the storage of ``gates``, with the same roundings.

        The returned memory is a view of ``gates``: the caller must not reuse that slice.
        """
        in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
        in_gate.sigmoid_().mul_(cell_input.tanh_())
        new_memory = forget_gate.sigmoid_().mul_(memory).add_(in_gate).clamp_(-self.cell_clip, self.cell_clip)
        cell_output = out_gate.sigmoid_().mul_(torch.tanh(new_memory, out=cell_input))
        new_hidden = torch.bmm(cell_output, self.projection).clamp_(-self.proj_clip, self.proj_clip)
        return new_hidden, new_memory


class BiLSTMStack(nn.Module):
    """``n_layers`` of :class:`ProjectedLSTM`; layers after the first add their input to their output."""

    def __init__(self, options: ElmoOptions) -> None:
        super().__init__()
        self.options = options
        self.layers = nn.ModuleList(
            ProjectedLSTM(
                options.projection_dim,
                options.lstm_dim,
                options.projection_dim,
                options.cell_clip,
                options.proj_clip,
            )
            for _ in range(options.n_layers)
        )
        self.dropout = nn.Dropout(0.0)

    def zero_state(self, batch: int, like: Tensor) -> LSTMState:
        """All-zero states for ``batch`` rows, on the device and dtype of ``like``."""
        opts = self.options
        return LSTMState(
            like.new_zeros((opts.n_layers, 2, batch, opts.projection_dim)),
            like.new_zeros((opts.n_layers, 2, batch, opts.lstm_dim)),
        )

    def forward(self, tokens: Tensor, lengths: Tensor, state: LSTMState) -> Tuple[List[Tensor], LSTMState]:
        """Run the stack over a batch of sentences, boundaries included.

        Shapes: ``tokens`` (time, batch, projection_dim); ``lengths`` (batch,) int64, each at
        least 1. Returns one tensor per layer, (time, batch, 2 * projection_dim) = [forward;
        backward], and the final state. Positions past a row's length hold undefined values.
        """
        n_steps, batch, _ = tokens.shape
        reverse_index = _reverse_index(lengths, n_steps)  # (time, batch)
        x = torch.stack([tokens, _reverse(tokens, reverse_index)], dim=1)  # (time, 2, batch, dim)
        layers, final_state = self.run(x, lengths, state)
        outputs = [torch.cat([y[:, 0], _reverse(y[:, 1], reverse_index)], dim=-1) for y in layers]
        return outputs, final_state

    def run(self, inputs: Tensor, lengths: Tensor, state: LSTMState) -> Tuple[List[Tensor], LSTMState]:
        """Run both directions over inputs already in each direction's reading order.

        Shapes: ``inputs`` (time, 2, batch, projection_dim), direction 1 already reversed, so
        the two directions may read different text (language-model training feeds the backward
        LM its own reversed stream); ``lengths`` (batch,) int64. Returns one tensor per layer,
        (time, 2, batch, projection_dim) in reading order, and the final state.
        """
        x = inputs
        outputs: List[Tensor] = []
        hiddens: List[Tensor] = []
        memories: List[Tensor] = []
        for index, layer in enumerate(self.layers):
            y, hidden, memory = layer(self.dropout(x), lengths, state.hidden[index], state.memory[index])
            if index > 0 and self.options.use_skip_connections:
                y = y + x
            outputs.append(y)
            hiddens.append(hidden)
            memories.append(memory)
            x = y
        return outputs, LSTMState(torch.stack(hiddens), torch.stack(memories))


def _reverse_index(lengths: Tensor, n_steps: int) -> Tensor:
    """Index that reverses each column's first ``length`` steps and leaves padding in place.

    Shape: (time, batch). It is its own inverse.
    """
    steps = torch.arange(n_steps, device=lengths.device).unsqueeze(1)  # (time, 1)
    reversed_steps = lengths.unsqueeze(0) - 1 - steps  # (time, batch)
    return torch.where(reversed_steps >= 0, reversed_steps, steps.expand_as(reversed_steps))


def _reverse(x: Tensor, index: Tensor) -> Tensor:
    """Shape: (time, batch, width) -> (time, batch, width), each column reversed in its length."""
    return x.gather(0, index.unsqueeze(-1).expand_as(x))
