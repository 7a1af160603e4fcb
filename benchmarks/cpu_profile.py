"""Where a biLM pass spends its CPU time, per precision: products, dtype conversions, the rest.

Issue 35's profile of a bf16 batch on an AMX Xeon found a third of the time in dtype conversions;
this prints that breakdown for the check's batches on whatever CPU runs it, so that a session
lent a machine of another kind (the GPU machine's AMX Xeon) learns in one short run where its
time goes. The biLM at the published Original size (untrained weights: they cost what trained ones
do), ``--rows`` sentences of ``--words`` to ``--max-words`` made-up words (every token through the
char CNN, as fresh words are; ``benchmarks/auto_precision.py``'s batches), ``--passes`` passes
under ``torch.profiler`` after one untimed pass per precision (packs, copies, kernels). Printed per
precision: tokens/s outside the profiler and under it, the share of self CPU time by kind of
operator, and the ``--top`` operators by self CPU time with their input shapes.

Read the shares against the two rates: the profiler slows some operators far more than others.
On a 2-core AMD EPYC (benchmarks/results/cpu_profile_epyc.txt) it made a bf16 pass 1.65x as long,
nearly all of it in the dtype conversions' ``copy_`` into fresh temporaries (the recurrent product
of a step, (2, 64, 16,384) bf16 to float32: 4.6 ms a call profiled, where the whole step, product
and addition, takes about 3.8 ms alone; keeping that product in a reused float32 buffer instead gained
nothing), while an int8 pass, with few conversions, kept its speed. Time a suspect operator alone,
in place, before acting on its share.

    OMP_NUM_THREADS=2 python benchmarks/cpu_profile.py [--precisions int8,bf16] [--threads 2]
    OMP_NUM_THREADS=2 taskset -c 2,3 python benchmarks/cpu_profile.py --threads 2   # 2 cores of a larger machine
"""

import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

import torch
import typer
from torch.profiler import profile

from spacy_elmo import BiLM

sys.path.insert(0, str(Path(__file__).parent))
from auto_precision import ORIGINAL, random_words  # noqa: E402  (a sibling script: the check's batches)

app = typer.Typer(add_completion=False)

# Kinds of operators, by name, for the breakdown; anything else counts as "other" (element-wise
# math, indexing, allocation).
KINDS = {
    "products": ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::linear", "aten::matmul",
                 "quantized::linear_dynamic", "onednn::qlinear_pointwise"),
    "dtype conversions and copies": ("aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "aten::contiguous",
                                     "aten::cat", "aten::stack"),
}


def kind_of(name: str) -> str:
    return next((kind for kind, names in KINDS.items() if name in names), "other")


def tokens_per_second(model: BiLM, batches: List[List[List[str]]], passes: int) -> float:
    tokens = passes * sum(len(sentence) for batch in batches for sentence in batch)
    start = time.perf_counter()
    for _ in range(passes):
        for batch in batches:
            model.embed_sentences(batch)
    return tokens / (time.perf_counter() - start)


@app.command()
def main(
    precisions: str = typer.Option("int8,bf16", help="Comma-separated, of fp32, bf16, int8"),
    threads: int = typer.Option(2, help="torch.set_num_threads"),
    rows: int = typer.Option(64, help="Sentences per batch"),
    words: int = typer.Option(20, help="Fewest words per sentence"),
    max_words: int = typer.Option(30, help="Most words per sentence"),
    passes: int = typer.Option(2, help="Profiled passes over the batches"),
    top: int = typer.Option(15, help="Operators listed per precision"),
) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = BiLM(ORIGINAL, cache_size=0)
    batches = [random_words(rows, words, max_words, seed) for seed in range(2)]
    typer.echo(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU "
               f"{torch.backends.cpu.get_cpu_capability()}; {len(batches)} batches of {rows} sentences "
               f"of {words}-{max_words} made-up words, Original size")
    with torch.no_grad():
        for precision in precisions.split(","):
            model.precision = precision  # type: ignore[assignment]
            model.embed_sentences(batches[0][:4])  # packs, low-precision copies, kernels
            rate = tokens_per_second(model, batches, passes)
            with profile(record_shapes=True) as prof:
                profiled_rate = tokens_per_second(model, batches, passes)
            events = prof.key_averages(group_by_input_shape=True)
            by_kind: Dict[str, float] = defaultdict(float)
            for event in events:
                by_kind[kind_of(event.key)] += event.self_cpu_time_total
            total = sum(by_kind.values())
            shares = ", ".join(f"{kind} {by_kind[kind] / total:.0%}" for kind in [*KINDS, "other"])
            typer.echo(f"\n## {precision}: {rate:,.0f} tokens/s ({profiled_rate:,.0f} under the profiler); "
                       f"self CPU time: {shares}")
            typer.echo("| operator | input shapes | calls | self ms | share |\n|---|---|---|---|---|")
            for event in sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]:
                shapes = str([list(s) for s in event.input_shapes if s])[:70]
                typer.echo(f"| {event.key} | {shapes} | {event.count} | {event.self_cpu_time_total / 1e3:.1f} | "
                           f"{event.self_cpu_time_total / total:.1%} |")


if __name__ == "__main__":
    app()
