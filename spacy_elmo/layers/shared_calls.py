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
begun, and wait a whole call for a call of half the rows. So the next call's leader waits for the
threads the last call served to queue again, up to :data:`RETURN_WAIT` of that call's time, and the
cohorts merge (Original size, 8 threads: calls of 4 docs on average before, twice the docs per
second after). A lone caller is itself the thread its last call served: it waits for nothing.

A row's result does not depend on its companions (the precisions' products are per row: see
docs/bilm.md), so a caller gets what it would have got alone. Where a joint call fails, each
caller's sentences run again alone, so that an error reaches the caller whose input caused it.
"""

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Hashable, List, Optional, Sequence, Tuple

from torch import Tensor

# Runs the biLM on sentences: (n_layers + 1 or 1, rows, time, width), positions past a row's
# length zero (:class:`~spacy_elmo.bilm.BiLMOutput`'s ``layers``).
Compute = Callable[[Sequence[Sequence[str]]], Tensor]
# How long a call's leader waits for the threads the last call served to queue again, as a
# fraction of that call's time: what a thread's return costs (the rest of its pipeline, its next
# request) is small beside a biLM call, and a thread that does not come back costs at most this.
RETURN_WAIT = 0.25


@dataclass(eq=False)  # requests are told apart by identity: two threads may send the same sentences
class _Request:
    key: Hashable
    sentences: Sequence[Sequence[str]]
    compute: Compute
    done: bool = False
    result: Optional[Tensor] = None
    error: Optional[BaseException] = None
    thread: int = field(default_factory=threading.get_ident)
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
        self._served: FrozenSet[int] = frozenset()  # the threads of the last call's requests
        self._last_seconds = 0.0  # how long the last call took

    def __reduce__(self) -> Tuple[type, Tuple[()]]:
        return SharedCalls, ()

    def __deepcopy__(self, memo: Dict) -> "SharedCalls":
        return SharedCalls()

    def run(self, key: Hashable, sentences: Sequence[Sequence[str]], compute: Compute, max_tokens: int) -> Tensor:
        """``compute(sentences)``, run alone or within a call shared with other threads' sentences:
        (n_layers + 1 or 1, len(sentences), time, width), ``time`` that of ``sentences`` alone."""
        if not sentences:
            return compute(sentences)
        request = _Request(key, sentences, compute)
        with self._lock:
            self._pending.append(request)
            self._lock.notify_all()  # a leader may be waiting for this thread
            while not request.done and self._running:
                self._lock.wait()
            if not request.done:
                self._running = True
        if not request.done:
            self._lead(request, max_tokens)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _lead(self, own: _Request, max_tokens: int) -> None:
        """Run one shared call, ``own`` and the requests waiting beside it, then let a waiting
        thread lead the next."""
        group = [own]
        began = time.perf_counter()
        try:
            with self._lock:
                self._wait_for_served(own, max_tokens)
                group = self._next_group(own, max_tokens)
            began = time.perf_counter()
            _run_group(group)
        finally:
            with self._lock:
                self._served = frozenset(request.thread for request in group)
                self._last_seconds = time.perf_counter() - began
                self._running = False
                self._lock.notify_all()

    def _wait_for_served(self, own: _Request, max_tokens: int) -> None:
        """Wait (the lock held, released while waiting) until every thread the last call served has
        a request of ``own``'s key queued, the queue fills ``max_tokens``, or :data:`RETURN_WAIT`
        of the last call's time has passed."""
        deadline = time.perf_counter() + RETURN_WAIT * self._last_seconds
        while True:
            queued = [request for request in self._pending if request.key == own.key]
            width = max(request.width for request in queued)
            full = width * sum(len(request.sentences) for request in queued) >= max_tokens
            remaining = deadline - time.perf_counter()
            if full or remaining <= 0 or self._served <= {request.thread for request in queued}:
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
