"""Faults injected into real pretraining runs (subprocesses): an unwritable output directory, a
disk that fills up at a checkpoint, SIGKILL in the middle of writing a checkpoint, and Ctrl-C
(SIGINT) or SIGTERM long before the first checkpoint.

Each time the previous checkpoint must stay usable, the error must say what happened and what
survived, and running the same command again must end with the weights of a run that never failed.
"""

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest

from spacy_elmo.pretraining.checkpoint import STOP_SIGNALS, load_checkpoint, stop_requests

from ..helpers import assert_float32_close, hdf5_arrays
from ..pretraining.helpers import write_corpus

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
ARGS = ("--preset", "tiny", "--negatives", "8", "--checkpoint-every", "10", "--seed", "5", "--no-progress")
# The same run until a signal stops it: no checkpoint before step 500, a log record at every step.
UNTIL_STOPPED = (*ARGS, "--checkpoint-every", "500", "--log-every", "1", "--max-steps", "100000")

# Runs the CLI with torch.save patched: the SECOND checkpoint write stops half-way, killed by SIGKILL.
KILL_MID_WRITE = """
import io, os, signal, sys
import torch
from spacy_elmo.cli import app

real_save, calls = torch.save, []

def save_then_die(obj, f):
    calls.append(f)
    if len(calls) < 2:
        return real_save(obj, f)
    buffer = io.BytesIO()
    real_save(obj, buffer)
    f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)

torch.save = save_then_die
app(args=sys.argv[1:])
"""


def pretrain(
    corpus: Path, output_dir: Path, max_steps: int = 40, file_size_limit: Optional[int] = None
) -> subprocess.CompletedProcess:
    def limit_file_size() -> None:  # what a full disk does to a write: it fails part-way (EFBIG here)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy_elmo",
            "pretrain",
            str(corpus),
            str(output_dir),
            *ARGS,
            "--max-steps",
            str(max_steps),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=limit_file_size if file_size_limit is not None else None,
    )


def assert_same_weights(path: Path, expected_path: Path) -> None:
    got, expected = hdf5_arrays(path), hdf5_arrays(expected_path)
    assert got.keys() == expected.keys()
    for name in expected:
        assert_float32_close(got[name], expected[name], err_msg=name)


