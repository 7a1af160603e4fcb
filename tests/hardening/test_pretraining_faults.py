"""Faults injected into real pretraining runs (subprocesses): an unwritable output directory, a
disk that fills up at a checkpoint, and SIGKILL in the middle of writing a checkpoint.

Each time the previous checkpoint must stay usable, the error must say what happened and what
survived, and running the same command again must end with the weights of a run that never failed.
"""

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import h5py
import numpy
import pytest

from spacy_elmo.training.checkpoint import load_checkpoint

from ..training.helpers import write_corpus

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
ARGS = ("--preset", "tiny", "--negatives", "8", "--checkpoint-every", "10", "--seed", "5", "--no-progress")

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
        [sys.executable, "-m", "spacy_elmo", "pretrain", str(corpus), str(output_dir), *ARGS, "--max-steps", str(max_steps)],
        env=ENV, capture_output=True, text=True, timeout=180,
        preexec_fn=limit_file_size if file_size_limit is not None else None,
    )


def weights(path: Path) -> Dict[str, numpy.ndarray]:
    values: Dict[str, numpy.ndarray] = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: values.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    return values


def assert_same_weights(path: Path, expected_path: Path) -> None:
    got, expected = weights(path), weights(expected_path)
    assert got.keys() == expected.keys()
    for name in expected:
        numpy.testing.assert_allclose(got[name], expected[name], atol=1e-6, err_msg=name)


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
        env=ENV, capture_output=True, text=True, timeout=180,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(temporaries(run)) == 1  # the half-written file, never moved onto checkpoint.pt
    assert load_checkpoint(run / "checkpoint.pt")["step"] == 10
    assert not (run / "weights.hdf5").exists()

    resumed = pretrain(corpus, run)
    assert resumed.returncode == 0, resumed.stderr
    assert temporaries(run) == []
    assert_same_weights(run / "weights.hdf5", uninterrupted / "whole" / "weights.hdf5")
