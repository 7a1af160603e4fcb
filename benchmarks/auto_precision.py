"""Is ``precision="auto"`` as fast as the fastest explicit precision on this CPU, and how close to the
machine's own matrix-product rate does each run?

At the published Original size (untrained weights: they cost what trained ones do), the first use of
``auto`` measures and records its decision (timed here, with where it came from); a second "load"
(the process's memory of it cleared) must read it back without timing. Then ``auto`` and each
explicit precision run the same random-word batches of ``--rows`` sentences of ``--words`` to
``--max-words`` words (no token cache: every word goes through the char CNN, as fresh words do),
interleaved after one untimed run each, ``--repeats`` rounds; the median tokens/s of each and its
range are printed, and auto's ratio to the fastest (the target: at least 0.90). Then the roofline:
this machine's fp32 and bf16 product rates at the biLM's shapes for these batches
(``spacy_elmo.bilm.precision.roofline``, timed in the same run), and each precision's FLOP rate (tokens/s x
204.3 MFLOP per token) as a fraction of the best of them (the target for ``auto``: at least 0.60 on
a CPU with AVX512-BF16 and no AMX, 0.40 with AMX).

    python benchmarks/auto_precision.py [--threads 2] [--rows 64] [--words 20] [--max-words 30]
        [--batches 2] [--repeats 5] [--cache DIR]   # default: a fresh temporary directory, so that auto measures
        [--as-avx2]   # the kernels of an AVX2-only CPU (harness.as_avx2_cpu)
"""

import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import typer

from harness import as_avx2_cpu, fresh_sentences, interleaved, machine
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm import settings
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.bilm.precision import autotune
from spacy_elmo.bilm.precision.flops import flops_per_token
from spacy_elmo.bilm.precision.roofline import DTYPES, bilm_products, product_rates

ORIGINAL = ElmoOptions(**ORIGINAL_SIZES)

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def roofline_fractions(found: Dict[str, float], batches: List[List[List[str]]]) -> None:
    """Print the machine's product rates at the biLM's shapes and each precision's fraction of the best."""
    rows = len(batches[0])
    positions = max(len(sentence) for sentence in batches[0]) + 2
    distinct = len({word for batch in batches for sentence in batch for word in sentence})
    rates = product_rates(bilm_products(ORIGINAL, rows, positions, min(distinct, 2048)), list(DTYPES))
    best_precision, best_product = max(
        ((p, product) for p, by_product in rates.items() for product in by_product), key=lambda pp: rates[pp[0]][pp[1]]
    )
    best = rates[best_precision][best_product]
    typer.echo(f"machine's best product rate: {best / 1e9:,.0f} GFLOP/s ({best_precision}, {best_product.describe()})")
    per_token = flops_per_token(ORIGINAL).total
    typer.echo("| precision | tokens/s | GFLOP/s | fraction of the best |\n|---|---|---|---|")
    for precision, rate in found.items():
        typer.echo(f"| {precision} | {rate:,.0f} | {rate * per_token / 1e9:,.0f} | {rate * per_token / best:.2f} |")


def first_and_second_decision(model: BiLM) -> None:
    """Time auto's decision at first use (measured or read) and at a second load (read, untimed)."""
    for label in ("first use", "second load"):
        model.runtime.decisions.made.clear()  # as in a new process
        start = time.perf_counter()
        decision = autotune.decide(model.runtime)
        typer.echo(
            f"{label}: auto = {decision.choice} ({decision.source}, {time.perf_counter() - start:.2f} s): "
            f"{autotune.describe(decision)}"
        )


def rates(model: BiLM, batches: List[List[List[str]]], precisions: List[str], repeats: int) -> Dict[str, float]:
    """Median tokens/s of each precision over interleaved rounds of every batch (each warmed up once:
    kernels, bf16 copies, int8 packs); each median's range is printed."""
    n_tokens = sum(len(sentence) for batch in batches for sentence in batch)

    def embed(precision: str) -> Callable[[], None]:
        def run() -> None:
            model.runtime.precision = precision  # type: ignore[assignment]
            for batch in batches:
                model.embed_sentences(batch)

        return run

    timings = interleaved({p: embed(p) for p in precisions}, repeats)
    for precision, timing in timings.items():
        typer.echo(f"{precision}: {timing.rate(n_tokens, ' tokens/s')}")
    return {p: n_tokens / timing.median for p, timing in timings.items()}


@app.command()
def main(
    threads: int = typer.Option(2, help="torch.set_num_threads"),
    rows: int = typer.Option(64, help="Sentences per batch"),
    words: int = typer.Option(20, help="Words per sentence, at least"),
    max_words: Optional[int] = typer.Option(None, help="Words per sentence, at most [default: --words]"),
    batches: int = typer.Option(2, help="Batches per timed run"),
    repeats: int = typer.Option(5, help="Interleaved rounds; the median counts"),
    cache: Optional[Path] = typer.Option(None, help="SPACY_ELMO_CACHE for the decision [default: a fresh one]"),
    as_avx2: bool = typer.Option(False, "--as-avx2", help="The kernels of an AVX2-only CPU (harness.as_avx2_cpu)"),
) -> None:
    if as_avx2:
        as_avx2_cpu()
    torch.set_num_threads(threads)
    os.environ.pop(settings.PRECISION_ENV, None)
    os.environ["SPACY_ELMO_CACHE"] = str(cache or tempfile.mkdtemp(prefix="spacy-elmo-auto-"))
    torch.manual_seed(0)  # untrained weights, as pretraining starts from: they cost what trained ones do
    model = BiLM(ORIGINAL, cache_size=0, max_batch_tokens=10**9).eval()
    typer.echo(f"{machine()}; decisions in {autotune.decisions_path()}")
    first_and_second_decision(model)
    batch_list = [list(fresh_sentences(rows, (words, max_words or words), (1, 10), seed)) for seed in range(batches)]
    found = rates(model, batch_list, ["auto", *autotune.candidates()], repeats)
    fastest = max(rate for precision, rate in found.items() if precision != "auto")
    typer.echo(f"auto / fastest explicit: {found['auto'] / fastest:.2f} (the target: at least 0.90)")
    roofline_fractions(found, batch_list)


if __name__ == "__main__":
    app()
