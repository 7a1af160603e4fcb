from pathlib import Path
from typing import List

import numpy
import pytest
import srsly
import typer
from typer.testing import CliRunner

from .scripts import load_script

compare = load_script("compare")


def write_units(directory: Path, unit: str, items_per_unit: List[List[List[int]]]) -> Path:
    directory.mkdir(parents=True)
    for number, items in enumerate(items_per_unit):
        srsly.write_json(directory / f"{unit}{number}.json", {"items": items})
    return directory


def accuracy_items(rng: numpy.random.Generator, n_docs: int, accuracy: float) -> List[List[int]]:
    return [[int(rng.random() < accuracy), 1] for _ in range(n_docs)]


def test_folds_pool_and_seeds_sum(tmp_path: Path) -> None:
    folds = compare.load_runs("a", [write_units(tmp_path / "f", "fold", [[[2, 4], [0, 2]], [[1, 1]]])])
    assert folds.unit == "fold" and folds.docs == {0: 2, 1: 1}
    assert folds.scores == {0: pytest.approx(2 / 6), 1: 1.0}
    assert folds.pooled == pytest.approx(3 / 7)  # micro over all documents, not the mean of folds
    seeds = compare.load_runs("b", [write_units(tmp_path / "s", "seed", [[[1, 1], [0, 1]], [[1, 1], [1, 1]]])])
    assert seeds.numerators.tolist() == [2, 1] and seeds.denominators.tolist() == [2, 2]
    assert seeds.pooled == 0.75


def test_bootstrap_ci_covers_a_real_difference_and_pins_a_null_one(tmp_path: Path) -> None:
    rng = numpy.random.default_rng(1)
    base = [accuracy_items(rng, 400, 0.6) for _ in range(5)]
    better = [accuracy_items(rng, 400, 0.75) for _ in range(5)]
    baseline = compare.load_runs("base", [write_units(tmp_path / "base", "fold", base)])
    system = compare.load_runs("sys", [write_units(tmp_path / "sys", "fold", better)])
    result = compare.compare(system, baseline, n_boot=2000, seed=0)
    low, high = result["ci95"]
    assert 0.0 < low < 0.15 < high  # true difference 0.15, well away from 0
    assert result["difference"] == pytest.approx(system.pooled - baseline.pooled)
    assert result["wins"] == 5 and result["p_not_better"] < 0.01
    itself = compare.compare(baseline, baseline, n_boot=200, seed=0)
    assert itself["difference"] == 0.0 and itself["ci95"] == [0.0, 0.0] and itself["wins"] == 0
    again = compare.compare(system, baseline, n_boot=2000, seed=0)
    assert again["ci95"] == result["ci95"]  # fixed seed: reproducible


def test_unpaired_runs_are_refused(tmp_path: Path) -> None:
    a = compare.load_runs("a", [write_units(tmp_path / "a", "fold", [[[1, 1]], [[1, 1]]])])
    b = compare.load_runs("b", [write_units(tmp_path / "b", "fold", [[[1, 1]], [[1, 1], [0, 1]]])])
    with pytest.raises(ValueError, match="not paired"):
        compare.compare(a, b, n_boot=10, seed=0)


def test_files_without_items_or_mixed_units_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    srsly.write_json(tmp_path / "old" / "seed0.json", {"metrics": {"f1": 0.5}})
    with pytest.raises(ValueError, match="no per-document items"):
        compare.load_runs("old", [tmp_path / "old"])
    write_units(tmp_path / "mixed", "fold", [[[1, 1]]])
    srsly.write_json(tmp_path / "mixed" / "seed0.json", {"items": [[1, 1]]})
    with pytest.raises(ValueError, match="both fold and seed"):
        compare.load_runs("mixed", [tmp_path / "mixed"])


def test_cli_writes_table_and_json(tmp_path: Path) -> None:
    rng = numpy.random.default_rng(2)
    write_units(tmp_path / "cnn", "seed", [accuracy_items(rng, 50, 0.5) for _ in range(3)])
    write_units(tmp_path / "elmo", "seed", [accuracy_items(rng, 50, 0.7) for _ in range(3)])
    app = typer.Typer()
    app.command()(compare.main)
    out = tmp_path / "results" / "sentiment"
    result = CliRunner().invoke(
        app,
        [
            str(out),
            "--system",
            f"cnn={tmp_path / 'cnn'}",
            "--system",
            f"elmo={tmp_path / 'elmo'}",
            "--baseline",
            "cnn",
            "--n-boot",
            "500",
        ],
    )
    assert result.exit_code == 0, result.output
    table = out.with_suffix(".md").read_text()
    assert "| elmo |" in table and "vs cnn" in table and "3 seeds" in table
    data = srsly.read_json(out.with_suffix(".json"))
    assert data["systems"]["cnn"]["comparisons"] == []
    assert data["systems"]["elmo"]["comparisons"][0]["baseline"] == "cnn"
    bad = CliRunner().invoke(app, [str(out), "--system", f"cnn={tmp_path / 'cnn'}", "--baseline", "w2v"])
    assert bad.exit_code != 0 and "not among the systems" in bad.output


