"""Collect metrics JSON files (scripts/evaluate.py) into a markdown table and PNG plots.

- ``results.md``: a row per system, a column per task metric (NER F1; sentiment and topics
  accuracy and macro-F1), each cell ``mean ± sd (n)`` over seeds in percent (sd is the sample
  standard deviation), then NER F1 per entity label. Where every system ran one seed, a cell is
  that seed's score alone and the caption says so. For NER, spaCy's efficiency config (s) is the
  CNN (a): (s)'s NER cell and bar show (a)'s runs, marked, with a note that says so.
- ``results.png``: the headline metrics as grouped bars with the seed spread as error bars.
- ``learning_curves.png``: the dev score at every evaluation step (spaCy's JSONL training log,
  ``<runs>/<system>-<task>/seed<k>/log.jsonl``), a panel per task, the mean over seeds per system.

The table is also printed. Systems are ordered as in SYSTEMS; unknown ones follow by name. Each
system has one colour in every plot and panel (:func:`colour`), whichever systems a panel shows.
"""

import math
import statistics
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import srsly
import typer

# name in the metrics files -> label in the table and plots, in display order
SYSTEMS = {
    "spacy": "(s) spaCy's efficiency config",
    "cnn": "(a) CNN tok2vec",
    "vectors": "(b) CNN + word2vec",
    "pretrain": "(c) CNN + spacy pretrain",
    "elmo": "(d) ELMo",
    "elmo_vectors": "(e) ELMo + word2vec",
}
# system -> its colour in every plot (matplotlib's named colours), so that a system looks the same in
# each panel whatever the others there; systems not listed take one of EXTRA_COLOURS by name.
COLOURS = {
    "spacy": "tab:gray",
    "cnn": "tab:blue",
    "vectors": "tab:orange",
    "pretrain": "tab:purple",
    "elmo": "tab:green",
    "elmo_vectors": "tab:red",
}
EXTRA_COLOURS = ("tab:brown", "tab:pink", "tab:olive", "tab:cyan")
# spaCy's efficiency config (s) has no NER runs of its own: for NER it is the CNN (a).
BORROWED = {("spacy", "ner"): "cnn"}
BORROWED_MARK = "¹"
BORROWED_NOTE = "For NER, spaCy's efficiency config (s) is the CNN tok2vec (a): (s) shows (a)'s runs"
# (task, metric) columns, in display order
COLUMNS: List[Tuple[str, str, str]] = [
    ("ner", "f1", "NER F1"),
    ("sentiment", "accuracy", "Sentiment acc."),
    ("sentiment", "macro_f1", "Sentiment macro-F1"),
    ("topics", "accuracy", "Topics acc."),
    ("topics", "macro_f1", "Topics macro-F1"),
]

Scores = Dict[Tuple[str, str, str], List[float]]  # (system, task, metric) -> one value per seed


Runs = Set[Tuple[str, str, int]]  # (system, task, seed) of every metrics file


