"""``precision = "auto"`` on a CPU: the fastest precision for this model on this machine, measured.

Whether bf16 or int8 beats float32 depends on the CPU and on the model's shapes, and no CPU flag
predicts it (docs/bilm.md has the figures). So at the first use of a model's shapes on a machine
the biLM times its own passes on a fixed batch of made-up words (:func:`.timed_passes.timed_pass`)
in each precision the CPU runs natively (:func:`candidates`), interleaved, and takes the fastest
that keeps the accuracy contract against float32 (:data:`MIN_MEAN_COSINE` in every layer), its
speed on the batch weighed with its speeds on a service's calls (:func:`choose`). One precision
serves every call of a process, so that a doc's vectors do not depend on its companions.
Inference (forward passes) and training (training steps, in fp32 and bf16: int8 has no gradient)
are decided apart. This is what :class:`~.precision.ResolvedPrecision` takes for ``auto`` on a CPU.

The decision is kept by the biLM's runtime (:class:`Decisions`) and in ``precision.json`` under
the model cache (:mod:`.decisions`), keyed by what it depends on (:func:`decision_fields`: the
pass, the CPU, the thread count, torch, the model's shapes) and for the accuracy the weights
(:func:`.identity.weights_digest`). Another model of the same shapes takes the speeds from the
record and checks only its own accuracy, one untimed pass per precision; later loads read the
decision without timing. Processes that start together (``n_process`` workers, ``torchrun``
ranks) wait for the one that measures (a file lock). Each decision is logged once (logger
``spacy_elmo``, INFO).

The thread count a decision is for is torch's, or the one a caller plans
(:attr:`.BiLMRuntime.planned_threads`: the ``elmo`` component's ``threads = "auto"`` may run a
call on fewer while other processes are busy), so a busy moment neither changes the decision nor
measures again; the measurement runs at the planned count.

``SPACY_ELMO_PRECISION=fp32|bf16|int8`` decides ``auto`` on the CPU without measuring (``int8``
inference only: training still measures); an explicit ``precision`` wins over both. Models below
:data:`MIN_MEASURED_FLOPS` per token run float32 unmeasured: there timing costs more than it saves.
"""

import contextlib
import logging
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, cast

import torch

from .. import kernels
from ..compute_thread import on_compute_thread
from ..model.options import ElmoOptions
from ..settings import PRECISION_ENV, switches
from . import compat, roofline
from .decisions import (
    Decision,
    Trial,
    decision_key,
    decisions_path,
    locked,
    read_decisions,
    record_decision,
    recorded_rates,
)
from .flops import flops_per_token
from .kinds import PRODUCT_PRECISIONS, listed
from .resolved import check_precision
from .timed_passes import BATCH_ROWS, BATCH_WORDS, FEW_ROWS, LONE_WORDS, Clock, Passes, Run, TunedRuntime, model_passes

logger = logging.getLogger("spacy_elmo")

MIN_MEAN_COSINE = 0.999  # the accuracy contract of every precision, per layer, against float32
# Nominal FLOPs per token (char CNN + LSTM) below which auto is float32 without measuring: the
# tiny models of tests and experiments, where Python overhead, not the products, sets the speed.
MIN_MEASURED_FLOPS = 2_000_000
MIN_ROUNDS, MAX_ROUNDS, MIN_SECONDS = 3, 15, 0.5  # interleaved rounds: at least 3, more while cheap
# How much faster a less accurate precision must be to be chosen: more than the noise of timings
# on a shared machine.
CLEAR_WIN = 1.10
# The two passes decided apart (``training`` in the functions below).
PASSES = {False: "inference", True: "training"}


def decision_threads(runtime: TunedRuntime) -> int:
    """The thread count a decision for ``runtime`` now is for: the one its caller plans
    (:attr:`.BiLMRuntime.planned_threads`), else torch's."""
    return torch.get_num_threads() if runtime.planned_threads is None else runtime.planned_threads


