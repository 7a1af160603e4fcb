"""The one thread that owns the pipeline, and runs the batches of queued requests.

spaCy's ``nlp.memory_zone()`` is not safe across threads (zones opened by concurrent requests
tear down each other's strings: ``E018``, ``E109``), and the biLM runs fastest on many rows at
once. So one thread loads the pipeline and is the only one to call it: callers queue their
requests (:meth:`Worker.submit`) and wait on a future, and the thread serves the queue of a
:class:`~spacy_elmo.batching.Batcher` (its batches, their limits, the wait for returning clients,
a failed batch run again request by request, the queue's bound with a ``Retry-After``), each
batch one call of a :data:`PipelineBatch` (which opens one zone around it).

After each batch the thread frees its OpenMP team and the allocator's free pages go back to the
system (:mod:`.memory`);
:meth:`Worker.close` refuses new requests and returns once the queue is drained.
"""

import gc
import itertools
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..batching import Batcher, BatchObserver, Request, ShuttingDown
from ..bilm.compute_thread import release_openmp_threads
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
# A request's items: each text, and whether its output holds its vectors.
TextItem = Tuple[str, bool]


class NotReady(RuntimeError):
    """The pipeline is still loading or warming up, or failed to load."""


class WorkerFailed(RuntimeError):
    """The worker's thread ended on an error: nothing runs the pipeline any more."""


