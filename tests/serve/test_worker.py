"""The worker that owns the pipeline, without HTTP: how queued requests form batches, that each
request gets its own outputs or its own error, the queue's bound, closing, and a batch's memory zone."""

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, List, Sequence

import pytest
import spacy
import torch
from spacy.language import Language

from spacy_elmo.batching import Overloaded, ShuttingDown, retry_after_seconds
from spacy_elmo.bilm.compute_thread import _libgomp
from spacy_elmo.serve.pipeline import PipelineRun, doc_output
from spacy_elmo.serve.settings import BatchLimits
from spacy_elmo.serve.worker import NotReady, Worker, WorkerFailed

from ..helpers import elmo_config

TIMEOUT = 10


class RecordingRun:
    """A batch run that records each batch's texts, fails on the text "boom", and holds the first
    batch until ``release`` is set (so that callers queue behind it)."""

    def __init__(self) -> None:
        self.batches: List[List[str]] = []
        self.first_started = threading.Event()
        self.release = threading.Event()

    def __call__(self, texts: Sequence[str], vectors: Sequence[bool]) -> List[Any]:
        self.batches.append(list(texts))
        if len(self.batches) == 1:
            self.first_started.set()
            assert self.release.wait(TIMEOUT)
        if "boom" in texts:
            raise ValueError("boom")
        return [(text.upper(), wanted) for text, wanted in zip(texts, vectors)]


def started_worker(run: RecordingRun, **limits: int) -> Worker:
    """A worker on ``run``, ready, its warm-up's batches forgotten, its first batch about to block."""
    worker = Worker(lambda: run, BatchLimits(**limits), warm_up_texts=("warm-up",))
    run.release.set()  # let the warm-up's batches through
    worker.start()
    wait_ready(worker)
    run.batches.clear()
    run.first_started.clear()
    run.release.clear()
    return worker


def wait_ready(worker: Worker) -> None:
    pause = threading.Event()
    for _ in range(TIMEOUT * 100):
        if worker.ready or worker.failure is not None:
            break
        pause.wait(0.01)
    assert worker.ready, worker.state


def queued_batches(limits: BatchLimits, requests: Sequence[List[str]]) -> List[List[str]]:
    """The batches a worker with ``limits`` runs for ``requests``, all queued behind a held batch."""
    run = RecordingRun()
    worker = started_worker(run, **vars(limits))
    worker.submit(["held"], vectors=False)
    assert run.first_started.wait(TIMEOUT)
    futures = [worker.submit(texts, vectors=False) for texts in requests]
    run.release.set()
    [future.result(TIMEOUT) for future in futures]
    assert worker.close(TIMEOUT)
    return run.batches[1:]


def test_a_batch_takes_whole_requests_in_order_within_its_limits() -> None:
    requests = (["ab", "c"], ["d"], ["e", "f"], ["g"])
    assert queued_batches(BatchLimits(max_batch_texts=3), requests) == [["ab", "c", "d"], ["e", "f", "g"]]
    # characters: the texts counted as long as the batch's longest
    assert queued_batches(BatchLimits(max_batch_texts=3, max_batch_chars=4), requests) == [
        ["ab", "c"],
        ["d", "e", "f"],
        ["g"],
    ]
    big = (["x" * 50], ["y"])
    assert queued_batches(BatchLimits(max_batch_chars=10), big) == [["x" * 50], ["y"]]  # alone


def test_callers_that_arrive_during_a_batch_form_the_next_one_and_each_gets_its_own_outputs() -> None:
    run = RecordingRun()
    worker = started_worker(run, max_batch_texts=4)
    first = worker.submit(["a"], vectors=False)
    assert run.first_started.wait(TIMEOUT)
    waiting = [worker.submit(texts, vectors=i % 2 == 0) for i, texts in enumerate([["b", "c"], ["d"], ["e"], ["f"]])]
    assert worker.batcher.queued == 4
    run.release.set()
    assert first.result(TIMEOUT) == [("A", False)]
    assert [f.result(TIMEOUT) for f in waiting] == [
        [("B", True), ("C", True)],
        [("D", False)],
        [("E", True)],
        [("F", False)],
    ]
    assert run.batches == [["a"], ["b", "c", "d", "e"], ["f"]]
    assert worker.close(TIMEOUT)


