"""One batcher for requests: ``spacy-elmo serve``'s queue of HTTP requests and the biLM calls of
threads that call ``nlp(text)`` at once both go through a :class:`Batcher`.

The biLM's cost per time step hardly grows with its rows until they are many, so requests that
wait at the same time run as one batch: a queue of requests, each with its items (texts, or a
doc's sentences) and a future; batches formed from its front, whole requests in arrival order,
within :class:`BatchPolicy`'s limits; and a batch that raises run again request by request, so
that an error reaches only the request whose input caused it. A request whose caller left
(its future cancelled) or whose deadline passed while it queued is never run.

Two ways to drive it, one policy: a thread that owns what the batches call runs
:meth:`Batcher.serve_forever` (the service's worker: spaCy's memory zones are not safe across
threads), or the callers lead, :meth:`Batcher.call` (threads sharing a pipeline: a lone caller
runs its request at once, on its own thread).

Callers that send their next request as soon as they have an answer would split into two
cohorts taking turns (those a batch answered come back while the next batch, of the others,
runs), each waiting a whole batch for a batch of half the requests. So before a batch the
batcher waits until as many requests queue as waited when the last batch ended plus those it
answered; a lone caller is itself the request its last batch answered, and waits for nothing.
Requests come back spread out where an event loop answers them and reads the next ones one at
a time, so the wait goes on while they keep coming (:class:`ReturnPatience`).
"""

import contextvars
import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Deque, Generic, Hashable, List, Optional, Sequence, Tuple, TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")
# Runs a batch: each request's items in, one output per request out, in order.
RunRequests = Callable[[Sequence[Sequence[Item]]], Sequence[Out]]
# Told of each batch run: each request's seconds in the queue, the batch's items and its seconds.
BatchObserver = Callable[[Sequence[float], int, float], None]

# How long a batch waits for another request while those the last batch answered come back, as a
# fraction of that batch's time: what a return costs (the rest of a pipeline, the next request) is
# small beside a biLM batch, and a request that does not come back costs at most this.
RETURN_WAIT = 0.25
# Weight of the newest batch in the running mean of seconds per item (for Retry-After).
RECENT_WEIGHT = 0.2


class Overloaded(RuntimeError):
    """The queue is full: try again after ``retry_after`` seconds."""

    def __init__(self, retry_after: int, queue_size: int) -> None:
        super().__init__(f"the server's queue is full ({queue_size} requests wait): retry in {retry_after} s")
        self.retry_after = retry_after


class ShuttingDown(RuntimeError):
    """The batcher is stopping: it finishes what it holds and takes nothing new."""


class DeadlineExceeded(TimeoutError):
    """A request's deadline passed while it waited in the queue: it was not run."""


class Interrupted(RuntimeError):
    """The batch that held the request was interrupted by an error that is not the request's own
    (a ``KeyboardInterrupt``, a ``SystemExit``): it propagates in the thread that ran the batch."""


@dataclass(frozen=True)
class BatchPolicy:
    """How a batch forms, named as Ray Serve's ``@serve.batch`` names its knobs.

    A batch takes whole requests of one key, in arrival order, while it holds at most
    ``max_batch_size`` items and ``max_batch_tokens`` padded tokens (its widest request's width
    times its items); a request larger than either runs alone. At most ``max_queued`` requests
    wait beside the running batch (None: no bound); one more is refused (:class:`Overloaded`).
    ``batch_wait_timeout_s`` caps the wait for the requests the last batch answered (None: as
    long as the last batch took).
    """

    max_batch_size: Optional[int] = None
    max_batch_tokens: Optional[int] = None
    max_queued: Optional[int] = None
    batch_wait_timeout_s: Optional[float] = None

    def fits(self, items: int, width: int) -> bool:
        """Whether a batch of ``items`` items, the widest ``width`` wide, stays within the limits."""
        if self.max_batch_size is not None and items > self.max_batch_size:
            return False
        return self.max_batch_tokens is None or items * width <= self.max_batch_tokens


class ReturnPatience:
    """How much longer a batch waits for the requests the last batch answered to come back: until
    :data:`RETURN_WAIT` of that batch's time passes without a new one, at most ``longest`` in all."""

    def __init__(self, last_seconds: float, longest: float) -> None:
        now = time.perf_counter()
        self._patience = RETURN_WAIT * last_seconds
        self._latest = now + longest
        self._deadline = min(now + self._patience, self._latest)
        self._seen = 0

    def remaining(self, queued: int) -> float:
        """Seconds left to wait with ``queued`` requests queued; more than at the last look restarts
        the patience: the rest may be on their way."""
        now = time.perf_counter()
        if queued > self._seen:
            self._seen, self._deadline = queued, min(now + self._patience, self._latest)
        return self._deadline - now


