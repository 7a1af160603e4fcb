"""``precision = "auto"`` on a CPU where training's decision and inference's differ, as they may
(each is measured on its own pass: spacy_elmo.bilm.precision.autotune): here faked, whatever this CPU is.

A store must record the products its layers were computed with (inference's), the Ray engine must
compute what the local engine computes, fine-tuning must train in training's decision, and a
pipeline set to fp32 must train in fp32 (issue 38). A frozen biLM runs inference alone: its feature
cache and a store it reads key on inference's products, and training's decision is never made
(issue 45).
"""

import json
from pathlib import Path
from typing import List

import pytest
import torch
from spacy.cli.train import train

from spacy_elmo import BiLM
from spacy_elmo.bilm import runtime as runtime_module
from spacy_elmo.bilm.precision import autotune
from spacy_elmo.bilm.runtime import BiLMRuntime
from spacy_elmo.bilm.settings import PRECISION_ENV
from spacy_elmo.embed import EmbedSettings, ray_engine, run_embed
from spacy_elmo.embed.store import FeatureStore

from .helpers import CONFIGS, assert_float32_close, build_ner_textcat, make_examples, record_own_precision
from .pipeline.helpers import overrides_for


def decisions(monkeypatch, inference: str, training: str) -> List[str]:
    """This CPU's measured decisions for every model, per use; returns the uses asked for, in order."""
    monkeypatch.delenv(PRECISION_ENV)  # the suite's fp32 (tests/conftest.py)
    asked: List[str] = []

    def cpu_auto_precision(runtime: BiLMRuntime, in_training: bool = False) -> str:
        asked.append(autotune.PASSES[in_training])
        return training if in_training else inference

    monkeypatch.setattr(autotune, "cpu_auto_precision", cpu_auto_precision)
    return asked


@pytest.mark.parametrize("inference_auto", ["fp32", "bf16"])
def test_embed_records_and_ray_takes_what_inference_computes(bilm_files, tmp_path, monkeypatch, inference_auto) -> None:
    decisions(monkeypatch, inference=inference_auto, training={"fp32": "bf16", "bf16": "fp32"}[inference_auto])
    products = {"fp32": "float32", "bf16": "bfloat16"}[inference_auto]
    (tmp_path / "in.txt").write_text("Hello there\nThe bank raised its rates .\n", encoding="utf8")
    run_embed(tmp_path / "in.txt", tmp_path / "local", EmbedSettings(), *bilm_files, progress=False)
    assert json.loads((tmp_path / "local" / "manifest.json").read_text())["model"]["products"] == products
    reader = BiLM.from_files(*bilm_files, precision=inference_auto)
    stored = FeatureStore(tmp_path / "local").get_many([("Hello", "there")], reader.runtime)[0]
    assert_float32_close(stored, reader.embed_sentences([["Hello", "there"]])[0])

    handed = []  # the settings the Ray engine would hand its CPU workers
    monkeypatch.setattr(ray_engine, "embed_on_ray", lambda *args, **kwargs: handed.append(args[3]))
    run_embed(tmp_path / "in.txt", tmp_path / "ray", EmbedSettings(), *bilm_files, engine="ray", progress=False)
    assert [settings.precision for settings in handed] == [inference_auto]
    assert json.loads((tmp_path / "ray" / "manifest.json").read_text())["model"]["products"] == products


def test_fine_tuning_trains_at_the_precision_set(bilm_files, monkeypatch) -> None:
    """fp32 set: float32 products; auto: training's decision (bf16 here), whatever inference's auto is."""
    decisions(monkeypatch, inference="int8", training="bf16")
    entered = record_own_precision(monkeypatch, runtime_module)
    for setting, dtype in [("fp32", torch.float32), ("auto", torch.bfloat16)]:
        nlp = build_ner_textcat(bilm_files, freeze=False, precision=setting)
        entered.clear()
        nlp.update(make_examples(nlp, 2), sgd=nlp.create_optimizer())
        assert entered and {found for _, found in entered} == {dtype}, setting


def test_a_frozen_biLM_keys_its_feature_cache_on_the_products_that_computed_it(bilm_files, monkeypatch) -> None:
    """The cached layers come from inference's products (bf16 here): the cache's fingerprint names
    them, although training calls it with gradients on, and training's decision is never asked for."""
    asked = decisions(monkeypatch, inference="bf16", training="fp32")
    nlp = build_ner_textcat(bilm_files, precision="auto")
    examples, optimizer = make_examples(nlp, 2), nlp.create_optimizer()
    for _ in range(2):
        nlp.update(examples, sgd=optimizer)
    cache = nlp.get_pipe("elmo").model.attrs["feature_cache"]
    assert len(cache) == 2 and cache._fingerprint[0] == torch.bfloat16
    assert set(asked) == {"inference"}


def test_a_store_is_checked_against_inference_products_with_gradients_on(bilm_files, tmp_path, monkeypatch) -> None:
    asked = decisions(monkeypatch, inference="bf16", training="fp32")
    (tmp_path / "in.txt").write_text("Hello there\n", encoding="utf8")
    run_embed(tmp_path / "in.txt", tmp_path / "store", EmbedSettings(), *bilm_files, progress=False)
    asked.clear()
    frozen = BiLM.from_files(*bilm_files, precision="auto")  # parameters that require gradients, as in training
    with torch.enable_grad():
        (stored,) = FeatureStore(tmp_path / "store").get_many([("Hello", "there")], frozen.runtime)
    assert stored is not None and set(asked) == {"inference"}


@pytest.mark.slow
def test_frozen_spacy_train_decides_inference_alone(corpus: Path, bilm_files, tmp_path, monkeypatch) -> None:
    """``spacy train`` of the shipped textcat config (frozen biLM), with auto measured (the tiny biLM's
    measurement faked): the decision cache holds inference's decision, no training pass."""
    monkeypatch.delenv(PRECISION_ENV)
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))

    def measure(passes, precisions, n_tokens, clock):
        return {precision: autotune.Trial(100.0 if precision == "fp32" else 50.0, 1.0) for precision in precisions}

    # every runtime's default, the one spacy train makes included
    monkeypatch.setattr(runtime_module.BiLMRuntime, "tuning", autotune.Tuning(measure=measure, min_measured_flops=0))
    files = {"paths.elmo_options": str(bilm_files[0]), "paths.elmo_weights": str(bilm_files[1])}
    train(CONFIGS / "textcat_elmo.cfg", tmp_path / "out", overrides=overrides_for("textcat_elmo.cfg", corpus, **files))
    entries = json.loads(autotune.decisions_path().read_text()).values()
    assert [entry["fields"]["pass"] for entry in entries] == ["inference"]
