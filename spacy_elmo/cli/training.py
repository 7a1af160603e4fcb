"""``spacy-elmo pretrain``, ``export`` and ``copy-pretrained``: train a biLM, export a run's
checkpoint, copy a bundled one."""

import shutil
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import typer

from ..pretraining.config import PRESETS, TrainingConfig
from .app import app, default, reported
from .options import with_settings

DEFAULT_PRESET = "small"


@app.command()
@with_settings(TrainingConfig, preset=DEFAULT_PRESET)
def pretrain(
    input_path: Path = typer.Argument(
        ..., metavar="INPUT", help="Corpus: a file or a directory of .txt / .jsonl / .spacy files"
    ),
    output_dir: Path = typer.Argument(
        ..., metavar="OUTPUT_DIR", help="Checkpoints, log.jsonl, and at the end options.json + weights.hdf5"
    ),
    preset: str = typer.Option(DEFAULT_PRESET, help=f"Model sizes and training defaults: {', '.join(PRESETS)}"),
    dev: Optional[Path] = typer.Option(None, help="Held-out text (same formats) for perplexity" + default("none")),
    init_from: Optional[Tuple[str, str]] = typer.Option(
        None,
        metavar="OPTIONS WEIGHTS",
        help="Continue from a standard ELMo file pair (paths or URLs); from its softmax too where "
        "vocab.txt and softmax.hdf5 lie beside WEIGHTS (as pretrain exports them), else with a new "
        "one (domain fine-tuning)",
    ),
    init_from_model: Optional[str] = typer.Option(
        None,
        metavar="NAME|URL|DIR",
        help="As --init-from, with the biLM named as `spacy-elmo models` lists it, a URL, or a directory",
    ),
    init_tokens_from: Optional[Path] = typer.Option(
        None,
        metavar="VECTORS",
        help="A spaCy pipeline with static vectors (`spacy init vectors`): first fit the new biLM's char CNN to "
        "reproduce them, so it starts knowing what words mean (MIMICK)",
    ),
    pipeline: Optional[Path] = typer.Option(
        None, help="Also save a blank spaCy pipeline with an elmo component holding the model here"
    ),
    threads: Optional[int] = typer.Option(
        None, help="Torch threads per process" + default("torch's choice; torchrun sets 1")
    ),
    resume: bool = typer.Option(True, help="Continue from OUTPUT_DIR/checkpoint.pt if it exists"),
    progress: bool = typer.Option(True, help="Show a progress bar"),
    settings: Optional[Dict[str, Any]] = None,
) -> None:
    """Train (or fine-tune) a biLM on raw text and export options.json + weights.hdf5 to OUTPUT_DIR.

    Ctrl-C (or SIGTERM) saves a checkpoint at the end of the current step; the same command then resumes.
    """
    import torch

    from ..bilm import BiLM
    from ..fileio import standard_files
    from ..pretraining import export_pipeline, get_preset
    from ..pretraining import pretrain as run_pretraining
    from ..pretraining.checkpoint import Interrupted
    from ..published.resolve import resolve_files, resolve_pretrained

    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with reported(ValueError, FileNotFoundError):
            chosen = get_preset(preset)
            config = chosen.training.updated(**(settings or {}))
            if init_from is not None and init_from_model is not None:
                raise ValueError("give --init-from or --init-from-model, not both")
            init = None if init_from is None else resolve_files(*init_from, check=BiLM.from_files)
            if init_from_model is not None:  # a biLM named as everywhere else, downloaded if need be
                init = resolve_pretrained(init_from_model, check=BiLM.from_files)
            metrics = run_pretraining(
                input_path, output_dir, chosen.options, config, dev, init, resume, progress, init_tokens_from
            )
    except Interrupted as err:
        if str(err):  # the process that saved the checkpoint
            typer.secho(str(err), fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(128 + err.signal_number) from err  # the shell's status for a process a signal stopped
    if not metrics:  # not the main process of a distributed run
        return
    for initial, result in metrics.get("eval", {}).items():
        typer.echo(
            f"held-out perplexity ({initial} initial state): forward {result['forward']:.2f}, "
            f"backward {result['backward']:.2f}, average {result['average']:.2f}"
        )
    typer.echo("Exported {} and {}".format(*standard_files(output_dir)))
    if pipeline is not None:
        export_pipeline(output_dir, pipeline, lang=config.lang)
        typer.echo(f"Saved a spaCy pipeline with the elmo component to {pipeline}")


@app.command("copy-pretrained")
def copy_pretrained(
    output_dir: Path = typer.Argument(..., metavar="OUTPUT_DIR", help="Gets options.json and weights.hdf5"),
    name: str = typer.Option("en", help="Which bundled biLM"),
) -> None:
    """Copy a biLM bundled with spacy-elmo, as standard files: for configs that name files, other
    ELMo implementations, or `pretrain --init-from` to fine-tune it on your domain."""
    from ..published import pretrained_files

    with reported(ValueError, FileNotFoundError):
        files = pretrained_files(name)
    output_dir.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copyfile(path, output_dir / path.name)
    typer.echo(f"Copied the bundled biLM {name!r} to {output_dir / files[0].name} and {output_dir / files[1].name}")


@app.command("export")
def export(
    run_dir: Path = typer.Argument(
        ..., metavar="RUN_DIR", help="The OUTPUT_DIR of a pretrain run, with its checkpoint.pt"
    ),
    output_dir: Path = typer.Argument(
        ..., metavar="OUTPUT_DIR", help="Gets options.json, weights.hdf5, vocab.txt, softmax.hdf5"
    ),
) -> None:
    """Export the last checkpoint of a pretrain run, while it runs or after it stopped: to evaluate
    it, or to continue it elsewhere with `pretrain --init-from`."""
    from ..pretraining.checkpoint import CHECKPOINT_NAME
    from ..pretraining.continuation import export_checkpoint

    with reported(ValueError, FileNotFoundError):
        if output_dir.resolve() == run_dir.resolve():
            raise ValueError("OUTPUT_DIR must differ from RUN_DIR, whose end writes the same files")
        step = export_checkpoint(run_dir / CHECKPOINT_NAME, output_dir)
    typer.echo(f"Exported the checkpoint of step {step} to {output_dir}")
