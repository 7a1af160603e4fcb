"""K-fold cross-validation: every document of a task is tested exactly once, by every system.

A test split of a few hundred sentences (WNUT-2016's 228) cannot tell systems 2 F1 apart: the
seed-to-seed spread alone is larger. Cross-validation uses all documents for testing, and the
same folds for every system make the comparison paired (scripts/compare.py).

``split``: the task's train, dev and test documents (``CORPUS/{train,dev,test}.spacy``) are
pooled, near-duplicates grouped (as ``corpus`` does, so a group never straddles folds), the
groups shuffled with the seed and dealt to the fold with the fewest documents so far. Fold ``k``
gets ``OUTPUT/fold<k>/test.spacy`` (fold k), ``dev.spacy`` (fold k+1 mod K: what ``spacy train``
picks ``model-best`` on) and ``train.spacy`` (the other K-2 folds); ``folds.json`` lists each
fold's document indices in the pooled order (train, dev, test), ``all.spacy`` holds the pooled
documents in that order (what ``spacy-elmo embed`` reads to serve every fold from one store).

``run``: ``spacy train`` one config on each fold (resumable: a fold whose metrics file exists is
skipped), then scripts/evaluate.py's metrics of its ``model-best`` on the fold's test documents,
with per-document items and the dev score at every evaluation (``dev_curve``, for configs whose
logger writes ``paths.log``), to ``METRICS/fold<k>.json``. Only ``model-best`` is kept.

``finetune``: a biLM fine-tuned on each fold's training text (``spacy-elmo pretrain --init-from``,
held-out perplexity on the fold's dev documents), with the layers of every document from it
(``spacy-elmo embed``), to ``OUTPUT/fold<k>/``; ``run --bilm-per-fold OUTPUT`` then trains each
fold on its own biLM. Fine-tuning on the pooled documents would show the LM every fold's test
text; per fold, it sees only what the fold's NER model trains on.
"""

import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import spacy
import srsly
import typer
from spacy.cli._util import import_code, parse_config_overrides
from spacy.cli.train import train as spacy_train
from spacy.tokens import DocBin
from spacy.util import load_config

from evaluate import evaluate_run, find_model
from make_corpus import near_duplicate_groups
from train import CODE_HELP, run_overrides

SPLITS = ("train", "dev", "test")

app = typer.Typer(add_completion=False, help=__doc__)


def deal_folds(groups: List[List[int]], k: int, seed: int) -> List[List[int]]:
    """Whole groups dealt, in a seeded random order, to the fold with the fewest documents."""
    if k < 3:
        raise ValueError(f"cross-validation needs at least 3 folds (test, dev, train), got {k}")
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    folds: List[List[int]] = [[] for _ in range(k)]
    for index in order:
        smallest = min(range(k), key=lambda f: len(folds[f]))
        folds[smallest].extend(groups[index])
    return [sorted(fold) for fold in folds]


def fold_roles(k: int, fold: int) -> Dict[str, List[int]]:
    """Which folds are test, dev and train in run ``fold`` of ``k``."""
    dev = (fold + 1) % k
    return {"test": [fold], "dev": [dev], "train": [f for f in range(k) if f not in (fold, dev)]}


@app.command()
def split(
    corpus: Path = typer.Argument(..., exists=True, file_okay=False, help="Directory with train/dev/test.spacy"),
    output_dir: Path = typer.Argument(
        ..., help="Writes OUTPUT_DIR/fold<k>/{train,dev,test}.spacy, all.spacy and folds.json"
    ),
    k: int = typer.Option(10, help="Number of folds"),
    seed: int = typer.Option(0, help="Seed of the fold assignment (keep it fixed: every system gets these folds)"),
) -> None:
    """Pool CORPUS's documents and write K train/dev/test folds."""
    nlp = spacy.blank("en")
    docs = [doc for name in SPLITS for doc in DocBin().from_disk(corpus / f"{name}.spacy").get_docs(nlp.vocab)]
    folds = deal_folds(near_duplicate_groups([doc.text for doc in docs]), k, seed)
    for fold in range(k):
        fold_dir = output_dir / f"fold{fold}"
        fold_dir.mkdir(parents=True, exist_ok=True)
        for role, members in fold_roles(k, fold).items():
            chosen = [docs[i] for f in members for i in folds[f]]
            DocBin(docs=chosen, store_user_data=False).to_disk(fold_dir / f"{role}.spacy")
    DocBin(docs=docs, store_user_data=False).to_disk(output_dir / "all.spacy")
    srsly.write_json(output_dir / "folds.json", {"k": k, "seed": seed, "n_docs": len(docs), "folds": folds})
    sizes = ", ".join(str(len(f)) for f in folds)
    typer.echo(f"{len(docs)} documents from {corpus} -> {k} folds of {sizes} in {output_dir}")


