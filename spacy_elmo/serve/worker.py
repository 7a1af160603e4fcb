"""The one thread that owns the pipeline, and the batches it forms from queued requests.

spaCy's ``nlp.memory_zone()`` is not safe across threads (zones opened by concurrent requests
tear down each other's strings: ``E018``, ``E109``), and the biLM runs fastest on many rows at
once. So one thread loads the pipeline and is the only one to call it: callers queue their
requests (:meth:`Worker.submit`) and wait on a future; the thread takes whole requests from the
front of the queue into a batch (those that arrived while the last batch ran form the next one,
bounded by :class:`~.settings.BatchLimits`), runs the batch as one call of a :data:`BatchRun`
(which opens one zone around it), and hands each request exactly its own outputs, in order.

Clients that send their next request as soon as they have an answer would split into two cohorts
taking turns (those a batch answered come back while the next batch, of the others, runs), each
waiting a whole batch for a batch of half the requests. So before a batch the worker waits until
as many requests queue as waited when the last batch ended plus those it answered; a lone client
waits for nothing. The event loop answers a batch's requests one after another and reads their
next ones the same way, so they come back spread out (at 8 clients the last up to more than half
a batch's time after the first): the wait goes on while they keep coming
(:class:`~spacy_elmo.layers.shared_calls.ReturnPatience`, as threads sharing biLM calls wait).

A batch that raises is run again request by request, so that an error reaches only the request
whose text caused it. A full queue refuses a request at once (:class:`Overloaded`, with a
``Retry-After`` estimated from the recent seconds per text) rather than letting latency grow
without bound. After each batch the allocator's free pages go back to the system
(:mod:`.memory`). A worker that owns its process (``freeze_heap``) freezes what the warm pipeline
holds out of the garbage collector's passes (:func:`~.memory.freeze_long_lived`), and gives it back
when it stops. :meth:`Worker.close` refuses new requests and returns once the queue is drained.
"""

import gc
import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, List, Optional, Sequence

from ..layers.shared_calls import ReturnPatience
from .memory import HEAP_TRIM_AVAILABLE, freeze_long_lived, release_free_heap, resident_mib
from .settings import BatchLimits

logger = logging.getLogger("spacy_elmo.serve")

BatchRun = Callable[[Sequence[str], Sequence[bool]], List[Any]]
"""Runs ``texts`` as one batch and gives one output per text, in order; ``vectors[i]`` says
whether text ``i``'s output holds its vectors."""

# Texts of a few lengths, run once before the service reports ready: the first calls pay for
# kernels and caches that every later call reuses.
WARM_UP_TEXTS = (
    "Warm-up .",
    "The bank raised its rates on Monday , and the river bank flooded .",
    "Alice flew from Paris to New York with Bob . " * 4,
)
DEFAULT_BATCHES = BatchLimits()
# Weight of the newest batch in the running mean of seconds per text (for Retry-After).
RECENT_WEIGHT = 0.2


class NotReady(RuntimeError):
    """The pipeline is still loading or warming up, or failed to load."""


class Overloaded(RuntimeError):
    """The queue is full: try again after ``retry_after`` seconds."""

    def __init__(self, retry_after: int, queue_size: int) -> None:
        super().__init__(f"the server's queue is full ({queue_size} requests wait): retry in {retry_after} s")
        self.retry_after = retry_after


class ShuttingDown(RuntimeError):
    """The service is stopping: it finishes what it holds and takes nothing new."""


@dataclass
class Job:
    """One request: its texts, whether it wants vectors, and the future its outputs go to."""

    texts: List[str]
    vectors: bool
    future: "Future[List[Any]]" = field(default_factory=Future)

    @property
    def chars(self) -> int:
        return sum(len(text) for text in self.texts)