def looping_clients_batches(batch_seconds: float, requests: int, client_delay: float) -> List[int]:
    """The sizes of the batches a worker runs for 8 clients that each send ``requests`` requests one
    after another, client ``i`` sending again ``i * client_delay`` seconds after its answer, beside
    batches that take ``batch_seconds``."""
    batches: List[int] = []

    def run(texts: Sequence[str], vectors: Sequence[bool]) -> List[Any]:
        batches.append(len(texts))
        threading.Event().wait(batch_seconds)
        return list(texts)

    worker = Worker(lambda: run, warm_up_texts=("warm-up",))
    worker.start()
    wait_ready(worker)
    batches.clear()
    pause = threading.Event()

    def client(index: int) -> None:
        for request in range(requests):
            assert worker.submit([f"{index}.{request}"], vectors=False).result(TIMEOUT) == [f"{index}.{request}"]
            pause.wait(index * client_delay)

    clients = [threading.Thread(target=client, args=(index,)) for index in range(8)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    assert worker.close(TIMEOUT)
    return batches


def test_clients_that_send_again_once_answered_share_batches_in_one_cohort() -> None:
    """8 clients each sending 12 requests one after another: those a batch answered join the next
    batch, rather than two halves taking turns (batches of 4 on average)."""
    batches = looping_clients_batches(batch_seconds=0.01, requests=12, client_delay=0.0)
    assert sum(batches) == 96
    assert len(batches) <= 96 / 6, f"batches of {batches}"


def test_clients_that_come_back_one_after_another_still_share_one_batch() -> None:
    """An event loop answers a batch's requests one at a time and reads the next ones the same way:
    8 clients returning 3 ms apart (21 ms in all, against RETURN_WAIT of a 40 ms batch) join one
    batch, where a wait that ran from the first of them took half (batches of 4 on average)."""
    batches = looping_clients_batches(batch_seconds=0.04, requests=6, client_delay=0.003)
    assert sum(batches) == 48
    assert len(batches) <= 48 / 6, f"batches of {batches}"


@pytest.mark.slow  # starts a fresh Python process
def test_a_worker_that_owns_its_process_freezes_the_warm_pipeline_out_of_the_collector() -> None:
    """Frozen after the warm-up (a full collection would walk every object of the pipeline), given
    back to the collector once stopped. Run in a child process: freezing is process-wide."""
    script = textwrap.dedent(
        """
        import gc
        from spacy_elmo.serve.worker import Worker
        worker = Worker(lambda: (lambda texts, vectors: list(texts)), warm_up_texts=("w",), freeze_heap=True)
        worker.start()
        assert worker.wait_loaded(30)
        frozen = gc.get_freeze_count()
        assert worker.submit(["a"], vectors=False).result(30) == ["a"]
        assert worker.close(30)
        print(frozen, gc.get_freeze_count())
        """
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    frozen, after = map(int, child.stdout.split())
    assert frozen > 10_000 and after == 0


def test_an_error_reaches_only_the_request_whose_text_raised_it() -> None:
    run = RecordingRun()
    worker = started_worker(run)
    worker.submit(["a"], vectors=False)
    assert run.first_started.wait(TIMEOUT)
    before, failing, after = (worker.submit(texts, False) for texts in (["b"], ["c", "boom"], ["d"]))
    run.release.set()
    assert before.result(TIMEOUT) == [("B", False)] and after.result(TIMEOUT) == [("D", False)]
    with pytest.raises(ValueError, match="boom"):
        failing.result(TIMEOUT)
    assert run.batches[1:] == [["b", "c", "boom", "d"], ["b"], ["c", "boom"], ["d"]]  # the batch, then each alone
    assert worker.close(TIMEOUT)


def test_a_full_queue_refuses_with_a_retry_after_and_a_closed_worker_drains_what_it_holds() -> None:
    run = RecordingRun()
    worker = started_worker(run, queue_size=2)
    worker.submit(["a"], False)
    assert run.first_started.wait(TIMEOUT)
    queued = [worker.submit([text], False) for text in ("b", "c")]
    with pytest.raises(Overloaded, match="queue is full") as refused:
        worker.submit(["d"], False)
    assert refused.value.retry_after >= 1
    closer = threading.Thread(target=worker.close, args=(TIMEOUT,))
    closer.start()
    pause = threading.Event()
    for _ in range(TIMEOUT * 100):
        if worker.state == "stopping":
            break
        pause.wait(0.01)
    with pytest.raises(ShuttingDown):
        worker.submit(["e"], False)
    run.release.set()
    closer.join(TIMEOUT)
    assert [f.result(0) for f in queued] == [[("B", False)], [("C", False)]]
    assert worker.state == "stopping" and not closer.is_alive()


def test_a_request_whose_caller_left_is_not_run() -> None:
    run = RecordingRun()
    worker = started_worker(run)
    worker.submit(["a"], False)
    assert run.first_started.wait(TIMEOUT)
    left, kept = worker.submit(["left"], False), worker.submit(["kept"], False)
    assert left.cancel()
    run.release.set()
    assert kept.result(TIMEOUT) == [("KEPT", False)]
    assert ["left"] not in run.batches and worker.close(TIMEOUT)


def test_requests_before_the_pipeline_is_ready_are_refused_and_a_failed_load_is_reported() -> None:
    release, failures = threading.Event(), []

    def load() -> RecordingRun:
        assert release.wait(TIMEOUT)
        raise OSError("no such pipeline")

    worker = Worker(load, on_failure=failures.append)
    worker.start()
    with pytest.raises(NotReady, match="loading"):
        worker.submit(["a"], False)
    release.set()
    assert worker.close(TIMEOUT)
    assert worker.state == "failed" and [str(error) for error in failures] == ["no such pipeline"]


def test_retry_after_is_whole_seconds_for_the_queue_ahead() -> None:
    assert retry_after_seconds(0.0, 0) == 1
    assert retry_after_seconds(0.01, 250) == 3


@pytest.fixture(scope="module")
def nlp_elmo(bilm_files) -> Language:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "threads": 1})
    nlp.initialize()
    return nlp


