"""Pretraining with bf16 products: a finite loss, float32 master weights, optimizer state and files."""

import json

import h5py
import numpy
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.bilm.runtime import BiLMRuntime, BiLMSettings
from spacy_elmo.cli import app
from spacy_elmo.pretraining import SharedSoftmax, TrainingConfig, get_preset, pretrain, train
from spacy_elmo.pretraining.checkpoint import load_checkpoint
from spacy_elmo.pretraining.evaluate import heldout_perplexity
from spacy_elmo.pretraining.softmax import sample_log_uniform

from .helpers import new_trainer, write_repetitive_corpus


def _datasets(group: h5py.Group):
    found = []
    group.visititems(lambda name, item: found.append(item) if isinstance(item, h5py.Dataset) else None)
    return found


@pytest.mark.slow  # pretraining runs
def test_pretrain_with_bf16_products_keeps_everything_else_float32(tmp_path):
    write_repetitive_corpus(tmp_path / "train.txt", 60)
    write_repetitive_corpus(tmp_path / "dev.txt", 6)
    out = tmp_path / "out"
    preset = get_preset("tiny")
    config = preset.training.updated(max_steps=10, precision="bf16")
    pretrain(tmp_path / "train.txt", out, preset.options, config, dev_path=tmp_path / "dev.txt", progress=False)
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses and all(numpy.isfinite(losses))
    assert numpy.isfinite(records[-1]["final"]["eval"]["zero"]["average"])
    checkpoint = load_checkpoint(out / "checkpoint.pt")
    assert checkpoint["config"]["precision"] == "bf16"
    optimizer_state = [
        t for s in checkpoint["optimizer"]["state"].values() for t in s.values() if t.is_floating_point()
    ]
    assert optimizer_state and all(t.dtype == torch.float32 for t in optimizer_state)
    assert all(t.dtype == torch.float32 for t in checkpoint["bilm"].values())
    with h5py.File(out / "weights.hdf5", "r") as f:
        datasets = _datasets(f)
        assert datasets and all(d.dtype == numpy.float32 for d in datasets)
    reloaded = BiLM.from_files(out / "options.json", out / "weights.hdf5")
    assert reloaded.runtime.precision == "fp32"
    assert numpy.isfinite(reloaded.embed_sentences([["the", "cat", "sat"]])[0]).all()


def test_an_unknown_precision_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, int8, auto, got 'half'"):
        TrainingConfig(precision="half")
    write_repetitive_corpus(tmp_path / "train.txt", 6)
    result = CliRunner().invoke(
        app,
        [
            "pretrain",
            str(tmp_path / "train.txt"),
            str(tmp_path / "out"),
            "--preset",
            "tiny",
            "--max-steps",
            "1",
            "--precision",
            "fp16",
        ],
    )
    assert result.exit_code == 1
    assert "precision must be one of fp32, bf16, int8, auto, got 'fp16'" in result.output


# not slow: a one-step run, the fast loop's check of `spacy-elmo pretrain` to the checkpoint
def test_the_cli_passes_the_precision_on(tmp_path):
    write_repetitive_corpus(tmp_path / "train.txt", 6)
    result = CliRunner().invoke(
        app,
        [
            "pretrain",
            str(tmp_path / "train.txt"),
            str(tmp_path / "out"),
            "--preset",
            "tiny",
            "--max-steps",
            "1",
            "--precision",
            "bf16",
            "--no-progress",
            "--warm-documents",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    assert load_checkpoint(tmp_path / "out" / "checkpoint.pt")["config"]["precision"] == "bf16"


@pytest.mark.parametrize("n_negatives", [0, 30])
def test_bf16_softmax_is_close_to_float32(n_negatives):
    torch.manual_seed(0)
    softmax = SharedSoftmax(vocab_size=200, dim=16)
    hidden, targets = torch.randn(50, 16), torch.randint(0, 200, (50,))
    if n_negatives:
        negatives = sample_log_uniform(200, n_negatives, torch.device("cpu"))
        fp32, bf16 = (
            softmax.sampled_nll(hidden, targets, negatives, dtype) for dtype in (torch.float32, torch.bfloat16)
        )
    else:
        fp32, bf16 = (softmax.full_nll(hidden, targets, dtype) for dtype in (torch.float32, torch.bfloat16))
    assert bf16.dtype == torch.float32
    assert not torch.equal(bf16, fp32)
    torch.testing.assert_close(bf16, fp32, atol=0.03, rtol=0.01)


def test_auto_pretrains_in_the_training_decision_measured_for_the_bilm(tmp_path, monkeypatch, capsys):
    """On a CPU, pretraining's "auto" is the biLM's measured decision for training steps, not inference's."""
    asked = []

    def cpu_auto_precision(runtime: BiLMRuntime, training: bool = False) -> str:
        asked.append((runtime.model.options.lstm_dim, training))
        return "bf16" if training else "fp32"

    monkeypatch.setattr(train, "cpu_auto_precision", cpu_auto_precision)
    write_repetitive_corpus(tmp_path / "train.txt", 30)
    preset = get_preset("tiny")
    config = preset.training.updated(max_steps=1, precision="auto", warm_documents=0)
    trainer = new_trainer(tmp_path, config, progress=True)
    assert trainer.bilm.runtime.precision == "bf16" and trainer.bilm.runtime.resolved_precision.dtype == torch.bfloat16
    assert asked == [(preset.options.lstm_dim, True)]
    assert "precision auto: the matrix products run in bf16 here" in capsys.readouterr().out


# not slow: runs of 3 and 4 steps, the fast loop's check of resuming
def test_a_resumed_run_takes_the_precision_of_the_new_command(tmp_path):
    """A run may resume on another machine, where another precision is native."""
    write_repetitive_corpus(tmp_path / "train.txt", 30)
    preset = get_preset("tiny")
    for steps, precision in ((3, "bf16"), (4, "fp32")):
        config = preset.training.updated(max_steps=steps, precision=precision, warm_documents=0)
        pretrain(tmp_path / "train.txt", tmp_path / "out", preset.options, config, progress=False)
        checkpoint = load_checkpoint(tmp_path / "out" / "checkpoint.pt")
        assert (checkpoint["step"], checkpoint["config"]["precision"]) == (steps, precision)


def test_evaluation_runs_on_a_runtime_of_its_own_in_the_runs_precision(tmp_path):
    """Held-out perplexity runs in the run's products on a runtime made for it: what it caches goes
    with it, and the trained biLM's own runtime (its steps') is left as it was."""
    write_repetitive_corpus(tmp_path / "train.txt", 30)
    write_repetitive_corpus(tmp_path / "dev.txt", 3)
    preset = get_preset("tiny")
    config = preset.training.updated(max_steps=1, precision="bf16", warm_documents=0)
    trainer = new_trainer(tmp_path, config, dev_path=tmp_path / "dev.txt")
    own_cache = trainer.bilm.runtime.token_cache
    evaluated = trainer._evaluate()["eval"]["zero"]
    assert len(own_cache) == 0
    bf16 = BiLMRuntime(trainer.bilm, BiLMSettings(precision="bf16"))
    docs, rows = trainer.dev_documents, trainer.rows
    assert evaluated == heldout_perplexity(bf16, trainer.loss.softmax, trainer.vocab, docs, batch_size=rows)
    fp32 = heldout_perplexity(BiLMRuntime(trainer.bilm, BiLMSettings()), trainer.loss.softmax, trainer.vocab, docs)
    assert fp32["average"] != evaluated["average"]