def parse_folds(text: str, k: int) -> List[int]:
    """``"all"`` or ``"0,1,2"`` -> fold numbers, each checked against ``k``."""
    if text == "all":
        return list(range(k))
    folds = [int(f) for f in text.replace(",", " ").split()]
    if not folds or any(not 0 <= f < k for f in folds):
        raise typer.BadParameter(f"folds must be 'all' or numbers in 0..{k - 1}, got {text!r}")
    return folds


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    config: Path = typer.Argument(..., exists=True, dir_okay=False, help="Training config"),
    folds_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="Output of `split`"),
    runs_dir: Path = typer.Argument(..., help="Pipelines go to RUNS_DIR/fold<k>/model-best"),
    metrics_dir: Path = typer.Argument(..., help="Writes METRICS_DIR/fold<k>.json"),
    system: str = typer.Option(..., help="System name for the comparison (cnn, vectors, elmo, ...)"),
    task: str = typer.Option(..., help="Task name (ner, sentiment, topics)"),
    folds: str = typer.Option("all", help="Folds to run, comma-separated, or 'all'"),
    seed: int = typer.Option(0, help="Training seed (the same for every fold)"),
    max_steps: int = typer.Option(0, help="Override training.max_steps (0: the config's)"),
    eval_frequency: int = typer.Option(0, help="Override training.eval_frequency (0: the config's)"),
    vectors: Optional[Path] = typer.Option(None, exists=True, help="A spaCy vectors directory (spacy init vectors)"),
    init_tok2vec: Optional[Path] = typer.Option(
        None, exists=True, dir_okay=False, help="spacy pretrain weights (.bin)"
    ),
    gpu_id: int = typer.Option(-1, help="GPU id, -1 for CPU"),
    bilm_per_fold: Optional[Path] = typer.Option(
        None, exists=True, file_okay=False, help="Output of `finetune`: each fold uses its own biLM and features"
    ),
    code: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help=CODE_HELP),
) -> None:
    """Train CONFIG on each fold and score it on the fold's test documents; finished folds are skipped."""
    import_code(code)  # as `spacy train --code`: before the config is read
    k = int(srsly.read_json(folds_dir / "folds.json")["k"])
    extra = parse_config_overrides(ctx.args)
    logs = "log" in load_config(config).get("paths", {})
    metrics_dir.mkdir(parents=True, exist_ok=True)
    for fold in parse_folds(folds, k):
        metrics_file = metrics_dir / f"fold{fold}.json"
        if metrics_file.exists():
            typer.echo(f"{system} {task} fold {fold}: done ({metrics_file})")
            continue
        fold_dir, run_dir = folds_dir / f"fold{fold}", runs_dir / f"fold{fold}"
        log = run_dir / "log.jsonl" if logs else None
        if log is not None:
            log.unlink(missing_ok=True)  # spaCy refuses to log into a file that exists
        overrides = {**run_overrides(fold_dir, seed, log, max_steps, eval_frequency, vectors, init_tok2vec), **extra}
        if bilm_per_fold is not None:
            overrides.update(fold_bilm_overrides(bilm_per_fold / f"fold{fold}"))
        typer.echo(f"== {config.name} fold {fold} -> {run_dir}")
        spacy_train(config, run_dir, use_gpu=gpu_id, overrides=overrides)
        result = {
            "system": system,
            "task": task,
            "fold": fold,
            "seed": seed,
            "dev_score": dev_score(find_model(run_dir)),
            "dev_curve": [] if log is None else dev_curve(log),
            **evaluate_run(run_dir, fold_dir / "test.spacy", batch_size=64, gpu_id=gpu_id),
        }
        srsly.write_json(metrics_file, result)  # last: a fold without it is run again
        shutil.rmtree(run_dir / "model-last", ignore_errors=True)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())  # type: ignore[union-attr]
        typer.echo(f"{system} {task} fold {fold}: dev {result['dev_score']:.4f}, test {shown} -> {metrics_file}")


