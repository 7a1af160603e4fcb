"""Runs in subprocesses: a run killed with SIGKILL and resumed, and a 2-process torchrun run."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from spacy_elmo.pretraining.checkpoint import load_checkpoint

from ..helpers import assert_float32_close, hdf5_arrays
from .helpers import write_corpus

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _command(corpus, output_dir, *extra):
    return [
        sys.executable,
        "-m",
        "spacy_elmo",
        "pretrain",
        str(corpus),
        str(output_dir),
        "--preset",
        "tiny",
        "--dropout",
        "0.2",
        "--negatives",
        "8",
        "--no-progress",
        *extra,
    ]


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    write_corpus(tmp_path / "corpus.txt", 120)
    args = ("--max-steps", "150", "--checkpoint-every", "10", "--seed", "3")
    subprocess.run(_command(tmp_path / "corpus.txt", tmp_path / "whole", *args), env=ENV, check=True, timeout=120)

    killed = subprocess.Popen(_command(tmp_path / "corpus.txt", tmp_path / "killed", *args), env=ENV)
    checkpoint = tmp_path / "killed" / "checkpoint.pt"
    deadline = time.monotonic() + 60
    while not (checkpoint.exists() and load_checkpoint(checkpoint)["step"] >= 30):
        assert killed.poll() is None and time.monotonic() < deadline, "run ended before it could be killed"
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=30) == -signal.SIGKILL
    assert load_checkpoint(checkpoint)["step"] < 150
    assert not (tmp_path / "killed" / "weights.hdf5").exists()

    subprocess.run(_command(tmp_path / "corpus.txt", tmp_path / "killed", *args), env=ENV, check=True, timeout=120)
    whole, resumed = hdf5_arrays(tmp_path / "whole" / "weights.hdf5"), hdf5_arrays(tmp_path / "killed" / "weights.hdf5")
    assert whole.keys() == resumed.keys()
    for name in whole:
        assert_float32_close(resumed[name], whole[name], err_msg=name)
    steps = [json.loads(line).get("step") for line in (tmp_path / "killed" / "log.jsonl").read_text().splitlines()]
    logged = [s for s in steps if s is not None]
    assert logged == sorted(logged) and logged[-1] == 150


@pytest.mark.slow
def test_two_processes_under_torchrun(tmp_path):
    write_corpus(tmp_path / "corpus.txt", 80)
    write_corpus(tmp_path / "dev.txt", 10, seed=1)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "spacy_elmo",
        "pretrain",
        str(tmp_path / "corpus.txt"),
        str(tmp_path / "out"),
        "--preset",
        "tiny",
        "--max-steps",
        "30",
        "--eval-every",
        "15",
        "--no-progress",
        "--dev",
        str(tmp_path / "dev.txt"),
    ]
    result = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out"
    assert (out / "options.json").exists() and (out / "weights.hdf5").exists()
    checkpoint = load_checkpoint(out / "checkpoint.pt")
    assert checkpoint["world"] == 2 and len(checkpoint["processes"]) == 2
    rows = [p["data"]["rows"] for p in checkpoint["processes"]]
    assert len(rows[0]) == len(rows[1]) == 2  # the global batch of 4 rows, 2 per process
    assert rows[0] != rows[1]  # each process reads its own documents
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in records if "loss" in r]
    assert train_steps == sorted(set(train_steps)) and train_steps[-1] == 30  # only rank 0 writes
    assert result.stdout.count("Exported") == 1
