"""The command line: ``spacy-elmo pretrain``, ``export``, ``copy-pretrained``, ``embed``, ``bench``, ``models``
and ``download`` (also ``python -m spacy_elmo ...``)."""

import functools
import inspect
import os
import re
import shutil
from dataclasses import Field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple, get_args

import typer

from .embed.settings import EmbedSettings
from .pretraining.config import PRESETS, TrainingConfig

if TYPE_CHECKING:
    from .bilm import BiLM

DEFAULT_PRESET = "small"

app = typer.Typer(add_completion=False, no_args_is_help=True, help="ELMo for spaCy: train and export biLMs.")


@app.callback()
def main() -> None:
    """ELMo for spaCy: train and export biLMs."""


def default(text: str) -> str:
    """`` [default: text]`` for an option whose default is worked out at run time, as typer shows
    its own (the bracket escaped from rich markup, which would swallow it)."""
    return f" \\[default: {text}]"


def parse_duration(text: str) -> float:
    """Seconds from '3600', '90s', '90m', '1.5h'."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise typer.BadParameter(f"not a duration: {text!r} (use e.g. 3600, 90m, 2h)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


# Settings whose command-line text is not their value.
SETTING_PARSERS: Dict[str, Callable[[str], Any]] = {"max_time": parse_duration}


def setting_option(setting: Field, preset: Optional[str] = None) -> inspect.Parameter:
    """The option of a settings field, from the field's own documentation (see
    :func:`~spacy_elmo.option_fields.setting`). Without ``preset``, its default is the field's; with
    the name of a preset (:class:`TrainingConfig`'s), it is None, which leaves the preset's value,
    and the help shows that value."""
    meta = setting.metadata
    value = setting.default if preset is None else getattr(PRESETS[preset].training, setting.name)
    declarations = [meta["flag"]] if "flag" in meta else []  # "--yes/--no" for a bool
    if value is None:
        shown = default(meta["unset"])
    elif preset is None:
        shown = ""  # typer shows the option's own default
    elif isinstance(value, bool) and declarations:
        shown = default(meta["flag"].split("/")[0 if value else 1].lstrip("-"))
    else:
        shown = default(f"the preset's; {preset}: {value}")
    parser = SETTING_PARSERS.get(setting.name)
    value_type = next((t for t in get_args(setting.type) if t is not type(None)), setting.type)
    if parser is not None or not isinstance(value_type, type):  # parsed text, or a Literal of names
        value_type = str
    option = typer.Option(setting.default if preset is None else None, *declarations, help=meta["help"] + shown, parser=parser)
    annotation = value_type if preset is None and setting.default is not None else Optional[value_type]
    return inspect.Parameter(setting.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


def with_settings(settings_class: type, preset: Optional[str] = None) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Add an option per field of the dataclass ``settings_class`` to the command, in place of its
    ``settings`` parameter, which receives the values given as a dict (see :func:`setting_option`:
    with ``preset``, only those given on the command line; the others keep the preset's). A field
    ``given_by`` another has no option: the command reads it from that one's."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command)
        kind = signature.parameters["settings"].kind
        options = [setting_option(s, preset).replace(kind=kind) for s in fields(settings_class) if "given_by" not in s.metadata]
        parameters = []
        for name, parameter in signature.parameters.items():
            parameters.extend(options if name == "settings" else [parameter])

        @functools.wraps(command)
        def with_given_settings(**kwargs: Any) -> None:
            given = {option.name: kwargs.pop(option.name) for option in options}
            command(**kwargs, settings={name: value for name, value in given.items() if value is not None})

        with_given_settings.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return with_given_settings

    return decorate


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
        help="Continue from a standard ELMo file pair (paths or URLs); with vocab.txt and softmax.hdf5 beside WEIGHTS (as pretrain exports them) "
        "also from its softmax, else with a new one (domain fine-tuning)",
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

    from .bilm import ElmoFileError
    from .fileio import OutputError, standard_files
    from .pretraining import export_pipeline, get_preset
    from .pretraining import pretrain as run_pretraining
    from .pretraining.checkpoint import Interrupted

    if threads is not None:
        torch.set_num_threads(threads)
    try:
        chosen = get_preset(preset)
        config = chosen.training.updated(**(settings or {}))
        init = _init_files(init_from, init_from_model)
        metrics = run_pretraining(
            input_path, output_dir, chosen.options, config, dev, init, resume, progress, init_tokens_from
        )
    except (ValueError, FileNotFoundError, ElmoFileError, OutputError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    except Interrupted as err:
        if str(err):  # the process that saved the checkpoint
            typer.secho(str(err), fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(128 + err.signal_number) from err  # the shell's status for a process a signal stopped
    if not metrics:  # not the main process of a distributed run
        return
    if "eval" in metrics:
        for initial, result in metrics["eval"].items():
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
    from .published import pretrained_files

    try:
        files = pretrained_files(name)
    except (ValueError, FileNotFoundError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    output_dir.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copyfile(path, output_dir / path.name)
    typer.echo(f"Copied the bundled biLM {name!r} to {output_dir / files[0].name} and {output_dir / files[1].name}")


@app.command("export")
def export(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="The OUTPUT_DIR of a pretrain run, with its checkpoint.pt"),
    output_dir: Path = typer.Argument(..., metavar="OUTPUT_DIR", help="Gets options.json, weights.hdf5, vocab.txt, softmax.hdf5"),
) -> None:
    """Export the last checkpoint of a pretrain run, while it runs or after it stopped: to evaluate
    it, or to continue it elsewhere with `pretrain --init-from`."""
    from .pretraining.checkpoint import CHECKPOINT_NAME
    from .pretraining.continuation import export_checkpoint

    if output_dir.resolve() == run_dir.resolve():
        typer.secho("Error: OUTPUT_DIR must differ from RUN_DIR, whose end writes the same files", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)
    try:
        step = export_checkpoint(run_dir / CHECKPOINT_NAME, output_dir)
    except (ValueError, FileNotFoundError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    typer.echo(f"Exported the checkpoint of step {step} to {output_dir}")


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
        None, metavar="NAME|URL|DIR", help="The biLM: a name of `spacy-elmo models`, a URL or a directory" + default("en")
    ),
    options_file: Optional[Path] = typer.Option(None, help="ELMo options.json" + default("the bundled biLM")),
    weight_file: Optional[Path] = typer.Option(None, help="ELMo weights.hdf5" + default("the bundled biLM")),
    settings: Optional[Dict[str, Any]] = None,
    format: Optional[str] = typer.Option(None, help="hdf5 or parquet" + default("hdf5 for OUTPUT ending .hdf5/.h5, else parquet")),
    engine: str = typer.Option("local", help="local (this process) or ray (Parquet only; pip install 'spacy-elmo\\[ray]')"),
    workers: int = typer.Option(2, help="Ray: biLM actors, one model load each"),
    ray_address: Optional[str] = typer.Option(None, help="Ray: address of a running cluster" + default("start a local Ray")),
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
    from .bilm import BiLM, ElmoFileError
    from .embed import OutputError, parse_layers, run_embed
    from .published.resolve import resolve_pretrained

    try:
        given = dict(settings or {})
        given["layers"], given["mix"] = parse_layers(given.get("layers", EmbedSettings.layers))
        if model is not None:
            if options_file is not None or weight_file is not None:
                raise ValueError("give --model or --options-file/--weight-file, not both")
            options_file, weight_file = resolve_pretrained(model, check=BiLM.from_files)
        summary = run_embed(
            input_path, output, EmbedSettings(**given), options_file, weight_file, format=format, engine=engine,  # type: ignore[arg-type]
            workers=workers, ray_address=ray_address, threads=threads, device=device, prefer_gpu=True,
            gpus_per_worker=gpus_per_worker, progress=progress,
        )
    except (ValueError, OSError, ElmoFileError, OutputError, ImportError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    typer.echo(f"{output}: {summary}")


@app.command("models")
def models(
    lang: Optional[str] = typer.Option(
        None, "--lang", metavar="LANG",
        help="Only the biLMs for a pipeline of this language (spaCy's code: de, nb, zh ...)",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the registry as JSON: name -> language, url, license, cached, and every other field"
    ),
) -> None:
    """The published biLMs that `pretrained = NAME` and `download NAME` know, and which are cached."""
    import json

    from .published.registry import language_name, models_for_language, registered_models
    from .published.resolve import named_source

    try:
        registry = registered_models()
    except ValueError as err:  # a bad SPACY_ELMO_MODELS file
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    if lang is not None:
        registry = models_for_language(lang, registry)

    def cached(model: Any) -> str:
        if model.bundled:
            return "bundled"
        if model.unconfirmed:
            return "no-url"
        return "yes" if named_source(model).is_cached() else "no"

    if as_json:
        listing = {
            name: {"language": model.language, "url": model.url, "license": model.license,
                   "cached": cached(model) in ("yes", "bundled"), **model.to_json()}
            for name, model in registry.items()
        }
        typer.echo(json.dumps(listing, indent=2, ensure_ascii=False))
        return
    if not registry:
        typer.echo(
            f"No published biLM for {language_name(lang or '')}. Train one on your text with `spacy-elmo pretrain` "
            "(docs/pretraining.md), or add one you have with SPACY_ELMO_MODELS (docs/models.md)"
        )
        return
    rows = [("name", "language", "MB", "width", "cached")]
    for model in registry.values():
        megabytes = model.megabytes
        size = "" if megabytes is None else f"{'' if model.weights_bytes else '~'}{megabytes:.0f}"
        rows.append((model.name, model.language, size, str(model.width or ""), cached(model)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


@app.command()
def bench(
    model: Optional[str] = typer.Option(
        None, metavar="NAME|URL|DIR", help="The biLM: a name of `spacy-elmo models`, a URL or a directory" + default("en")
    ),
    size: Optional[str] = typer.Option(
        None,
        help="Instead of --model: untrained weights at a published size, original or small (nothing to download; "
        "the choice is printed, not recorded)",
    ),
    threads: Optional[int] = typer.Option(None, help="Torch threads" + default("torch's choice")),
) -> None:
    """Time the biLM's inference in each precision this CPU runs, and its training step in each
    but int8 (no gradient), and record what precision = "auto" picks here for its shapes, for each
    use (as their first use would; this measures again and replaces them).

    It prints the biLM, its sizes and the batch it times: the biLM's forward pass alone, in tokens/s,
    not the pipeline's nlp.pipe words/s (benchmarks/component_speed.py times that).

    Beside tokens/s, a roofline: this machine's own matrix-product rate per precision at the
    biLM's product shapes, timed in the same run, and the fraction of it the biLM reaches (its
    tokens/s times its FLOP per token, counted from the options: spacy_elmo.roofline)."""
    import torch

    from .bilm import ElmoFileError
    from .bilm.autotune import BATCH_ROWS, BATCH_WORDS, PRECISION_ENV, decisions_path, remeasure, timing_batch
    from .bilm.compat import cpu_capabilities
    from .bilm.flops import flops_per_token
    from .roofline import bilm_products, product_rates, report, roofline

    if threads is not None:
        torch.set_num_threads(threads)
    try:
        bilm, label = _bench_model(model, size)
    except (ValueError, OSError, ElmoFileError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    capabilities = cpu_capabilities()
    flags = ", ".join(f for f in ("avx512_bf16", "amx_bf16", "avx512_vnni", "avx_vnni") if capabilities.get(f))
    typer.echo(f"CPU {capabilities.get('cpu_name', '?')} ({flags or 'none of avx512_bf16, amx_bf16, avx512_vnni'}), "
               f"{torch.get_num_threads()} threads, torch {torch.__version__}; biLM {label}")
    options, batch = bilm.options, timing_batch()
    n_distinct = len({word for sentence in batch for word in sentence}) + 2  # the boundary tokens
    typer.echo(
        f"sizes: lstm_dim {options.lstm_dim}, projection_dim {options.projection_dim}, n_layers {options.n_layers}, "
        f"n_highway {options.n_highway}, n_filters {options.n_filters} ({sum(p.numel() for p in bilm.parameters()) / 1e6:.1f} M "
        f"parameters); timed on {BATCH_ROWS} sentences of {BATCH_WORDS} made-up words ({BATCH_ROWS * BATCH_WORDS} tokens, "
        f"{BATCH_ROWS * (BATCH_WORDS + 2)} positions with the boundaries, {n_distinct} distinct)"
    )
    typer.echo(
        f"tokens/s: the {BATCH_ROWS * BATCH_WORDS} words of that batch per second of one forward pass of the biLM alone "
        "(zero initial state, no token cache: the char CNN encodes each distinct word; boundaries computed, not counted)"
    )
    typer.echo(
        "nlp.pipe's words/s is another figure: it adds tokenization, segmentation, batching and the layer mix, "
        "and runs larger batches of real, repeating words through the token cache; for it, time the pipeline "
        "with benchmarks/component_speed.py (in the repository)"
    )
    decision = remeasure(bilm, record=size is None)
    fp32 = decision.trials["fp32"].tokens_per_s
    typer.echo("| precision | tokens/s | / fp32 | worst layer's mean cosine to fp32 |\n|---|---|---|---|")
    for name, trial in decision.trials.items():
        typer.echo(f"| {name} | {trial.tokens_per_s:,.0f} | {trial.tokens_per_s / fp32:.2f}x | {trial.cosine:.5f} |")
    training = remeasure(bilm, record=size is None, training=True)
    typer.echo("| training step (forward and backward) | tokens/s | / fp32 |\n|---|---|---|")
    for name, trial in training.trials.items():
        typer.echo(f"| {name} | {trial.tokens_per_s:,.0f} | {trial.tokens_per_s / training.trials['fp32'].tokens_per_s:.2f}x |")
    where = f"recorded in {decisions_path()}" if size is None else "not recorded: untrained weights"
    typer.echo(f"precision \"auto\" here: {decision.choice} for inference, {training.choice} for training ({where})")
    count = flops_per_token(options)
    rates = product_rates(bilm_products(options, BATCH_ROWS, BATCH_WORDS + 2, n_distinct), list(decision.trials))
    lines = {p: roofline(p, trial.tokens_per_s, count, rates[p]) for p, trial in decision.trials.items()}
    for line in report(count, rates, lines):
        typer.echo(line)
    if os.environ.get(PRECISION_ENV):
        typer.echo(f"{PRECISION_ENV}={os.environ[PRECISION_ENV]} overrides it in this environment")


def _bench_model(model: Optional[str], size: Optional[str]) -> Tuple["BiLM", str]:
    """The biLM `bench` times: named (downloaded if need be), random at a published size, or the bundled `en`."""
    import torch

    from .bilm import BiLM, ElmoOptions
    from .published import pretrained_files

    sizes = {"original": ElmoOptions(lstm_dim=4096, projection_dim=512, n_layers=2, n_highway=2), "small": ElmoOptions()}
    if model is not None and size is not None:
        raise ValueError("give --model or --size, not both")
    if size is not None:
        if size not in sizes:
            raise ValueError(f"--size must be one of {', '.join(sizes)}, got {size!r}")
        torch.manual_seed(0)  # the weights a new biLM starts from: they cost what trained ones do
        return BiLM(sizes[size], cache_size=0).eval(), f"{size} size, untrained weights"
    if model is not None:
        return BiLM.from_pretrained(model, cache_size=0).eval(), model
    return BiLM.from_files(*pretrained_files("en"), cache_size=0).eval(), "en (bundled)"


@app.command("download")
def download(
    name: str = typer.Argument(
        ..., metavar="NAME|URL", help="A name of `spacy-elmo models`, or a URL of a directory or an archive"
    ),
    force: bool = typer.Option(False, "--force", help="Fetch again, replacing the cached copy"),
    verify: bool = typer.Option(
        False, "--verify",
        help="Check a cached copy's sha256 against the one recorded at its download, reading every file "
        "(loads trust an unchanged size and modification time)",
    ),
) -> None:
    """Fetch a biLM into the cache ahead of use (Docker images, machines without network)."""
    from .bilm import BiLM, ElmoFileError
    from .bilm.manylangs import load_manylangs
    from .published.resolve import download_pretrained

    try:
        paths = download_pretrained(
            name, check=BiLM.from_files, force=force, verify=verify,
            check_directory=functools.partial(load_manylangs, BiLM),
        )
    except (ValueError, OSError, ElmoFileError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    typer.echo(f"{name}: {' and '.join(str(p) for p in paths)}{' (sha256 verified)' if verify else ''}")


def _init_files(init_from: Optional[Tuple[str, str]], init_from_model: Optional[str]) -> Optional[Tuple[Path, Path]]:
    """The files `pretrain` starts from: a pair, or a biLM named as everywhere else (downloaded if need be)."""
    from .bilm import BiLM
    from .published.resolve import resolve_files, resolve_pretrained

    if init_from is not None and init_from_model is not None:
        raise ValueError("give --init-from or --init-from-model, not both")
    if init_from_model is not None:
        return resolve_pretrained(init_from_model, check=BiLM.from_files)
    return None if init_from is None else resolve_files(*init_from, check=BiLM.from_files)
