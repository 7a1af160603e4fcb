"""``precision = "auto"`` on a CPU: the fastest precision for this model on this machine, measured.

Whether bf16 or int8 beats float32 depends on the CPU and on the model's shapes: with the same
AVX512-BF16, bf16 is faster than float32 on one CPU and slower on another (docs/bilm.md has the
figures). No CPU flag predicts it, so at the first use of a model's shapes on a machine the biLM
times its own passes on a fixed batch of made-up words (:meth:`BiLM.layers_at`) in each
precision the CPU can run (:func:`candidates`), interleaved, and takes the fastest whose layers
keep the accuracy contract against float32 on that batch (mean per-token cosine of at least
:data:`MIN_MEAN_COSINE` in every layer). Inference and training are decided apart: inference
times forward passes; training times training steps, a forward and a backward pass through every
parameter, in fp32 and bf16 (int8 has no gradient). The backward pass has products of other
shapes, so the two can differ. That takes seconds at the Original size, a fraction of that below.
This is what :class:`~.precision.Products` takes for ``auto`` on a CPU.

The decision is kept in memory for the process and in ``precision.json`` under the model cache
(``SPACY_ELMO_CACHE``, see :mod:`spacy_elmo.published.cache`), keyed by what it depends on: the
pass timed (inference or training), the CPU's name and flags, torch's thread count, the torch
version and quantized engine, and the model's shapes (:func:`decision_fields`). Later loads read
it without timing; an unreadable file is ignored and rewritten. Processes that start together
(``n_process`` workers, ``torchrun`` ranks) wait for the one that measures (a file lock) and read
its decision. Each decision is logged once (logger ``spacy_elmo``, INFO).

``SPACY_ELMO_PRECISION=fp32|bf16|int8`` decides ``auto`` on the CPU without measuring (``int8``
inference only: training still measures); an explicit ``precision`` wins over both. Models below
:data:`MIN_MEASURED_FLOPS` per token run float32 without measuring: there the products are not
what costs, and timing would cost more than it could save.
"""

import contextlib
import hashlib
import json
import logging
import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple

import numpy
import torch
from filelock import FileLock

from ..fileio import atomic_path
from ..published.cache import CACHE_ENV, cache_root
from . import compat
from .int8 import int8_available
from .options import ElmoOptions
from .precision import PRECISION_ENV, check_precision, cpu_has_native_bf16
from .roofline import flops_per_token


class TunedModel(Protocol):
    """What the decision needs of a biLM (:class:`~spacy_elmo.bilm.BiLM` has it): its shapes, and
    its layers from a pass in a given precision, inference's or a training step's."""

    options: ElmoOptions

    def layers_at(self, sentences: Sequence[Sequence[str]], precision: str, training: bool = False) -> torch.Tensor: ...

    def release_product_copies(self) -> None: ...


logger = logging.getLogger("spacy_elmo")

DECISIONS_NAME = "precision.json"
MIN_MEAN_COSINE = 0.999  # the accuracy contract of every precision, per layer, against float32
# Nominal FLOPs per token (char CNN + LSTM) below which auto is float32 without measuring: the
# tiny models of tests and experiments, where Python overhead, not the products, sets the speed.
MIN_MEASURED_FLOPS = 2_000_000
# The timed batch: 64 sentences of 5 made-up words. The rows are those of a batch of nlp.pipe
# (its products' shapes decide which precision wins: on an AMX Xeon at 16 rows bf16 edged out int8,
# which ran 1.28x as fast at 64), the few words keep the measurement short.
BATCH_ROWS, BATCH_WORDS = 64, 5
MIN_ROUNDS, MAX_ROUNDS, MIN_SECONDS = 3, 15, 0.5  # interleaved rounds: at least 3, more while cheap
# How much faster a less accurate precision must be to be chosen: at 1 thread on a 2-core Xeon,
# int8 was once cached at 490 tokens/s against bf16's 452 (8%), a margin inside a shared
# machine's noise.
CLEAR_WIN = 1.10
# The version of the biLM's CPU computation that decisions were measured with: raise it when a
# change makes one precision's pass faster or slower than another's, so that caches measure again.
# 2: the LSTM's gates windows bounded in bytes, int8 products written per direction.
# 3: one sigmoid for the four gates, bf16 LSTM weights laid out (out, in), int8's char CNN in bf16.
# 4: int8 weights packed for oneDNN on CPUs with VNNI or AMX int8.
# 5: low-precision LSTM directions one after the other, the char CNN as unfolded products, the
#    timed batch of 64 rows.
# 6: int8's input and recurrent products as one product per step.
KERNELS = 6
# The two passes decided apart (``training`` in the functions below).
PASSES = {False: "inference", True: "training"}

