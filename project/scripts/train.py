"""Train one system on one task for one or more seeds: ``OUTPUT_DIR/seed<k>/`` per seed.

A thin wrapper around ``spacy.cli.train.train`` that fills in what every project command
repeats: the task's train/dev DocBins, the seed, a fresh JSONL training log per run
(``seed<k>/log.jsonl``, read by scripts/results.py for learning curves, when the config's
logger writes to ``paths.log``; spaCy refuses to log into a file that exists, so a stale log
from an earlier run is removed first), and optional
vectors / pretrained tok2vec weights. ``--code FILE`` imports registered functions first, as
``spacy train --code`` does (``code/elmo_variants.py``). Anything else goes through as config
overrides (``--training.patience 400``).
"""

from pathlib import Path
from typing import Dict, List, Optional

import typer
from spacy.cli._util import import_code, parse_config_overrides
from spacy.cli.train import train as spacy_train
from spacy.util import load_config


def parse_seeds(text: str) -> List[int]:
    """``"0,1,2"`` or ``"0 1 2"`` -> [0, 1, 2]."""
    try:
        seeds = [int(s) for s in text.replace(",", " ").split()]
    except ValueError as err:
        raise typer.BadParameter(f"seeds must be integers separated by commas, got {text!r}") from err
    if not seeds:
        raise typer.BadParameter("give at least one seed")
    return seeds


CODE_HELP = (
    "A Python file with registered functions the config names, as `spacy train --code` (e.g. code/elmo_variants.py)"
)


def run_overrides(
    corpus: Path,
    seed: int,
    log: Optional[Path],
    max_steps: int,
    eval_frequency: int,
    vectors: Optional[Path],
    init_tok2vec: Optional[Path],
) -> Dict[str, object]:
    """Config overrides of one run; ``log`` only for configs whose logger writes ``paths.log``."""
    overrides: Dict[str, object] = {
        "paths.train": str(corpus / "train.spacy"),
        "paths.dev": str(corpus / "dev.spacy"),
        "system.seed": seed,
    }
    if log is not None:
        overrides["paths.log"] = str(log)
    if max_steps > 0:
        overrides["training.max_steps"] = max_steps
    if eval_frequency > 0:
        overrides["training.eval_frequency"] = eval_frequency
    if vectors is not None:
        overrides["paths.vectors"] = str(vectors)
    if init_tok2vec is not None:
        overrides["paths.init_tok2vec"] = str(init_tok2vec)
    return overrides


app = typer.Typer(add_completion=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def main(
    ctx: typer.Context,
    config: Path = typer.Argument(..., exists=True, dir_okay=False, help="Training config"),
    output_dir: Path = typer.Argument(..., help="Pipelines go to OUTPUT_DIR/seed<k>/model-{best,last}"),
    corpus: Path = typer.Option(..., exists=True, file_okay=False, help="Directory with train.spacy and dev.spacy"),
    seeds: str = typer.Option("0", help="Seeds, comma-separated: one run each"),
    max_steps: int = typer.Option(0, help="Override training.max_steps (0: the config's)"),
    eval_frequency: int = typer.Option(0, help="Override training.eval_frequency (0: the config's)"),
    vectors: Optional[Path] = typer.Option(None, exists=True, help="A spaCy vectors directory (spacy init vectors)"),
    init_tok2vec: Optional[Path] = typer.Option(
        None, exists=True, dir_okay=False, help="spacy pretrain weights (.bin)"
    ),
    gpu_id: int = typer.Option(-1, help="GPU id, -1 for CPU"),
    code: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help=CODE_HELP),
) -> None:
    """Train CONFIG on --corpus once per seed."""
    import_code(code)  # as `spacy train --code`: before the config is read
    extra = parse_config_overrides(ctx.args)
    logs = "log" in load_config(config).get("paths", {})
    if not logs:
        typer.secho(f"{config} has no paths.log: no JSONL training log, so no learning curve", fg=typer.colors.YELLOW)
    for seed in parse_seeds(seeds):
        run_dir = output_dir / f"seed{seed}"
        log = run_dir / "log.jsonl"
        log.unlink(missing_ok=True)
        overrides = {
            **run_overrides(corpus, seed, log if logs else None, max_steps, eval_frequency, vectors, init_tok2vec),
            **extra,
        }
        typer.echo(f"== {config.name} seed {seed} -> {run_dir}")
        spacy_train(config, run_dir, use_gpu=gpu_id, overrides=overrides)


if __name__ == "__main__":
    app()