def load_metrics(metrics_dir: Path) -> Tuple[Scores, Scores, Runs]:
    """Headline scores, per-label NER F1 (label in place of metric) and the runs of every metrics file."""
    scores: Scores = defaultdict(list)
    ner_labels: Scores = defaultdict(list)
    runs: Runs = set()
    files = sorted(metrics_dir.rglob("seed*.json"))  # fold*.json: cross-validation, scripts/compare.py
    if not files:
        raise FileNotFoundError(f"no metrics files under {metrics_dir}")
    for path in files:
        data = srsly.read_json(path)
        try:
            system, task = data["system"], data["task"]
            runs.add((system, task, int(data["seed"])))
            for metric, value in data["metrics"].items():
                scores[(system, task, metric)].append(float(value))
            if task == "ner":
                for label, prf in data["per_label"].items():
                    ner_labels[(system, task, label)].append(float(prf["f"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path} is not a metrics file of scripts/evaluate.py: {err}") from err
    return scores, ner_labels, runs


def ordered_systems(names: Sequence[str]) -> List[str]:
    known = [s for s in SYSTEMS if s in names]
    return known + sorted(set(names) - set(known))


def colour(system: str) -> str:
    """The system's colour in every plot: its own in COLOURS, else one of EXTRA_COLOURS by its name."""
    if system in COLOURS:
        return COLOURS[system]
    return EXTRA_COLOURS[zlib.crc32(system.encode("utf8")) % len(EXTRA_COLOURS)]


def system_scores(scores: Scores, system: str, task: str, metric: str) -> Tuple[Optional[List[float]], bool]:
    """The system's scores for a task's metric, and whether they are another system's runs (BORROWED).

    (s) for NER, which has no runs of its own, takes (a)'s, so its table cell and bar show a number.
    """
    if (system, task, metric) in scores:
        return scores[(system, task, metric)], False
    lender = BORROWED.get((system, task))
    if lender is not None and (lender, task, metric) in scores:
        return scores[(lender, task, metric)], True
    return None, False


def mean_sd(values: Sequence[float]) -> Tuple[float, Optional[float]]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def cell(values: Optional[Sequence[float]], count: bool = True) -> str:
    """``mean ± sd (n)`` in percent; ``mean (1)`` for one seed; the bare score without ``count``."""
    if not values:
        return "–"
    mean, sd = mean_sd(values)
    spread = f" ± {100 * sd:.1f}" if sd is not None else ""
    return f"{100 * mean:.1f}{spread}" + (f" ({len(values)})" if count else "")


def one_seed(scores: Scores) -> bool:
    """Whether every score in the table comes from a single seed."""
    return all(len(values) == 1 for values in scores.values())


def score_cell(scores: Scores, system: str, task: str, metric: str) -> str:
    """A table cell; one of another system's runs (see :func:`system_scores`) ends in BORROWED_MARK."""
    values, borrowed = system_scores(scores, system, task, metric)
    text = cell(values, count=not one_seed(scores))
    return f"{text} {BORROWED_MARK}" if borrowed else text


def borrows(scores: Scores, systems: Sequence[str], columns: Sequence[Tuple[str, str, str]]) -> bool:
    """Whether any cell of the table shows another system's runs (and so needs BORROWED_NOTE)."""
    return any(system_scores(scores, s, task, metric)[1] for s in systems for task, metric, _ in columns)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def training_steps(metrics_dir: Path) -> List[int]:
    """The distinct ``max_steps`` the runs of METRICS_DIR were trained with (files that record it)."""
    return sorted(
        {
            int(srsly.read_json(p)["max_steps"])
            for p in metrics_dir.rglob("seed*.json")
            if "max_steps" in srsly.read_json(p)
        }
    )


def caption(scores: Scores, steps: Sequence[int]) -> str:
    """What the table ran: seeds and steps, and a warning where one seed cannot show the spread."""
    if one_seed(scores):
        text = "Test scores in percent, one seed per system"
    else:
        text = "Test scores in percent, mean ± sample sd over seeds (number of seeds)"
    if steps:
        text += f"; at most {', '.join(map(str, steps))} training steps per run"
    text += "."
    if one_seed(scores):
        text += (
            " One seed cannot show the seed-to-seed spread, and differences of a few points can be"
            " noise: `compare` gives confidence intervals over the test documents; `all` runs 5 seeds."
        )
    return text


def results_markdown(scores: Scores, ner_labels: Scores, steps: Sequence[int] = ()) -> str:
    systems = ordered_systems([s for s, _, _ in scores])
    columns = [c for c in COLUMNS if any((s, c[0], c[1]) in scores for s in systems)]
    main = markdown_table(
        ["System"] + [title for _, _, title in columns],
        [[SYSTEMS.get(s, s)] + [score_cell(scores, s, task, metric) for task, metric, _ in columns] for s in systems],
    )
    text = caption(scores, steps) + "\n\n" + main + "\n"
    if borrows(scores, systems, columns):
        text += f"\n{BORROWED_MARK} {BORROWED_NOTE}.\n"
    labels = sorted({label for _, _, label in ner_labels})
    if labels:
        ner_systems = [s for s in systems if any((s, "ner", label) in ner_labels for label in labels)]
        per_label = markdown_table(
            ["NER F1 by label"] + [SYSTEMS.get(s, s) for s in ner_systems],
            [
                [label] + [cell(ner_labels.get((s, "ner", label)), count=not one_seed(ner_labels)) for s in ner_systems]
                for label in labels
            ],
        )
        text += "\n" + per_label + "\n"
    return text


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> None:
    """Write the figure as a PNG and free it (pyplot keeps every open figure otherwise)."""
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


def bars_figure(scores: Scores) -> Any:
    """The headline metrics as grouped bars, a bar per system in its colour, the seed spread as error
    bars (none for one seed); (s)'s NER bar shows (a)'s runs, hatched, with BORROWED_NOTE below."""
    systems = ordered_systems([s for s, _, _ in scores])
    columns = [c for c in COLUMNS if any((s, c[0], c[1]) in scores for s in systems)]
    width = 0.8 / max(len(systems), 1)
    fig, ax = pyplot().subplots(figsize=(max(6.0, 1.6 * len(columns)), 4.0))
    borrowed_bars = []
    for i, system in enumerate(systems):
        found = [system_scores(scores, system, task, metric) for task, metric, _ in columns]
        stats = [mean_sd(values) if values else (math.nan, None) for values, _ in found]
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(columns))]
        errors = [100 * sd if sd is not None else math.nan for _, sd in stats]
        bars = ax.bar(
            xs,
            [100 * m for m, _ in stats],
            width,
            yerr=errors,
            capsize=2,
            color=colour(system),
            label=SYSTEMS.get(system, system),
        )
        borrowed_bars += [bar for bar, (_, borrowed) in zip(bars, found) if borrowed]
    ax.set_xticks(range(len(columns)), [title for _, _, title in columns], rotation=15)
    ax.set_ylabel("test score (%)")
    ax.legend(fontsize="small")
    for bar in borrowed_bars:  # after the legend, whose keys copy a system's first bar
        bar.set_hatch("//")
    ax.grid(axis="y", alpha=0.3)
    if borrows(scores, systems, columns):
        fig.text(0.01, 0.01, f"{BORROWED_NOTE} (hatched).", fontsize="small")
        fig.tight_layout(rect=(0, 0.05, 1, 1))
    else:
        fig.tight_layout()
    return fig


