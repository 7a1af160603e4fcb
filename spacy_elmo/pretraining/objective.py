"""The init-tokens objective of a run: fitting a new biLM's token encoder to static vectors before
the language model trains, and keeping layer 0 near them as a second loss (``init_tokens_weight``).

The distance itself is :class:`.init_tokens.InitTokens`; this module decides, from a run's settings,
whether a run fits it, keeps it or has none, and puts it beside the LM losses in what a step optimises.
"""

import inspect
from typing import List, Optional, Tuple

from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..bilm import BiLM
from ..bilm.model.lstm import LSTMState
from ..fileio import PathLike
from .config import TrainingConfig
from .continuation import read_init_tokens
from .init_tokens import InitTokens, fit_init_tokens, load_static_vectors
from .lm import BiLMLoss
from .stream import WindowBatch


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
    """Fit the new biLM's token encoder to static vectors (rank 0; DDP then copies it to all).

    Returns the mean cosine after each epoch.
    """
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
    pass. torch >= 2.13 names the switch ``forward_sync_buffers`` and still syncs buffers once at
    construction; older versions name it ``broadcast_buffers``, which skips that sync too: harmless,
    as every process builds the same constants from the same configuration and files.
    """
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return DistributedDataParallel(objective, forward_sync_buffers=False)
    return DistributedDataParallel(objective, broadcast_buffers=False)
