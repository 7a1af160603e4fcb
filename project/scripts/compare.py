"""Paired comparison of systems: the metric difference to a baseline with a bootstrap 95% CI.

Each system is a directory of metrics files from scripts/evaluate.py (``seed<k>.json``: every
seed scores the same test documents) or scripts/crossval.py (``fold<k>.json``: every fold scores
its own documents). Every file carries ``items``, one ``[numerator, denominator]`` per document
whose sums give the headline metric (NER micro F1, text classification accuracy).

- Folds: a document's items are its fold's; the pooled metric is the cross-validated score.
- Seeds: a document's items are summed over the seeds, so the pooled metric is the score of
  all seeds' predictions together.
- Folds of several training seeds (``NAME=DIR1,DIR2``: one cross-validation per directory, same
  folds): a document's items are summed over the seeds, as for seeds; the per-fold scores are
  those sums'. More seeds average out the training noise that one seed per fold leaves in.

The systems must have the same folds or seeds, and the same documents in each. The paired
bootstrap resamples documents (with replacement, ``--n-boot`` times, fixed ``--seed``) and
recomputes both systems' pooled metric on the same sample; the 2.5 and 97.5 percentiles of the
difference are the 95% CI. The table also gives each fold's or seed's difference: how many the
system wins, and their mean ± sd. With a single seed (or fold) there is no spread to give: the
table shows each system's score and its difference with the CI, and says "one seed".

Cross-validation files of ``scripts/crossval.py`` also carry ``dev_score``, the dev score that
chose each fold's model; where every file of a system has one, the table shows its mean over the
folds (and seeds), so that a choice made on dev and its test result sit side by side.

Written: ``OUTPUT.md`` (a markdown table, also printed) and ``OUTPUT.json`` (the same numbers).
"""

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import numpy
import srsly
import typer

UNITS = ("fold", "seed")
CHUNK = 500  # bootstrap replicates per matrix product: 500 x n_docs counts in memory at a time


@dataclass
class Runs:
    """One system's metrics files: the per-unit scores and the pooled per-document items."""

    name: str
    unit: str  # "fold" or "seed"
    scores: Dict[int, float]  # unit number -> headline metric of that fold or seed
    docs: Dict[int, int]  # unit number -> number of test documents
    numerators: numpy.ndarray  # (n_docs,) pooled over units
    denominators: numpy.ndarray  # (n_docs,)
    dev: Dict[int, float]  # unit number -> dev score that chose its model (mean over seeds); empty if unknown

    @property
    def pooled(self) -> float:
        return ratio(self.numerators.sum(), self.denominators.sum())


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, 0.0 for an empty denominator (no entity predicted or gold)."""
    return float(numerator / denominator) if denominator else 0.0


def parse_system(text: str) -> Tuple[str, List[Path]]:
    """``NAME=DIR`` or ``NAME=DIR1,DIR2,...`` -> (name, dirs)."""
    name, sep, directories = text.partition("=")
    parts = directories.split(",")
    if not sep or not name or not all(parts):
        raise typer.BadParameter(f"give systems as NAME=METRICS_DIR or NAME=DIR1,DIR2 (seeds of a CV), got {text!r}")
    return name, [Path(part) for part in parts]


def load_runs(name: str, directories: List[Path]) -> Runs:
    """One directory's runs, or the sum over cross-validations of several seeds (same folds)."""
    runs = [load_directory(name, directory) for directory in directories]
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    for directory, other in zip(directories, runs):
        if other.unit != "fold":
            raise ValueError(
                f"{directory}: several directories are seeds of a cross-validation; this one has seed files"
            )
        if other.docs != first.docs:
            raise ValueError(f"{directory}: folds {other.docs} differ from {directories[0]}'s {first.docs}")
    dev = {n: statistics.fmean(run.dev[n] for run in runs) for n in first.docs} if all(run.dev for run in runs) else {}
    numerators = sum(run.numerators for run in runs)
    denominators = sum(run.denominators for run in runs)
    bounds = numpy.cumsum([0] + [first.docs[n] for n in sorted(first.docs)])
    scores = {
        n: ratio(numerators[start:end].sum(), denominators[start:end].sum())
        for n, start, end in zip(sorted(first.docs), bounds[:-1], bounds[1:])
    }
    return Runs(name, "fold", scores, dict(first.docs), numerators, denominators, dev)  # type: ignore[arg-type]


