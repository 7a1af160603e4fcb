"""Evaluate trained pipelines on a test split and write one metrics JSON per seed.

For every ``RUNS_DIR/seed<k>/`` (the output of scripts/train.py) the pipeline ``model-best``
(or ``model-last`` when no evaluation ever ran) annotates ``TEST`` and is scored with spaCy's
own scorers, as ``spacy evaluate`` does. Written to ``OUTPUT_DIR/seed<k>.json``:

- ``system``, ``task``, ``seed``, ``model``, ``test``, ``n_docs``, ``words_per_second``;
- ``metrics``: NER ``f1``/``precision``/``recall``; text classification ``accuracy`` (share of
  documents whose highest-scoring class is the gold class, computed here: spaCy's scorer has
  no accuracy) and ``macro_f1`` (spaCy's ``cats_macro_f``, over the argmax for exclusive
  classes), plus ``macro_auc``;
- ``max_steps``: the training steps the run was given (``training.max_steps`` of its config);
- ``per_label``: ``{label: {"p", "r", "f"}}`` from spaCy's scorer;
- ``items``: one ``[numerator, denominator]`` pair per test document, in the test file's order,
  such that the headline metric is ``sum(numerators) / sum(denominators)``: NER
  ``[2 * correct entities, predicted + gold entities]`` (so the sum gives micro F1), text
  classification ``[1 if the argmax class is right else 0, 1]``. scripts/compare.py resamples
  them for paired bootstrap confidence intervals.

Metrics files of seeds that are not evaluated in this run are removed from OUTPUT_DIR, so the
results table never mixes runs made with other settings.

All scores are fractions in [0, 1].
"""

import time
from pathlib import Path
from typing import Dict, List, Optional

import spacy
import srsly
import typer
from spacy.language import Language
from spacy.scorer import Scorer
from spacy.training import Corpus, Example


def find_model(run_dir: Path) -> Path:
    for name in ("model-best", "model-last"):
        if (run_dir / name / "config.cfg").exists():
            return run_dir / name
    raise FileNotFoundError(f"no model-best or model-last pipeline in {run_dir}")


def predict(nlp: Language, examples: List[Example], batch_size: int) -> float:
    """Annotate every example's predicted doc in place; returns words per second."""
    start = time.perf_counter()
    docs = nlp.pipe((eg.predicted for eg in examples), batch_size=batch_size)
    for eg, doc in zip(examples, docs):
        eg.predicted = doc
    seconds = time.perf_counter() - start
    return sum(len(eg.predicted) for eg in examples) / max(seconds, 1e-9)


def argmax_accuracy(examples: List[Example]) -> float:
    """Share of examples whose top predicted class is the top gold class."""
    if not examples:
        raise ValueError("no examples to score")
    return sum(correct for correct, _ in accuracy_items(examples)) / len(examples)


def entity_items(examples: List[Example]) -> List[List[int]]:
    """Per document ``[2 * correct entities, predicted + gold entities]``: summed, micro F1."""
    items = []
    for eg in examples:
        gold = {(e.start_char, e.end_char, e.label_) for e in eg.reference.ents}
        predicted = {(e.start_char, e.end_char, e.label_) for e in eg.predicted.ents}
        items.append([2 * len(gold & predicted), len(gold) + len(predicted)])
    return items


def accuracy_items(examples: List[Example]) -> List[List[int]]:
    """Per document ``[1 if the top predicted class is the top gold class else 0, 1]``."""
    return [
        [int(max(eg.predicted.cats, key=eg.predicted.cats.get) == max(eg.reference.cats, key=eg.reference.cats.get)), 1]
        for eg in examples
    ]


def task_metrics(nlp: Language, examples: List[Example]) -> Dict[str, object]:
    """The headline metrics and per-label scores for the pipeline's task (ner or textcat)."""
    scores = Scorer(nlp).score(examples)
    if "ner" in nlp.pipe_names:
        return {
            "metrics": {"f1": scores["ents_f"], "precision": scores["ents_p"], "recall": scores["ents_r"]},
            "per_label": scores["ents_per_type"],
            "items": entity_items(examples),
        }
    if "textcat" in nlp.pipe_names:
        return {
            "metrics": {
                "accuracy": argmax_accuracy(examples),
                "macro_f1": scores["cats_macro_f"],
                "macro_auc": scores["cats_macro_auc"],
            },
            "per_label": scores["cats_f_per_type"],
            "items": accuracy_items(examples),
        }
    raise ValueError(f"pipeline {nlp.pipe_names} has neither ner nor textcat")


def evaluate_run(run_dir: Path, test: Path, batch_size: int, gpu_id: int) -> Dict[str, object]:
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)
    model = find_model(run_dir)
    nlp = spacy.load(model)
    examples = list(Corpus(test)(nlp))
    words_per_second = predict(nlp, examples, batch_size)
    return {
        "model": str(model),
        "test": str(test),
        "n_docs": len(examples),
        "max_steps": nlp.config["training"]["max_steps"],
        "words_per_second": words_per_second,
        **task_metrics(nlp, examples),
    }


def seed_dirs(runs_dir: Path, seeds: Optional[str]) -> List[Path]:
    if seeds:
        return [runs_dir / f"seed{int(s)}" for s in seeds.replace(",", " ").split()]
    found = sorted(p for p in runs_dir.glob("seed*") if p.is_dir())
    if not found:
        raise FileNotFoundError(f"no seed<k> run directories in {runs_dir}")
    return found


def main(
    runs_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="Output dir of scripts/train.py"),
    test: Path = typer.Argument(..., exists=True, dir_okay=False, help="Test DocBin (.spacy)"),
    output_dir: Path = typer.Argument(..., help="Writes OUTPUT_DIR/seed<k>.json"),
    system: str = typer.Option(..., help="System name for the results table (cnn, vectors, pretrain, elmo, ...)"),
    task: str = typer.Option(..., help="Task name (ner, sentiment, topics)"),
    seeds: Optional[str] = typer.Option(None, help="Seeds to evaluate, comma-separated [default: every seed<k> dir]"),
    batch_size: int = typer.Option(64, help="Docs per batch"),
    gpu_id: int = typer.Option(-1, help="GPU id, -1 for CPU"),
) -> None:
    """Score every seed's pipeline in RUNS_DIR on TEST."""
    output_dir.mkdir(parents=True, exist_ok=True)
    run_dirs = seed_dirs(runs_dir, seeds)
    for stale in sorted(set(output_dir.glob("seed*.json")) - {output_dir / f"{d.name}.json" for d in run_dirs}):
        stale.unlink()  # a seed of an earlier run with other settings: not part of these results
        typer.echo(f"removed {stale} (seed not evaluated in this run)")
    for run_dir in run_dirs:
        seed = int(run_dir.name[len("seed") :])
        result = {"system": system, "task": task, "seed": seed, **evaluate_run(run_dir, test, batch_size, gpu_id)}
        srsly.write_json(output_dir / f"seed{seed}.json", result)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())  # type: ignore[union-attr]
        typer.echo(f"{system} {task} seed {seed}: {shown} -> {output_dir / f'seed{seed}.json'}")


if __name__ == "__main__":
    typer.run(main)
