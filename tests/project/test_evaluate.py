from pathlib import Path

import pytest
import spacy
import srsly
import typer
from spacy.scorer import Scorer
from spacy.tokens import DocBin
from spacy.training import Example
from typer.testing import CliRunner

from .scripts import load_script

evaluate = load_script("evaluate")

TEXTS = [
    ("great fun film", "fresh"),
    ("dull and long", "rotten"),
    ("a joy", "fresh"),
    ("tedious mess", "rotten"),
    ("warm and funny", "fresh"),
    ("boring", "rotten"),
]


def app() -> typer.Typer:
    application = typer.Typer()
    application.command()(evaluate.main)
    return application


def textcat_setup(tmp_path: Path) -> Path:
    nlp = spacy.blank("en")
    nlp.add_pipe("textcat")
    examples = []
    for text, label in TEXTS:
        doc = nlp.make_doc(text)
        examples.append(
            Example.from_dict(doc, {"cats": {"fresh": float(label == "fresh"), "rotten": float(label == "rotten")}})
        )
    nlp.initialize(lambda: examples)
    (tmp_path / "runs" / "seed0").mkdir(parents=True)
    nlp.to_disk(tmp_path / "runs" / "seed0" / "model-last")  # no model-best: evaluation falls back
    DocBin(docs=[eg.reference for eg in examples]).to_disk(tmp_path / "test.spacy")
    return tmp_path / "runs"


def test_textcat_metrics_and_accuracy_from_predictions(tmp_path: Path) -> None:
    runs = textcat_setup(tmp_path)
    out = tmp_path / "metrics"
    out.mkdir()
    srsly.write_json(out / "seed7.json", {"stale": True})
    result = CliRunner().invoke(
        app(), [str(runs), str(tmp_path / "test.spacy"), str(out), "--system", "cnn", "--task", "sentiment"]
    )
    assert result.exit_code == 0, result.output
    assert not (out / "seed7.json").exists()
    data = srsly.read_json(out / "seed0.json")
    assert (data["system"], data["task"], data["seed"], data["n_docs"]) == ("cnn", "sentiment", 0, 6)
    assert data["model"].endswith("model-last")
    assert set(data["metrics"]) == {"accuracy", "macro_f1", "macro_auc"}
    assert set(data["per_label"]) == {"fresh", "rotten"}
    nlp = spacy.load(runs / "seed0" / "model-last")
    predicted = [max(doc.cats, key=doc.cats.get) for doc in nlp.pipe(text for text, _ in TEXTS)]
    expected = sum(p == gold for p, (_, gold) in zip(predicted, TEXTS)) / len(TEXTS)
    assert data["metrics"]["accuracy"] == pytest.approx(expected)


def test_ner_metrics(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("ner")
    doc = nlp.make_doc("Bob lives in Paris")
    examples = [Example.from_dict(doc, {"entities": [(0, 3, "person"), (13, 18, "geo-loc")]})]
    nlp.initialize(lambda: examples)
    (tmp_path / "runs" / "seed1").mkdir(parents=True)
    nlp.to_disk(tmp_path / "runs" / "seed1" / "model-best")
    DocBin(docs=[examples[0].reference]).to_disk(tmp_path / "test.spacy")
    result = CliRunner().invoke(
        app(),
        [
            str(tmp_path / "runs"),
            str(tmp_path / "test.spacy"),
            str(tmp_path / "m"),
            "--system",
            "cnn",
            "--task",
            "ner",
            "--seeds",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    data = srsly.read_json(tmp_path / "m" / "seed1.json")
    assert set(data["metrics"]) == {"f1", "precision", "recall"}
    assert all(0.0 <= v <= 1.0 for v in data["metrics"].values())


def test_accuracy_is_argmax_agreement() -> None:
    nlp = spacy.blank("en")
    examples = []
    for pred, gold in [({"a": 0.7, "b": 0.3}, {"a": 1.0, "b": 0.0}), ({"a": 0.4, "b": 0.6}, {"a": 1.0, "b": 0.0})]:
        eg = Example.from_dict(nlp.make_doc("x"), {"cats": gold})
        eg.predicted.cats = pred
        examples.append(eg)
    assert evaluate.argmax_accuracy(examples) == 0.5


def test_missing_pipeline_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "seed0").mkdir()
    with pytest.raises(FileNotFoundError, match="no model-best or model-last"):
        evaluate.find_model(tmp_path / "seed0")


def test_entity_items_sum_to_spacys_micro_f1() -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("ner")
    cases = [  # (text, gold, predicted) entity offsets
        (
            "Bob met Ann in Paris",
            [(0, 3, "person"), (8, 11, "person"), (15, 20, "geo-loc")],
            [(0, 3, "person"), (15, 20, "person")],
        ),
        ("nothing here", [], [(0, 7, "product")]),
        ("Ann again", [(0, 3, "person")], []),
        ("no entities", [], []),
    ]
    examples = []
    for text, gold, predicted in cases:
        eg = Example.from_dict(nlp.make_doc(text), {"entities": gold})
        eg.predicted.ents = [eg.predicted.char_span(s, e, label=label) for s, e, label in predicted]
        examples.append(eg)
    items = evaluate.entity_items(examples)
    assert items == [[2, 5], [0, 1], [0, 1], [0, 0]]
    assert sum(n for n, _ in items) / sum(d for _, d in items) == pytest.approx(Scorer(nlp).score(examples)["ents_f"])
