"""What ``auto`` times (:mod:`.autotune`): a biLM's own passes over a fixed batch, each with its
products in a precision given per call, through the biLM's public calls."""

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence, cast

import numpy
import torch

from ..model.lstm import LSTMState
from ..model.options import ElmoOptions
from .decisions import Decisions
from .resolved import Precision

# The timed batch: 64 sentences (the rows of a batch of nlp.pipe, whose products' shapes decide
# which precision wins) of 5 made-up words (few, to keep the measurement short).
BATCH_ROWS, BATCH_WORDS = 64, 5
# A service's calls (timed for inference): a lone request's sentence, and a few requests' sentences
# sharing a call (threads or a server's queue under load), of LONE_WORDS words each.
LONE_WORDS, FEW_ROWS = 15, 8


class PassOutput(Protocol):
    """What a pass gives: its layers, as :class:`~spacy_elmo.bilm.BiLMOutput`'s."""

    layers: torch.Tensor


class TunedModel(Protocol):
    """What the decision needs of a biLM (:class:`~spacy_elmo.bilm.BiLM` has it): its shapes, weights
    (for :func:`.identity.weights_digest`) and mode, and its zero state."""

    options: ElmoOptions
    training: bool

    def state_dict(self) -> Dict[str, torch.Tensor]: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def train(self, mode: bool = True) -> object: ...

    def zero_state(self, batch: int) -> LSTMState: ...


class TunedRuntime(Protocol):
    """What the decision needs of the runtime it is made for (:class:`~spacy_elmo.bilm.runtime.BiLMRuntime`):
    its biLM, a pass in a precision given per call, its decisions (:class:`.decisions.Decisions`),
    what it measures with, and what drops the weight copies between candidates."""

    decisions: Decisions
    planned_threads: Optional[int]
    tuning: Any  # an autotune.Tuning (autotune imports this module: no import back)

    @property
    def model(self) -> TunedModel: ...

    def __call__(
        self,
        sentences: Sequence[Sequence[str]],
        state: Optional[LSTMState] = None,
        precision: Optional[Precision] = None,
    ) -> PassOutput: ...

    def release_product_copies(self) -> None: ...


# One forward pass of the timed batch with the products in a precision; returns its layers.
Run = Callable[[str], torch.Tensor]
Clock = Callable[[], float]


def _nothing(*args: object) -> None:
    return None


@dataclass(frozen=True)
class Passes:
    """What a measurement runs: ``run``, the timed pass in a precision; ``prepare``, untimed before
    it, makes that precision's weight copies; ``release``, untimed after it, drops them and the
    float32 pages the pass read back (:meth:`.BiLMRuntime.release_product_copies`), so that memory holds
    one candidate's weights at a time: the measuring process peaks no higher than a float32 one.
    ``lone`` and ``few``, timed after ``run``: a service's calls, one sentence of :data:`LONE_WORDS`
    words alone and :data:`FEW_ROWS` such sentences together (inference's; None: not timed)."""

    run: Run
    prepare: Callable[[str], object] = _nothing
    release: Callable[[], None] = _nothing
    lone: Optional[Run] = None
    few: Optional[Run] = None


def model_passes(runtime: TunedRuntime, run: Optional[Run], training: bool) -> Passes:
    """The runtime's own passes (inference's or training steps) on :func:`timing_batch`, or ``run``
    (tests' stand-in) alone."""
    if run is not None:
        return Passes(run)
    batch = timing_batch()
    words = [word for sentence in batch for word in sentence]
    few = [words[row * LONE_WORDS : (row + 1) * LONE_WORDS] for row in range(FEW_ROWS)]
    return Passes(
        run=lambda precision: timed_pass(runtime, batch, precision, training),
        prepare=lambda precision: timed_pass(runtime, batch[:1], precision, training),
        release=runtime.release_product_copies,
        lone=None if training else lambda precision: timed_pass(runtime, few[:1], precision),
        few=None if training else lambda precision: timed_pass(runtime, few, precision),
    )


def timed_pass(
    runtime: TunedRuntime, sentences: Sequence[Sequence[str]], precision: str, training: bool = False
) -> torch.Tensor:
    """:attr:`~.model.BiLMOutput.layers` (detached) of one zero-state pass of ``runtime``'s biLM without
    gradients, products in ``precision``, without the token cache, dropout off (comparable passes
    that draw nothing): what ``auto`` times. ``training``: a training step's passes instead, with a
    backward pass from a loss on the layers to every parameter, whose gradients are dropped (each
    ``.grad`` left as it was). The model's settings and mode are left as they were.
    """
    model = runtime.model
    mode = model.training
    model.train(False)
    try:
        with torch.set_grad_enabled(training):
            zero = model.zero_state(len(sentences))
            layers = runtime(sentences, zero, cast(Precision, precision)).layers  # a candidate's name
            trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
            if training and trained:
                torch.autograd.grad(layers.float().square().mean(), trained, allow_unused=True)
            return layers.detach()
    finally:
        model.train(mode)


def timing_batch() -> List[List[str]]:
    """The fixed batch ``auto`` times: :data:`BATCH_ROWS` sentences of :data:`BATCH_WORDS` made-up words."""
    rng = numpy.random.default_rng(0)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    return [["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(BATCH_WORDS)] for _ in range(BATCH_ROWS)]