def form_batch(pending: Deque[Job], limits: BatchLimits) -> List[Job]:
    """Take the next batch off the front of ``pending``: whole requests in order while the batch
    stays within ``limits`` (the first request always, however large)."""
    batch = [pending.popleft()]
    n_texts, n_chars = len(batch[0].texts), batch[0].chars
    while pending:
        job = pending[0]
        if n_texts + len(job.texts) > limits.max_batch_texts or n_chars + job.chars > limits.max_batch_chars:
            break
        batch.append(pending.popleft())
        n_texts, n_chars = n_texts + len(job.texts), n_chars + job.chars
    return batch


def retry_after_seconds(seconds_per_text: float, queued_texts: int) -> int:
    """Whole seconds until the queue ahead has likely run: at least 1."""
    return max(1, math.ceil(seconds_per_text * queued_texts))


class Worker:
    """Owns the pipeline ``load`` returns: loads it, warms it up and runs every batch, on one thread.

    ``on_failure`` is called (on that thread) with the error if loading or warming up fails;
    ``after_batch`` after the warm-up and after each batch, before the next is taken (by default
    the allocator's free pages go back to the system: :func:`~.memory.release_free_heap`);
    ``freeze_heap``: the worker owns its process (a server's), so after the warm-up it freezes every
    object alive out of the garbage collector's passes, and unfreezes them once it has stopped.
    """

    def __init__(
        self,
        load: Callable[[], BatchRun],
        limits: BatchLimits = DEFAULT_BATCHES,
        warm_up_texts: Sequence[str] = WARM_UP_TEXTS,
        on_failure: Optional[Callable[[BaseException], None]] = None,
        after_batch: Callable[[], object] = release_free_heap,
        freeze_heap: bool = False,
    ) -> None:
        self.limits = limits
        self.failure: Optional[BaseException] = None
        self.batches_run = 0
        self.rest_mib: Optional[float] = None
        self._load = load
        self._warm_up_texts = list(warm_up_texts)
        self._on_failure = on_failure
        self._after_batch = after_batch
        self._freeze_heap = freeze_heap
        self._cond = threading.Condition()
        self._pending: Deque[Job] = deque()
        self._queued_texts = 0
        self._closing = False
        self._ready = threading.Event()
        self._settled = threading.Event()  # set once the pipeline is warm or has failed to load
        self._seconds_per_text = 0.0
        self._expected = 0  # requests the next batch waits for: those queued when the last ended and those it answered
        self._last_seconds = 0.0  # the last batch's time
        self._thread = threading.Thread(target=self._main, name="spacy-elmo-pipeline", daemon=True)

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and not self._closing

    @property
    def state(self) -> str:
        """``loading``, ``ready``, ``stopping`` or ``failed``."""
        if self.failure is not None:
            return "failed"
        if self._closing:
            return "stopping"
        return "ready" if self._ready.is_set() else "loading"

    @property
    def queued(self) -> int:
        """Requests waiting for a batch (the running batch's not counted)."""
        return len(self._pending)

    def start(self) -> None:
        self._thread.start()

    def wait_loaded(self, timeout: Optional[float] = None) -> bool:
        """Wait until the pipeline is loaded and warm, or has failed to (at most ``timeout``
        seconds); whether it is ready."""
        self._settled.wait(timeout)
        return self.ready

    def submit(self, texts: List[str], vectors: bool) -> "Future[List[Any]]":
        """Queue a request; its future gets one output per text, in order, or the error of its own texts.

        Raises :class:`NotReady`, :class:`ShuttingDown` or :class:`Overloaded` instead of queueing.
        """
        job = Job(texts, vectors)
        with self._cond:
            if self._closing:
                raise ShuttingDown("the server is shutting down: it takes no new requests")
            if not self._ready.is_set():
                raise NotReady(f"the pipeline is not ready ({self.state})")
            if len(self._pending) >= self.limits.queue_size:
                wait = retry_after_seconds(self._seconds_per_text, self._queued_texts)
                raise Overloaded(wait, self.limits.queue_size)
            self._pending.append(job)
            self._queued_texts += len(texts)
            self._cond.notify()
        return job.future

    def close(self, timeout: Optional[float] = None) -> bool:
        """Refuse new requests, let the thread run what is queued, and wait for it to end (at most
        ``timeout`` seconds); whether it ended."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _main(self) -> None:
        try:
            run = self._load()
            self._warm_up(run)
        except BaseException as err:  # the server stops: without its pipeline it serves nothing
            self.failure = err
            logger.exception("the pipeline failed to load or warm up")
            if self._on_failure is not None:
                self._on_failure(err)
            self._settled.set()
            return
        self._ready.set()
        self._settled.set()
        while (batch := self._next_batch()) is not None:
            self._run_batch(run, batch)
        if self._freeze_heap:
            gc.unfreeze()
        logger.info("the pipeline's worker drained its queue and stopped after %d batches", self.batches_run)

    def _warm_up(self, run: BatchRun) -> None:
        """Each warm-up text alone, then all together; logs the time and the memory at rest after it."""
        start = time.perf_counter()
        for text in self._warm_up_texts:
            run([text], [True])
        if len(self._warm_up_texts) > 1:
            run(self._warm_up_texts, [True] * len(self._warm_up_texts))
        self._after_batch()
        seconds = time.perf_counter() - start
        self.rest_mib = resident_mib()
        rest = "unknown" if self.rest_mib is None else f"{self.rest_mib:.0f} MiB"
        trim = "returned" if HEAP_TRIM_AVAILABLE else "kept by the allocator (no glibc malloc_trim)"
        message = "warm-up took %.2f s; resident memory at rest: %s; freed heap %s after each batch"
        logger.info(message, seconds, rest, trim)
        if self._freeze_heap:
            logger.info("froze %d objects out of the garbage collector's passes", freeze_long_lived())

    def _next_batch(self) -> Optional[List[Job]]:
        """The next batch of requests still wanted (a request whose caller left is dropped);
        None once closing with nothing queued."""
        with self._cond:
            while True:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return None
                self._wait_for_returning()
                batch = form_batch(self._pending, self.limits)
                self._queued_texts -= sum(len(job.texts) for job in batch)
                wanted = [job for job in batch if job.future.set_running_or_notify_cancel()]
                if wanted:
                    return wanted

    def _wait_for_returning(self) -> None:
        """Wait (the lock held, released while waiting) until the requests the next batch expects
        have queued, a batch is full or the server closes, or patience runs out (:class:`ReturnPatience`)."""
        expected = min(self._expected, self.limits.max_batch_texts)
        patience = ReturnPatience(self._last_seconds)
        while len(self._pending) < expected and not self._closing:
            remaining = patience.remaining(len(self._pending))
            if remaining <= 0:
                return
            self._cond.wait(remaining)

    def _run_batch(self, run: BatchRun, jobs: List[Job]) -> None:
        start = time.perf_counter()
        self._run_jobs(run, jobs)
        with self._cond:
            self._expected = len(self._pending) + len(jobs)
            self._last_seconds = time.perf_counter() - start
        self._after_batch()
        n_texts = max(1, sum(len(job.texts) for job in jobs))
        per_text = (time.perf_counter() - start) / n_texts
        self._seconds_per_text += RECENT_WEIGHT * (per_text - self._seconds_per_text)
        self.batches_run += 1

    def _run_jobs(self, run: BatchRun, jobs: List[Job]) -> None:
        """Run ``jobs`` as one batch; if it raises, each request alone, so an error reaches its own only."""
        texts = [text for job in jobs for text in job.texts]
        vectors = [job.vectors for job in jobs for _ in job.texts]
        try:
            outputs = run(texts, vectors)
        except Exception as err:
            if len(jobs) > 1:
                for job in jobs:
                    self._run_jobs(run, [job])
                return
            logger.warning("a request of %d texts failed: %s: %s", len(texts), type(err).__name__, err)
            jobs[0].future.set_exception(err)
            return
        start = 0
        for job in jobs:
            job.future.set_result(outputs[start : start + len(job.texts)])
            start += len(job.texts)