def load_directory(name: str, directory: Path) -> Runs:
    """Read ``fold<k>.json`` or ``seed<k>.json`` files of ``directory`` (not both kinds)."""
    files = {unit: sorted(directory.glob(f"{unit}*.json")) for unit in UNITS}
    kinds = [unit for unit in UNITS if files[unit]]
    if len(kinds) != 1:
        found = "both fold and seed files" if kinds else "no fold<k>.json or seed<k>.json files"
        raise ValueError(f"{directory}: {found}; give a directory of one system's metrics for one task")
    unit = kinds[0]
    scores: Dict[int, float] = {}
    docs: Dict[int, int] = {}
    items: Dict[int, numpy.ndarray] = {}
    dev: Dict[int, float] = {}
    for path in files[unit]:
        data = srsly.read_json(path)
        if "items" not in data:
            raise ValueError(f"{path} has no per-document items: evaluate it again with scripts/evaluate.py")
        number = int(path.stem[len(unit) :])
        unit_items = numpy.asarray(data["items"], dtype=numpy.float64).reshape(-1, 2)
        items[number], docs[number] = unit_items, len(unit_items)
        scores[number] = ratio(unit_items[:, 0].sum(), unit_items[:, 1].sum())
        if "dev_score" in data:
            dev[number] = float(data["dev_score"])
    if unit == "fold":
        pooled = numpy.concatenate([items[number] for number in sorted(items)])
    else:
        if len(set(docs.values())) != 1:
            raise ValueError(f"{directory}: seeds scored different numbers of documents {docs}")
        pooled = sum(items.values())  # type: ignore[assignment]
    return Runs(name, unit, scores, docs, pooled[:, 0], pooled[:, 1], dev if len(dev) == len(docs) else {})


def check_paired(system: Runs, baseline: Runs) -> None:
    """Same unit kind, same folds or seeds, same number of documents in each."""
    if system.unit != baseline.unit or system.docs != baseline.docs:
        raise ValueError(
            f"{system.name} and {baseline.name} are not paired: {system.unit}s {system.docs} vs "
            f"{baseline.unit}s {baseline.docs} (unit number -> documents); run both on the same folds or seeds"
        )


def bootstrap_differences(system: Runs, baseline: Runs, n_boot: int, seed: int) -> numpy.ndarray:
    """``(n_boot,)`` pooled-metric differences, system minus baseline, on shared document resamples."""
    n_docs = len(system.numerators)
    columns = numpy.stack([system.numerators, system.denominators, baseline.numerators, baseline.denominators], axis=1)
    rng = numpy.random.default_rng(seed)
    differences = []
    for start in range(0, n_boot, CHUNK):
        counts = rng.multinomial(n_docs, numpy.full(n_docs, 1.0 / n_docs), size=min(CHUNK, n_boot - start))
        sums = counts @ columns  # (chunk, 4)
        with numpy.errstate(invalid="ignore", divide="ignore"):
            difference = sums[:, 0] / sums[:, 1] - sums[:, 2] / sums[:, 3]
        differences.append(numpy.nan_to_num(difference))
    return numpy.concatenate(differences)


def compare(system: Runs, baseline: Runs, n_boot: int, seed: int) -> Dict[str, object]:
    """The difference to ``baseline``: pooled, its bootstrap 95% CI, and per fold or seed."""
    check_paired(system, baseline)
    differences = bootstrap_differences(system, baseline, n_boot, seed)
    low, high = numpy.percentile(differences, [2.5, 97.5])
    per_unit = [system.scores[n] - baseline.scores[n] for n in sorted(system.scores)]
    return {
        "baseline": baseline.name,
        "difference": system.pooled - baseline.pooled,
        "ci95": [float(low), float(high)],
        "p_not_better": float((differences <= 0).mean()),
        "per_unit": per_unit,
        "wins": sum(d > 0 for d in per_unit),
    }


def summary(runs: Runs) -> Dict[str, object]:
    """Pooled score, mean and sd over the units (sd None for a single unit), dev mean, counts."""
    values = [runs.scores[n] for n in sorted(runs.scores)]
    return {
        "pooled": runs.pooled,
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else None,
        "dev_mean": statistics.fmean(runs.dev.values()) if runs.dev else None,
        "units": len(values),
        "docs": len(runs.numerators),
    }


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def signed(value: float) -> str:
    return f"{100 * value:+.1f}"