def test_seeds_of_a_cross_validation_sum_per_document(tmp_path: Path) -> None:
    seed0 = write_units(tmp_path / "s0", "fold", [[[2, 4], [0, 2]], [[1, 1]]])
    seed1 = write_units(tmp_path / "s1", "fold", [[[4, 4], [1, 2]], [[0, 1]]])
    runs = compare.load_runs("a", [seed0, seed1])
    assert runs.unit == "fold" and runs.docs == {0: 2, 1: 1}
    assert runs.numerators.tolist() == [6, 1, 1] and runs.denominators.tolist() == [8, 4, 2]
    assert runs.scores == {0: pytest.approx(7 / 12), 1: 0.5}
    assert runs.pooled == pytest.approx(8 / 14)
    other_folds = write_units(tmp_path / "s2", "fold", [[[1, 1]], [[1, 1], [1, 1]]])
    with pytest.raises(ValueError, match="differ"):
        compare.load_runs("b", [seed0, other_folds])
    seeds = write_units(tmp_path / "seeds", "seed", [[[1, 1], [0, 1]], [[1, 1], [1, 1]]])
    with pytest.raises(ValueError, match="seed files"):
        compare.load_runs("c", [seed0, seeds])


def test_the_cli_takes_comma_separated_seeds_of_a_system(tmp_path: Path) -> None:
    base = write_units(tmp_path / "base", "fold", [[[0, 1], [0, 1]], [[0, 1]]])
    seed0 = write_units(tmp_path / "s0", "fold", [[[1, 1], [1, 1]], [[1, 1]]])
    seed1 = write_units(tmp_path / "s1", "fold", [[[1, 1], [0, 1]], [[1, 1]]])
    app = typer.Typer()
    app.command()(compare.main)
    result = CliRunner().invoke(
        app,
        [
            str(tmp_path / "out"),
            "--system",
            f"base={base}",
            "--system",
            f"two seeds={seed0},{seed1}",
            "--baseline",
            "base",
            "--n-boot",
            "50",
        ],
    )
    assert result.exit_code == 0, result.output
    data = srsly.read_json(tmp_path / "out.json")["systems"]["two seeds"]
    assert data["summary"]["pooled"] == pytest.approx(5 / 6)
    assert data["comparisons"][0]["difference"] == pytest.approx(5 / 6)


def test_the_dev_scores_that_chose_the_models_sit_beside_the_test_scores(tmp_path: Path) -> None:
    def folds_with_dev(name: str, devs: List[float]) -> Path:
        directory = write_units(tmp_path / name, "fold", [[[1, 2]] for _ in devs])
        for number, dev in enumerate(devs):
            data = srsly.read_json(directory / f"fold{number}.json")
            srsly.write_json(directory / f"fold{number}.json", {**data, "dev_score": dev})
        return directory

    seed0, seed1 = folds_with_dev("s0", [0.40, 0.50]), folds_with_dev("s1", [0.30, 0.60])
    assert compare.load_runs("two seeds", [seed0, seed1]).dev == {0: pytest.approx(0.35), 1: pytest.approx(0.55)}
    no_dev = write_units(tmp_path / "old", "fold", [[[1, 2]], [[1, 2]]])
    app = typer.Typer()
    app.command()(compare.main)
    result = CliRunner().invoke(
        app,
        [
            str(tmp_path / "out"),
            "--system",
            f"old={no_dev}",
            "--system",
            f"new={seed0},{seed1}",
            "--baseline",
            "old",
            "--n-boot",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| dev, mean |" in result.output and "| new | 50.0 | 50.0 ± 0.0 | 45.0 |" in result.output
    assert "| old | 50.0 | 50.0 ± 0.0 |  |" in result.output
    systems = srsly.read_json(tmp_path / "out.json")["systems"]
    assert (
        systems["new"]["summary"]["dev_mean"] == pytest.approx(0.45) and systems["old"]["summary"]["dev_mean"] is None
    )


def test_one_seed_is_printed_as_one_seed(tmp_path: Path) -> None:
    """No spread, no wins of one, no "1 seeds": the score, the difference and its CI."""
    rng = numpy.random.default_rng(3)
    write_units(tmp_path / "spacy", "seed", [accuracy_items(rng, 200, 0.9)])
    write_units(tmp_path / "elmo", "seed", [accuracy_items(rng, 200, 0.9)])
    app = typer.Typer()
    app.command()(compare.main)
    result = CliRunner().invoke(
        app,
        [
            str(tmp_path / "quick"),
            "--system",
            f"(s) spaCy={tmp_path / 'spacy'}",
            "--system",
            f"(d) ELMo={tmp_path / 'elmo'}",
            "--baseline",
            "(s) spaCy",
            "--n-boot",
            "200",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| system | score, one seed | vs (s) spaCy: diff [95% CI] |" in result.output
    assert "one seed, 200 test documents" in result.output
    assert "±" not in result.output and "1 seeds" not in result.output and "/1" not in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("| (d) ELMo |"))
    assert row.count("|") == 4 and row.split(" | ")[2].startswith(("+", "-")) and "[" in row
    assert srsly.read_json(tmp_path / "quick.json")["systems"]["(d) ELMo"]["summary"]["sd"] is None
