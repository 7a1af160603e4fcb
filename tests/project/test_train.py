from pathlib import Path

import pytest
import spacy
import srsly
import typer
from spacy.util import load_config
from typer.testing import CliRunner

from .helpers import tiny_corpus
from .scripts import PROJECT_DIR, load_script

train = load_script("train")
CONFIGS = PROJECT_DIR / "configs"


def test_parse_seeds() -> None:
    assert train.parse_seeds("0,1, 2") == [0, 1, 2]
    assert train.parse_seeds("5") == [5]
    with pytest.raises(typer.BadParameter):
        train.parse_seeds("0,x")
    with pytest.raises(typer.BadParameter):
        train.parse_seeds(" ")


def test_overrides_only_set_what_was_given(tmp_path: Path) -> None:
    base = train.run_overrides(tmp_path, 3, tmp_path / "log.jsonl", 0, 0, None, None)
    assert base == {
        "paths.train": str(tmp_path / "train.spacy"),
        "paths.dev": str(tmp_path / "dev.spacy"),
        "paths.log": str(tmp_path / "log.jsonl"),
        "system.seed": 3,
    }
    assert "paths.log" not in train.run_overrides(tmp_path, 3, None, 0, 0, None, None)  # config without paths.log
    full = train.run_overrides(tmp_path, 3, tmp_path / "log.jsonl", 20, 10, Path("v"), Path("w.bin"))
    assert (full["training.max_steps"], full["training.eval_frequency"]) == (20, 10)
    assert (full["paths.vectors"], full["paths.init_tok2vec"]) == ("v", "w.bin")


def test_systems_differ_only_where_they_should() -> None:
    for kind in ("ner", "textcat"):
        cnn = load_config(CONFIGS / f"{kind}_cnn.cfg")
        vectors = load_config(CONFIGS / f"{kind}_vectors.cfg")
        pretrain = load_config(CONFIGS / f"{kind}_pretrain.cfg")
        assert vectors["components"]["tok2vec"]["model"]["embed"]["include_static_vectors"] is True
        assert cnn["components"]["tok2vec"]["model"]["embed"]["include_static_vectors"] is False
        vectors["components"]["tok2vec"]["model"]["embed"]["include_static_vectors"] = False
        assert vectors["components"] == cnn["components"] == pretrain["components"]
        assert vectors["training"] == cnn["training"] == pretrain["training"]
    # the pretrained weights fit: spacy pretrain's tok2vec is the one the pretrain configs train
    tok2vec = load_config(CONFIGS / "pretrain_tok2vec.cfg")
    assert tok2vec["components"]["tok2vec"] == load_config(CONFIGS / "ner_pretrain.cfg")["components"]["tok2vec"]
    assert (
        tok2vec["pretraining"]["component"] == load_config(CONFIGS / "textcat_pretrain.cfg")["pretraining"]["component"]
    )
    textcat = load_config(CONFIGS / "textcat_cnn.cfg")["components"]["textcat"]
    assert textcat["factory"] == "textcat" and textcat["model"]["exclusive_classes"] is True


def test_elmo_textcat_is_spacys_bag_of_words_plus_elmo() -> None:
    """(d) is (s) with ELMo added to its scores, (e) is (d) with word2vec beside the ELMo mix."""
    spacy_own = load_config(CONFIGS / "textcat_spacy.cfg")
    elmo = load_config(CONFIGS.parent.parent / "spacy_elmo" / "configs" / "textcat_elmo.cfg")
    elmo_vectors = load_config(CONFIGS / "textcat_elmo_vectors.cfg")
    bow = spacy_own["components"]["textcat"]["model"]
    model = elmo["components"]["textcat"]["model"]
    assert model["@architectures"] == "spacy_elmo.ElmoBOWTextCat.v1"
    for setting in ("exclusive_classes", "ngram_size", "length"):
        assert model[setting] == bow[setting]
    for section in ("optimizer", "batcher", "max_steps", "patience", "dropout"):
        assert elmo["training"][section] == spacy_own["training"][section] == elmo_vectors["training"][section]
    with_vectors = elmo_vectors["components"]["textcat"]["model"]
    assert "embed" in with_vectors["tok2vec"] and "embed" not in model["tok2vec"]
    del with_vectors["tok2vec"]["embed"]
    assert with_vectors == model


@pytest.mark.parametrize("kind", ["ner", "textcat"])
def test_cnn_config_trains_and_logs(tmp_path: Path, kind: str) -> None:
    tiny_corpus(tmp_path / "corpus", kind)
    out = tmp_path / "runs"
    (out / "seed4").mkdir(parents=True)
    (out / "seed4" / "log.jsonl").write_text("stale\n")
    result = CliRunner().invoke(
        train.app,
        [
            str(CONFIGS / f"{kind}_cnn.cfg"),
            str(out),
            "--corpus",
            str(tmp_path / "corpus"),
            "--seeds",
            "4",
            "--max-steps",
            "4",
            "--eval-frequency",
            "2",
            "--training.batcher.size.start",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (out / "seed4" / "model-best" / "config.cfg").exists()
    log = list(srsly.read_jsonl(out / "seed4" / "log.jsonl"))
    assert [record["step"] for record in log] == [0, 2, 4]
    assert spacy.load(out / "seed4" / "model-last").config["system"]["seed"] == 4
