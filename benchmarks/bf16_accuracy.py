"""How far bf16 (or int8) products move the biLM's layers from float32, on real text.

Runs one biLM (default: the bundled English one) in float32 and in ``--precision`` (bf16 or
int8) over the first lines of a text file, a sentence per line, split on whitespace, and prints
per layer the mean and the smallest per-token cosine between the two, and the largest absolute
difference. The contract of both is a mean per-token cosine of at least 0.999 in every layer.

    python benchmarks/bf16_accuracy.py project/corpus/lm/dev.txt [--lines 2000] [--precision int8]
        [--options-file F --weight-file F]
"""

import time
from pathlib import Path
from typing import List, Optional

import numpy
import typer

from spacy_elmo import BiLM, pretrained_files

app = typer.Typer(add_completion=False)


def read_sentences(path: Path, lines: int) -> List[List[str]]:
    with path.open(encoding="utf8") as f:
        sentences = [line.split() for _, line in zip(range(lines), f)]
    return [s for s in sentences if s]


@app.command()
def main(
    text: Path = typer.Argument(..., help="A sentence per line"),
    lines: int = typer.Option(2000, help="How many lines of TEXT to read"),
    options_file: Optional[Path] = typer.Option(None, help="default: the bundled biLM --pretrained"),
    weight_file: Optional[Path] = typer.Option(None),
    pretrained: str = typer.Option("en", help="Which bundled biLM, without --options-file/--weight-file"),
    precision: str = typer.Option("bf16", help="Compared with fp32: bf16 or int8"),
) -> None:
    files = (options_file, weight_file) if options_file and weight_file else pretrained_files(pretrained)
    sentences = read_sentences(text, lines)
    layers = {}
    for name in ("fp32", precision):
        bilm = BiLM.from_files(*files, precision=name, cache_size=0)
        start = time.perf_counter()
        layers[name] = numpy.concatenate(bilm.embed_sentences(sentences), axis=1)
        typer.echo(f"{name}: {time.perf_counter() - start:.1f} s")
    fp32, other = layers["fp32"], layers[precision]
    typer.echo(f"{len(sentences)} sentences, {fp32.shape[1]} tokens")
    typer.echo("| layer | mean cosine | smallest cosine | largest abs difference | mean abs fp32 value |\n|---|---|---|---|---|")
    for k, (a, b) in enumerate(zip(fp32, other)):
        cosine = (a * b).sum(-1) / (numpy.linalg.norm(a, axis=-1) * numpy.linalg.norm(b, axis=-1))
        typer.echo(f"| {k} | {cosine.mean():.6f} | {cosine.min():.6f} | {numpy.abs(a - b).max():.4f} | {numpy.abs(a).mean():.3f} |")


if __name__ == "__main__":
    app()
