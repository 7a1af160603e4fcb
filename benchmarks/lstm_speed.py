"""The LSTM stack alone on a CPU, per product precision: what an ``nlp.pipe`` pass spends most of its time in.

    python benchmarks/lstm_speed.py [--precisions int8,bf16,fp32] [--threads 2] [--repeats 15]

``BiLSTMStack`` at the published Original size (random weights), inference, on the batches an
``nlp.pipe(batch_size=64)`` of the 480 English sentences of examples/word_senses.jsonl makes:
each batch's sentence lengths (spaCy's blank English tokens, plus the two boundary tokens),
random token vectors. One repeat runs every batch; printed per precision: the fastest and the
median repeat, and words/s at the fastest. The fastest repeat is the figure least moved by other
work on a shared machine, so two commits compare by running this on each, one after the other.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import List

import spacy
import torch

from spacy_elmo import ElmoOptions
from spacy_elmo.bilm.lstm import BiLSTMStack
from spacy_elmo.bilm.precision import INT8

sys.path.insert(0, str(Path(__file__).parent))
from peer_transformers import load_texts  # noqa: E402  (a sibling script: the same 480 sentences)

DTYPES = {"int8": INT8, "bf16": torch.bfloat16, "fp32": torch.float32}
BATCH_SIZE = 64


def batch_lengths() -> List[torch.Tensor]:
    """Per ``nlp.pipe`` batch, its sentences' lengths with the boundary tokens."""
    lengths = [len(doc) + 2 for doc in spacy.blank("en").pipe(load_texts(480))]
    return [torch.tensor(lengths[i : i + BATCH_SIZE]) for i in range(0, len(lengths), BATCH_SIZE)]


def one_pass(stack: BiLSTMStack, inputs: List[torch.Tensor], batches: List[torch.Tensor], dtype: torch.dtype) -> float:
    """Seconds to run every batch through the stack."""
    start = time.perf_counter()
    for tokens, lengths in zip(inputs, batches):
        stack(tokens, lengths, stack.zero_state(len(lengths), tokens), dtype)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precisions", default="int8,bf16,fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    options = ElmoOptions(lstm_dim=4096, projection_dim=512, n_layers=2, n_highway=2)
    stack = BiLSTMStack(options)
    batches = batch_lengths()
    inputs = [torch.randn(int(lengths.max()), len(lengths), options.projection_dim) for lengths in batches]
    words = sum(int(lengths.sum()) - 2 * len(lengths) for lengths in batches)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {words} words in {len(batches)} batches "
          f"of up to {BATCH_SIZE} sentences; LSTM of the Original size")
    with torch.no_grad():
        for name in args.precisions.split(","):
            one_pass(stack, inputs, batches, DTYPES[name])  # packs, copies, caches
            seconds = sorted(one_pass(stack, inputs, batches, DTYPES[name]) for _ in range(args.repeats))
            print(f"{name}: fastest {seconds[0] * 1e3:.0f} ms, median {statistics.median(seconds) * 1e3:.0f} ms; "
                  f"{words / seconds[0]:,.0f} words/s at the fastest")


if __name__ == "__main__":
    main()