@app.command()
def finetune(
    folds_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="Output of `split`"),
    bilm_dir: Path = typer.Argument(
        ..., exists=True, file_okay=False, help="The biLM to start from: an export of spacy-elmo pretrain"
    ),
    output_dir: Path = typer.Argument(
        ..., help="Writes OUTPUT_DIR/fold<k>/ (the biLM) and OUTPUT_DIR/fold<k>/features"
    ),
    steps: int = typer.Option(
        60, help="Fine-tuning steps per fold (60: about 2 passes over 37 k tokens with the base preset)"
    ),
    init_tokens_weight: float = typer.Option(
        1.0, help="Keep layer 0 near the vectors exported with BILM_DIR (kept_vectors.hdf5); 0 for none"
    ),
    folds: str = typer.Option("all", help="Folds to fine-tune, comma-separated, or 'all'"),
    threads: int = typer.Option(0, help="Torch threads (0: torch's choice)"),
) -> None:
    """Fine-tune BILM_DIR on each fold's training text and embed every document with it; finished folds are skipped."""
    k = int(srsly.read_json(folds_dir / "folds.json")["k"])
    for fold in parse_folds(folds, k):
        fold_dir, bilm = folds_dir / f"fold{fold}", output_dir / f"fold{fold}"
        if not (bilm / "weights.hdf5").exists():
            typer.echo(f"== fine-tuning {bilm_dir} on {fold_dir / 'train.spacy'} -> {bilm}")
            run_spacy_elmo(
                [
                    "pretrain",
                    fold_dir / "train.spacy",
                    bilm,
                    "--init-from",
                    bilm_dir / "options.json",
                    bilm_dir / "weights.hdf5",
                    "--dev",
                    fold_dir / "dev.spacy",
                    "--max-steps",
                    steps,
                    "--eval-every",
                    steps,
                    "--init-tokens-weight",
                    init_tokens_weight,
                    "--no-progress",
                ]
                + (["--threads", threads] if threads else [])
            )
        if not (bilm / "features" / "manifest.json").exists():
            run_spacy_elmo(
                [
                    "embed",
                    folds_dir / "all.spacy",
                    bilm / "features",
                    "--options-file",
                    bilm / "options.json",
                    "--weight-file",
                    bilm / "weights.hdf5",
                ]
                + (["--threads", threads] if threads else [])
            )


def run_spacy_elmo(args: List[object]) -> None:
    """Run a spacy-elmo command in its own process, as a user would; its failure stops the script."""
    subprocess.run([sys.executable, "-m", "spacy_elmo", *map(str, args)], check=True)


def fold_bilm_overrides(bilm: Path) -> Dict[str, str]:
    """The config overrides that give a fold its own biLM and feature store (``finetune``'s output)."""
    missing = [
        name for name in ("options.json", "weights.hdf5", "features/manifest.json") if not (bilm / name).exists()
    ]
    if missing:
        raise typer.BadParameter(f"{bilm} lacks {', '.join(missing)}: run `crossval.py finetune` for this fold first")
    return {
        "paths.elmo_options": str(bilm / "options.json"),
        "paths.elmo_weights": str(bilm / "weights.hdf5"),
        "components.elmo.features": str(bilm / "features"),
    }


def dev_curve(log: Path) -> List[List[float]]:
    """[step, dev score] at every evaluation of a run (its JSONL training log).

    ``dev_score`` is the best of these, which favours a system whose dev score swings more
    between evaluations; the curve allows measures that do not, e.g. the mean of the last ones.
    """
    return [[int(record["step"]), float(record["score"])] for record in srsly.read_jsonl(log)]


def dev_score(model_dir: Path) -> float:
    """The dev score ``spacy train`` chose ``model_dir`` by (its meta.json), 0.0 if it never evaluated."""
    performance = srsly.read_json(model_dir / "meta.json").get("performance", {})
    weights = load_config(model_dir / "config.cfg")["training"]["score_weights"]
    return float(sum((performance.get(name) or 0.0) * weight for name, weight in weights.items() if weight))


if __name__ == "__main__":
    app()
