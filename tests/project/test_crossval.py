from pathlib import Path

import pytest
import spacy
import srsly
import typer
from spacy.tokens import DocBin
from typer.testing import CliRunner

from ..helpers import WIDTH, write_bilm_files
from .helpers import crossval_app as app
from .helpers import write_ner_corpus as write_corpus
from .scripts import PROJECT_DIR, load_script

crossval = load_script("crossval")


def test_deal_folds_keeps_groups_and_balances() -> None:
    groups = [[0, 5], [1], [2], [3, 4, 6], [7], [8], [9]]
    folds = crossval.deal_folds(groups, k=3, seed=0)
    assert sorted(i for fold in folds for i in fold) == list(range(10))
    for group in groups:
        assert sum(set(group) <= set(fold) for fold in folds) == 1
    assert max(map(len, folds)) - min(map(len, folds)) <= 2  # at most the largest group's size - 1
    assert crossval.deal_folds(groups, k=3, seed=0) == folds
    with pytest.raises(ValueError, match="at least 3 folds"):
        crossval.deal_folds(groups, k=2, seed=0)


def test_fold_roles_rotate_dev_and_test() -> None:
    assert crossval.fold_roles(4, 3) == {"test": [3], "dev": [0], "train": [1, 2]}
    tests = [crossval.fold_roles(4, f)["test"][0] for f in range(4)]
    devs = [crossval.fold_roles(4, f)["dev"][0] for f in range(4)]
    assert sorted(tests) == sorted(devs) == [0, 1, 2, 3]


def test_split_tests_every_document_once(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path)
    result = CliRunner().invoke(app(), ["split", str(corpus), str(tmp_path / "cv"), "--k", "3"])
    assert result.exit_code == 0, result.output
    nlp = spacy.blank("en")
    tested = []
    for fold in range(3):
        parts = {
            role: [
                d.text
                for d in DocBin().from_disk(tmp_path / "cv" / f"fold{fold}" / f"{role}.spacy").get_docs(nlp.vocab)
            ]
            for role in ("train", "dev", "test")
        }
        assert len(set(parts["train"]) | set(parts["dev"]) | set(parts["test"])) == 13
        assert not set(parts["train"]) & set(parts["test"]) and not set(parts["dev"]) & set(parts["test"])
        tested += parts["test"]
    assert sorted(tested) == sorted(set(tested)) and len(tested) == 13
    pooled = [d.text for d in DocBin().from_disk(tmp_path / "cv" / "all.spacy").get_docs(nlp.vocab)]
    assert sorted(pooled) == sorted(tested)  # one file for `spacy-elmo embed` to serve every fold
    folds = srsly.read_json(tmp_path / "cv" / "folds.json")["folds"]
    assert any({0, 12} <= set(fold) for fold in folds)  # the near-duplicate pair stays together


def test_run_trains_scores_and_resumes(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path)
    assert CliRunner().invoke(app(), ["split", str(corpus), str(tmp_path / "cv"), "--k", "3"]).exit_code == 0
    args = [
        "run",
        str(PROJECT_DIR / "configs" / "ner_cnn.cfg"),
        str(tmp_path / "cv"),
        str(tmp_path / "runs"),
        str(tmp_path / "metrics"),
        "--system",
        "cnn",
        "--task",
        "ner",
        "--folds",
        "1",
        "--max-steps",
        "4",
        "--eval-frequency",
        "2",
        "--training.patience",
        "0",
    ]
    result = CliRunner().invoke(app(), args)
    assert result.exit_code == 0, result.output
    data = srsly.read_json(tmp_path / "metrics" / "fold1.json")
    assert (data["system"], data["task"], data["fold"]) == ("cnn", "ner", 1)
    assert len(data["items"]) == data["n_docs"] and 0.0 <= data["dev_score"] <= 1.0
    assert [step for step, _ in data["dev_curve"]] == [0, 2, 4]
    assert max(score for _, score in data["dev_curve"]) == pytest.approx(data["dev_score"])
    assert (tmp_path / "runs" / "fold1" / "model-best").is_dir() and not (
        tmp_path / "runs" / "fold1" / "model-last"
    ).exists()
    again = CliRunner().invoke(app(), args)
    assert again.exit_code == 0 and "done" in again.output
    wrong = CliRunner().invoke(app(), [arg if arg != "1" else "3" for arg in args])
    assert wrong.exit_code != 0 and "0..2" in wrong.output


def test_finetune_gives_each_fold_its_own_biLM_and_run_uses_it(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path)
    assert CliRunner().invoke(app(), ["split", str(corpus), str(tmp_path / "cv"), "--k", "3"]).exit_code == 0
    start = tmp_path / "bilm"
    write_bilm_files(start)
    crossval.finetune(tmp_path / "cv", start, tmp_path / "tuned", steps=2, init_tokens_weight=0.0, folds="1", threads=1)
    tuned = tmp_path / "tuned" / "fold1"
    assert (tuned / "features" / "manifest.json").exists() and not (tmp_path / "tuned" / "fold0").exists()
    assert (tuned / "weights.hdf5").read_bytes() != (start / "weights.hdf5").read_bytes()
    width = str(WIDTH)
    args = [
        "run",
        str(PROJECT_DIR.parent / "spacy_elmo" / "configs" / "ner_elmo.cfg"),
        str(tmp_path / "cv"),
        str(tmp_path / "runs"),
        str(tmp_path / "metrics"),
        "--system",
        "tuned",
        "--task",
        "ner",
        "--max-steps",
        "2",
        "--eval-frequency",
        "1",
        "--training.patience",
        "0",
        "--components.ner.model.tok2vec.width",
        width,
        "--bilm-per-fold",
        str(tmp_path / "tuned"),
    ]
    result = CliRunner().invoke(app(), [*args, "--folds", "1"])
    assert result.exit_code == 0, result.output
    trained = spacy.util.load_config(tmp_path / "runs" / "fold1" / "model-best" / "config.cfg")
    assert trained["components"]["elmo"]["features"] == str(tuned / "features")
    with pytest.raises(
        typer.BadParameter, match="lacks options.json, weights.hdf5, features/manifest.json: run `crossval.py finetune`"
    ):
        crossval.fold_bilm_overrides(tmp_path / "tuned" / "fold0")