# One forward pass of the timed batch with the products in a precision; returns its layers.
Run = Callable[[str], torch.Tensor]
Clock = Callable[[], float]


def _nothing(*args: object) -> None:
    return None


@dataclass(frozen=True)
class Passes:
    """What a measurement runs: ``run``, the timed pass in a precision; ``prepare``, untimed before
    it, makes that precision's weight copies; ``release``, untimed after it, drops them and the
    float32 pages the pass read back (:meth:`BiLM.release_product_copies`), so that memory holds
    one candidate's weights at a time: the measuring process peaks no higher than a float32 one."""

    run: Run
    prepare: Callable[[str], object] = _nothing
    release: Callable[[], None] = _nothing


@dataclass(frozen=True)
class Trial:
    """One precision's measurement: median speed, and its worst layer's mean per-token cosine to fp32."""

    tokens_per_s: float
    cosine: float


@dataclass(frozen=True)
class Decision:
    """What ``auto`` chose, and the measurements it chose from (empty when not measured)."""

    choice: str
    trials: Dict[str, Trial]
    source: str  # "measured", "cache", "env", "tiny"


_decided: Dict[Tuple, Decision] = {}
_lock = threading.Lock()


def cpu_auto_precision(model: TunedModel, training: bool = False) -> str:
    """What ``auto`` means for ``model``'s inference (or training) on this CPU: ``fp32``,
    ``bf16`` or ``int8`` (inference only)."""
    return decide(model, training=training).choice


def decide(
    model: TunedModel, run: Optional[Run] = None, clock: Clock = time.perf_counter, training: bool = False
) -> Decision:
    """The decision for ``model``'s inference (or training) at this thread count: from the
    environment, memory, the cache file, or measured now and recorded (``run`` and ``clock``
    replace the biLM's passes and the timer in tests)."""
    override = os.environ.get(PRECISION_ENV, "").strip()
    if override and _candidates_for(training, [_checked_override(override)]):  # int8 set: training measures
        return Decision(override, {}, "env")
    if flops_per_token(model.options).total < MIN_MEASURED_FLOPS:
        return Decision("fp32", {}, "tiny")
    memo = (model.options, torch.get_num_threads(), training)
    with _lock:
        if memo in _decided:
            return _decided[memo]
        decision = _decided[memo] = _decide_once(model, _passes(model, run, training), clock, training, force=False)
    logger.info("spacy-elmo: precision 'auto' on this CPU is %s for this biLM's %s (%s)",
                decision.choice, PASSES[training], describe(decision))
    return decision


def remeasure(
    model: TunedModel, record: bool = True, run: Optional[Run] = None, clock: Clock = time.perf_counter,
    training: bool = False,
) -> Decision:
    """Measure now, whatever is recorded or set (``spacy-elmo bench``); with ``record``, the
    decision replaces the recorded one, as this process's too. Without (random weights, whose
    accuracy says nothing of a trained model's), it is only returned."""
    passes = _passes(model, run, training)
    if not record:
        trials = measure(passes, _candidates_for(training, candidates()), BATCH_ROWS * BATCH_WORDS, clock)
        return Decision(choose(trials), trials, "measured")
    with _lock:
        decision = _decided[(model.options, torch.get_num_threads(), training)] = _decide_once(
            model, passes, clock, training, force=True
        )
    return decision


