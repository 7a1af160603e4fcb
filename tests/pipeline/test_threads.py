"""The ``threads`` setting: fixed counts are honoured, ``"auto"`` leaves busy cores to others, never
changes torch's count under other threads' feet, and ``precision = "auto"`` decides for its plan."""

import multiprocessing
import subprocess
import sys
import threading
import time
from typing import List

import pytest
import spacy
import torch

from spacy_elmo.bilm.precision import autotune
from spacy_elmo.bilm.settings import PRECISION_ENV
from spacy_elmo.layers import get_runtime
from spacy_elmo.threads import Cores, available_cores, busy_elsewhere

from ..helpers import elmo_config

needs_proc = pytest.mark.skipif(busy_elsewhere() is None, reason="the OS does not report runnable threads (/proc)")


def test_a_fixed_count_is_used_as_given() -> None:
    assert Cores().resolve(3) == 3


def alone(**answers) -> Cores:
    """The machine as ``answers`` say (the OS's otherwise), where this process runs one Python
    thread, whatever else the test runner started."""
    return Cores(**{"shares_torch": lambda: False, **answers})


def recording_threads(nlp: spacy.Language) -> List[int]:
    """torch's thread count at each call of the pipe's biLM from now on."""
    seen: List[int] = []
    get_runtime(nlp.get_pipe("elmo").model).register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    return seen


@pytest.mark.parametrize("others, expected", [(0, "all"), (1, "all-1"), (99, 1), (None, "all")])
def test_auto_leaves_the_cores_other_processes_use(others, expected) -> None:
    cores = available_cores()
    wanted = {"all": cores, "all-1": max(1, cores - 1)}.get(expected, expected)
    assert alone(busy_elsewhere=lambda: others).resolve("auto") == wanted


@needs_proc
def test_a_spinning_process_counts_as_busy() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 10
        seen = 0
        while time.monotonic() < deadline and not seen:
            seen = busy_elsewhere()
            time.sleep(0.05)
        assert seen >= 1
    finally:
        spinner.kill()
        spinner.wait()


@pytest.mark.parametrize("setting", [1, 2])
def test_the_component_runs_the_bilm_with_its_threads_and_restores_the_count(bilm_files, setting) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "threads": setting})
    nlp.initialize()
    seen = recording_threads(nlp)
    before = torch.get_num_threads()
    nlp("Threads are a setting of the pipe .")
    assert seen and set(seen) == {setting}
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -2, "many"])
def test_a_bad_threads_setting_is_a_clear_error(bilm_files, bad) -> None:
    nlp = spacy.blank("xx")
    with pytest.raises(Exception, match="threads"):
        nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "threads": bad})


def test_auto_leaves_torchs_count_alone_beside_other_python_threads(bilm_files) -> None:
    """Their torch calls would run at the count set for ours: ``auto`` keeps torch's."""
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    nlp.get_pipe("elmo").cores = Cores(available_cores=lambda: torch.get_num_threads() + 1, busy_elsewhere=lambda: 0)
    nlp.initialize()
    seen = recording_threads(nlp)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        nlp("Another thread runs .")
    finally:
        stop.set()
        other.join()
    assert seen and set(seen) == {torch.get_num_threads()}


def test_a_biLM_on_a_gpu_leaves_torchs_count_alone_and_reads_no_load(bilm_files, monkeypatch) -> None:
    """Its products run on the GPU: torch's CPU threads are kept, and /proc is not read per call.
    (The ops claim a GPU here; the model is the CPU's: the logic tested, not the device.)"""

    def no_load() -> int:
        raise AssertionError("a call on a GPU read the machine's load")

    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    elmo = nlp.get_pipe("elmo")
    elmo.cores = alone(available_cores=lambda: torch.get_num_threads() + 1)
    nlp.initialize()
    seen = recording_threads(nlp)
    elmo.cores = alone(available_cores=lambda: torch.get_num_threads() + 1, busy_elsewhere=no_load)
    monkeypatch.setattr(elmo.model.ops, "device_type", "gpu")
    nlp("A call on a GPU .")
    assert seen == [torch.get_num_threads()]


def _counts_beside_a_busy_process(options_file: str, weight_file: str, queue) -> None:
    """In a fresh process: torch's thread count at a call on 2 idle cores and at one beside a busy
    process, once the biLM's compute thread runs (made at ``initialize``)."""
    from spacy_elmo.bilm.compute_thread import THREAD_NAME

    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"model": {"options_file": options_file, "weight_file": weight_file}})
    nlp.initialize()
    nlp("The first call .")
    seen = recording_threads(nlp)
    for others in (0, 1):
        nlp.get_pipe("elmo").cores = Cores(available_cores=lambda: 2, busy_elsewhere=lambda: others)  # noqa: B023
        nlp("A call .")
    queue.put((seen, any(thread.name.startswith(THREAD_NAME) for thread in threading.enumerate())))


@pytest.mark.slow  # starts a fresh Python process
def test_auto_leaves_a_busy_core_once_the_biLMs_compute_thread_runs(bilm_files) -> None:
    """The compute thread runs each call at its caller's count: it is no other thread whose torch
    a change of the count would reach, and ``auto`` goes on adapting beside it."""
    context = multiprocessing.get_context("spawn")  # this test run's own threads would count
    queue = context.Queue()
    child = context.Process(target=_counts_beside_a_busy_process, args=(*map(str, bilm_files), queue))
    child.start()
    child.join(120)  # the result is a few bytes: the queue holds it while the child exits
    assert child.exitcode == 0
    seen, compute_thread = queue.get(timeout=10)
    assert compute_thread and seen == [2, 1]


def test_a_pipe_that_decided_on_an_idle_machine_measures_nothing_new_beside_a_busy_one(
    bilm_files, monkeypatch, tmp_path
) -> None:
    """``precision = "auto"`` decides for the cores the process may use (2 here) on the first call;
    a call beside a busy process runs on 1 thread, and neither measures nor decides again."""
    monkeypatch.delenv(PRECISION_ENV)
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    measured: List[int] = []  # torch's thread count at each measurement

    def measure(passes, precisions, n_tokens, clock):
        measured.append(torch.get_num_threads())
        return {precision: autotune.Trial(100.0, 1.0) for precision in precisions}

    load = {"others": 0}
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files, precision="auto"))
    elmo = nlp.get_pipe("elmo")
    elmo.cores = alone(available_cores=lambda: 2, busy_elsewhere=lambda: load["others"])
    elmo.model.initialize()  # the biLM made, to be measured (the tiny one, by the fake above) as the pipe initializes
    get_runtime(elmo.model).tuning = autotune.Tuning(measure=measure, min_measured_flops=0)
    nlp.initialize()
    seen = recording_threads(nlp)
    nlp("An idle machine .")
    load["others"] = 1
    nlp("A busy one .")
    assert seen == [2, 1] and measured == [2]
