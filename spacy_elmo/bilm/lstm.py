"""The bidirectional stack of LSTMs with projection, clipping and skip connections.

Both directions of a layer are one module whose parameters are stacked along a leading
direction axis of size 2 (0 = forward, 1 = backward). The backward direction reads every
sentence reversed *within its own length*, so both directions step through time together and
padding never reaches a state. Per layer, the input half of the gate pre-activations is
computed before the time loop, in large matrix products over many timesteps; the time loop
only does the recurrent product, for both directions at once and, with rows sorted longest
first, only for the prefix of rows still running, so padding costs no recurrent work. With
autograd, each weight's gradient is gathered over the steps into a few large products
(:mod:`.gathered_gradients`) rather than computed per step. In int8
(inference only) each step's input and recurrent products are one product instead, over the
step's input beside the previous output, and the directions run one after the other
(:meth:`ProjectedLSTM.forward_int8`).
"""

import math
from functools import partial
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from . import int8
from .cuda_graphs import run_fused_layer
from .fused_lstm import use_fused_lstm
from .gathered_gradients import GatheredWeight
from .options import ElmoOptions
from .precision import INT8, LowPrecisionWeights
from .row_buckets import on_padded_rows

# The float32 gates of a window of timesteps whose input products are computed in one product:
# small enough to stay in a CPU's cache between the product that writes them and the steps that
# read them. Windows of 1,024 positions (134 MB at the Original size) made the additions over them
# run at memory speed: a quarter of a bf16 pass on one AMD EPYC core. At the Original size this is
# 128 positions, a product of 128 rows, still efficient; a batch of more rows takes one step.
WINDOW_GATES_BYTES = 16 * 2**20

