"""What a pretraining step optimises: the two language-model losses of a biLM and, with the
init-tokens objective (``init_tokens_weight``), the distance of layer 0 to static vectors.

:class:`BiLMLoss`: the biLM's char CNN encodes each distinct token of the batch once; its LSTM
stack runs the forward LM over the forward windows and the backward LM over the backward windows
(each in its own reading order, see :mod:`.stream`) from the carried state; the top layer, after
dropout, goes through the shared softmax. :class:`Objective`, what DistributedDataParallel wraps,
adds the distance (:class:`.init_tokens.InitTokens`); :func:`load_init_tokens` decides from a
run's settings whether a run fits it (to a new biLM's token encoder, before the LM trains), keeps
it or has none.
"""

import inspect
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..bilm import BiLM
from ..bilm.model.lstm import LSTMState
from ..bilm.precision.resolved import own_precision
from ..fileio import PathLike
from .config import TrainingConfig
from .continuation import read_init_tokens
from .init_tokens import InitTokens, fit_init_tokens, load_static_vectors
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
        dtype = self.bilm.runtime.resolved_precision.dtype
        with own_precision(self.softmax.weight.device, dtype):
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


def load_init_tokens(
    config: TrainingConfig,
    init_tokens_from: Optional[PathLike],
    init_from: Optional[Tuple[PathLike, PathLike]],
    projection_dim: int,
    fit: bool,
) -> Optional[InitTokens]:
    """The distance to the static vectors, when this run fits (``fit`` and ``init_tokens_from``) or keeps it.

    A run continued from an export (``init_from``) keeps the vectors and head exported with it.
    """
    keep = config.init_tokens_weight > 0
    if keep and init_from is not None:
        return read_init_tokens(init_from[1], projection_dim)
    if keep and init_tokens_from is None:
        raise ValueError(
            f"init_tokens_weight {config.init_tokens_weight} keeps the token encoder near static vectors: "
            "give them (--init-tokens-from), also to resume the run"
        )
    if init_tokens_from is None or not (fit or keep):
        return None
    words, vectors = load_static_vectors(init_tokens_from)
    return InitTokens(words, vectors, projection_dim)


def fit_token_encoder(bilm: BiLM, init_tokens: InitTokens, config: TrainingConfig, progress: bool) -> List[float]:
    """Fit the new biLM's token encoder to static vectors (rank 0; DDP then copies it to all);
    returns the mean cosine after each epoch."""
    bar = tqdm(
        total=config.init_tokens_epochs, desc=f"token encoder <- {len(init_tokens.words)} vectors", disable=not progress
    )
    cosines: List[float] = []

    def record(epoch: int, cosine: float) -> None:
        cosines.append(round(cosine, 5))
        bar.set_postfix(cosine=f"{cosine:.3f}")
        bar.update()

    fit_init_tokens(bilm, init_tokens, config.init_tokens_epochs, config.seed, record)
    bar.close()
    return cosines


class Objective(nn.Module):
    """What a step optimises (and DistributedDataParallel wraps): the LM losses and, when ``init_tokens``
    is given, the distance of layer 0 to static vectors over ``BATCH_WORDS`` sampled words."""

    def __init__(self, loss: BiLMLoss, init_tokens: Optional[InitTokens]) -> None:
        super().__init__()
        self.loss = loss
        self.init_tokens = init_tokens

    def forward(self, batch: WindowBatch, state: LSTMState) -> Tuple[Tensor, Tensor, LSTMState, Tensor]:
        """:class:`BiLMLoss`'s NLL sums (2,), counts (2,) and final state, then the distance (a
        scalar; 0 without ``init_tokens``)."""
        sums, counts, final = self.loss(batch, state)
        if self.init_tokens is None:
            return sums, counts, final, sums.new_zeros(())
        return sums, counts, final, self.init_tokens(self.loss.bilm, self.init_tokens.sample())


def data_parallel(objective: nn.Module) -> DistributedDataParallel:
    """``objective`` under DistributedDataParallel, without broadcasting its buffers at every step.

    No buffer changes in training: the LSTMs' forget biases and the init-tokens targets (the static
    vectors, (n_words, width)) are constants, and a run drops the biLM's warm states (they are
    recomputed at export). DDP's default would broadcast them all from rank 0 before every forward
    pass. torch >= 2.13 names the switch ``forward_sync_buffers`` (buffers still sync once at
    construction), older ones ``broadcast_buffers`` (no sync at all: harmless, every process builds the same).
    """
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return DistributedDataParallel(objective, forward_sync_buffers=False)
    return DistributedDataParallel(objective, broadcast_buffers=False)
