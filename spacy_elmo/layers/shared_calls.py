"""One biLM call for many threads: callers that arrive while a call runs join the next one.

A service calls ``nlp(text)`` from a pool of threads, one request each. Run as they come, each
request's biLM call reads every weight of the LSTM at each time step for a row or two, and the
calls fight for the same cores. The biLM's cost per step hardly grows with its rows until they
are many, so the calls are shared instead: a lone caller runs at once and waits for nothing; the
callers that arrive while a call runs wait, and the first of them then runs one call for all of
them (up to ``max_tokens`` padded tokens), hands each its own rows and wakes them. Only one call
runs at a time, so torch's threads are never oversubscribed by concurrent calls.

Callers that loop (a pool of threads working through requests) would otherwise split into two
cohorts that take turns: those a call served come back while the next call, of the others, has
begun, and wait a whole call for a call of half the rows. So the next call's leader waits until as
many requests queue as waited when the last call ended plus those it served, and the cohorts merge
into calls of every waiting request, at about twice the docs per second (docs/performance.md,
"Serving"). It
counts requests, not threads: a web server's pool hands a client's next request to whichever
thread is free. Requests come back spread out where an event loop answers them and reads the next
ones one at a time (FastAPI's sync endpoints), so the wait goes on while they keep coming: it ends
once :data:`RETURN_WAIT` of the last call's time passes without a new one, or after as long as the
last call took in all. A lone caller is itself the request its last call served: it waits for nothing.

On a CPU every call runs on one thread of the process, whichever caller leads it
(:mod:`spacy_elmo.bilm.compute_thread`): torch's OpenMP threads then stay hot between the small
operations of the biLM's step loop.

A row's result does not depend on its companions (the precisions' products are per row: see
docs/bilm.md), so a caller gets what it would have got alone. Where a joint call fails, each
caller's sentences run again alone, so that an error reaches the caller whose input caused it.
"""

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple

from torch import Tensor

from ..bilm.compute_thread import on_compute_thread

# Runs the biLM on sentences: (n_layers + 1 or 1, rows, time, width), positions past a row's
# length zero (:class:`~spacy_elmo.bilm.BiLMOutput`'s ``layers``).
Compute = Callable[[Sequence[Sequence[str]]], Tensor]
# How long a call's leader waits for another request while those the last call served come back,
# as a fraction of that call's time: what a return costs (the rest of a pipeline, the next request)
# is small beside a biLM call, and a request that does not come back costs at most this.
RETURN_WAIT = 0.25


class ReturnPatience:
    """How much longer a leader waits for the requests the last call served to come back: until
    :data:`RETURN_WAIT` of that call's time passes without a new one, at most that call's time in
    all (the service's worker waits for its clients so too)."""

    def __init__(self, last_seconds: float) -> None:
        now = time.perf_counter()
        self._patience = RETURN_WAIT * last_seconds
        self._latest = now + last_seconds
        self._deadline = min(now + self._patience, self._latest)
        self._seen = 0

    def remaining(self, queued: int) -> float:
        """Seconds left to wait with ``queued`` requests queued; more than at the last look restarts
        the patience: the rest may be on their way."""
        now = time.perf_counter()
        if queued > self._seen:
            self._seen, self._deadline = queued, min(now + self._patience, self._latest)
        return self._deadline - now


@dataclass(eq=False)  # requests are told apart by identity: two threads may send the same sentences
class _Request:
    key: Hashable
    sentences: Sequence[Sequence[str]]
    compute: Compute
    done: bool = False
    result: Optional[Tensor] = None
    error: Optional[BaseException] = None
    width: int = field(init=False)  # padded positions of this request alone, boundaries included

    def __post_init__(self) -> None:
        self.width = max(len(s) for s in self.sentences) + 2


class SharedCalls:
    """Joins concurrent biLM calls with the same ``key`` (the pass's settings, e.g. its mix weights).

    Pickles and copies start empty: what it holds is this process's waiting threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._pending: List[_Request] = []
        self._running = False
        self._expected = 0  # requests the next call waits for: those queued when the last ended and those it served
        self._last_seconds = 0.0  # how long the last call took

    def __reduce__(self) -> Tuple[type, Tuple[()]]:
        return SharedCalls, ()

    def __deepcopy__(self, memo: Dict) -> "SharedCalls":
        return SharedCalls()

    def run(
        self, key: Hashable, sentences: Sequence[Sequence[str]], compute: Compute, max_tokens: int, on_cpu: bool = True
    ) -> Tensor:
        """``compute(sentences)``, run alone or within a call shared with other threads' sentences:
        (n_layers + 1 or 1, len(sentences), time, width), ``time`` that of ``sentences`` alone.
        ``on_cpu``: the call runs on a CPU, so on the process's compute thread (elsewhere in the leader's)."""
        if not sentences:
            return compute(sentences)
        request = _Request(key, sentences, compute)
        with self._lock:
            self._pending.append(request)
            self._lock.notify_all()  # a leader may be waiting for this request
            while not request.done and self._running:
                self._lock.wait()
            if not request.done:
                self._running = True
        if not request.done:
            self._lead(request, max_tokens, on_cpu)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _lead(self, own: _Request, max_tokens: int, on_cpu: bool) -> None:
        """Run one shared call, ``own`` and the requests waiting beside it, then let a waiting
        thread lead the next."""
        group = [own]
        began = time.perf_counter()
        try:
            with self._lock:
                self._wait_for_returning(own, max_tokens)
                group = self._next_group(own, max_tokens)
            began = time.perf_counter()
            if on_cpu:
                on_compute_thread(_run_group, group)
            else:
                _run_group(group)
        finally:
            with self._lock:
                self._expected = len(self._pending) + len(group)
                self._last_seconds = time.perf_counter() - began
                self._running = False
                self._lock.notify_all()

    def _wait_for_returning(self, own: _Request, max_tokens: int) -> None:
        """Wait (the lock held, released while waiting) until the requests the next call expects
        have queued with ``own``'s key or they fill ``max_tokens``, or patience runs out
        (:class:`ReturnPatience`)."""
        patience = ReturnPatience(self._last_seconds)
        while True:
            queued = [request for request in self._pending if request.key == own.key]
            width = max(request.width for request in queued)
            full = width * sum(len(request.sentences) for request in queued) >= max_tokens
            if full or len(queued) >= self._expected:
                return
            remaining = patience.remaining(len(queued))
            if remaining <= 0:
                return
            self._lock.wait(remaining)

    def _next_group(self, own: _Request, max_tokens: int) -> List[_Request]:
        """``own`` and the waiting requests of its key that fit beside it in ``max_tokens`` padded
        tokens, in arrival order; taken off the queue."""
        group, rows, width = [own], len(own.sentences), own.width
        for request in self._pending:
            if request is own or request.key != own.key:
                continue
            new_width = max(width, request.width)
            if new_width * (rows + len(request.sentences)) > max_tokens:
                continue
            group.append(request)
            rows, width = rows + len(request.sentences), new_width
        self._pending = [request for request in self._pending if request not in group]
        return group


def _run_group(group: List[_Request]) -> None:
    """One call for the group's sentences, each request given its rows; alone again on failure."""
    if len(group) > 1:
        try:
            layers = group[0].compute([s for request in group for s in request.sentences])
        except Exception:
            layers = None
        if layers is not None:
            first = 0
            for request in group:
                rows = slice(first, first + len(request.sentences))
                request.result, request.done = layers[:, rows, : request.width], True
                first = rows.stop
            return
    for request in group:
        try:
            request.result = request.compute(request.sentences)
        except Exception as error:  # reaches this request's caller only
            request.error = error
        request.done = True
