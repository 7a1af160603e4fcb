"""``spacy-elmo embed``: the ELMo layers of a corpus, stored as Parquet shards or AllenNLP's HDF5."""

from pathlib import Path
from typing import Any, Dict, Optional

import typer

from ..embed.settings import EmbedSettings
from .app import app, default, reported
from .options import with_settings


@app.command()
@with_settings(EmbedSettings)
def embed(
    input_path: Path = typer.Argument(
        ..., metavar="INPUT", help="A sentence per line (or Doc): a file or a directory of .txt / .jsonl / .spacy files"
    ),
    output: Path = typer.Argument(
        ..., metavar="OUTPUT", help="A directory of Parquet shards, or an .hdf5 file in AllenNLP's layout"
    ),
    model: Optional[str] = typer.Option(
        None,
        metavar="NAME|URL|DIR",
        help="The biLM: a name of `spacy-elmo models`, a URL or a directory" + default("en"),
    ),
    options_file: Optional[Path] = typer.Option(None, help="ELMo options.json" + default("the bundled biLM")),
    weight_file: Optional[Path] = typer.Option(None, help="ELMo weights.hdf5" + default("the bundled biLM")),
    settings: Optional[Dict[str, Any]] = None,
    format: Optional[str] = typer.Option(
        None, help="hdf5 or parquet" + default("hdf5 for OUTPUT ending .hdf5/.h5, else parquet")
    ),
    engine: str = typer.Option(
        "local", help="local (this process) or ray (Parquet only; pip install 'spacy-elmo[ray]')"
    ),
    workers: int = typer.Option(2, help="Ray: biLM actors, one model load each"),
    ray_address: Optional[str] = typer.Option(
        None, help="Ray: address of a running cluster" + default("start a local Ray")
    ),
    threads: Optional[int] = typer.Option(None, help="Torch threads per process" + default("torch's choice")),
    device: str = typer.Option(
        "auto",
        help="Where the biLM runs: cpu, cuda (= cuda:0) or cuda:N; auto: cuda:0 when torch sees a CUDA GPU, "
        "else the CPU. Ray: the workers' device, a GPU each only with --gpus-per-worker",
    ),
    gpus_per_worker: float = typer.Option(
        0.0,
        help="Ray: GPUs each worker asks Ray for (its num_gpus), and runs its biLM on; 0: CPU workers; "
        "a fraction shares a GPU (0.5: two workers per GPU)",
    ),
    progress: bool = typer.Option(True, help="Show a progress bar"),
) -> None:
    """ELMo layers of every sentence of INPUT, stored in OUTPUT; rerun the same command to resume."""
    from ..bilm import BiLM
    from ..embed import parse_layers, run_embed
    from ..published.resolve import resolve_pretrained

    with reported(ValueError, OSError, ImportError):
        given = dict(settings or {})
        given["layers"], given["mix"] = parse_layers(given.get("layers", EmbedSettings.layers))
        if model is not None:
            if options_file is not None or weight_file is not None:
                raise ValueError("give --model or --options-file/--weight-file, not both")
            options_file, weight_file = resolve_pretrained(model, check=BiLM.from_files)
        summary = run_embed(
            input_path,
            output,
            EmbedSettings(**given),
            options_file,
            weight_file,
            format=format,
            engine=engine,  # type: ignore[arg-type]
            workers=workers,
            ray_address=ray_address,
            threads=threads,
            device=device,
            prefer_gpu=True,
            gpus_per_worker=gpus_per_worker,
            progress=progress,
        )
    typer.echo(f"{output}: {summary}")
