"""Training speed of a pretraining preset: tokens per second (per direction) after warm-up.

    python benchmarks/pretrain_speed.py --preset small [--corpus PATH] [--steps 30] [--precision auto]

Without --corpus, the harness's Zipfian random-word corpus is generated in a temporary directory
(the vocabulary pass is not timed). Tokens are window positions, boundaries included, summed over
the batch: the unit of the training log's tokens_per_s. ``--precision`` is that of the matrix
products, as ``spacy-elmo pretrain --precision`` (``auto`` measured on a CPU, untimed: see
spacy_elmo.bilm.precision.autotune; bf16 is faster than fp32 on some CPUs without AMX, slower on others).
"""

import tempfile
from pathlib import Path
from typing import Optional

import torch
import typer

from harness import machine, timed, zipf_corpus
from spacy_elmo.bilm.precision.resolved import PRECISIONS
from spacy_elmo.pretraining import get_preset
from spacy_elmo.pretraining.distributed import Distributed
from spacy_elmo.pretraining.train import Trainer

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command()
def main(
    preset: str = typer.Option("small", help="A preset of spacy-elmo pretrain"),
    corpus: Optional[Path] = typer.Option(None, help="A document per line [default: a Zipfian random corpus]"),
    steps: int = typer.Option(30, help="Timed steps"),
    warmup: int = typer.Option(5, help="Untimed steps first"),
    threads: int = typer.Option(torch.get_num_threads(), help="torch.set_num_threads"),
    precision: str = typer.Option("auto", help=f"The products' precision: {', '.join(PRECISIONS)}"),
) -> None:
    if precision not in PRECISIONS:
        raise typer.BadParameter(f"--precision {precision!r}: one of {', '.join(PRECISIONS)}")
    torch.set_num_threads(threads)
    chosen = get_preset(preset)
    with tempfile.TemporaryDirectory() as tmp:
        if corpus is None:
            corpus = Path(tmp) / "corpus.txt"
            zipf_corpus(corpus)
        config = chosen.training.updated(max_steps=warmup + steps, precision=precision)
        trainer = Trainer(
            Distributed(),
            corpus,
            Path(tmp) / "out",
            chosen.options,
            config,
            dev_path=None,
            init_from=None,
            resume=False,
            progress=False,
        )
        for _ in range(warmup):
            trainer._train_step()
        seconds = timed(lambda: [trainer._train_step() for _ in range(steps)])
    tokens = steps * config.batch_size * config.window
    n_params = sum(p.numel() for p in trainer.loss.parameters())
    print(machine())
    print(
        f"preset {preset}: {n_params / 1e6:.1f} M parameters (softmax included), "
        f"batch {config.batch_size} x window {config.window}, {config.n_negatives or 'full'} softmax, "
        f"{threads} thread(s), {precision} precision ({trainer.bilm.runtime.resolved_precision.dtype})"
    )
    print(
        f"{tokens / seconds:.0f} tokens/s ({seconds / steps * 1000:.0f} ms/step); "
        f"5 M tokens in {5e6 / (tokens / seconds) / 3600:.2f} h"
    )


if __name__ == "__main__":
    app()