def cpu_auto_precision(runtime: TunedRuntime, training: bool = False) -> str:
    """What ``auto`` means for ``runtime``'s inference (or training) on this CPU: ``fp32``,
    ``bf16`` or ``int8`` (inference only); measured on the compute thread, where the biLM's calls
    run (:mod:`spacy_elmo.bilm.compute_thread`: from another thread, beside its OpenMP threads,
    every precision measured slower, and int8 most)."""
    return on_compute_thread(decide, runtime, training).choice


def decide(runtime: TunedRuntime, training: bool = False) -> Decision:
    """The decision for ``runtime``'s inference (or training) at :func:`decision_threads`: from the
    environment, memory, the cache file, or measured now (as its runtime's :class:`Tuning` says) and recorded."""
    override = switches().precision
    if override and (PRODUCT_PRECISIONS[_checked_override(override)].trains or not training):  # int8: training measures
        return Decision(override, {}, "env")
    if flops_per_token(runtime.model.options).total < runtime.tuning.min_measured_flops:
        return Decision("fp32", {}, "tiny")
    decisions, use = runtime.decisions, (decision_threads(runtime), training)
    if use in decisions.made:
        return decisions.made[use]
    decision = decisions.made[use] = _decide_once(runtime, use, force=False)
    logger.info(
        "spacy-elmo: precision 'auto' on this CPU is %s for this biLM's %s (%s)",
        decision.choice,
        PASSES[training],
        describe(decision),
    )
    return decision


def remeasure(runtime: TunedRuntime, record: bool = True, training: bool = False) -> Decision:
    """Measure now, whatever is recorded or set (``spacy-elmo bench``); with ``record``, the
    decision replaces the recorded one, and the runtime's. Without (random weights, whose
    accuracy says nothing of a trained model's), it is only returned."""
    return on_compute_thread(_remeasure, runtime, record, training)


def _remeasure(runtime: TunedRuntime, record: bool, training: bool) -> Decision:
    tuning: Tuning = runtime.tuning
    if not record:
        passes = model_passes(runtime, tuning.run, training)
        trials = tuning.measure(passes, tuning.precisions(training), BATCH_ROWS * BATCH_WORDS, tuning.clock)
        return Decision(choose(trials), trials, "measured")
    use = (decision_threads(runtime), training)
    decision = runtime.decisions.made[use] = _decide_once(runtime, use, force=True)
    return decision


