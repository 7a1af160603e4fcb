"""Training on a GPU: listener updates, fine-tuning, fresh predictions after it, mixed precision
with the grad scaler, and ``spacy train --gpu-id 0``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import spacy
import torch
from thinc.api import Adam, PyTorchGradScaler

from spacy_elmo import BiLM
from spacy_elmo.layers import get_bilm

from ..helpers import CONFIGS, N_LAYERS, WIDTH, assert_float32_close, build_ner_textcat, make_examples
from ..pipeline.helpers import (
    FINE_TUNING_TEXTS,
    assert_learn_rate_scale_scales_the_biLM_steps_only,
    fine_tuned_pipeline,
    overrides_for,
    train,
)
from .helpers import host, is_cupy_float32

pytestmark = pytest.mark.gpu


def test_frozen_ner_and_textcat_updates_give_finite_losses(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    before = [p.detach().clone() for p in bilm.parameters()]
    losses = train(nlp, make_examples(nlp), steps=3)
    assert losses["ner"] > 0 and losses["textcat"] > 0
    assert all(numpy.isfinite(value) for value in losses.values())
    assert all(torch.equal(a, b) for a, b in zip(before, bilm.parameters()))


def test_fine_tuning_moves_the_biLM_by_learn_rate_scale(bilm_files, deterministic) -> None:
    """The GPU twin of tests/pipeline/test_listeners.py::test_learn_rate_scale_scales_the_biLM_steps_only."""
    assert_learn_rate_scale_scales_the_biLM_steps_only(bilm_files)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_predictions_after_fine_tuning_steps_are_not_stale(bilm_files, precision: str, tmp_path: Path) -> None:
    """The GPU twin of tests/pipeline/test_fine_tuning_steps.py: after every step, what the pipeline
    serves equals what a fresh copy of its weights computes."""
    nlp = fine_tuned_pipeline("ner_elmo.cfg", bilm_files, precision)
    examples = make_examples(nlp)
    optimizer = Adam(0.01)
    before = [host(doc.tensor) for doc in nlp.pipe(FINE_TUNING_TEXTS)]  # fills the token cache and the bf16 copies
    for step in range(3):
        nlp.update(examples, sgd=optimizer)
        served = [host(doc.tensor) for doc in nlp.pipe(FINE_TUNING_TEXTS)]
        nlp.to_disk(tmp_path / str(step))
        fresh = [host(doc.tensor) for doc in spacy.load(tmp_path / str(step)).pipe(FINE_TUNING_TEXTS)]
        for got, want in zip(served, fresh):
            assert_float32_close(got, want)
    assert max(float(numpy.abs(a - b).max()) for a, b in zip(before, served)) > 1e-3  # the steps moved the features


def test_mixed_precision_with_the_grad_scaler_gives_the_unscaled_gradients(bilm_files) -> None:
    """Under thinc's autocast and a grad scaler of 1024, the biLM gets the sum of the listeners'
    gradients, scaled and unscaled exactly once (as a direct backward pass computes it)."""
    nlp = build_ner_textcat(
        bilm_files,
        freeze=False,
        precision="fp32",
        mixed_precision=True,
        grad_scaler_config={"enabled": True, "init_scale": 1024.0},
    )
    elmo = nlp.get_pipe("elmo")
    shim = elmo.model.shims[0]
    assert shim._mixed_precision and isinstance(shim._grad_scaler, PyTorchGradScaler)
    bilm = get_bilm(elmo.model)
    examples = make_examples(nlp, 3)
    docs = [eg.predicted for eg in examples]
    rng = numpy.random.default_rng(0)
    grads = [[rng.normal(size=(N_LAYERS, len(doc), WIDTH)).astype("float32") for doc in docs] for _ in range(2)]

    bilm.zero_grad()
    output = bilm([[t.text for t in doc] for doc in docs])
    loss = sum(
        (output.layers[:, row, 1 : len(doc) + 1] * torch.from_numpy(a + b).to(bilm.device)).sum()
        for row, (doc, a, b) in enumerate(zip(docs, *grads))
    )
    loss.backward()
    expected = [p.grad.clone() for p in bilm.parameters()]

    bilm.zero_grad()
    elmo.update(examples, losses={})
    for listener, listener_grads in zip(elmo.listeners, grads):
        listener._backprop([elmo.model.ops.asarray3f(g) for g in listener_grads])
    assert not shim._grad_scaler.found_inf
    for param, grad in zip(bilm.parameters(), expected):
        assert param.grad.dtype == torch.float32
        assert float((param.grad - grad).norm()) <= 1e-4 * float(grad.norm())
    losses = train(nlp, make_examples(nlp), steps=3)
    assert all(numpy.isfinite(value) for value in losses.values()) and losses["elmo"] > 0
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in bilm.parameters())


@pytest.mark.parametrize("freeze", [True, False])
def test_spacy_train_gpu_id_0_trains_and_model_best_loads(
    freeze: bool, corpus: Path, bilm_files, tmp_path: Path
) -> None:
    config = "ner_elmo.cfg"
    files = {"paths.elmo_options": str(bilm_files[0]), "paths.elmo_weights": str(bilm_files[1])}
    steps = {"training.max_steps": 20, "training.eval_frequency": 10, "components.elmo.model.freeze": freeze}
    overrides = overrides_for(config, corpus, **files, **steps)
    as_text = {key: json.dumps(value) if isinstance(value, bool) else str(value) for key, value in overrides.items()}
    args = [arg for key, value in as_text.items() for arg in (f"--{key}", value)]  # booleans as true / false
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy",
            "train",
            str(CONFIGS / config),
            "--gpu-id",
            "0",
            "--output",
            str(tmp_path / "out"),
            *args,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Using GPU: 0" in result.stdout + result.stderr
    nlp = spacy.load(tmp_path / "out" / "model-best")
    assert get_bilm(nlp.get_pipe("elmo").model).device == torch.device("cuda", 0)
    doc = nlp("Alice went home . It was great .")
    assert is_cupy_float32(doc.tensor) and doc.tensor.shape == (8, WIDTH)
    assert nlp.get_pipe("elmo").listening_components == ["ner"]
    last = get_bilm(spacy.load(tmp_path / "out" / "model-last").get_pipe("elmo").model)
    original = BiLM.from_files(*bilm_files).to(last.device)
    same = all(torch.equal(a, b) for a, b in zip(last.parameters(), original.parameters()))
    assert same == freeze  # fine-tuning moved the biLM, a frozen one stayed as its files