def counted(number: int, unit: str) -> str:
    """``one seed``, ``5 seeds``, ``10 folds``."""
    return f"one {unit}" if number == 1 else f"{number} {unit}s"


def markdown(title: str, unit: str, results: Dict[str, Dict[str, object]], baselines: List[str]) -> str:
    """One row per system; a comparison column per baseline.

    Several folds or seeds: the pooled score, the mean ± sd over the units and the wins per
    comparison. A single one: its score and the difference with its CI, no spread and no wins.
    """
    first = next(iter(results.values()))["summary"]
    single = all(result["summary"]["units"] == 1 for result in results.values())  # type: ignore[index]
    with_dev = any(result["summary"]["dev_mean"] is not None for result in results.values())  # type: ignore[index]
    header = ["system"] + ([f"score, {counted(1, unit)}"] if single else ["pooled", f"mean ± sd over {unit}s"])
    header += ["dev, mean"] if with_dev else []
    header += [f"vs {b}: diff [95% CI]" + ("" if single else ", wins") for b in baselines]
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, result in results.items():
        s = result["summary"]
        cells = [name, pct(s["pooled"])]  # type: ignore[index]
        if not single:
            spread = "" if s["sd"] is None else f" ± {pct(s['sd'])}"  # type: ignore[index]
            cells.append(f"{pct(s['mean'])}{spread}")  # type: ignore[index]
        if with_dev:
            cells.append("" if s["dev_mean"] is None else pct(s["dev_mean"]))  # type: ignore[index]
        by_baseline = {c["baseline"]: c for c in result["comparisons"]}  # type: ignore[union-attr]
        for baseline in baselines:
            c = by_baseline.get(baseline)
            text = f"{signed(c['difference'])} [{signed(c['ci95'][0])}, {signed(c['ci95'][1])}]" if c else ""
            if c and not single:
                text += f", {c['wins']}/{len(c['per_unit'])}"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    note = f"Scores in percent; {counted(first['units'], unit)}, {first['docs']} test documents"  # type: ignore[index]
    note += (
        ". CI: paired bootstrap over documents."
        if single
        else (" pooled. CI: paired bootstrap over documents; wins: folds or seeds where the system scores higher.")
    )
    if single and unit == "seed":
        note += " One seed cannot show how far another seed would move a score: the CI covers the test documents only."
    if with_dev:
        note += " Dev: the score that chose each fold's model (fold k+1 of run k), mean over folds and seeds."
    return "\n".join(lines + ["", note]) + "\n"


def main(
    output: Path = typer.Argument(..., help="Writes OUTPUT.md and OUTPUT.json (OUTPUT without suffix)"),
    system: List[str] = typer.Option(
        ...,
        help="NAME=METRICS_DIR, or NAME=DIR1,DIR2 for a cross-validation run with several seeds; "
        "repeatable; in table order",
    ),
    baseline: List[str] = typer.Option(..., help="NAME of a --system to compare every other system with, repeatable"),
    title: str = typer.Option("Paired comparison", help="Table title"),
    n_boot: int = typer.Option(10000, help="Bootstrap replicates"),
    seed: int = typer.Option(0, help="Bootstrap seed"),
) -> None:
    """Pooled metric of each system, and its paired difference to each baseline with a 95% CI."""
    runs = {name: load_runs(name, directories) for name, directories in map(parse_system, system)}
    unknown = [b for b in baseline if b not in runs]
    if unknown:
        raise typer.BadParameter(f"baselines {unknown} are not among the systems {list(runs)}")
    results: Dict[str, Dict[str, object]] = {}
    for name, system_runs in runs.items():
        comparisons = [compare(system_runs, runs[b], n_boot, seed) for b in baseline if b != name]
        results[name] = {"summary": summary(system_runs), "comparisons": comparisons}
    unit = next(iter(runs.values())).unit
    table = markdown(title, unit, results, baseline)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".md").write_text(table, encoding="utf8")
    srsly.write_json(
        output.with_suffix(".json"), {"title": title, "unit": unit, "n_boot": n_boot, "seed": seed, "systems": results}
    )
    typer.echo(table)


if __name__ == "__main__":
    typer.run(main)