def _decide_once(runtime: TunedRuntime, use: Tuple[int, bool], force: bool) -> Decision:
    """Read the decision for ``runtime``'s model's shapes and weights at ``use``, (threads, training), from
    the cache file, or make and record it, holding the file's lock: measured, or, where the speeds
    of these shapes are recorded (another model's), only the accuracy checked (:func:`accuracies`).
    A cache directory that cannot be written costs a measurement per process, never an error."""
    (threads, training), tuning = use, cast(Tuning, runtime.tuning)
    passes, precisions = model_passes(runtime, tuning.run, training), tuning.precisions(training)
    fields, weights = (
        decision_fields(runtime.model.options, threads, training),
        runtime.decisions.weights(runtime.model),
    )
    key, path = decision_key({**fields, "weights": weights}), decisions_path()
    with locked(path) as usable:
        recorded = read_decisions(path) if usable and not force else {}
        if key in recorded:
            entry = recorded[key]
            return Decision(entry["choice"], {p: Trial(**t) for p, t in entry["trials"].items()}, "cache")
        rates = recorded_rates(recorded.values(), fields, precisions)
        with torch_at(threads):
            if rates is None:
                trials, source = tuning.measure(passes, precisions, BATCH_ROWS * BATCH_WORDS, tuning.clock), "measured"
            else:
                cosines = accuracies(passes, precisions)
                trials = {p: Trial(rates[p][0], cosines[p], *rates[p][1:]) for p in precisions}
                source = "checked"
        decision = Decision(choose(trials), trials, source)
        if usable:
            entry = {
                "choice": decision.choice,
                "trials": {p: asdict(t) for p, t in trials.items()},
                "fields": {**fields, "weights": weights},
                "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
            record_decision(path, key, entry)
    return decision


@contextlib.contextmanager
def torch_at(threads: int) -> Iterator[None]:
    """torch at ``threads`` threads for the block, restored after; left alone where it is there already."""
    previous = torch.get_num_threads()
    if previous != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if previous != threads:
            torch.set_num_threads(previous)


def _checked_override(value: str) -> str:
    try:
        check_precision(value)
    except ValueError as err:
        raise ValueError(f"{PRECISION_ENV}={value!r}: {err}") from err
    if value == "auto":
        raise ValueError(
            f"{PRECISION_ENV} decides what precision 'auto' is: give {listed(PRODUCT_PRECISIONS)}, or unset it"
        )
    return value


def decision_fields(options: ElmoOptions, threads: int, training: bool = False) -> Dict[str, object]:
    """What the speeds of a decision depend on: the pass, the CPU, torch, the thread count, the
    model's shapes, and how the biLM computes (:func:`..kernels.source_digest`). Its accuracy depends on the
    weights too: the cache file keys a decision on these and the weights' digest."""
    capabilities = compat.cpu_capabilities()
    flags = sorted(name for name, value in capabilities.items() if value is True)
    shapes = {name: value for name, value in options.to_dict().items() if name in ("lstm", "char_cnn")}
    return {
        "pass": PASSES[training],
        "cpu": capabilities.get("cpu_name", ""),
        "flags": flags,
        "threads": threads,
        "torch": torch.__version__,
        "quantized_engine": torch.backends.quantized.engine,
        "shapes": shapes,
        "kernels": kernels.source_digest(),
    }


def candidates() -> List[str]:
    """The precisions this CPU runs natively (:attr:`.kinds.ProductPrecision.runs_natively_on_cpu`):
    fp32; bf16 with AVX512-BF16 or AMX (elsewhere torch emulates it, many times slower: not worth
    timing); int8 where torch has the kernels."""
    return [name for name, kind in PRODUCT_PRECISIONS.items() if kind.runs_natively_on_cpu()]


def measure(passes: Passes, precisions: Sequence[str], n_tokens: int, clock: Clock) -> Dict[str, Trial]:
    """Each precision's median tokens/s over interleaved rounds of its pass, and its accuracy to fp32.

    Each pass's weight copies are made before it and dropped after it, untimed (:class:`Passes`).
    The median of at least :data:`MIN_ROUNDS` leaves out the first round's kernels' first calls;
    rounds go on while they are cheap, up to :data:`MAX_ROUNDS` or :data:`MIN_SECONDS`."""
    layers: Dict[str, torch.Tensor] = {}
    times: Dict[str, List[float]] = {precision: [] for precision in precisions}
    service_times: Dict[str, Dict[str, List[float]]] = {"lone": {}, "few": {}}
    start = clock()
    rounds = 0
    while rounds < MIN_ROUNDS or (rounds < MAX_ROUNDS and clock() - start < MIN_SECONDS):
        for precision in precisions:
            passes.prepare(precision)
            began = clock()
            output = passes.run(precision)
            times[precision].append(clock() - began)
            for call, run in (("lone", passes.lone), ("few", passes.few)):
                if run is not None:
                    began = clock()
                    run(precision)
                    service_times[call].setdefault(precision, []).append(clock() - began)
            passes.release()
            layers.setdefault(precision, output)  # the first round's, for the accuracy
        rounds += 1

    def service_rate(call: str, precision: str, words: int) -> float:
        timed = service_times[call].get(precision)
        return words / statistics.median(timed) if timed else 0.0

    return {
        precision: Trial(
            n_tokens / statistics.median(times[precision]),
            worst_cosine(layers[precision], layers["fp32"]),
            service_rate("lone", precision, LONE_WORDS),
            service_rate("few", precision, FEW_ROWS * LONE_WORDS),
        )
        for precision in precisions
    }


@dataclass(frozen=True)
class Tuning:
    """What ``auto``'s measurement and ``spacy-elmo bench``'s roofline run with (:attr:`.BiLMRuntime.tuning`,
    which tests set): the precisions (None: this CPU's :func:`candidates`), the pass (None: the model's,
    :func:`.model_passes`) and clock timed, what times them (:func:`measure`), the FLOP per token below
    which nothing is measured, and the roofline's least seconds per product and rows of its large one."""

    candidates: Optional[Sequence[str]] = None
    run: Optional[Run] = None
    clock: Clock = time.perf_counter
    measure: Callable[[Passes, Sequence[str], int, Clock], Dict[str, Trial]] = measure
    min_measured_flops: int = MIN_MEASURED_FLOPS
    roofline_seconds: float = roofline.MIN_SECONDS
    roofline_rows: int = roofline.LARGE_ROWS

    def precisions(self, training: bool) -> List[str]:
        """The candidates that can run the pass: training has no int8 (no gradient through its products)."""
        return [p for p in self.candidates or candidates() if PRODUCT_PRECISIONS[p].trains or not training]


def accuracies(passes: Passes, precisions: Sequence[str]) -> Dict[str, float]:
    """Each precision's worst layer's mean per-token cosine to fp32 (:func:`worst_cosine`), from one
    untimed pass each: the accuracy check of a model whose shapes' speeds are known."""
    layers: Dict[str, torch.Tensor] = {}
    for precision in precisions:
        layers[precision] = passes.run(precision)
        passes.release()
    return {precision: worst_cosine(layers[precision], layers["fp32"]) for precision in precisions}


def worst_cosine(found: torch.Tensor, expected: torch.Tensor) -> float:
    """The smallest over layers of the mean per-token cosine; ``layers`` as :func:`.timed_passes.timed_pass` gives them.

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
    only when it is at least :data:`CLEAR_WIN` times as fast (a decision is cached for good: a
    margin within a busy machine's noise would pick the less accurate one on a coin toss). Where
    both were timed on a service's calls too, bulk work and a service weigh the same: "as fast" is
    the geometric mean of the speed ratio on the batch and the service's, itself the geometric mean
    of the ratios alone and for a few sentences together (a precision can win a batch and lose a
    service's calls by more, and the service's two calls are one use, not two: docs/bilm.md,
    project/docs/lab-notebook.md, "A service's slowest requests")."""
    kept = sorted(
        (p for p, trial in trials.items() if p == "fp32" or trial.cosine >= MIN_MEAN_COSINE),
        key=lambda p: 1.0 if p == "fp32" else trials[p].cosine,
        reverse=True,
    )
    choice = kept[0]
    for candidate in kept[1:]:
        if _wins(trials[candidate], trials[choice]):
            choice = candidate
    return choice


def _wins(candidate: Trial, choice: Trial) -> bool:
    """Whether the less accurate ``candidate`` replaces ``choice`` (see :func:`choose`)."""
    batch, *service = (a / b if a > 0 and b > 0 else 0.0 for a, b in zip(candidate.speeds(), choice.speeds()))
    timed_service = [ratio for ratio in service if ratio > 0]
    ratios = [batch] + ([_geometric_mean(timed_service)] if timed_service else [])
    return _geometric_mean(ratios) >= CLEAR_WIN


def _geometric_mean(values: List[float]) -> float:
    return math.prod(values) ** (1 / len(values))


def describe(decision: Decision) -> str:
    """One line: where the decision came from and, if measured, tokens/s and cosine per precision."""
    if not decision.trials:
        return {"env": f"set by {PRECISION_ENV}", "tiny": "a model this small runs fp32 unmeasured"}[decision.source]
    rates = ", ".join(f"{p} {_rates(t)} (cosine {t.cosine:.5f})" for p, t in decision.trials.items())
    if decision.source == "checked":
        return f"accuracy checked at the speeds recorded for these shapes: {rates}"
    return f"{decision.source}: {rates}"


def _rates(trial: Trial) -> str:
    """``"8,405 tokens/s"``, with ``", a lone sentence 1,317, 8 sentences 4,210"`` where those were timed."""
    service = f", a lone sentence {trial.lone_tokens_per_s:,.0f}" if trial.lone_tokens_per_s else ""
    service += f", {FEW_ROWS} sentences {trial.few_tokens_per_s:,.0f}" if trial.few_tokens_per_s else ""
    return f"{trial.tokens_per_s:,.0f} tokens/s{service}"
