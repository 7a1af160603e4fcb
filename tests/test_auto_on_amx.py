"""``precision = "auto"`` on a CPU with AMX, on any machine: torch is made to report AMX's bf16 tiles.

There the two meanings of ``auto`` part: training's is the hardware rule (bf16), inference's the
measured decision; ``SPACY_ELMO_PRECISION`` decides both (fp32 in the suite, see tests/conftest.py). A store
must record the products its layers were computed with, the Ray engine must compute what the
local engine computes, and a pipeline set to fp32 must train in fp32 (issue 38).
"""

import json

import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.bilm import model as model_module
from spacy_elmo.bilm.precision import PRECISION_ENV, Products
from spacy_elmo.embed import EmbedSettings, ray_engine, run_embed
from spacy_elmo.embed.store import FeatureStore

from .helpers import assert_float32_close, build_ner_textcat, make_examples, record_own_precision

CPU = torch.device("cpu")


@pytest.fixture
def amx_cpu(monkeypatch) -> None:
    """This CPU as torch describes one with AMX: ``auto`` for training is bf16 here."""
    capabilities = {**torch.cpu.get_capabilities(), "amx_bf16": True, "amx_tile": True, "avx512_bf16": True}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    monkeypatch.delenv(PRECISION_ENV)  # the suite's fp32 (tests/conftest.py) would pin the rule too
    assert Products.resolve("auto", CPU, training=True).precision == "bf16"


@pytest.mark.parametrize("inference_auto", ["fp32", "bf16"])
def test_embed_records_and_ray_takes_what_inference_computes_on_a_cpu_with_amx(
    amx_cpu, bilm_files, tmp_path, monkeypatch, inference_auto
) -> None:
    monkeypatch.setenv(PRECISION_ENV, inference_auto)
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


def test_fine_tuning_trains_at_the_precision_set_on_a_cpu_with_amx(amx_cpu, bilm_files, monkeypatch) -> None:
    """fp32 set: float32 products; auto: the hardware rule's bf16, whatever inference's auto is."""
    entered = record_own_precision(monkeypatch, model_module)
    for setting, dtype in [("fp32", torch.float32), ("auto", torch.bfloat16)]:
        nlp = build_ner_textcat(bilm_files, freeze=False, precision=setting)
        entered.clear()
        nlp.update(make_examples(nlp, 2), sgd=nlp.create_optimizer())
        assert entered and {found for _, found in entered} == {dtype}, setting
