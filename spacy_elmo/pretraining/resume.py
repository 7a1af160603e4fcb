"""Saving a run to its checkpoint and restoring it, for :class:`.train.Trainer`.

A mixin, so that what a checkpoint holds is read in one place, beside its inverse; the file format
(atomic writes, the format version, the RNG) is :mod:`.checkpoint`'s. The keys ``vectors_head`` and
``kept_vectors`` are the on-disk names of the init-tokens objective's head and static vectors.
"""

from pathlib import Path
from typing import Any, Dict, Optional

import torch

from ..bilm import BiLM
from ..bilm.model.lstm import LSTMState
from .checkpoint import CHECKPOINT_NAME, rng_state, save_checkpoint, set_rng_state
from .config import TrainingConfig
from .distributed import Distributed
from .lm import BiLMLoss, Objective
from .runlog import RunLog
from .stream import WindowStream
from .vocab import Vocabulary


class Checkpointed:
    """Save and restore of the run state that the Trainer sets up (declared here, not set)."""

    env: Distributed
    output_dir: Path
    config: TrainingConfig
    vocab: Vocabulary
    loss: BiLMLoss
    objective: Objective
    optimizer: torch.optim.Optimizer
    stream: WindowStream
    state: LSTMState
    log: RunLog
    step: int
    saved_step: Optional[int]
    tokens: int
    elapsed: float

    @property
    def bilm(self) -> BiLM:
        return self.loss.bilm

    def save(self) -> None:
        """Every process contributes its data position, LSTM state and RNG; rank 0 writes."""
        lstm_state = [self.state.hidden.cpu(), self.state.memory.cpu()]
        per_process = self.env.gather({"data": self.stream.state_dict(), "lstm_state": lstm_state, "rng": rng_state()})
        if not self.env.is_main:
            return
        init_tokens = self.objective.init_tokens
        checkpoint: Dict[str, Any] = {
            "step": self.step,
            "tokens": self.tokens,
            "elapsed": self.elapsed,
            "world": self.env.world,
            "config": self.config.to_dict(),
            "options": self.bilm.options.to_dict(),
            "vocab": list(self.vocab.words),  # after the markers, in id order
            "bilm": self.bilm.state_dict(),
            "softmax": self.loss.softmax.state_dict(),
            "vectors_head": init_tokens.head.state_dict() if init_tokens is not None else None,
            # the kept static vectors, for ``spacy-elmo export`` of a checkpoint
            "kept_vectors": None
            if init_tokens is None
            else {"words": init_tokens.words, "vectors": torch.from_numpy(init_tokens.vectors)},
            "optimizer": self.optimizer.state_dict(),
            "processes": per_process,
        }
        with self.log.writing(CHECKPOINT_NAME):
            save_checkpoint(self.output_dir / CHECKPOINT_NAME, checkpoint)
        self.saved_step = self.step

    def restore(self, checkpoint: Dict[str, Any]) -> None:
        """Continue exactly where ``checkpoint`` stopped: weights, optimizer, data position, LSTM state, RNG."""
        if checkpoint["world"] != self.env.world:
            raise ValueError(
                f"the checkpoint was written by {checkpoint['world']} process(es), this run has "
                f"{self.env.world}: resume with the same number of processes"
            )
        self.bilm.load_state_dict(checkpoint["bilm"])
        self.loss.softmax.load_state_dict(checkpoint["softmax"])
        if self.objective.init_tokens is not None:
            self.objective.init_tokens.head.load_state_dict(checkpoint["vectors_head"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        mine = checkpoint["processes"][self.env.rank]
        self.stream.load_state_dict(mine["data"])
        hidden, memory = mine["lstm_state"]
        self.state = LSTMState(hidden.to(self.env.device), memory.to(self.env.device))
        set_rng_state(mine["rng"])
        self.step = self.saved_step = int(checkpoint["step"])
        self.tokens = int(checkpoint["tokens"])
        self.elapsed = float(checkpoint["elapsed"])
