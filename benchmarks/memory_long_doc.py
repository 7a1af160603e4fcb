"""Peak memory of the ``elmo`` pipe on one long document without sentence boundaries.

Each document length runs in a fresh subprocess, so ``ru_maxrss`` (the process's high-water
mark) belongs to that run alone. The child loads a biLM of the published Small sizes (random
weights: memory does not depend on the values), runs a short warm-up doc, records the
high-water mark (the *baseline*: interpreter, spaCy, torch, the model), then pipes one doc of N
tokens. Reported per length, in MiB:

- ``model``: the biLM's parameters;
- ``baseline``: the high-water mark before the long doc;
- ``peak - baseline``: what the long doc added;
- ``outputs``: what the pipe must hand back for the doc, by design: the layers it computes,
  (n_layers + 1, N, 2 * projection_dim) float32, and ``doc.tensor``, (N, 2 * projection_dim);
- ``working``: ``peak - baseline - outputs``, the memory used on the way. Bounded memory means
  this stays flat as N grows.

Run from the repository root:

    python benchmarks/memory_long_doc.py --lengths 10000,50000,100000
"""

import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Dict, List

import spacy
import torch
import typer
from spacy.tokens import Doc

from spacy_elmo import BiLM, ElmoOptions

MIB = 2**20
WORDS = ("the of and to in a is that for it as was with be by on not he I this are or his from at which "
         "but have an they you were her she there one been all their has would will what if can when so "
         "London Paris December government company market people research system Washington").split()

app = typer.Typer(add_completion=False)


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def measure(n_tokens: int, model_dir: Path) -> Dict[str, float]:
    """One long doc through a fresh pipeline; call in a fresh process."""
    warnings.simplefilter("ignore", UserWarning)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"options_file": str(model_dir / "options.json"),
                                           "weight_file": str(model_dir / "weights.hdf5")}})
    nlp.initialize()
    bilm = nlp.get_pipe("elmo").model.shims[0]._model
    list(nlp.pipe([Doc(nlp.vocab, words=WORDS)]))  # warm up: allocator, torch kernels, caches
    baseline = max_rss_bytes()
    rnd = random.Random(0)  # random words: no window repeats, so none is skipped as a duplicate
    doc = Doc(nlp.vocab, words=[rnd.choice(WORDS) for _ in range(n_tokens)])
    start = time.perf_counter()
    (doc,) = nlp.pipe([doc])
    elapsed = time.perf_counter() - start
    peak = max_rss_bytes()
    width, n_layers = bilm.output_dim, bilm.n_output_layers
    outputs = 4 * n_tokens * width * (n_layers + 1)  # the layers + doc.tensor, float32
    return {
        "tokens": n_tokens,
        "seconds": round(elapsed, 1),
        "model_mib": sum(p.numel() * p.element_size() for p in bilm.parameters()) / MIB,
        "baseline_mib": baseline / MIB,
        "added_mib": (peak - baseline) / MIB,
        "outputs_mib": outputs / MIB,
        "working_mib": (peak - baseline - outputs) / MIB,
    }


@app.command()
def main(
    lengths: str = typer.Option("10000,50000,100000", help="document lengths in tokens, comma-separated"),
    torch_threads: int = typer.Option(1, help="torch threads in each run"),
    child: int = typer.Option(0, hidden=True, help="internal: measure this length in this process"),
    model_dir: str = typer.Option("", hidden=True, help="internal: the biLM files"),
) -> None:
    torch.set_num_threads(torch_threads)
    if child:
        typer.echo(json.dumps(measure(child, Path(model_dir))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        BiLM(ElmoOptions()).to_files(Path(tmp) / "options.json", Path(tmp) / "weights.hdf5")  # published Small
        rows: List[Dict[str, float]] = []
        for n_tokens in (int(n) for n in lengths.split(",")):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(n_tokens), "--model-dir", tmp, "--torch-threads", str(torch_threads)],
                check=True, capture_output=True, text=True,
            ).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
    typer.echo(f"biLM parameters (published Small sizes): {rows[0]['model_mib']:.1f} MiB; torch threads {torch_threads}")
    typer.echo(f"{'tokens':>8} {'seconds':>8} {'baseline':>9} {'peak-base':>10} {'outputs':>8} {'working':>8}  (MiB)")
    for row in rows:
        typer.echo(f"{row['tokens']:>8} {row['seconds']:>8} {row['baseline_mib']:>9.1f} {row['added_mib']:>10.1f} "
                   f"{row['outputs_mib']:>8.1f} {row['working_mib']:>8.1f}")


if __name__ == "__main__":
    app()