def read_curves(runs_dir: Path, runs: Runs) -> Dict[Tuple[str, str], Dict[int, List[float]]]:
    """(system, task) -> step -> dev scores over seeds, from ``<system>-<task>/seed<k>/log.jsonl``.

    Only runs that have a metrics file count, so a stale run directory never enters a curve.
    """
    curves: Dict[Tuple[str, str], Dict[int, List[float]]] = defaultdict(lambda: defaultdict(list))
    for system, task, seed in sorted(runs):
        log = runs_dir / f"{system}-{task}" / f"seed{seed}" / "log.jsonl"
        if not log.exists():
            continue
        for record in srsly.read_jsonl(log):
            curves[(system, task)][int(record["step"])].append(float(record["score"]))
    return curves


def curves_figure(curves: Dict[Tuple[str, str], Dict[int, List[float]]]) -> Any:
    """A panel per task, a line per system in its colour: the mean dev score over seeds per step."""
    tasks = [t for t in dict.fromkeys(task for task, _, _ in COLUMNS) if any(k[1] == t for k in curves)]
    tasks += sorted({t for _, t in curves} - set(tasks))
    fig, axes = pyplot().subplots(1, max(len(tasks), 1), figsize=(4.5 * max(len(tasks), 1), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for system in ordered_systems([s for s, t in curves if t == task]):
            points = sorted(curves[(system, task)].items())
            ax.plot(
                [step for step, _ in points],
                [100 * statistics.fmean(v) for _, v in points],
                color=colour(system),
                label=SYSTEMS.get(system, system),
            )
        ax.set_title(task)
        ax.set_xlabel("training step")
        ax.set_ylabel("dev score (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def main(
    metrics_dir: Path = typer.Argument(
        ..., exists=True, file_okay=False, help="Metrics JSON files (searched recursively)"
    ),
    output_dir: Path = typer.Argument(..., help="Writes results.md, results.png, learning_curves.png"),
    runs_dir: Optional[Path] = typer.Option(
        None, exists=True, file_okay=False, help="Training runs, for learning curves"
    ),
) -> None:
    """Table and plots of every system x task x seed in METRICS_DIR."""
    try:
        scores, ner_labels, runs = load_metrics(metrics_dir)
    except (FileNotFoundError, ValueError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    output_dir.mkdir(parents=True, exist_ok=True)
    text = results_markdown(scores, ner_labels, training_steps(metrics_dir))
    (output_dir / "results.md").write_text(text, encoding="utf8")
    save(bars_figure(scores), output_dir / "results.png")
    written = ["results.md", "results.png"]
    if runs_dir is not None:
        curves = read_curves(runs_dir, runs)
        if curves:
            save(curves_figure(curves), output_dir / "learning_curves.png")
            written.append("learning_curves.png")
    typer.echo(text)
    typer.echo(f"Wrote {', '.join(str(output_dir / name) for name in written)}")


if __name__ == "__main__":
    typer.run(main)