class Worker:
    """Owns the pipeline ``load`` returns: loads it, warms it up and runs every batch, on one thread.

    ``on_failure`` is called (on that thread) with the error if loading or warming up fails;
    ``after_batch`` after the warm-up and after each batch, before the next is taken (by default
    the allocator's free pages go back to the system: :func:`~.memory.release_free_heap`);
    ``freeze_heap``: the worker owns its process (a server's), so after the warm-up it freezes every
    object alive out of the garbage collector's passes, and unfreezes them once it has stopped.
    ``observe``: told of each batch (:data:`~spacy_elmo.batching.BatchObserver`: metrics).

    The thread is watched: if it ends on an error after the pipeline loaded (outside a batch's
    own error handling), :attr:`failure` holds it, every queued request gets :class:`WorkerFailed`
    at once, new ones are refused, and ``on_failure`` is called, as for a failed load.
    """

    def __init__(
        self,
        load: Callable[[], BatchRun],
        limits: BatchLimits = DEFAULT_BATCHES,
        warm_up_texts: Sequence[str] = WARM_UP_TEXTS,
        on_failure: Optional[Callable[[BaseException], None]] = None,
        after_batch: Callable[[], object] = release_free_heap,
        freeze_heap: bool = False,
        observe: Optional[BatchObserver] = None,
    ) -> None:
        self.limits = limits
        self.failure: Optional[BaseException] = None
        self.rest_mib: Optional[float] = None
        self.batcher: Batcher[TextItem, List[Any]] = Batcher(limits.policy(), logger, observe)
        self._run: Optional[BatchRun] = None
        self._load = load
        self._warm_up_texts = list(warm_up_texts)
        self._on_failure = on_failure
        self._after_batch = after_batch
        self._freeze_heap = freeze_heap
        self._ready = threading.Event()
        self._settled = threading.Event()  # set once the pipeline is warm or has failed to load
        self._thread = threading.Thread(target=self._main, name="spacy-elmo-pipeline", daemon=True)

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and not self.batcher.closing and self.failure is None

    @property
    def loaded(self) -> bool:
        """Whether the pipeline loaded and warmed up (it may have failed since)."""
        return self._ready.is_set()

    @property
    def alive(self) -> bool:
        """Whether the worker still can serve: loading, ready or stopping, not failed."""
        return self.failure is None

    @property
    def state(self) -> str:
        """``loading``, ``ready``, ``stopping`` or ``failed``."""
        if self.failure is not None:
            return "failed"
        if self.batcher.closing:
            return "stopping"
        return "ready" if self._ready.is_set() else "loading"

    def start(self) -> None:
        self._thread.start()

    def wait_loaded(self, timeout: Optional[float] = None) -> bool:
        """Wait until the pipeline is loaded and warm, or has failed to (at most ``timeout``
        seconds); whether it is ready."""
        self._settled.wait(timeout)
        return self.ready

    def submit(
        self, texts: List[str], vectors: bool, deadline: Optional[float] = None, request_id: str = ""
    ) -> "Future[List[Any]]":
        """Queue a request; its future gets one output per text, in order, or the error of its own
        texts (:class:`~spacy_elmo.batching.DeadlineExceeded` if ``deadline``, ``time.monotonic``
        seconds, passes while it waits: it is then not run). ``request_id`` names it in the log.

        Raises :class:`NotReady`, :class:`~spacy_elmo.batching.ShuttingDown` or
        :class:`~spacy_elmo.batching.Overloaded` instead of queueing.
        """
        if self.failure is not None or self._run is None or not self._ready.is_set():
            if self.batcher.closing and self.failure is None:
                raise ShuttingDown("the server is shutting down: it takes no new requests")
            reason = "" if self.failure is None else f": {type(self.failure).__name__}: {self.failure}"
            raise NotReady(f"the pipeline is not ready ({self.state}{reason})")
        items = [(text, vectors) for text in texts]
        width = max((len(text) for text in texts), default=0)
        return self.batcher.submit(Request(items, width, self._run_texts, deadline=deadline, label=request_id))

    def close(self, timeout: Optional[float] = None) -> bool:
        """Refuse new requests, let the thread run what is queued, and wait for it to end (at most
        ``timeout`` seconds); whether it ended."""
        self.batcher.close()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run_texts(self, requests: Sequence[Sequence[TextItem]]) -> List[List[Any]]:
        """The requests' texts through the pipeline in one call; each request its own outputs."""
        assert self._run is not None
        texts = [text for items in requests for text, _ in items]
        outputs = self._run(texts, [vectors for items in requests for _, vectors in items])
        ends = itertools.accumulate(len(items) for items in requests)
        return [outputs[end - len(items) : end] for items, end in zip(requests, ends)]

    def _main(self) -> None:
        try:
            run = self._load()
            self._warm_up(run)
            self._run = run
            self._ready.set()
        except BaseException as err:  # the server stops: without its pipeline it serves nothing
            self.failure = err
            logger.exception("the pipeline failed to load or warm up")
            if self._on_failure is not None:
                self._on_failure(err)
            return
        finally:
            self._settled.set()
        try:
            self.batcher.serve_forever(self._rest)
        except BaseException as err:  # nothing runs the pipeline now: say so, and let the server stop
            self.failure = err
            logger.exception("the pipeline's worker failed after %d batches", self.batcher.batches_run)
            self.batcher.fail(WorkerFailed(f"the pipeline's worker failed: {type(err).__name__}: {err}"))
            if self._on_failure is not None:
                self._on_failure(err)
            return
        finally:
            if self._freeze_heap:
                gc.unfreeze()
        logger.info("the pipeline's worker drained its queue and stopped after %d batches", self.batcher.batches_run)

    def _rest(self) -> None:
        """Between batches: free this thread's OpenMP team (docs/serving.md), then ``after_batch``."""
        release_openmp_threads()
        self._after_batch()

    def _warm_up(self, run: BatchRun) -> None:
        """Each warm-up text alone, then all together; logs the time and the memory at rest after it."""
        start = time.perf_counter()
        for text in self._warm_up_texts:
            run([text], [True])
        if len(self._warm_up_texts) > 1:
            run(self._warm_up_texts, [True] * len(self._warm_up_texts))
        self._rest()
        seconds = time.perf_counter() - start
        self.rest_mib = resident_mib()
        rest = "unknown" if self.rest_mib is None else f"{self.rest_mib:.0f} MiB"
        trim = "returned" if HEAP_TRIM_AVAILABLE else "kept by the allocator (no glibc malloc_trim)"
        message = "warm-up took %.2f s; resident memory at rest: %s; freed heap %s after each batch"
        logger.info(message, seconds, rest, trim)
        if self._freeze_heap:
            logger.info("froze %d objects out of the garbage collector's passes", freeze_long_lived())
