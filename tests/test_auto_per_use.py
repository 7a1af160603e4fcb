"""``precision = "auto"`` on a CPU where training's decision and inference's differ, as they may
(each is measured on its own pass: spacy_elmo.bilm.autotune): here faked, whatever this CPU is.

A store must record the products its layers were computed with (inference's), the Ray engine must
compute what the local engine computes, fine-tuning must train in training's decision, and a
pipeline set to fp32 must train in fp32 (issue 38).
"""

import json

import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.bilm import autotune
from spacy_elmo.bilm import model as model_module
from spacy_elmo.bilm.precision import PRECISION_ENV
from spacy_elmo.embed import EmbedSettings, ray_engine, run_embed
from spacy_elmo.embed.store import FeatureStore

from .helpers import assert_float32_close, build_ner_textcat, make_examples, record_own_precision


def decisions(monkeypatch, inference: str, training: str) -> None:
    """This CPU's measured decisions for every model, per use."""
    monkeypatch.delenv(PRECISION_ENV)  # the suite's fp32 (tests/conftest.py)

    def cpu_auto_precision(model: BiLM, in_training: bool = False) -> str:
        return training if in_training else inference

    monkeypatch.setattr(autotune, "cpu_auto_precision", cpu_auto_precision)


@pytest.mark.parametrize("inference_auto", ["fp32", "bf16"])
def test_embed_records_and_ray_takes_what_inference_computes(bilm_files, tmp_path, monkeypatch, inference_auto) -> None:
    decisions(monkeypatch, inference=inference_auto, training={"fp32": "bf16", "bf16": "fp32"}[inference_auto])
    products = {"fp32": "float32", "bf16": "bfloat16"}[inference_auto]
    (tmp_path / "in.txt").write_text("Hello there\nThe bank raised its rates .\n", encoding="utf8")
    run_embed(tmp_path / "in.txt", tmp_path / "local", EmbedSettings(), *bilm_files, progress=False)
    assert json.loads((tmp_path / "local" / "manifest.json").read_text())["model"]["products"] == products
    reader = BiLM.from_files(*bilm_files, precision=inference_auto)
    stored = FeatureStore(tmp_path / "local").get_many([("Hello", "there")], reader)[0]
    assert_float32_close(stored, reader.embed_sentences([["Hello", "there"]])[0])

    handed = []  # the settings the Ray engine would hand its CPU workers
    monkeypatch.setattr(ray_engine, "embed_on_ray", lambda *args, **kwargs: handed.append(args[3]))
    run_embed(tmp_path / "in.txt", tmp_path / "ray", EmbedSettings(), *bilm_files, engine="ray", progress=False)
    assert [settings.precision for settings in handed] == [inference_auto]
    assert json.loads((tmp_path / "ray" / "manifest.json").read_text())["model"]["products"] == products


def test_fine_tuning_trains_at_the_precision_set(bilm_files, monkeypatch) -> None:
    """fp32 set: float32 products; auto: training's decision (bf16 here), whatever inference's auto is."""
    decisions(monkeypatch, inference="int8", training="bf16")
    entered = record_own_precision(monkeypatch, model_module)
    for setting, dtype in [("fp32", torch.float32), ("auto", torch.bfloat16)]:
        nlp = build_ner_textcat(bilm_files, freeze=False, precision=setting)
        entered.clear()
        nlp.update(make_examples(nlp, 2), sgd=nlp.create_optimizer())
        assert entered and {found for _, found in entered} == {dtype}, setting