def temporaries(directory: Path) -> List[Path]:
    return sorted(directory.glob(".*.tmp"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus, and the weights of a run that never failed."""
    root = tmp_path_factory.mktemp("faults")
    write_corpus(root / "corpus.txt", 150)
    result = pretrain(root / "corpus.txt", root / "whole")
    assert result.returncode == 0, result.stderr
    return root


@pytest.mark.slow  # its fixture pretrains a run
def test_unwritable_output_directory_fails_at_once_and_clearly(uninterrupted: Path) -> None:
    blocker = uninterrupted / "a_file"
    blocker.write_text("not a directory")
    result = pretrain(uninterrupted / "corpus.txt", blocker / "run")
    assert result.returncode == 1
    assert "cannot write to the output directory" in result.stderr and "Traceback" not in result.stderr
    assert blocker.read_text() == "not a directory"


@pytest.mark.slow
def test_disk_full_at_a_checkpoint_keeps_the_previous_one_and_resumes(uninterrupted: Path, tmp_path: Path) -> None:
    corpus, run = uninterrupted / "corpus.txt", tmp_path / "run"
    first = pretrain(corpus, run, max_steps=10)
    assert first.returncode == 0, first.stderr
    checkpoint_size = (run / "checkpoint.pt").stat().st_size
    before = (run / "checkpoint.pt").read_bytes()

    full = pretrain(corpus, run, file_size_limit=checkpoint_size // 2)
    assert full.returncode == 1
    assert "cannot write checkpoint.pt" in full.stderr and "at step 20" in full.stderr
    assert "The checkpoint of step 10" in full.stderr and "is intact" in full.stderr
    assert "Traceback" not in full.stderr
    assert (run / "checkpoint.pt").read_bytes() == before
    assert load_checkpoint(run / "checkpoint.pt")["step"] == 10
    assert temporaries(run) == []

    resumed = pretrain(corpus, run)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_weights(run / "weights.hdf5", uninterrupted / "whole" / "weights.hdf5")


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_checkpoint_write(uninterrupted: Path, tmp_path: Path) -> None:
    corpus, run = uninterrupted / "corpus.txt", tmp_path / "run"
    killed = subprocess.run(
        [sys.executable, "-c", KILL_MID_WRITE, "pretrain", str(corpus), str(run), *ARGS, "--max-steps", "40"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(temporaries(run)) == 1  # the half-written file, never moved onto checkpoint.pt
    assert load_checkpoint(run / "checkpoint.pt")["step"] == 10
    assert not (run / "weights.hdf5").exists()

    resumed = pretrain(corpus, run)
    assert resumed.returncode == 0, resumed.stderr
    assert temporaries(run) == []
    assert_same_weights(run / "weights.hdf5", uninterrupted / "whole" / "weights.hdf5")


def logged_steps(run: Path) -> List[int]:
    lines = (run / "log.jsonl").read_text(encoding="utf8").splitlines()
    return [record["step"] for record in map(json.loads, lines) if "step" in record]


def has_logged_a_step(run: Path) -> bool:
    """Whether a run has logged a step (its log holds a whole line)."""
    log = run / "log.jsonl"
    return log.exists() and "\n" in log.read_text(encoding="utf8")


@pytest.mark.slow
def test_ctrl_c_before_the_first_checkpoint_saves_one_and_the_run_resumes_from_it(
    uninterrupted: Path, tmp_path: Path
) -> None:
    """SIGINT a few steps in, long before the first checkpoint: the run saves that step, says where
    and how to resume, exits 130 as a shell expects, and the same command continues from that step
    to the weights of a run never stopped. (The distributed test below sends SIGTERM.)"""
    corpus, run = uninterrupted / "corpus.txt", tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "spacy_elmo", "pretrain", str(corpus), str(run), *UNTIL_STOPPED],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not has_logged_a_step(run):  # in the training loop
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == 130, stderr
    step = load_checkpoint(run / "checkpoint.pt")["step"]
    assert 0 < step < 40, f"stopped at step {step}: the signal came too late for the test's 40-step run"
    assert f"Stopped by SIGINT at step {step}; checkpoint saved to {run / 'checkpoint.pt'}" in stderr
    assert "Run the same command again to continue" in stderr and "Traceback" not in stderr
    assert not (run / "weights.hdf5").exists()

    resumed = pretrain(corpus, run)  # to step 40, logging every 5 steps
    assert resumed.returncode == 0, resumed.stderr
    assert logged_steps(run) == list(range(1, step + 1)) + list(range(5 * (step // 5 + 1), 41, 5))
    assert_same_weights(run / "weights.hdf5", uninterrupted / "whole" / "weights.hdf5")


# Runs the CLI with one change: rank 1 of a torchrun run gets SIGTERM during its 5th step, rank 0 none.
SIGNAL_RANK_1 = """
import os, signal, sys
from spacy_elmo.cli import app
from spacy_elmo.pretraining.train import Trainer

real_step = Trainer._train_step

def step_with_a_signal(self):
    if self.env.rank == 1 and self.step == 4:
        os.kill(os.getpid(), signal.SIGTERM)
    return real_step(self)

Trainer._train_step = step_with_a_signal
app(args=sys.argv[1:])
"""


@pytest.mark.slow
def test_a_signal_to_one_process_of_a_distributed_run_stops_all_at_the_same_step(
    uninterrupted: Path, tmp_path: Path
) -> None:
    """The processes agree to stop after the step in which any of them got a signal: every one
    hands its state to rank 0's checkpoint, which says so once, and none waits for the others."""
    script = tmp_path / "signal_rank_1.py"
    script.write_text(SIGNAL_RANK_1, encoding="utf8")
    run = tmp_path / "run"
    torchrun = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(script),
            "pretrain",
            str(uninterrupted / "corpus.txt"),
            str(run),
            *UNTIL_STOPPED,
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = torchrun.communicate(timeout=180)
    except subprocess.TimeoutExpired:  # processes that disagree wait in a collective for hours
        torchrun.terminate()  # torchrun ends its workers: SIGTERM, and SIGKILL 30 s later
        torchrun.communicate(timeout=90)
        raise
    assert torchrun.returncode != 0
    checkpoint = load_checkpoint(run / "checkpoint.pt")
    assert checkpoint["step"] == 5 and len(checkpoint["processes"]) == 2
    assert stderr.count("Stopped by SIGTERM at step 5; checkpoint saved") == 1, stderr[-3000:]
    assert "exitcode  : 143" in stderr  # 128 + SIGTERM, in torchrun's report of the failed workers


def test_stop_requests_record_signals_until_a_second_ctrl_c_and_give_the_handlers_back() -> None:
    before = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    with pytest.raises(KeyboardInterrupt), stop_requests() as stop:
        signal.raise_signal(signal.SIGINT)  # would raise KeyboardInterrupt
        signal.raise_signal(signal.SIGTERM)  # would end the process
        signal.raise_signal(signal.SIGTERM)  # the scheduler's, then torchrun's: the worker still saves
        assert stop == [signal.SIGINT, signal.SIGTERM, signal.SIGTERM]
        signal.raise_signal(signal.SIGINT)  # Ctrl-C twice: stop now
    assert stop == [signal.SIGINT, signal.SIGTERM, signal.SIGTERM]
    assert {number: signal.getsignal(number) for number in STOP_SIGNALS} == before
