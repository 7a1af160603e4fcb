import statistics
from pathlib import Path

import pytest
import srsly
from typer.testing import CliRunner

from .scripts import load_script

results = load_script("results")

NER_F1 = {"cnn": [0.40, 0.42, 0.44], "elmo": [0.50, 0.52, 0.57]}
TOPIC_ACC = {"cnn": [0.90, 0.92, 0.94], "elmo": [0.95, 0.96, 0.97]}


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    srsly.write_json(path, data)


def write_metrics(root: Path) -> None:
    for system in ("cnn", "elmo"):
        for seed in range(3):
            write_json(
                root / system / "ner" / f"seed{seed}.json",
                {
                    "system": system,
                    "task": "ner",
                    "seed": seed,
                    "metrics": {"f1": NER_F1[system][seed], "precision": 0.5, "recall": 0.5},
                    "per_label": {
                        "person": {"p": 0.6, "r": 0.6, "f": 0.6 + seed / 100},
                        "geo-loc": {"p": 0.3, "r": 0.3, "f": 0.3},
                    },
                },
            )
            write_json(
                root / system / "topics" / f"seed{seed}.json",
                {
                    "system": system,
                    "task": "topics",
                    "seed": seed,
                    "metrics": {"accuracy": TOPIC_ACC[system][seed], "macro_f1": 0.9, "macro_auc": 0.99},
                    "per_label": {"tech": {"p": 0.9, "r": 0.9, "f": 0.9}},
                },
            )


def write_logs(root: Path) -> None:
    for system in ("cnn", "elmo"):
        for seed in range(4):  # seed 3 has no metrics file: a stale run that must be ignored
            score = 0.9 if seed == 3 else 0.1 * (seed + 1)
            log = root / f"{system}-ner" / f"seed{seed}" / "log.jsonl"
            log.parent.mkdir(parents=True)
            srsly.write_jsonl(
                log,
                [
                    {"epoch": 0, "step": step, "losses": {}, "scores": {}, "score": score * step / 200}
                    for step in (0, 100, 200)
                ],
            )


def expected_cell(values) -> str:
    return f"{100 * statistics.fmean(values):.1f} ± {100 * statistics.stdev(values):.1f} (3)"


def test_table_has_mean_and_spread_per_system_and_task(tmp_path: Path) -> None:
    write_metrics(tmp_path)
    scores, ner_labels, runs = results.load_metrics(tmp_path)
    text = results.results_markdown(scores, ner_labels)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| System"))
    assert header == "| System | NER F1 | Topics acc. | Topics macro-F1 |"
    cnn = next(line for line in lines if line.startswith("| (a) CNN tok2vec"))
    elmo = next(line for line in lines if line.startswith("| (d) ELMo"))
    assert (
        cnn
        == f"| (a) CNN tok2vec | {expected_cell(NER_F1['cnn'])} | {expected_cell(TOPIC_ACC['cnn'])} | 90.0 ± 0.0 (3) |"
    )
    assert elmo.split(" | ")[1] == "53.0 ± 3.6 (3)"
    assert lines.index(cnn) < lines.index(elmo)
    assert "| person | 61.0 ± 1.0 (3) | 61.0 ± 1.0 (3) |" in lines
    assert len(runs) == 12


def test_learning_curves_average_only_evaluated_seeds(tmp_path: Path) -> None:
    write_metrics(tmp_path / "metrics")
    write_logs(tmp_path / "training")
    _, _, runs = results.load_metrics(tmp_path / "metrics")
    curves = results.read_curves(tmp_path / "training", runs)
    assert set(curves) == {("cnn", "ner"), ("elmo", "ner")}
    assert curves[("cnn", "ner")][200] == pytest.approx([0.1, 0.2, 0.3])  # not 0.9 of the stale seed 3


