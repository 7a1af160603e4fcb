"""The compute thread: every biLM call on a CPU runs on one thread, whose OpenMP team the threads
handing calls over leave alone."""

import multiprocessing
import os
import threading
from pathlib import Path
from typing import List

import pytest
import torch

from spacy_elmo.bilm import compute_thread


def own_thread_count() -> int:
    return len(list(Path("/proc/self/task").iterdir()))


@pytest.mark.skipif(compute_thread._libgomp() is None, reason="torch does not run on GNU OpenMP here")
def test_a_thread_frees_its_openmp_threads_and_gets_them_back_at_its_next_parallel_operation() -> None:
    """libgomp throttles every team once the process holds more OpenMP threads than cores, so the
    threads handing calls to the compute thread free theirs (layers/shared_calls.py)."""
    counts: List[int] = []

    def parallel_operation() -> None:
        torch.ones(2**20).mul_(2.0)  # above torch's grain: runs on the thread's OpenMP team

    def work() -> None:
        torch.set_num_threads(2)
        before = own_thread_count()
        parallel_operation()
        counts.extend([before, own_thread_count()])
        compute_thread.release_openmp_threads()
        counts.append(own_thread_count())
        parallel_operation()
        counts.append(own_thread_count())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    before, with_team, released, again = counts
    assert with_team == before + 1 and released == before and again == with_team


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