def test_a_batch_runs_in_one_memory_zone_and_gives_what_nlp_pipe_gives(nlp_elmo: Language) -> None:
    strings = len(nlp_elmo.vocab.strings)
    run = PipelineRun(nlp_elmo)
    texts = ["zorblax quimfet .", "", "  ", "Alice saw glorptuna ."]
    outputs = run(texts, [True, False, True, True])
    assert len(nlp_elmo.vocab.strings) == strings  # the zone dropped the new words
    expected = [doc_output(doc, True) for doc in nlp_elmo.pipe(texts)]
    assert [o["tokens"] for o in outputs] == [e["tokens"] for e in expected]
    assert "vectors" not in outputs[1] and outputs[0]["vectors"] == expected[0]["vectors"]
    assert len(outputs[2]["vectors"]) == len(outputs[2]["tokens"]) == 1


def test_future_results_come_from_the_worker_thread_only() -> None:
    """Only the worker's thread calls the pipeline, whoever submits."""
    threads: List[str] = []

    def run(texts: Sequence[str], vectors: Sequence[bool]) -> List[Any]:
        threads.append(threading.current_thread().name)
        return list(texts)

    worker = Worker(lambda: run, warm_up_texts=("w",))
    worker.start()
    futures: List[Future] = []
    wait_ready(worker)
    submitters = [threading.Thread(target=lambda: futures.append(worker.submit(["x"], False))) for _ in range(8)]
    for thread in submitters:
        thread.start()
    for thread in submitters:
        thread.join(TIMEOUT)
    assert [f.result(TIMEOUT) for f in futures] == [["x"]] * 8
    assert set(threads) == {"spacy-elmo-pipeline"} and worker.close(TIMEOUT)


def test_wait_loaded_returns_once_the_pipeline_is_warm_or_has_failed() -> None:
    release = threading.Event()

    def load() -> RecordingRun:
        assert release.wait(TIMEOUT)
        return RecordingRun()

    worker = Worker(load, warm_up_texts=())
    worker.start()
    assert worker.wait_loaded(0.05) is False and worker.state == "loading"
    release.set()
    assert worker.wait_loaded(TIMEOUT) is True and worker.state == "ready"
    assert worker.close(TIMEOUT)

    def fail() -> RecordingRun:
        raise OSError("no such pipeline")

    failing = Worker(fail)
    failing.start()
    assert failing.wait_loaded(TIMEOUT) is False and failing.state == "failed"


def test_a_worker_that_dies_outside_a_batch_fails_what_it_holds_and_says_so() -> None:
    """The thread ends on an error after a batch (here in ``after_batch``): the worker reports
    ``failed`` with the error, what was queued gets WorkerFailed at once, and new requests are refused."""
    run, failures, batches = RecordingRun(), [], []

    def after_batch() -> None:
        batches.append(1)
        if len(batches) > 1:  # the warm-up's passes, then the first batch
            raise OSError("the allocator is gone")

    worker = Worker(lambda: run, warm_up_texts=("warm-up",), on_failure=failures.append, after_batch=after_batch)
    run.release.set()
    worker.start()
    wait_ready(worker)
    run.release.clear()
    run.first_started.clear()
    run.batches.clear()
    first = worker.submit(["a"], vectors=False)
    assert run.first_started.wait(TIMEOUT)
    queued = worker.submit(["b"], vectors=False)
    run.release.set()
    assert first.result(TIMEOUT) == [("A", False)]
    with pytest.raises(WorkerFailed, match="the allocator is gone"):
        queued.result(TIMEOUT)
    assert worker.state == "failed" and not worker.alive and not worker.ready
    assert [str(error) for error in failures] == ["the allocator is gone"]
    with pytest.raises(NotReady, match="failed: OSError: the allocator is gone"):
        worker.submit(["c"], vectors=False)
    assert run.batches == [["a"]]


def process_threads() -> int:
    """The process's threads, OpenMP's included (which ``threading`` does not see)."""
    return len(list(Path("/proc/self/task").iterdir()))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts the process's threads in /proc")
def test_the_worker_frees_its_openmp_team_after_each_batch() -> None:
    """Its team's threads would spin on the cores the event loop needs to answer the batch."""
    if _libgomp() is None:
        pytest.skip("torch does not run on GNU OpenMP here")
    rested, during = threading.Event(), []

    def run(texts: Sequence[str], vectors: Sequence[bool]) -> List[Any]:
        torch.set_num_threads(2)
        total = float(torch.ones(1 << 22).sum())  # a parallel operation: the thread's team is made
        during.append(process_threads())
        return [total] * len(texts)

    worker = Worker(lambda: run, warm_up_texts=("warm-up",), after_batch=rested.set)
    worker.start()
    wait_ready(worker)
    rested.clear()
    assert worker.submit(["text"], vectors=False).result(TIMEOUT) == [float(1 << 22)]
    assert rested.wait(TIMEOUT)
    assert process_threads() < during[-1]
    assert worker.close(TIMEOUT)
