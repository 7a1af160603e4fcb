"""The LSTM layer as bilm-tf defines it, written to be read: the spec every kernel is held to.

One step of one direction is TensorFlow's ``LSTMCell`` with a projection (gate columns in its
order i, j, f, o; ``bias`` is the stored one plus the forget bias, :meth:`LSTMLayer.gate_bias`)::

    i, j, f, o = x @ W_input + h @ W_hidden + bias
    c' = clip(sigmoid(i) * tanh(j) + sigmoid(f) * c, cell_clip)
    h' = clip((sigmoid(o) * tanh(c')) @ W_projection, proj_clip)

A layer runs both directions over a batch whose rows are sorted longest first; at step ``t``
only the ``active[t]`` rows still running are computed, so a row's outputs stop at its length
(zero after it) and its final state is the one after its last step. Direction 1's inputs come
already reversed within each row's length (:class:`~spacy_elmo.bilm.model.lstm.BiLSTMStack`).

The kernels compute the same, faster: the two products of a step as one, the cell in place on
scaled values (:mod:`.cell`), products in bf16 or int8. ``tests/bilm/kernels/test_contract.py``
runs every kernel the registry can pick against :class:`ReferenceKernel`, in float64, each within
its own tolerance.
"""

from typing import Sequence, Tuple

import torch
from torch import Tensor

from .layer import LSTMLayer


def reference_step(layer: LSTMLayer, direction: int, x: Tensor, h: Tensor, c: Tensor) -> Tuple[Tensor, Tensor]:
    """One step of one direction, as new tensors: ``x`` (rows, input_dim), ``h`` (rows,
    projection_dim), ``c`` (rows, lstm_dim) -> the new ``h`` and ``c``, in the inputs' dtype."""
    dtype = x.dtype
    gates = x @ layer.input_weight[direction].to(dtype) + h @ layer.hidden_weight[direction].to(dtype)
    i, j, f, o = (gates + layer.gate_bias()[direction].to(dtype)).chunk(4, dim=-1)
    c = (torch.sigmoid(i) * torch.tanh(j) + torch.sigmoid(f) * c).clamp(-layer.cell_clip, layer.cell_clip)
    h = (torch.sigmoid(o) * torch.tanh(c)) @ layer.projection[direction].to(dtype)
    return h.clamp(-layer.proj_clip, layer.proj_clip), c


class ReferenceKernel:
    """:func:`reference_step` over a layer's steps (a :class:`~spacy_elmo.bilm.kernels.LayerKernel`),
    in the dtype of its inputs, with autograd, leaving the caller's states alone."""

    def __call__(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Tuple[Tensor, Tensor, Tensor]:
        directions = [self.direction(layer, d, inputs[:, d], active, hidden[d], memory[d]) for d in range(2)]
        outputs, final_hidden, final_memory = zip(*directions)
        return torch.stack(outputs, dim=1), torch.stack(final_hidden), torch.stack(final_memory)

    @staticmethod
    def direction(
        layer: LSTMLayer, direction: int, inputs: Tensor, active: Sequence[int], h: Tensor, c: Tensor
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """One direction: ``inputs`` (time, batch, input_dim), ``h`` and ``c`` its start states ->
        its outputs (time, batch, projection_dim), zero past each row's length, and final states."""
        outputs = []
        for t, rows in enumerate(active):
            step_h, step_c = reference_step(layer, direction, inputs[t, :rows], h[:rows], c[:rows])
            h, c = torch.cat([step_h, h[rows:]]), torch.cat([step_c, c[rows:]])  # stopped rows keep their last
            outputs.append(torch.cat([step_h, step_h.new_zeros((len(h) - rows, step_h.shape[1]))]))
        return torch.stack(outputs), h, c
