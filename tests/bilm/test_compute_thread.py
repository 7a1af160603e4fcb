"""The compute thread: every biLM call on a CPU runs on one thread, whose OpenMP team the threads
handing calls over leave alone."""

import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import List

import pytest
import torch

from spacy_elmo.bilm import compute_thread


def own_thread_count() -> int:
    return len(list(Path("/proc/self/task").iterdir()))


def thread_count_once_down_to(expected: int) -> int:
    """The process's thread count once it is ``expected`` or after a second: a freed OpenMP thread
    leaves /proc a moment after libgomp lets it go."""
    deadline = time.monotonic() + 1.0
    while own_thread_count() > expected and time.monotonic() < deadline:
        time.sleep(0.005)
    return own_thread_count()


needs_libgomp = pytest.mark.skipif(compute_thread._libgomp() is None, reason="torch does not run on GNU OpenMP here")


def parallel_operation() -> None:
    torch.ones(2**20).mul_(2.0)  # above torch's grain: runs on the thread's OpenMP team


def in_a_thread(work) -> None:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


def counts_in_a_fresh_process(function) -> List[int]:
    """``function()``'s thread counts, run in a fresh process: in the test run's own, threads that
    other tests left end at any moment."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_put_result, args=(function, queue))
    child.start()
    counts = queue.get(timeout=120)
    child.join(30)
    return counts


def _put_result(function, queue) -> None:
    queue.put(function())


def _released_and_made_again() -> List[int]:
    counts: List[int] = []

    def work() -> None:
        torch.set_num_threads(2)
        before = own_thread_count()
        parallel_operation()
        counts.extend([before, own_thread_count()])
        compute_thread.release_openmp_threads()
        counts.append(thread_count_once_down_to(before))
        parallel_operation()
        counts.append(own_thread_count())

    in_a_thread(work)
    return counts


def _around_a_compute_thread_call() -> List[int]:
    counts: List[int] = []

    def call() -> None:
        parallel_operation()
        counts.append(own_thread_count())

    def caller() -> None:
        torch.set_num_threads(2)  # the compute thread runs at its caller's count
        compute_thread.on_compute_thread(lambda: None)  # the compute thread exists
        counts.append(own_thread_count())
        compute_thread.on_compute_thread(call)
        counts.append(thread_count_once_down_to(counts[0]))

    in_a_thread(caller)
    return counts


@needs_libgomp
@pytest.mark.slow  # starts a fresh Python process
def test_a_thread_frees_its_openmp_threads_and_gets_them_back_at_its_next_parallel_operation() -> None:
    """libgomp throttles every team once the process holds more OpenMP threads than cores, so the
    threads handing calls to the compute thread free theirs (layers/bilm.py, _run_joined)."""
    before, with_team, released, again = counts = counts_in_a_fresh_process(_released_and_made_again)
    assert with_team == before + 1 and released == before and again == with_team, counts


@needs_libgomp
@pytest.mark.slow  # starts a fresh Python process
def test_the_compute_thread_frees_its_openmp_threads_after_each_call() -> None:
    """Between calls its team would throttle torch work of other threads (training, embed)."""
    before, during, after = counts = counts_in_a_fresh_process(_around_a_compute_thread_call)
    assert during == before + 1 and after == before, counts


def _thread_name() -> str:
    return threading.current_thread().name


def _thread_name_in_child(queue) -> None:
    queue.put(compute_thread.on_compute_thread(_thread_name))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_makes_its_own_compute_thread() -> None:
    """The parent's thread does not exist in a child forked from it (``nlp.pipe(n_process=2)``):
    a call there must not wait on it forever."""
    assert compute_thread.on_compute_thread(_thread_name).startswith(compute_thread.THREAD_NAME)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_thread_name_in_child, args=(queue,))
    child.start()
    child.join(30)
    assert child.exitcode == 0 and queue.get(timeout=1).startswith(compute_thread.THREAD_NAME)
