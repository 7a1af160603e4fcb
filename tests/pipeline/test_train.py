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

from spacy_elmo import BiLM
from spacy_elmo.layers import get_bilm

from ..helpers import CONFIGS, WIDTH
from .helpers import overrides_for

pytestmark = pytest.mark.slow  # every test here is a spacy train run


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
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
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
