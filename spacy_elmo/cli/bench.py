"""``spacy-elmo bench``: the biLM's speed in each precision on this machine, what ``auto`` picks
here, and how close each comes to the machine's own matrix-product rate."""

from typing import TYPE_CHECKING, Dict, Optional, Tuple

import typer

from .app import app, default, reported

if TYPE_CHECKING:
    from ..bilm import BiLM
    from ..bilm.precision.autotune import Trial
    from ..bilm.runtime import BiLMRuntime


@app.command()
def bench(
    model: Optional[str] = typer.Option(
        None,
        metavar="NAME|URL|DIR",
        help="The biLM: a name of `spacy-elmo models`, a URL or a directory" + default("en"),
    ),
    size: Optional[str] = typer.Option(
        None,
        help="Instead of --model: untrained weights at a published size, original or small (nothing to download; "
        "the choice is printed, not recorded)",
    ),
    threads: Optional[int] = typer.Option(None, help="Torch threads" + default("torch's choice")),
) -> None:
    """Time the biLM's inference in each precision this CPU runs, and its training step in each but
    int8 (no gradient), and record what precision = "auto" picks here for each use (as a first use
    would: this measures again and replaces the record).

    It times the biLM's forward pass alone, in tokens/s, not the pipeline's nlp.pipe words/s
    (benchmarks/component_speed.py times that). Beside tokens/s, a roofline: this machine's own
    matrix-product rate per precision at the biLM's product shapes, timed in the same run, and the
    fraction of it the biLM reaches (spacy_elmo.bilm.precision.roofline).
    """
    import torch

    from ..bilm.precision.autotune import decisions_path, remeasure, torch_at
    from ..bilm.precision.timed_passes import FEW_ROWS, timing_batch
    from ..bilm.runtime import BiLMRuntime, BiLMSettings
    from ..bilm.settings import PRECISION_ENV, switches

    with torch_at(torch.get_num_threads() if threads is None else threads):  # restored: bench may run in-process
        with reported(ValueError, OSError):
            bilm, label = _bench_model(model, size)
        runtime = BiLMRuntime(bilm.eval(), BiLMSettings(cache_size=0))  # every timed pass encodes its tokens
        n_distinct = len({word for sentence in timing_batch() for word in sentence}) + 2  # the boundary tokens
        _describe(runtime, label, n_distinct)
        decision = remeasure(runtime, record=size is None)
        fp32 = decision.trials["fp32"].tokens_per_s
        typer.echo(
            f"| precision | tokens/s | / fp32 | a lone sentence, tokens/s | {FEW_ROWS} sentences, tokens/s "
            "| worst layer's mean cosine to fp32 |\n|---|---|---|---|---|---|"
        )
        for name, trial in decision.trials.items():
            batch = f"{trial.tokens_per_s:,.0f} | {trial.tokens_per_s / fp32:.2f}x"
            service = f"{trial.lone_tokens_per_s:,.0f} | {trial.few_tokens_per_s:,.0f}"
            typer.echo(f"| {name} | {batch} | {service} | {trial.cosine:.5f} |")
        training = remeasure(runtime, record=size is None, training=True)
        typer.echo("| training step (forward and backward) | tokens/s | / fp32 |\n|---|---|---|")
        for name, trial in training.trials.items():
            ratio = trial.tokens_per_s / training.trials["fp32"].tokens_per_s
            typer.echo(f"| {name} | {trial.tokens_per_s:,.0f} | {ratio:.2f}x |")
        where = f"recorded in {decisions_path()}" if size is None else "not recorded: untrained weights"
        typer.echo(f'precision "auto" here: {decision.choice} for inference, {training.choice} for training ({where})')
        _roofline(runtime, decision.trials, n_distinct)
        override = switches().precision
        if override:
            typer.echo(f"{PRECISION_ENV}={override} overrides it in this environment")


def _bench_model(model: Optional[str], size: Optional[str]) -> Tuple["BiLM", str]:
    """The biLM `bench` times: named (downloaded if need be), random at a published size, or the bundled `en`."""
    import torch

    from ..bilm import BiLM, ElmoOptions
    from ..bilm.model.options import ORIGINAL_SIZES
    from ..published import pretrained_files

    sizes = {"original": ElmoOptions(**ORIGINAL_SIZES), "small": ElmoOptions()}
    if model is not None and size is not None:
        raise ValueError("give --model or --size, not both")
    if size is not None:
        if size not in sizes:
            raise ValueError(f"--size must be one of {', '.join(sizes)}, got {size!r}")
        torch.manual_seed(0)  # the weights a new biLM starts from: they cost what trained ones do
        return BiLM(sizes[size]), f"{size} size, untrained weights"
    if model is not None:
        return BiLM.from_pretrained(model), model
    return BiLM.from_files(*pretrained_files("en")), "en (bundled)"


def _describe(runtime: "BiLMRuntime", label: str, n_distinct: int) -> None:
    """Print the machine, the biLM, its sizes and the batch that ``bench`` times (``n_distinct`` tokens)."""
    import torch

    from ..bilm.precision.compat import cpu_capabilities
    from ..bilm.precision.timed_passes import BATCH_ROWS, BATCH_WORDS

    capabilities = cpu_capabilities()
    flags = ", ".join(f for f in ("avx512_bf16", "amx_bf16", "avx512_vnni", "avx_vnni") if capabilities.get(f))
    typer.echo(
        f"CPU {capabilities.get('cpu_name', '?')} ({flags or 'none of avx512_bf16, amx_bf16, avx512_vnni'}), "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; biLM {label}"
    )
    options, words = runtime.model.options, BATCH_ROWS * BATCH_WORDS
    parameters = sum(p.numel() for p in runtime.parameters()) / 1e6
    typer.echo(
        f"sizes: lstm_dim {options.lstm_dim}, projection_dim {options.projection_dim}, n_layers {options.n_layers}, "
        f"n_highway {options.n_highway}, n_filters {options.n_filters} ({parameters:.1f} M parameters); "
        f"timed on {BATCH_ROWS} sentences of {BATCH_WORDS} made-up words ({words} tokens, "
        f"{BATCH_ROWS * (BATCH_WORDS + 2)} positions with the boundaries, {n_distinct} distinct)"
    )
    typer.echo(
        f"tokens/s: the {words} words of that batch per second of one forward pass of the biLM alone (zero "
        "initial state, no token cache: the char CNN encodes each distinct word; boundaries computed, not counted)"
    )
    typer.echo(
        "nlp.pipe's words/s is another figure: it adds tokenization, segmentation, batching and the layer mix, "
        "and runs larger batches of real, repeating words through the token cache; for it, time the pipeline "
        "with benchmarks/component_speed.py (in the repository)"
    )


def _roofline(runtime: "BiLMRuntime", trials: Dict[str, "Trial"], n_distinct: int) -> None:
    """Print the roofline of ``trials`` (each precision's timing, on a batch of ``n_distinct`` tokens)."""
    from ..bilm.precision.flops import flops_per_token
    from ..bilm.precision.roofline import bilm_products, product_rates, report, roofline
    from ..bilm.precision.timed_passes import BATCH_ROWS, BATCH_WORDS

    count, tuning = flops_per_token(runtime.model.options), runtime.tuning
    products = bilm_products(runtime.model.options, BATCH_ROWS, BATCH_WORDS + 2, n_distinct, tuning.roofline_rows)
    rates = product_rates(products, list(trials), tuning.roofline_seconds)
    lines = {p: roofline(p, trial.tokens_per_s, count, rates[p]) for p, trial in trials.items()}
    for line in report(count, rates, lines):
        typer.echo(line)
