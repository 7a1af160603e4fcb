"""How a pretraining run starts: fresh, continued from an exported biLM (``init_from``), or resumed
from the checkpoint in its output directory. :func:`run_start` decides it once; the
:class:`.train.Trainer` then asks the start it got for each thing that depends on it."""

import functools
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from ..bilm import BiLM, ElmoOptions
from ..fileio import PathLike
from .checkpoint import CHECKPOINT_NAME, load_checkpoint
from .config import TrainingConfig
from .continuation import Continuation, find_continuation, load_softmax
from .resume import Checkpointed
from .softmax import SharedSoftmax
from .vocab import Vocabulary

# What a resumed run takes from the new command rather than from the checkpoint.
RESUME_OVERRIDES = ("max_steps", "max_time", "checkpoint_every", "eval_every", "log_every", "eval_tokens", "precision")


class FreshStart:
    """A new biLM of the command's sizes, its vocabulary counted from the corpus. The other starts
    override what differs; the Trainer asks in this order."""

    resumes = False  # the run was started before: its token encoder is not fitted to static vectors again

    def settings(self, options: ElmoOptions, config: TrainingConfig) -> Tuple[ElmoOptions, TrainingConfig]:
        """The biLM's sizes and the run's settings, from the command's ``options`` and ``config``."""
        return options, config

    def vocabulary(self, count_corpus: Callable[[], Vocabulary]) -> Vocabulary:
        """The run's vocabulary; ``count_corpus`` builds a new one from the corpus."""
        return count_corpus()

    def bilm(self, options: ElmoOptions) -> BiLM:
        """The biLM to train, before any state is restored into it."""
        return BiLM(options)

    def continue_softmax(self, softmax: SharedSoftmax) -> Optional[str]:
        """Load the softmax the run continues, if any (else it is new, of the vocabulary's size);
        returns what to tell the user about it."""
        return None

    def restore(self, run: Checkpointed) -> None:
        """Put ``run``, set up, where the start left off (a new or continued run counts from step 0)."""


class ContinuedStart(FreshStart):
    """``init_from`` = (options file, weight file): the biLM of a standard dump (the command's sizes
    are ignored), with the softmax and vocabulary exported beside the weight file when they are
    there (see :mod:`.continuation`)."""

    def __init__(self, files: Tuple[PathLike, PathLike]) -> None:
        self.files = files

    @functools.cached_property
    def continuation(self) -> Optional[Continuation]:
        """The exported vocabulary and softmax, read when first asked for (with the vocabulary)."""
        return find_continuation(self.files[1])

    def vocabulary(self, count_corpus: Callable[[], Vocabulary]) -> Vocabulary:
        return self.continuation.vocab if self.continuation is not None else count_corpus()

    def bilm(self, options: ElmoOptions) -> BiLM:
        return BiLM.from_files(*self.files)

    def continue_softmax(self, softmax: SharedSoftmax) -> Optional[str]:
        if self.continuation is None:
            return None
        load_softmax(softmax, self.continuation)
        return f"Continuing with the softmax and vocabulary exported beside {self.files[1]}"


class ResumedStart(FreshStart):
    """The checkpoint of a run stopped in the output directory: its settings, vocabulary and state
    (the biLM's weights and the softmax come from it in :meth:`restore`)."""

    resumes = True

    def __init__(self, checkpoint: Dict[str, Any]) -> None:
        self.checkpoint = checkpoint

    def settings(self, options: ElmoOptions, config: TrainingConfig) -> Tuple[ElmoOptions, TrainingConfig]:
        """The checkpoint's sizes and settings, except those the command may change (``RESUME_OVERRIDES``)."""
        overrides = {name: getattr(config, name) for name in RESUME_OVERRIDES}
        config = TrainingConfig(**{**self.checkpoint["config"], **overrides})
        return ElmoOptions.from_dict(self.checkpoint["options"]), config

    def vocabulary(self, count_corpus: Callable[[], Vocabulary]) -> Vocabulary:
        return Vocabulary(self.checkpoint["vocab"])

    def restore(self, run: Checkpointed) -> None:
        run.restore(self.checkpoint)  # weights, optimizer, data position, LSTM state and RNG


def run_start(output_dir: Path, resume: bool, init_from: Optional[Tuple[PathLike, PathLike]]) -> FreshStart:
    """Resumed where ``resume`` finds a checkpoint in ``output_dir``, else continued from ``init_from``
    where it is given, else fresh."""
    checkpoint_path = output_dir / CHECKPOINT_NAME
    if resume and checkpoint_path.exists():
        return ResumedStart(load_checkpoint(checkpoint_path))
    if init_from is not None:
        return ContinuedStart(init_from)
    return FreshStart()