def test_cli_writes_table_and_plots(tmp_path: Path) -> None:
    write_metrics(tmp_path / "metrics")
    write_logs(tmp_path / "training")
    app = typer_app()
    out = tmp_path / "results"
    result = CliRunner().invoke(app, [str(tmp_path / "metrics"), str(out), "--runs-dir", str(tmp_path / "training")])
    assert result.exit_code == 0, result.output
    assert "| (d) ELMo | 53.0 ± 3.6 (3)" in result.output
    assert (out / "results.md").read_text(encoding="utf8") in result.output
    for name in ("results.png", "learning_curves.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_rejects_a_file_that_is_not_metrics(tmp_path: Path) -> None:
    write_json(tmp_path / "m" / "seed0.json", {"system": "cnn"})
    result = CliRunner().invoke(typer_app(), [str(tmp_path / "m"), str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "is not a metrics file" in result.output


def test_single_seed_has_no_spread() -> None:
    assert results.cell([0.5]) == "50.0 (1)"
    assert results.cell([0.5], count=False) == "50.0"
    assert results.cell(None) == "–"


def typer_app():
    import typer

    app = typer.Typer()
    app.command()(results.main)
    return app


def test_cross_validation_folds_stay_out_of_the_seed_table(tmp_path: Path) -> None:
    write_json(
        tmp_path / "m" / "cnn" / "ner" / "seed0.json",
        {"system": "cnn", "task": "ner", "seed": 0, "metrics": {"f1": 0.5}, "per_label": {}},
    )
    write_json(
        tmp_path / "m" / "cv" / "cnn" / "ner" / "fold0.json",
        {"system": "cnn", "task": "ner", "seed": 0, "metrics": {"f1": 0.9}},
    )
    scores, _, runs = results.load_metrics(tmp_path / "m")
    assert scores[("cnn", "ner", "f1")] == [0.5] and runs == {("cnn", "ner", 0)}


def test_caption_says_what_ran_and_warns_about_one_seed() -> None:
    one = results.caption({("cnn", "ner", "f1"): [0.4]}, [300])
    assert "at most 300 training steps" in one and "one seed per system" in one and "± sample sd" not in one
    many = results.caption({("cnn", "ner", "f1"): [0.4, 0.5]}, [2000])
    assert "one seed" not in many.lower() and "mean ± sample sd over seeds" in many


def test_one_seed_prints_scores_without_spread_and_s_beside_ner(tmp_path: Path) -> None:
    """The quick workflow's table: one seed each, (s) for text classification only."""
    for system, task, metric, value in [
        ("spacy", "topics", "accuracy", 0.95),
        ("cnn", "topics", "accuracy", 0.5),
        ("cnn", "ner", "f1", 0.3),
        ("elmo", "ner", "f1", 0.35),
    ]:
        write_json(
            tmp_path / system / task / "seed0.json",
            {
                "system": system,
                "task": task,
                "seed": 0,
                "metrics": {metric: value},
                "per_label": {"person": {"f": value}},
            },
        )
    scores, ner_labels, _ = results.load_metrics(tmp_path)
    lines = results.results_markdown(scores, ner_labels, [300]).splitlines()
    assert "one seed per system" in lines[0]
    assert "| (s) spaCy's efficiency config | 30.0 ¹ | 95.0 |" in lines  # (a)'s NER score, marked
    assert "¹ For NER, spaCy's efficiency config (s) is the CNN tok2vec (a): (s) shows (a)'s runs." in lines
    assert "| (a) CNN tok2vec | 30.0 | 50.0 |" in lines and "| (d) ELMo | 35.0 | – |" in lines
    assert "| person | 30.0 | 35.0 |" in lines
    assert not any("(1)" in line or "±" in line for line in lines[1:])


def test_a_system_has_one_colour_in_every_panel_and_s_has_an_ner_bar() -> None:
    """The NER panel lacks (s) and the topics panel has it: ELMo keeps its colour in both, and in the bars."""
    from matplotlib.colors import to_rgba
    from matplotlib.container import BarContainer

    curves = {
        ("cnn", "ner"): {100: [0.3]},
        ("elmo", "ner"): {100: [0.4]},
        ("spacy", "topics"): {100: [0.9]},
        ("cnn", "topics"): {100: [0.5]},
        ("elmo", "topics"): {100: [0.6]},
    }
    figure = results.curves_figure(curves)
    colours = {
        (ax.get_title(), line.get_label()): to_rgba(line.get_color()) for ax in figure.axes for line in ax.get_lines()
    }
    elmo = results.SYSTEMS["elmo"]
    assert colours[("ner", elmo)] == colours[("topics", elmo)]  # matplotlib's cycle gave orange, then green
    assert colours[("ner", elmo)] == to_rgba(results.colour("elmo"))
    assert len({colours[("topics", results.SYSTEMS[s])] for s in ("spacy", "cnn", "elmo")}) == 3

    scores = {
        ("spacy", "topics", "accuracy"): [0.9],
        ("cnn", "ner", "f1"): [0.3],
        ("cnn", "topics", "accuracy"): [0.5],
        ("elmo", "ner", "f1"): [0.4],
        ("elmo", "topics", "accuracy"): [0.6],
    }
    ax = results.bars_figure(scores).axes[0]
    bars = {
        container.get_label(): list(container) for container in ax.containers if isinstance(container, BarContainer)
    }
    spacy_bars = bars[results.SYSTEMS["spacy"]]
    assert [bar.get_height() for bar in spacy_bars] == pytest.approx([30.0, 90.0])  # NER: (a)'s runs
    assert spacy_bars[0].get_hatch() == "//" and not spacy_bars[1].get_hatch()
    assert all(bar.get_facecolor() == to_rgba(results.colour("elmo")) for bar in bars[elmo])
    assert results.colour("another") == results.colour("another") in results.EXTRA_COLOURS
