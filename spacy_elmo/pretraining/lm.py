"""The two language-model losses of a biLM, as one module (what DistributedDataParallel wraps).

The biLM's char CNN encodes each distinct token of the batch once; its LSTM stack runs the
forward LM over the forward windows and the backward LM over the backward windows (each in
its own reading order, see :mod:`.stream`) from the carried state; the top layer, after
dropout, goes through the shared softmax.
"""

from typing import Tuple

import torch
from torch import Tensor, nn

from ..bilm import BiLM
from ..bilm.model.lstm import LSTMState
from ..bilm.precision.resolved import own_precision
from .softmax import SharedSoftmax, sample_log_uniform
from .stream import WindowBatch


class BiLMLoss(nn.Module):
    """Sum of negative log-likelihoods of each direction, with the final LSTM state.

    ``n_negatives`` = 0 means full softmax; otherwise sampled softmax with that many negatives
    shared by every row and both directions. The products (char CNN, LSTM, softmax) run at the
    biLM's precision, the loss in float32.
    """

    def __init__(self, bilm: BiLM, vocab_size: int, n_negatives: int = 0, top_dropout: float = 0.0) -> None:
        super().__init__()
        self.bilm = bilm
        self.softmax = SharedSoftmax(vocab_size, bilm.options.projection_dim)
        self.n_negatives = n_negatives
        self.top_dropout = nn.Dropout(top_dropout)

    def forward(self, batch: WindowBatch, state: LSTMState) -> Tuple[Tensor, Tensor, LSTMState]:
        """Returns NLL sums (2,) [forward, backward], scored target counts (2,), final state.

        ``state``: hidden (n_layers, 2, batch, P), memory (n_layers, 2, batch, lstm_dim).
        """
        with own_precision(self.softmax.weight.device, self.bilm.runtime.resolved_precision.dtype):
            return self._losses(batch, state)

    def _losses(self, batch: WindowBatch, state: LSTMState) -> Tuple[Tensor, Tensor, LSTMState]:
        dtype = self.bilm.runtime.resolved_precision.dtype
        top, final = self.top_layer(batch, state)
        device = top.device
        scored = batch.scored.to(device)
        hidden = self.top_dropout(top[scored])  # (n_scored, P)
        targets = batch.targets.to(device)[scored]
        if self.n_negatives:
            negatives = sample_log_uniform(self.softmax.vocab_size, self.n_negatives, device)
            nll = self.softmax.sampled_nll(hidden, targets, negatives, dtype)
        else:
            nll = self.softmax.full_nll(hidden, targets, dtype)
        direction = torch.arange(2, device=device).view(2, 1, 1).expand_as(scored)[scored]
        sums = torch.zeros(2, dtype=nll.dtype, device=device).index_add(0, direction, nll)
        return sums, scored.sum(dim=(1, 2)), final

    def top_layer(self, batch: WindowBatch, state: LSTMState) -> Tuple[Tensor, LSTMState]:
        """The top LSTM layer of each LM over its windows, in reading order, and the final state.

        Returns (2, batch, window, P) [forward LM; backward LM] and the LSTMState after the window.
        """
        device = self.softmax.weight.device
        forward_rows, backward_rows = batch.inputs
        table, index = self.bilm.runtime.token_table([*forward_rows, *backward_rows])  # index: (2 * batch, window)
        index = index.view(2, len(forward_rows), -1).permute(2, 0, 1)
        x = table[index.to(device)]  # (window, 2, batch, P)
        lengths = torch.full((x.shape[2],), x.shape[0], dtype=torch.int64, device=device)
        layers, final = self.bilm.lstm.run(x, lengths, state, self.bilm.runtime.resolved_precision.dtype)
        return layers[-1].permute(1, 2, 0, 3), final

    def zero_state(self, batch_size: int) -> LSTMState:
        return self.bilm.lstm.zero_state(batch_size, self.softmax.weight)


def detach(state: LSTMState) -> LSTMState:
    """Cut the graph at a window boundary (truncated back-propagation through time)."""
    return LSTMState(state.hidden.detach(), state.memory.detach())


def mean_loss(sums: Tensor, counts: Tensor) -> Tensor:
    """The training objective: the mean of the two directions' mean NLL per scored target."""
    return (sums / counts.clamp(min=1)).mean()