@dataclass(eq=False)  # requests are told apart by identity: two callers may send the same items
class Request(Generic[Item, Out]):
    """One request: its items, how wide its widest item is (tokens, or characters standing for
    them), what runs its batch (requests of one key share it), its deadline (``time.monotonic``
    seconds; None: none), a label for logs, and the future its output goes to."""

    items: Sequence[Item]
    width: int
    run: RunRequests
    key: Hashable = None
    deadline: Optional[float] = None
    label: str = ""
    future: "Future[Out]" = field(default_factory=Future)
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    queued_at: float = field(default_factory=time.monotonic)

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline


def retry_after_seconds(seconds_per_item: float, queued_items: int) -> int:
    """Whole seconds until the queue ahead has likely run: at least 1."""
    return max(1, math.ceil(seconds_per_item * queued_items))


class Batcher(Generic[Item, Out]):
    """A queue of requests run in batches by :class:`BatchPolicy` (see the module's docstring).

    ``logger``: where a request that fails alone is reported (with its label); ``observe``: told of
    each batch (metrics). Pickles and copies start empty: what it holds is this process's waiting
    callers.
    """

    def __init__(
        self,
        policy: BatchPolicy = BatchPolicy(),
        logger: Optional[logging.Logger] = None,
        observe: Optional[BatchObserver] = None,
    ) -> None:
        self.policy = policy
        self.batches_run = 0
        self._logger = logger
        self._observe = observe
        self._cond = threading.Condition()
        self._pending: Deque[Request[Item, Out]] = deque()
        self._queued_items = 0
        self._running = False
        self._closing = False
        self._expected = 0  # requests the next batch waits for: those queued when the last ended and those it answered
        self._last_seconds = 0.0  # the last batch's time
        self._seconds_per_item = 0.0

    def __reduce__(self) -> Tuple[type, Tuple[BatchPolicy, Optional[logging.Logger]]]:
        return Batcher, (self.policy, self._logger)  # not ``observe``: a copy is counted apart

    @property
    def queued(self) -> int:
        """Requests waiting for a batch (the running batch's not counted)."""
        return len(self._pending)

    @property
    def closing(self) -> bool:
        return self._closing

    def submit(self, request: Request[Item, Out]) -> "Future[Out]":
        """Queue ``request``; its future gets its output, or the error of its own items.

        Raises :class:`ShuttingDown` or :class:`Overloaded` instead of queueing.
        """
        with self._cond:
            if self._closing:
                raise ShuttingDown("the server is shutting down: it takes no new requests")
            if self.policy.max_queued is not None and len(self._pending) >= self.policy.max_queued:
                raise Overloaded(
                    retry_after_seconds(self._seconds_per_item, self._queued_items), self.policy.max_queued
                )
            self._pending.append(request)
            self._queued_items += len(request.items)
            self._cond.notify_all()  # the thread that runs batches may be waiting for this request
        return request.future

    def call(self, request: Request[Item, Out]) -> Out:
        """Submit ``request`` and run batches on this thread until it is answered, while no other
        caller runs one: the callers lead in turn, and a lone caller runs at once."""
        future = self.submit(request)
        while not future.done():
            with self._cond:
                while self._running and not future.done():
                    self._cond.wait()
                if future.done():
                    break
                self._running = True
            self._lead()
        return future.result()

    def serve_forever(self, after_batch: Callable[[], object] = lambda: None) -> None:
        """Run batches on this thread as requests come, ``after_batch`` after each, until
        :meth:`close` and the queue is drained. The only thread to run them."""
        with self._cond:
            self._running = True
        while self._lead(block=True):
            after_batch()

    def close(self) -> None:
        """Refuse new requests; what is queued still runs."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """Refuse new requests, and answer every queued one with ``error`` at once: what would run
        them is gone."""
        with self._cond:
            self._closing = True
            pending, self._pending, self._queued_items = list(self._pending), deque(), 0
            self._cond.notify_all()
        for request in pending:
            if request.future.set_running_or_notify_cancel():
                request.future.set_exception(error)

    def _lead(self, block: bool = False) -> bool:
        """Take the next batch and run it on this thread (``_running`` set by the caller); whether
        one ran. ``block``: wait for requests while none queue and the batcher is open."""
        batch: List[Request[Item, Out]] = []
        seconds = 0.0
        try:
            with self._cond:
                batch = self._next_batch(block)
            started, began = time.monotonic(), time.perf_counter()
            if batch:
                try:
                    batch[0].context.run(self._run_requests, batch)
                finally:
                    seconds = time.perf_counter() - began
        finally:
            with self._cond:
                if batch:
                    self._after(batch, seconds)
                self._running = block and bool(batch)  # the serving thread keeps the turn
                self._cond.notify_all()
        if batch and self._observe is not None:
            waits = [started - request.queued_at for request in batch]
            self._observe(waits, sum(len(request.items) for request in batch), seconds)
        return bool(batch)

    def _next_batch(self, block: bool) -> List[Request[Item, Out]]:
        """The next batch of requests still wanted (the lock held); empty where none queue (and,
        with ``block``, once closing with nothing queued)."""
        while True:
            while block and not self._pending and not self._closing:
                self._cond.wait()
            if not self._pending:
                return []
            self._wait_for_returning()
            batch = [request for request in self._take_batch() if self._still_wanted(request)]
            if batch:
                return batch

    def _wait_for_returning(self) -> None:
        """Wait (the lock held, released while waiting) until the requests the next batch expects
        have queued with the front request's key or fill a batch, the batcher closes, or patience
        runs out (:class:`ReturnPatience`)."""
        last, cap = self._last_seconds, self.policy.batch_wait_timeout_s
        patience = ReturnPatience(last, last if cap is None else min(last, cap))
        while self._pending and not self._closing:
            key = self._pending[0].key
            queued = [request for request in self._pending if request.key == key]
            items = sum(len(request.items) for request in queued)
            full = not self.policy.fits(items + 1, max(request.width for request in queued))
            if full or len(queued) >= self._expected:
                return
            remaining = patience.remaining(len(queued))
            if remaining <= 0:
                return
            self._cond.wait(remaining)

    def _take_batch(self) -> List[Request[Item, Out]]:
        """The front request and those of its key behind it, in order, while the batch fits the
        policy (the front one alone however large); taken off the queue (the lock held)."""
        key = self._pending[0].key
        batch: List[Request[Item, Out]] = []
        kept: Deque[Request[Item, Out]] = deque()
        items = width = 0
        full = False
        for request in self._pending:
            if request.key == key and not full:
                full = bool(batch) and not self.policy.fits(items + len(request.items), max(width, request.width))
            if request.key != key or full:
                kept.append(request)
                continue
            batch.append(request)
            items, width = items + len(request.items), max(width, request.width)
        self._pending = kept
        self._queued_items -= items
        return batch

    def _still_wanted(self, request: Request[Item, Out]) -> bool:
        """Whether to run ``request``: its caller has not left, and its deadline has not passed (its
        future then gets :class:`DeadlineExceeded`)."""
        if not request.future.set_running_or_notify_cancel():  # cancelled: not again, whoever cancels it
            return False
        if request.expired(time.monotonic()):
            request.future.set_exception(DeadlineExceeded("the request's deadline passed while it waited in the queue"))
            return False
        return True

    def _run_requests(self, batch: List[Request[Item, Out]]) -> None:
        """Run ``batch`` as one call; if it raises, each request alone, so an error reaches its own
        only. A request left unanswered (the run interrupted) gets the interruption."""
        try:
            outputs = batch[0].run([request.items for request in batch])
        except Exception as err:
            if len(batch) > 1:
                for request in batch:
                    self._run_requests([request])
                return
            if self._logger is not None:
                label = batch[0].label
                what = (f"{label} " if label else "", len(batch[0].items), type(err).__name__, err)
                self._logger.warning("request %sof %d items failed: %s: %s", *what, extra={"request_id": label})
            batch[0].future.set_exception(err)
            return
        except BaseException as err:
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(Interrupted(f"the batch was interrupted: {type(err).__name__}: {err}"))
            raise
        for request, output in zip(batch, outputs):
            request.future.set_result(output)

    def _after(self, batch: List[Request[Item, Out]], seconds: float) -> None:
        """Record a batch's time for the next one's wait and for Retry-After (the lock held)."""
        self._expected = len(self._pending) + len(batch)
        self._last_seconds = seconds
        per_item = seconds / max(1, sum(len(request.items) for request in batch))
        self._seconds_per_item += RECENT_WEIGHT * (per_item - self._seconds_per_item)
        self.batches_run += 1