def _decide_once(model: TunedModel, passes: Passes, clock: Clock, training: bool, force: bool) -> Decision:
    """Read the decision from the cache file, or measure and record it, holding the file's lock.

    A cache directory that cannot be written (a read-only home) costs a measurement per process,
    never an error.
    """
    fields = decision_fields(model.options, torch.get_num_threads(), training)
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    path = decisions_path()
    with _locked(path) as usable:
        recorded = read_decisions(path).get(key) if usable and not force else None
        if recorded is not None:
            return Decision(recorded["choice"], {p: Trial(**t) for p, t in recorded["trials"].items()}, "cache")
        trials = measure(passes, _candidates_for(training, candidates()), BATCH_ROWS * BATCH_WORDS, clock)
        decision = Decision(choose(trials), trials, "measured")
        if usable:
            entry = {"choice": decision.choice, "trials": {p: asdict(t) for p, t in trials.items()},
                     "fields": fields, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
            _record(path, key, entry)
    return decision


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """Hold the decisions file's lock; yields False where the cache directory cannot be used."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError as err:
        logger.warning("spacy-elmo: cannot keep precision decisions in %s (%s); set %s to a writable "
                       "directory, or %s to skip measuring", path.parent, err, CACHE_ENV, PRECISION_ENV)
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def _record(path: Path, key: str, entry: Dict[str, object]) -> None:
    """Add ``entry`` to the decisions file, replacing an unreadable file."""
    decisions = read_decisions(path)
    decisions[key] = entry
    try:
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(decisions, indent=1, sort_keys=True) + "\n", encoding="utf8")
    except OSError as err:
        logger.warning("spacy-elmo: cannot write %s (%s): precision 'auto' will be measured again", path, err)


def _passes(model: TunedModel, run: Optional[Run], training: bool) -> Passes:
    """The model's own passes (inference's or training steps) on :func:`timing_batch`, or ``run``
    (tests' stand-in) alone."""
    if run is not None:
        return Passes(run)
    batch = timing_batch()
    return Passes(
        run=lambda precision: model.layers_at(batch, precision, training),  # type: ignore[arg-type]
        prepare=lambda precision: model.layers_at(batch[:1], precision, training),  # type: ignore[arg-type]
        release=model.release_product_copies,
    )


def _checked_override(value: str) -> str:
    try:
        check_precision(value)
    except ValueError as err:
        raise ValueError(f"{PRECISION_ENV}={value!r}: {err}") from err
    if value == "auto":
        raise ValueError(f"{PRECISION_ENV} decides what precision 'auto' is: give fp32, bf16 or int8, or unset it")
    return value


def decisions_path() -> Path:
    """``precision.json`` in the model cache (``SPACY_ELMO_CACHE``, else the user's cache directory)."""
    return cache_root() / DECISIONS_NAME


def read_decisions(path: Path) -> Dict[str, Dict]:
    """The recorded decisions, by key; ``{}`` for a missing or unreadable file (rewritten at the next decision)."""
    try:
        data = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: entry for key, entry in data.items() if _well_formed(entry)}


def _well_formed(entry: object) -> bool:
    try:
        check_precision(entry["choice"])  # type: ignore[index]
        return all(set(t) == {"tokens_per_s", "cosine"} for t in entry["trials"].values())  # type: ignore[index]
    except (TypeError, KeyError, ValueError, AttributeError):
        return False


def decision_fields(options: ElmoOptions, threads: int, training: bool = False) -> Dict[str, object]:
    """What a measured decision depends on: the pass, the CPU, torch, the thread count, the
    model's shapes, and how the biLM computes (:data:`KERNELS`)."""
    capabilities = compat.cpu_capabilities()
    flags = sorted(name for name, value in capabilities.items() if value is True)
    shapes = {name: value for name, value in options.to_dict().items() if name in ("lstm", "char_cnn")}
    return {"pass": PASSES[training], "cpu": capabilities.get("cpu_name", ""), "flags": flags, "threads": threads,
            "torch": torch.__version__, "quantized_engine": torch.backends.quantized.engine, "shapes": shapes,
            "kernels": KERNELS}


