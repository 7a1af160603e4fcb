"""Matrix-product rate of this CPU in float32 and bfloat16, at the biLM's shapes.

Without AMX torch runs bf16 on AVX512-BF16 (slower than float32 on one Xeon, faster on an AMD
EPYC) or emulates it (far slower). Training's ``precision="auto"`` follows the hardware rule
(bf16 only with AMX; spacy_elmo.bilm.precision), which this prints; inference measures the biLM
itself instead (``spacy-elmo bench``). Run before choosing a precision on a new machine:

    python benchmarks/matmul_precision.py
"""

import time
from typing import Tuple

import torch
import typer

from spacy_elmo.bilm.precision import Products

# Small enough that one emulated bf16 product takes seconds, not minutes.
SHAPES: Tuple[Tuple[int, int, int], ...] = (
    (1024, 1024, 1024),  # an input product
    (64, 128, 4096),  # one recurrent step of the Small biLM (projection 128, lstm 1024)
)

app = typer.Typer(add_completion=False)


def gflops(m: int, k: int, n: int, dtype: torch.dtype, seconds: float) -> float:
    """Best rate over repeated products within about ``seconds``."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    a @ b
    best, spent = 0.0, 0.0
    while spent < seconds:
        start = time.perf_counter()
        a @ b
        took = time.perf_counter() - start
        spent += took
        best = max(best, 2 * m * k * n / took / 1e9)
    return best


@app.command()
def main(threads: int = typer.Option(0, help="torch threads (0: torch's default)"), seconds: float = 3.0) -> None:
    if threads:
        torch.set_num_threads(threads)
    typer.echo(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
               f"{torch.backends.cpu.get_cpu_capability()}; training's precision 'auto' resolves to "
        f"{Products.resolve('auto', torch.device('cpu'), training=True).dtype}")
    typer.echo("| m x k x n | float32 GFLOP/s | bfloat16 GFLOP/s | bf16 / fp32 |\n|---|---|---|---|")
    for m, k, n in SHAPES:
        fp32 = gflops(m, k, n, torch.float32, seconds)
        bf16 = gflops(m, k, n, torch.bfloat16, seconds)
        typer.echo(f"| {m} x {k} x {n} | {fp32:.1f} | {bf16:.1f} | {bf16 / fp32:.2f}x |")


if __name__ == "__main__":
    app()
