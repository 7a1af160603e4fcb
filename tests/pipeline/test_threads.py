"""The ``threads`` setting: fixed counts are honoured, ``"auto"`` leaves busy cores to others."""

import subprocess
import sys
import time

import pytest
import spacy
import torch

from spacy_elmo import threads as threads_module
from spacy_elmo.bilm import BiLM
from spacy_elmo.threads import available_cores, busy_elsewhere, resolve_threads

from ..helpers import elmo_config

needs_proc = pytest.mark.skipif(busy_elsewhere() is None, reason="the OS does not report runnable threads (/proc)")


def test_a_fixed_count_is_used_as_given() -> None:
    assert resolve_threads(3) == 3


@pytest.mark.parametrize("others, expected", [(0, "all"), (1, "all-1"), (99, 1), (None, "all")])
def test_auto_leaves_the_cores_other_processes_use(monkeypatch, others, expected) -> None:
    monkeypatch.setattr(threads_module, "busy_elsewhere", lambda: others)
    cores = available_cores()
    wanted = {"all": cores, "all-1": max(1, cores - 1)}.get(expected, expected)
    assert resolve_threads("auto") == wanted


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
def test_the_component_runs_the_bilm_with_its_threads_and_restores_the_count(
    bilm_files, monkeypatch, setting
) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "threads": setting})
    nlp.initialize()
    seen = []
    forward = BiLM.forward

    def recording_forward(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(BiLM, "forward", recording_forward)
    before = torch.get_num_threads()
    nlp("Threads are a setting of the pipe .")
    assert seen and set(seen) == {setting}
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -2, "many"])
def test_a_bad_threads_setting_is_a_clear_error(bilm_files, bad) -> None:
    nlp = spacy.blank("en")
    with pytest.raises(Exception, match="threads"):
        nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "threads": bad})
