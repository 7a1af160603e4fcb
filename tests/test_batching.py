"""The one batcher (spacy_elmo.batching), driven by its callers as threads calling a pipeline drive
it: a lone caller runs at once, callers that arrive while a batch runs join the next one, each gets
exactly its own output, an error reaches its own caller only, and a request past its deadline or
whose caller left is not run. (The service's worker drives it from a thread: tests/serve/test_worker.py.)"""

import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import List, Sequence

import numpy
import pytest
import spacy
import torch

from spacy_elmo import batching
from spacy_elmo.batching import Batcher, BatchPolicy, DeadlineExceeded, Request
from spacy_elmo.bilm import BiLM
from spacy_elmo.bilm.kernels.int8_packs import int8_available
from spacy_elmo.bilm.runtime import token_groups
from spacy_elmo.layers.bilm import _run_joined

from .helpers import elmo_config

WIDTH = 3


class FakeBiLM:
    """Layers that name each row's tokens: (1, rows, longest + 2, WIDTH), zero past a row's length.
    Its first call waits until ``release`` is set, so that other callers queue behind it."""

    def __init__(self, hold_first: bool = False) -> None:
        self.calls: List[List[List[str]]] = []
        self.release = threading.Event()
        self.arrived = threading.Semaphore(0)
        if not hold_first:
            self.release.set()

    def __call__(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        self.calls.append([list(s) for s in sentences])
        if len(self.calls) == 1:
            self.release.wait(10)
        if any("BAD" in s for s in sentences):
            raise ValueError("a bad token")
        return expected_layers(sentences, max(len(s) for s in sentences) + 2)


def expected_layers(sentences: Sequence[Sequence[str]], time_steps: int) -> torch.Tensor:
    layers = torch.zeros(1, len(sentences), time_steps, WIDTH)
    for row, sentence in enumerate(sentences):
        for t, token in enumerate(sentence, start=1):
            layers[0, row, t] = float(sum(map(ord, token)))
    return layers


def call(batcher: Batcher, sentences, compute, key=None, on_cpu: bool = False) -> torch.Tensor:
    """``compute(sentences)``'s layers, alone or in a batch with other callers', as the elmo layer
    calls the biLM."""
    width = max(len(sentence) for sentence in sentences) + 2
    return batcher.call(Request(sentences, width, partial(_run_joined, compute, on_cpu), key=key))


def tokens_batcher(max_tokens: int = 10_000) -> Batcher:
    return Batcher(BatchPolicy(max_batch_tokens=max_tokens))


def run_concurrently(batcher: Batcher, fake: FakeBiLM, requests: List[List[List[str]]], keys=None):
    """The first request runs (held); the rest arrive while it runs; then it is released."""
    keys = keys or [None] * len(requests)
    with ThreadPoolExecutor(len(requests)) as pool:
        first = pool.submit(call, batcher, requests[0], fake, keys[0])
        while not fake.calls:
            time.sleep(0.001)
        rest = [pool.submit(call, batcher, request, fake, key) for key, request in zip(keys[1:], requests[1:])]
        while batcher.queued < len(rest):  # every later caller waits in the queue
            time.sleep(0.001)
        fake.release.set()
        futures = [first] + rest
        return [f.exception() or f.result() for f in futures]


def test_a_lone_caller_runs_at_once_with_its_own_sentences() -> None:
    fake = FakeBiLM()
    result = call(tokens_batcher(100), [["one", "two"]], fake)
    assert fake.calls == [[["one", "two"]]]
    assert torch.equal(result, expected_layers([["one", "two"]], 4))


def test_callers_that_arrive_during_a_call_share_the_next_and_get_their_own_rows() -> None:
    fake = FakeBiLM(hold_first=True)
    requests = [[["first"]], [["a", "bb", "ccc"]], [["d"], ["e", "f"]], [["g", "h", "i", "j", "k"]]]
    results = run_concurrently(tokens_batcher(), fake, requests)
    assert len(fake.calls) == 2 and sorted(map(len, fake.calls)) == [1, 4]  # the three waiting callers: one call
    for request, result in zip(requests, results):
        assert torch.equal(result, expected_layers(request, max(map(len, request)) + 2))


def test_callers_with_the_same_sentences_each_join_the_shared_call() -> None:
    fake = FakeBiLM(hold_first=True)
    requests = [[["first"]], [["same", "text"]], [["same", "text"]], [["same", "text"]]]
    results = run_concurrently(tokens_batcher(), fake, requests)
    assert sorted(map(len, fake.calls)) == [1, 3]  # the three alike in one call, none run alone after it
    for request, result in zip(requests, results):
        assert torch.equal(result, expected_layers(request, max(map(len, request)) + 2))


def test_an_error_reaches_the_caller_whose_sentence_caused_it_only() -> None:
    fake = FakeBiLM(hold_first=True)
    requests = [[["first"]], [["fine"]], [["BAD", "token"]], [["also", "fine"]]]
    results = run_concurrently(tokens_batcher(), fake, requests)
    assert isinstance(results[2], ValueError)
    for k in (0, 1, 3):
        assert torch.equal(results[k], expected_layers(requests[k], max(map(len, requests[k])) + 2))
    assert [len(c) for c in fake.calls] == [1, 3, 1, 1, 1]  # the batch, then each alone


def test_calls_of_other_settings_are_not_joined() -> None:
    fake = FakeBiLM(hold_first=True)
    requests = [[["first"]], [["a"]], [["b"]], [["c"]]]
    run_concurrently(tokens_batcher(), fake, requests, keys=[None, (1.0,), (0.5,), (1.0,)])
    assert sorted(map(len, fake.calls)) == [1, 1, 2]


def test_a_shared_call_stays_within_its_padded_tokens_and_takes_requests_in_order() -> None:
    batcher, fake = tokens_batcher(8), FakeBiLM(hold_first=True)
    with ThreadPoolExecutor(5) as pool:
        first = pool.submit(call, batcher, [["x"]], fake)
        while not fake.calls:
            time.sleep(0.001)
        rest = []
        for sentences in ([["a", "b"]], [["c", "d"]], [["e", "f", "g", "h", "i", "j"]], [["k"]]):
            rest.append(pool.submit(call, batcher, sentences, fake))  # 4, 4, 8 and 3 positions
            while batcher.queued < len(rest):
                time.sleep(0.001)
        fake.release.set()
        [f.result() for f in [first] + rest]
    assert all(len(c) * (max(map(len, c)) + 2) <= 8 for c in fake.calls[1:])
    assert [[s[0] for s in c] for c in fake.calls] == [["x"], ["a", "c"], ["e"], ["k"]]


def test_a_request_whose_caller_left_or_whose_deadline_passed_is_not_run() -> None:
    batcher, fake = tokens_batcher(), FakeBiLM(hold_first=True)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(call, batcher, [["first"]], fake)
        while not fake.calls:
            time.sleep(0.001)
        run = partial(_run_joined, fake, False)
        late = batcher.submit(Request([["late"]], 3, run, deadline=time.monotonic() + 0.01))
        left = batcher.submit(Request([["left"]], 3, run))
        kept = batcher.submit(Request([["kept"]], 3, run))
        assert left.cancel()
        time.sleep(0.02)
        fake.release.set()
        first.result()
        assert call(batcher, [["next"]], fake).shape[1] == 1
    with pytest.raises(DeadlineExceeded, match="deadline passed"):
        late.result(0)
    assert kept.done() and [[s[0] for s in c] for c in fake.calls] == [["first"], ["kept", "next"]]


def test_threads_that_loop_share_calls_in_one_cohort() -> None:
    """8 threads each sending 12 requests one after another: the threads a call served join the next
    call, rather than two halves taking turns (calls of 4 on average)."""
    batcher, calls = tokens_batcher(), []

    def compute(sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        calls.append(len(sentences))
        time.sleep(0.01)  # a biLM call, long beside what a thread does between two of its requests
        return expected_layers(sentences, max(map(len, sentences)) + 2)

    def work(thread: int) -> None:
        for index in range(12):
            request = [[f"t{thread}", f"r{index}"]]
            assert torch.equal(call(batcher, request, compute), expected_layers(request, 4))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert sum(calls) == 96
    assert len(calls) <= 96 / 6, f"calls of {calls}"


def test_requests_a_pool_hands_out_as_an_event_loop_returns_them_share_one_call() -> None:
    """A web server's sync endpoints: 8 clients, each request run on whichever of 32 threads is free,
    the clients coming back 3 ms apart (as an event loop answers and reads them one at a time)
    beside 40 ms calls. Threads the last call served need not come back, so a wait for them, from
    the first arrival, cut calls of 4 on average."""
    batcher, calls = tokens_batcher(), []

    def compute(sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        calls.append(len(sentences))
        time.sleep(0.04)
        return expected_layers(sentences, max(map(len, sentences)) + 2)

    with ThreadPoolExecutor(32) as server:

        def client(index: int) -> None:
            for request_index in range(6):
                request = [[f"c{index}", f"r{request_index}"]]
                answer = server.submit(call, batcher, request, compute).result()
                assert torch.equal(answer, expected_layers(request, 4))
                time.sleep(0.003 * index)

        with ThreadPoolExecutor(8) as clients:
            list(clients.map(client, range(8)))
    assert sum(calls) == 48
    assert len(calls) <= 48 / 6, f"calls of {calls}"


def test_a_lone_thread_that_loops_waits_for_nothing() -> None:
    batcher, seconds = tokens_batcher(), []

    def compute(sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        time.sleep(0.02)
        return expected_layers(sentences, max(map(len, sentences)) + 2)

    for index in range(5):
        began = time.perf_counter()
        call(batcher, [[f"r{index}"]], compute)
        seconds.append(time.perf_counter() - began)
    assert max(seconds) < 0.02 * (1 + 0.5 * batching.RETURN_WAIT) + 0.004  # no wait beside the call


def test_a_batch_wait_timeout_caps_the_wait_for_returning_callers() -> None:
    """Two threads the last batch served, one of which does not come back: with batch_wait_timeout_s
    the other waits at most that long for it, not RETURN_WAIT of the last batch's time."""
    batcher, fake = Batcher(BatchPolicy(batch_wait_timeout_s=0.0)), FakeBiLM(hold_first=True)
    run_concurrently(batcher, fake, [[["first"]], [["a"]], [["b"]]])
    began = time.perf_counter()
    call(batcher, [["alone"]], fake)
    assert time.perf_counter() - began < 0.05


CALLER: contextvars.ContextVar[int] = contextvars.ContextVar("caller", default=-1)  # as thinc's ops are


def test_calls_on_a_cpu_run_on_one_thread_at_the_leaders_thread_count_and_context() -> None:
    """Led by one thread after another, every call runs on the process's one compute thread (so
    that its OpenMP threads are the only ones: see spacy_elmo.threads.release_openmp_threads), at
    the leader's torch thread count and with its context variables; off the CPU, in the leader."""
    ran_on: List[threading.Thread] = []
    counts: List[int] = []
    callers_seen: List[int] = []

    def compute(sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        ran_on.append(threading.current_thread())
        counts.append(torch.get_num_threads())
        callers_seen.append(CALLER.get())
        return expected_layers(sentences, max(map(len, sentences)) + 2)

    batcher, callers = tokens_batcher(100), []

    def lead(index: int, on_cpu: bool) -> None:
        callers.append(threading.current_thread())
        torch.set_num_threads(1 + index % 2)
        CALLER.set(10 + index)
        request = [[f"r{index}"]]
        assert torch.equal(call(batcher, request, compute, on_cpu=on_cpu), expected_layers(request, 3))

    for index, on_cpu in enumerate([True, True, True, False]):
        caller = threading.Thread(target=lead, args=(index, on_cpu))
        caller.start()
        caller.join()
    assert len(set(ran_on[:3])) == 1 and not set(ran_on[:3]) & set(callers)
    assert ran_on[3] is callers[3]
    assert counts == [1, 2, 1, 2] and callers_seen == [10, 11, 12, 13]


PRECISIONS = ["fp32", "bf16"] + (["int8"] if int8_available() else [])


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("tensor_only", [True, False], ids=["mixed", "layers"])
def test_threads_calling_the_pipeline_share_calls_and_get_the_serial_vectors(
    bilm_files, monkeypatch, tensor_only, precision
) -> None:
    """``nlp(text)`` from 8 threads at once: fewer biLM calls than docs, each doc its serial vectors
    (the mixed path without listeners, and whole layers with ``store_layers``), in every precision
    ``auto`` can pick."""
    nlp = spacy.blank("xx")
    config = {**elmo_config(bilm_files, precision=precision), "threads": 1, "store_layers": not tensor_only}
    nlp.add_pipe("elmo", config=config)
    nlp.initialize()
    texts = [f"Request {i} asks for {'many ' * i}vectors ." for i in range(16)]
    serial = [nlp(text) for text in texts]
    calls: List[int] = []
    forward = BiLM.forward

    def slow_forward(self, *args, **kwargs):
        calls.append(1)
        time.sleep(0.02)  # callers that arrive meanwhile queue behind this call
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(BiLM, "forward", slow_forward)
    with ThreadPoolExecutor(8) as pool:
        docs = list(pool.map(nlp, texts))
    assert len(calls) < len(texts)
    for doc, alone in zip(docs, serial):  # a row in another batch: float32 rounding only (see RELIABILITY.md)
        assert [t.text for t in doc] == [t.text for t in alone]
        assert_within_rounding(doc.tensor, alone.tensor)
        if not tensor_only:
            assert_within_rounding(doc._.elmo_layers, alone._.elmo_layers)


def assert_within_rounding(found: numpy.ndarray, expected: numpy.ndarray) -> None:
    """Within 1e-4 of the largest value: what the determinism suite allows a batch's other rows."""
    numpy.testing.assert_allclose(found, expected, rtol=0, atol=1e-4 * float(numpy.abs(expected).max()))


def test_token_groups_sum_widths_or_pad_to_the_widest() -> None:
    widths = [1, 2, 3, 5, 8]
    assert list(token_groups(widths, lambda w: w, 6)) == [[1, 2, 3], [5], [8]]
    assert list(token_groups(widths, lambda w: w, 6, padded=True)) == [[1, 2], [3], [5], [8]]
    assert list(token_groups(iter(widths), lambda w: w, 100, padded=True)) == [widths]  # read lazily
    assert list(token_groups([], lambda w: w, 6)) == []


def test_pipe_runs_docs_in_length_sorted_groups_of_pipe_batch_tokens(bilm_files, monkeypatch) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "pipe_batch_tokens": 6})
    elmo = nlp.get_pipe("elmo")
    groups: List[List[int]] = []
    annotate = elmo._annotate
    monkeypatch.setattr(elmo, "_annotate", lambda docs: groups.append([len(doc) for doc in docs]) or annotate(docs))
    docs = list(nlp.pipe([" ".join(["x"] * n) for n in (5, 1, 3, 8, 2)]))
    assert groups == [[1, 2, 3], [5], [8]]
    assert [len(doc) for doc in docs] == [5, 1, 3, 8, 2]
