"""Training speed of a pretraining preset: tokens per second (per direction) after warm-up.

    python benchmarks/pretrain_speed.py --preset small [--corpus PATH] [--steps 30] [--precision auto]

Without --corpus, a Zipfian random-word corpus is generated in a temporary directory (the
vocabulary pass is not timed). Tokens are window positions, boundaries included, summed over
the batch: the unit of the training log's tokens_per_s. ``--precision`` is that of the matrix
products, as ``spacy-elmo pretrain --precision`` (``auto`` measured on a CPU, untimed: see
spacy_elmo.bilm.autotune; bf16 is faster than fp32 on some CPUs without AMX, slower on others).
"""

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch

from spacy_elmo.bilm.precision import PRECISIONS
from spacy_elmo.pretraining import get_preset
from spacy_elmo.pretraining.distributed import Distributed
from spacy_elmo.pretraining.train import Trainer


def zipf_corpus(path: Path, n_documents: int = 3000, vocab: int = 30_000, seed: int = 0) -> None:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    with path.open("w", encoding="utf8") as f:
        for _ in range(n_documents):
            f.write(" ".join(rng.choices(words, weights, k=rng.randint(10, 60))) + " .\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus
        if corpus is None:
            corpus = Path(tmp) / "corpus.txt"
            zipf_corpus(corpus)
        config = preset.training.updated(max_steps=args.warmup + args.steps, precision=args.precision)
        trainer = Trainer(
            Distributed(),
            corpus,
            Path(tmp) / "out",
            preset.options,
            config,
            dev_path=None,
            init_from=None,
            resume=False,
            progress=False,
        )
        for _ in range(args.warmup):
            trainer._train_step()
        started = time.perf_counter()
        for _ in range(args.steps):
            trainer._train_step()
        seconds = time.perf_counter() - started
    tokens = args.steps * config.batch_size * config.window
    n_params = sum(p.numel() for p in trainer.loss.parameters())
    print(
        f"preset {args.preset}: {n_params / 1e6:.1f} M parameters (softmax included), "
        f"batch {config.batch_size} x window {config.window}, {config.n_negatives or 'full'} softmax, "
        f"{args.threads} thread(s), {args.precision} precision ({trainer.bilm.resolved_precision.dtype})"
    )
    print(
        f"{tokens / seconds:.0f} tokens/s ({seconds / args.steps * 1000:.0f} ms/step); "
        f"5 M tokens in {5e6 / (tokens / seconds) / 3600:.2f} h"
    )


if __name__ == "__main__":
    main()