def candidates() -> List[str]:
    """The precisions this CPU runs natively: fp32; bf16 with AVX512-BF16 or AMX (elsewhere torch
    emulates it, 30x slower: not worth timing); int8 where torch has the kernels."""
    found = ["fp32"]
    if cpu_has_native_bf16():
        found.append("bf16")
    if int8_available():
        found.append("int8")
    return found


def _candidates_for(training: bool, precisions: Sequence[str]) -> List[str]:
    """``precisions`` that can run the pass: training has no int8 (no gradient through its products)."""
    return [p for p in precisions if not (training and p == "int8")]


def measure(passes: Passes, precisions: Sequence[str], n_tokens: int, clock: Clock) -> Dict[str, Trial]:
    """Each precision's median tokens/s over interleaved rounds of its pass, and its accuracy to fp32.

    Each pass's weight copies are made before it and dropped after it, untimed (:class:`Passes`).
    The first round also pays for kernels' first calls: the median of at least :data:`MIN_ROUNDS`
    leaves it out. Rounds go on while they are cheap, up to :data:`MAX_ROUNDS` or :data:`MIN_SECONDS`.
    """
    layers: Dict[str, torch.Tensor] = {}
    times: Dict[str, List[float]] = {precision: [] for precision in precisions}
    start = clock()
    rounds = 0
    while rounds < MIN_ROUNDS or (rounds < MAX_ROUNDS and clock() - start < MIN_SECONDS):
        for precision in precisions:
            passes.prepare(precision)
            began = clock()
            output = passes.run(precision)
            times[precision].append(clock() - began)
            passes.release()
            layers.setdefault(precision, output)  # the first round's, for the accuracy
        rounds += 1
    return {
        precision: Trial(n_tokens / statistics.median(times[precision]), worst_cosine(layers[precision], layers["fp32"]))
        for precision in precisions
    }


def worst_cosine(found: torch.Tensor, expected: torch.Tensor) -> float:
    """The smallest over layers of the mean per-token cosine; ``layers`` as :meth:`BiLM.layers_at` gives them.

    Shapes (n_layers + 1, batch, time, width); positions of zeros (padding) are left out.
    """
    a, b = found.float().flatten(1, 2), expected.float().flatten(1, 2)  # (layers, positions, width)
    norms = a.norm(dim=-1) * b.norm(dim=-1)
    kept = norms[0] > 0
    cosines = (a * b).sum(-1)[:, kept] / norms[:, kept]
    return float(cosines.mean(dim=1).min())


def choose(trials: Dict[str, Trial]) -> str:
    """The fastest precision that keeps the accuracy contract (fp32 keeps it by definition), where
    it wins clearly: a less accurate precision (lower cosine to fp32) replaces a more accurate one
    only when it is at least :data:`CLEAR_WIN` times as fast. A decision is cached for good, and
    a margin within the noise of a busy machine would keep the less accurate one on a coin toss."""
    kept = sorted(
        (p for p, trial in trials.items() if p == "fp32" or trial.cosine >= MIN_MEAN_COSINE),
        key=lambda p: 1.0 if p == "fp32" else trials[p].cosine,
        reverse=True,
    )
    choice = kept[0]
    for candidate in kept[1:]:
        if trials[candidate].tokens_per_s >= CLEAR_WIN * trials[choice].tokens_per_s:
            choice = candidate
    return choice


def timing_batch() -> List[List[str]]:
    """The fixed batch ``auto`` times: :data:`BATCH_ROWS` sentences of :data:`BATCH_WORDS` made-up words."""
    rng = numpy.random.default_rng(0)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    return [["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(BATCH_WORDS)] for _ in range(BATCH_ROWS)]


def describe(decision: Decision) -> str:
    """One line: where the decision came from and, if measured, tokens/s and cosine per precision."""
    if not decision.trials:
        return {"env": f"set by {PRECISION_ENV}", "tiny": "a model this small runs fp32 unmeasured"}[decision.source]
    rates = ", ".join(f"{p} {t.tokens_per_s:,.0f} tokens/s (cosine {t.cosine:.5f})" for p, t in decision.trials.items())
    return f"{decision.source}: {rates}"