# A product weight: a tensor with the direction first; in training, such a tensor whose gradient is
# gathered over the steps (GatheredWeight); in int8 (inference), one direction's pack (projection).
Weight = Union[Tensor, GatheredWeight, int8.Packed]


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
        self.low_precision = LowPrecisionWeights()
        self.int8 = int8.Int8Weights()
        for weight in (self.input_weight, self.hidden_weight, self.projection):
            nn.init.uniform_(weight, -0.05, 0.05)

    def forward(
        self,
        inputs: Tensor,
        active: Sequence[int],
        hidden: Tensor,
        memory: Tensor,
        workspace: Optional[Tensor] = None,
        dtype: torch.dtype = torch.float32,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """Run both directions over a batch whose rows are sorted by length, longest first.

        Shapes: ``inputs`` (time, 2, batch, input_dim), already reversed for direction 1;
        ``active[t]`` is the number of rows still running at step t (non-increasing), so step t
        computes rows ``:active[t]`` only and padding costs nothing; ``hidden`` (2, batch,
        projection_dim); ``memory`` (2, batch, lstm_dim). ``workspace``, only without autograd:
        at least :meth:`workspace_size` floats, reused for every window's gates (a fresh
        allocation this large costs page faults; all layers can share one; int8 needs none).
        ``dtype``: of the input, recurrent and projection products (see :mod:`.precision`); gates,
        states and outputs are float32. Returns the outputs (time, 2, batch, projection_dim), zero past
        each row's length, and the states after each row's last step.
        """
        if dtype == INT8:
            return self.forward_int8(inputs, active, hidden, memory)
        # With a workspace, each step overwrites its slice of the precomputed gates and the
        # states in place, saving passes over (directions, batch, 4 * lstm_dim) per step; autograd
        # needs fresh tensors.
        in_place = workspace is not None
        weights = self._gathered_weights(dtype) if not in_place and torch.is_grad_enabled() else self._weights(dtype)
        inputs, bias = self._with_bias(inputs, dtype)
        n_steps, _, batch, _ = inputs.shape
        if in_place:
            hidden, memory = hidden.clone(), memory.clone()
        chunk = _window_steps(n_steps, batch, self.lstm_dim)
        outputs: List[Tensor] = []
        for start in range(0, n_steps, chunk):
            rows = active[start]  # the window's later steps need no more rows than its first
            window = inputs[start : start + chunk, :, :rows]
            flat = window.transpose(0, 1).reshape(window.shape[1], -1, window.shape[-1])
            out = None
            if in_place:
                shape = (flat.shape[0], flat.shape[1], 4 * self.lstm_dim)
                out = workspace[: math.prod(shape)].view(shape)
            pre_gates = _input_gates(flat, weights.input, bias, out).view(flat.shape[0], window.shape[0], rows, -1)
            # Each step's view by unbind: its backward stacks the steps' gradients once, where an
            # index per step would write a window-sized gradient (zeros and one step) per step.
            for offset, step_gates in enumerate(pre_gates.unbind(1)):
                running = active[start + offset]
                gates = _add_recurrent(step_gates[:, :running], hidden[:, :running], weights.hidden, in_place)
                if in_place:  # the running rows of ``memory`` are overwritten by the cell
                    new_hidden = self._cell_in_place(gates, memory[:, :running], weights.projection)
                    hidden[:, :running] = new_hidden
                else:
                    new_hidden, new_memory = self._cell(gates, memory[:, :running], weights.projection)
                    hidden = _update_rows(hidden, new_hidden)
                    memory = _update_rows(memory, new_memory)
                outputs.append(F.pad(new_hidden, (0, 0, 0, batch - running)))
        return torch.stack(outputs), hidden, memory

    def forward_int8(
        self, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """:meth:`forward` in int8 (see :mod:`.int8`), for inference only: same arguments and results.

        Each step's gates come from one product, of the step's input beside the previous output
        (rows, input_dim + projection_dim), by both weights stacked, with the bias: no window of
        input gates to keep and no pass adding the recurrent product to them, at the cost of one
        activation scale for both halves (no loss in the accuracy contract:
        ``benchmarks/bf16_accuracy.py``, figures in docs/bilm.md). Each direction runs all its
        steps before the other, so a step reads one direction's weights, which can stay in the
        CPU's cache.
        """
        packs = self.int8.get("lstm", list(self.parameters()), self._int8_packs)  # refuses gradients
        with torch.no_grad():
            runs = [
                self._int8_direction(inputs[:, d], active, hidden[d], memory[d], packs[0][d], packs[1][d])
                for d in range(2)
            ]
        outputs, final_hidden, final_memory = zip(*runs)
        return torch.stack(outputs, dim=1), torch.stack(final_hidden), torch.stack(final_memory)

    def _int8_direction(
        self, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor,
        gates_pack: int8.Packed, projection_pack: int8.Packed,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """One direction of :meth:`forward_int8`. Shapes: ``inputs`` (time, batch, input_dim),
        ``hidden`` (batch, projection_dim), ``memory`` (batch, lstm_dim); returns the outputs
        (time, batch, projection_dim), zero past each row's length, and the final states."""
        n_steps, batch, _ = inputs.shape
        hidden, memory = hidden.clone(), memory.clone()
        outputs: List[Tensor] = []
        for step in range(n_steps):
            running = active[step]
            step_inputs = torch.cat([inputs[step, :running], hidden[:running]], dim=1)  # (running, input_dim + projection_dim)
            gates = int8.linear(step_inputs, gates_pack).unsqueeze(0)  # (1, running, 4 * lstm_dim)
            new_hidden = self._cell_in_place(gates, memory[None, :running], projection_pack)[0]
            hidden[:running] = new_hidden
            outputs.append(F.pad(new_hidden, (0, 0, 0, batch - running)))
        return torch.stack(outputs), hidden, memory

    def workspace_size(self, n_steps: int, batch: int) -> int:
        """Floats of the gates buffer that :meth:`forward` needs for this batch."""
        return 2 * _window_steps(n_steps, batch, self.lstm_dim) * batch * 4 * self.lstm_dim

    def _weights(self, dtype: torch.dtype) -> "LSTMWeights":
        """The three product weights in ``dtype`` (float32 or bf16); in float32 the input weight has the bias row."""
        if dtype == torch.float32:
            # The bias rides in the input product as the weight of one more input that is always
            # 1: cheaper than broadcasting it into the gates before the product.
            bias = (self.bias + self.forget_bias).unsqueeze(1)
            return LSTMWeights(torch.cat([self.input_weight, bias], dim=1), self.hidden_weight, self.projection)
        return self._product_weights(dtype, out_major=self.input_weight.device.type == "cpu")

    def _gathered_weights(self, dtype: torch.dtype) -> "LSTMWeights":
        """:meth:`_weights` for a pass with autograd: each weight whose parameter is trained is a
        :class:`GatheredWeight`, its gradient gathered over the steps into the float32 parameter
        in a few large products; every product multiplies by a copy in ``dtype``, laid out as
        :meth:`_product_weights` lays it out, made for this pass outside autograd."""
        sources = self._weights(dtype) if dtype == torch.float32 else self._product_weights(torch.float32)
        out_major = dtype != torch.float32 and self.input_weight.device.type == "cpu"
        copies = [_product_copy(source, dtype, out_major) for source in sources]
        return LSTMWeights(*(GatheredWeight(s, c) if s.requires_grad else c for s, c in zip(sources, copies)))

    def _product_weights(self, dtype: torch.dtype, out_major: bool = False) -> "LSTMWeights":
        """The three product weights as stored, (2, in, out), in ``dtype`` (float32 or bf16), without the bias.

        ``out_major``: each low-precision copy is laid out (2, out, in) in memory and returned as
        its transposed view, the layout oneDNN's bf16 kernels on a CPU read faster at the input and
        recurrent products' shapes (``benchmarks/lstm_layout.py``; figures in docs/bilm.md). The
        GPU's fused loop takes them as stored.
        """
        if dtype == torch.float32:
            return LSTMWeights(self.input_weight, self.hidden_weight, self.projection)

        def copy(name: str, weight: Tensor) -> Tensor:
            if not out_major:
                return self.low_precision.get(name, dtype, [weight], lambda: weight)
            laid_out = self.low_precision.get(f"{name}.T", dtype, [weight], lambda: weight.transpose(1, 2).contiguous())
            return laid_out.transpose(1, 2)

        return LSTMWeights(
            copy("input_weight", self.input_weight),
            copy("hidden_weight", self.hidden_weight),
            copy("projection", self.projection),
        )

    def fused_forward(
        self, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor, dtype: torch.dtype
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """:meth:`forward` for inference on a GPU, the cell fused into two kernels per step
        (see :mod:`.fused_lstm`), replayed from a CUDA graph where one serves (see
        :mod:`.cuda_graphs`); same arguments and results, without autograd."""
        bias = (self.bias + self.forget_bias).contiguous()
        weights = tuple(self._product_weights(dtype))
        return run_fused_layer(self, inputs, active, hidden, memory, weights, bias, self.cell_clip, self.proj_clip)

    def _int8_packs(self) -> Tuple[Tuple[int8.Packed, ...], ...]:
        """The int8 packs of :meth:`forward_int8`, per direction: the gates' (the input weight over
        the recurrent one, with the bias), then the projection's, each (out, in)."""
        bias = self.bias + self.forget_bias
        # One direction's stacked float32 weight at a time, made (out, in) as the pack reads it:
        # the only transient copy of a weight (64 MB at the Original size), freed once packed.
        return (
            tuple(int8.pack(torch.cat([self.input_weight[d].T, self.hidden_weight[d].T], dim=1), bias[d]) for d in range(2)),
            tuple(int8.pack(self.projection[d].T, None) for d in range(2)),
        )

    def _with_bias(self, inputs: Tensor, dtype: torch.dtype) -> Tuple[Tensor, Optional[Tensor]]:
        """The inputs for the input product, in ``dtype``, and the bias it leaves to add.

        Float32: a constant-1 input is appended (the bias row of :meth:`_weights`), no bias
        left. Lower precision would round the bias, so it stays float32, (2, 1, 4 * lstm_dim),
        and is added where the product is converted to float32 (:func:`_input_gates`).
        """
        if dtype == torch.float32:
            n_steps, _, batch, _ = inputs.shape
            return torch.cat([inputs, inputs.new_ones(n_steps, 2, batch, 1)], dim=-1), None
        return inputs.to(dtype), (self.bias + self.forget_bias).unsqueeze(1)

    def _cell(self, gates: Tensor, memory: Tensor, projection: Weight) -> Tuple[Tensor, Tensor]:
        """One step from gate pre-activations (2, batch, 4 * lstm_dim) and memory (2, batch, lstm_dim).

        Returns the clipped projected output (2, batch, projection_dim) and the clipped memory;
        the projection product runs in ``projection``'s dtype.
        """
        in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
        new_memory = torch.sigmoid(in_gate) * torch.tanh(cell_input) + torch.sigmoid(forget_gate) * memory
        new_memory = new_memory.clamp(-self.cell_clip, self.cell_clip)
        cell_output = torch.sigmoid(out_gate) * torch.tanh(new_memory)
        new_hidden = _project(cell_output, projection).clamp(-self.proj_clip, self.proj_clip)
        return new_hidden, new_memory

    def _cell_in_place(self, gates: Tensor, memory: Tensor, projection: Weight) -> Tensor:
        """:meth:`_cell` computed in the storage of ``gates``, the new memory written over ``memory``;
        returns the new output (2, rows, projection_dim).

        Each tanh is computed as ``2 sigmoid(2x) - 1`` (as the GPU's fused kernels do), so that
        the four gates go through one sigmoid over contiguous memory: torch's CPU tanh runs several
        times slower than its sigmoid (``benchmarks/lstm_layout.py`` times both cells). The results
        differ from :meth:`_cell`'s by float32 roundings (a few 1e-7).
        """
        in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
        cell_input.mul_(2.0)
        gates.sigmoid_()
        cell_input.mul_(2.0).sub_(1.0)  # tanh of the cell input
        memory.mul_(forget_gate).addcmul_(in_gate, cell_input).clamp_(-self.cell_clip, self.cell_clip)
        squashed = torch.mul(memory, 2.0, out=cell_input).sigmoid_().mul_(2.0).sub_(1.0)  # tanh(memory)
        cell_output = out_gate.mul_(squashed)
        return _project(cell_output, projection).clamp_(-self.proj_clip, self.proj_clip)


class LSTMWeights(NamedTuple):
    """A layer's product weights in float32 or bf16. Shapes (direction first): ``input`` (2,
    input_dim [+ 1 bias row], 4 * lstm_dim), ``hidden`` (2, projection_dim, 4 * lstm_dim),
    ``projection`` (2, lstm_dim, projection_dim)."""

    input: Tensor
    hidden: Tensor
    projection: Tensor


def _product_copy(source: Tensor, dtype: torch.dtype, out_major: bool) -> Tensor:
    """``source`` (2, in, out) in ``dtype``, outside autograd; ``out_major``: laid out (2, out, in)
    in memory, returned as its transposed view (see :meth:`ProjectedLSTM._product_weights`)."""
    with torch.no_grad():
        if not out_major:
            return source.detach().to(dtype)
        return source.transpose(1, 2).to(dtype, memory_format=torch.contiguous_format).transpose(1, 2)


def _input_gates(flat: Tensor, weight: Weight, bias: Optional[Tensor], out: Optional[Tensor]) -> Tensor:
    """The input half of a window's gates, float32, into ``out`` if given.

    Shapes: ``flat`` (2, n, input_dim) x ``weight`` (2, input_dim, 4 * lstm_dim) ->
    (2, n, 4 * lstm_dim). In lower precision the float32 ``bias`` is added after the product,
    in float32: into ``out``, the product converted in place and the bias added there (``torch.add``
    into ``out`` converts it into a temporary first: one more pass over the gates).
    """
    if out is None:
        product = _product(flat, weight)
        return product if bias is None else torch.add(product, bias)
    if bias is None:
        return torch.bmm(flat, weight, out=out)
    return out.copy_(_product(flat, weight)).add_(bias)


def _add_recurrent(gates: Tensor, hidden: Tensor, weight: Weight, in_place: bool) -> Tensor:
    """``gates + hidden @ weight`` in float32, the product in ``weight``'s dtype; ``in_place``
    (without autograd) in the storage of ``gates``.

    Shapes: ``gates`` (2, rows, 4 * lstm_dim), ``hidden`` (2, rows, projection_dim) float32.
    """
    if not in_place:
        return gates + _product(hidden.to(weight.dtype), weight)
    if weight.dtype == torch.float32:
        return gates.baddbmm_(hidden, weight)
    return gates.add_(_product(hidden.to(weight.dtype), weight))


def _project(cell_output: Tensor, projection: Weight) -> Tensor:
    """(directions, rows, lstm_dim) float32 -> (directions, rows, projection_dim) float32, the product
    in ``projection``'s dtype; an int8 pack serves one direction (see :meth:`ProjectedLSTM.forward_int8`)."""
    if not isinstance(projection, (Tensor, GatheredWeight)):
        return int8.linear(cell_output[0], projection).unsqueeze(0)
    if projection.dtype == torch.float32:
        return _product(cell_output, projection)
    return _product(cell_output.to(projection.dtype), projection).float()


def _product(x: Tensor, weight: Weight) -> Tensor:
    """``torch.bmm(x, weight)``, the weight's gradient gathered where it is a :class:`GatheredWeight`;
    in low precision on bounded row counts (see :mod:`.row_buckets`). Shape: (2, rows, in) -> (2, rows, out)."""
    product = weight if isinstance(weight, GatheredWeight) else partial(torch.bmm, mat2=weight)
    return product(x) if weight.dtype == torch.float32 else on_padded_rows(product, x, 1)


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

    def forward(
        self, tokens: Tensor, lengths: Tensor, state: LSTMState, dtype: torch.dtype = torch.float32
    ) -> Tuple[List[Tensor], LSTMState]:
        """Run the stack over a batch of sentences, boundaries included, products in ``dtype``.

        Shapes: ``tokens`` (time, batch, projection_dim); ``lengths`` (batch,) int64, each at
        least 1, on any device (on the CPU, a GPU pass needs no wait: see :meth:`run`). Returns
        one tensor per layer, (time, batch, 2 * projection_dim) = [forward; backward], and the
        final state. Positions past a row's length hold undefined values.
        """
        n_steps, batch, _ = tokens.shape
        reverse_index = _reverse_index(lengths.to(tokens.device), n_steps)  # (time, batch)
        x = torch.stack([tokens, _reverse(tokens, reverse_index)], dim=1)  # (time, 2, batch, dim)
        layers, final_state = self.run(x, lengths, state, dtype)
        outputs = [torch.cat([y[:, 0], _reverse(y[:, 1], reverse_index)], dim=-1) for y in layers]
        return outputs, final_state

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
        # Rows longest first, so that the rows still running at any step are a prefix. The order
        # is worked out on the host: reading a GPU's lengths back would wait for all queued work.
        host_lengths = lengths.cpu()
        host_order = torch.argsort(host_lengths, descending=True, stable=True)
        active = _active_rows(host_lengths[host_order].tolist(), inputs.shape[0])
        order = host_order.to(inputs.device)
        restore = torch.argsort(order)
        x = inputs.index_select(2, order)
        hidden, memory = state.hidden.index_select(2, order), state.memory.index_select(2, order)
        outputs: List[Tensor] = []
        hiddens: List[Tensor] = []
        memories: List[Tensor] = []
        n_steps, _, batch, _ = x.shape
        fused = use_fused_lstm(x.device, dtype)
        workspace = None  # every layer has the same gate width: one buffer serves them all
        if not torch.is_grad_enabled() and not fused and dtype != INT8:
            workspace = x.new_empty(self.layers[0].workspace_size(n_steps, batch))
        for index, layer in enumerate(self.layers):
            if fused:
                y, layer_hidden, layer_memory = layer.fused_forward(
                    self.dropout(x), active, hidden[index], memory[index], dtype
                )
            else:
                y, layer_hidden, layer_memory = layer(
                    self.dropout(x), active, hidden[index], memory[index], workspace, dtype
                )
            if index > 0 and self.options.use_skip_connections:
                y = y + x
            outputs.append(y.index_select(2, restore))
            hiddens.append(layer_hidden)
            memories.append(layer_memory)
            x = y
        final_hidden = torch.stack(hiddens).index_select(2, restore)
        final_memory = torch.stack(memories).index_select(2, restore)
        return outputs, LSTMState(final_hidden, final_memory)


def _window_steps(n_steps: int, batch: int, lstm_dim: int) -> int:
    """Timesteps whose input products are computed together (see ``WINDOW_GATES_BYTES``)."""
    positions = WINDOW_GATES_BYTES // (2 * 4 * lstm_dim * 4)  # both directions, 4 gates, float32
    return min(n_steps, max(1, positions // batch))


def _active_rows(sorted_lengths: Sequence[int], n_steps: int) -> List[int]:
    """For rows sorted by length, longest first: how many are still running at each step."""
    running = len(sorted_lengths)
    active: List[int] = []
    for step in range(n_steps):
        while running and sorted_lengths[running - 1] <= step:
            running -= 1
        active.append(running)
    return active


def _update_rows(state: Tensor, new_rows: Tensor) -> Tensor:
    """``state`` (2, batch, width) with its first ``new_rows.shape[1]`` rows replaced, as a new
    tensor: autograd still needs the old state."""
    running = new_rows.shape[1]
    if running == state.shape[1]:
        return new_rows
    return torch.cat([new_rows, state[:, running:]], dim=1)


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
