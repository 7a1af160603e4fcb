"""The LSTM stack alone on a CPU, per product precision: what an ``nlp.pipe`` pass spends most of its time in.

    python benchmarks/lstm_speed.py [--precisions int8,bf16,fp32] [--threads 2] [--repeats 15]

``BiLSTMStack`` at the published Original size (random weights), inference, on the batches an
``nlp.pipe(batch_size=64)`` of the 480 English sentences of examples/word_senses.jsonl makes:
each batch's sentence lengths (spaCy's blank English tokens, plus the two boundary tokens),
random token vectors. One pass runs every batch; the precisions take turns in ``--repeats``
rounds after one untimed pass each (packs, copies, caches). Printed per precision: the median
pass and the range, and words/s at the median and the fastest. Two commits compare by running
this on each, one after the other.
"""

from typing import Callable, List

import spacy
import torch
import typer

from harness import interleaved, machine, word_sense_texts
from spacy_elmo import ElmoOptions
from spacy_elmo.bilm.model.lstm import BiLSTMStack
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.bilm.precision.resolved import INT8

DTYPES = {"int8": INT8, "bf16": torch.bfloat16, "fp32": torch.float32}
BATCH_SIZE = 64


def batch_lengths() -> List[torch.Tensor]:
    """Per ``nlp.pipe`` batch, its sentences' lengths with the boundary tokens."""
    lengths = [len(doc) + 2 for doc in spacy.blank("en").pipe(word_sense_texts(480))]
    return [torch.tensor(lengths[i : i + BATCH_SIZE]) for i in range(0, len(lengths), BATCH_SIZE)]


def one_pass(
    stack: BiLSTMStack, inputs: List[torch.Tensor], batches: List[torch.Tensor], dtype: torch.dtype
) -> Callable[[], None]:
    """A pass of every batch through the stack, to time."""

    def run() -> None:
        with torch.no_grad():
            for tokens, lengths in zip(inputs, batches):
                stack(tokens, lengths, stack.zero_state(len(lengths), tokens), dtype)

    return run


app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command()
def main(
    precisions: str = typer.Option("int8,bf16,fp32", help=f"Comma-separated, of {', '.join(DTYPES)}"),
    threads: int = typer.Option(2, help="torch.set_num_threads"),
    repeats: int = typer.Option(15, help="Interleaved rounds"),
) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    options = ElmoOptions(**ORIGINAL_SIZES)
    stack = BiLSTMStack(options)
    batches = batch_lengths()
    inputs = [torch.randn(int(lengths.max()), len(lengths), options.projection_dim) for lengths in batches]
    words = sum(int(lengths.sum()) - 2 * len(lengths) for lengths in batches)
    print(machine())
    print(f"{words} words in {len(batches)} batches of up to {BATCH_SIZE} sentences; LSTM of the Original size")
    runs = {name: one_pass(stack, inputs, batches, DTYPES[name]) for name in precisions.split(",")}
    for name, timing in interleaved(runs, repeats).items():
        print(
            f"{name}: pass {timing.describe()}; {timing.rate(words, ' words/s')}, "
            f"{words / timing.fastest:,.0f} words/s at the fastest"
        )


if __name__ == "__main__":
    app()
