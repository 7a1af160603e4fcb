"""`spacy train`, `spacy init fill-config` and `spacy debug config` on the shipped example configs."""

import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import spacy
import torch
from spacy.cli.debug_config import debug_config
from spacy.cli.init_config import fill_config
from spacy.cli.train import train
from spacy.tokens import DocBin

import spacy_elmo
from spacy_elmo import BiLM
from spacy_elmo.layers import get_bilm

from .conftest import WIDTH, make_examples

CONFIGS = Path(spacy_elmo.__file__).parent / "configs"
TINY = {
    "components.elmo.model.lstm_dim": 24,
    "components.elmo.model.projection_dim": 8,
    "components.elmo.model.filters": [[1, 4], [2, 8], [3, 8]],
    "training.max_steps": 6,
    "training.eval_frequency": 3,
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("corpus")
    nlp = spacy.blank("en")
    for name, n in (("train", 12), ("dev", 4)):
        DocBin(docs=[eg.reference for eg in make_examples(nlp, n)]).to_disk(directory / f"{name}.spacy")
    return directory


def overrides_for(config: str, corpus: Path, **extra: object) -> dict:
    listeners = {f"components.{c}.model.tok2vec.width": WIDTH for c in ("ner", "textcat") if c in config}
    paths = {"paths.train": str(corpus / "train.spacy"), "paths.dev": str(corpus / "dev.spacy")}
    return {**paths, **TINY, **listeners, **extra}


def check_trained(path: Path, config: str) -> None:
    nlp = spacy.load(path)
    doc = nlp("Alice went home . It was great .")
    assert doc.tensor.shape == (8, WIDTH)
    assert nlp.get_pipe("elmo").listening_components == [c for c in ("ner", "textcat") if c in config]
    if "textcat" in config:
        assert set(doc.cats) == {"POS", "NEG"}


@pytest.mark.parametrize("config", ["ner_elmo.cfg", "textcat_elmo.cfg", "ner_textcat_elmo.cfg"])
def test_example_configs_fill_debug_and_train(config: str, corpus: Path, bilm_files, tmp_path: Path) -> None:
    fill_config(tmp_path / "filled.cfg", CONFIGS / config, silent=True)
    debug_config(CONFIGS / config, overrides=overrides_for(config, corpus))
    files = {"paths.elmo_options": str(bilm_files[0]), "paths.elmo_weights": str(bilm_files[1])}
    train(tmp_path / "filled.cfg", tmp_path / "out", overrides=overrides_for(config, corpus, **files))
    check_trained(tmp_path / "out" / "model-last", config)


def test_spacy_train_command_finds_everything_through_entry_points(corpus: Path, bilm_files, tmp_path: Path) -> None:
    """A fresh interpreter that never imports spacy_elmo itself: the entry points must do it."""
    config = "ner_textcat_elmo.cfg"
    files = {"paths.elmo_options": str(bilm_files[0]), "paths.elmo_weights": str(bilm_files[1])}
    args = [arg for key, value in overrides_for(config, corpus, **files).items() for arg in (f"--{key}", str(value))]
    result = subprocess.run(
        [sys.executable, "-m", "spacy", "train", str(CONFIGS / config), "--output", str(tmp_path / "out"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    check_trained(tmp_path / "out" / "model-last", config)


def test_spacy_train_fine_tunes_with_freeze_false(corpus: Path, bilm_files, tmp_path: Path) -> None:
    files = {"paths.elmo_options": str(bilm_files[0]), "paths.elmo_weights": str(bilm_files[1])}
    overrides = overrides_for("textcat_elmo.cfg", corpus, **files, **{"components.elmo.model.freeze": False})
    train(CONFIGS / "textcat_elmo.cfg", tmp_path / "out", overrides=overrides)
    nlp = spacy.load(tmp_path / "out" / "model-last")
    assert nlp.get_pipe("elmo").model.attrs["freeze"] is False
    tuned = get_bilm(nlp.get_pipe("elmo").model)
    original = BiLM.from_files(*bilm_files)
    assert any(not torch.equal(a, b) for a, b in zip(tuned.parameters(), original.parameters()))  # it did train
    assert numpy.isfinite(nlp("It was great .").tensor).all()
