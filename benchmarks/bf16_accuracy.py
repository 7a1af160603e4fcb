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
from typing import Optional

import typer

from harness import layer_agreement, machine, text_lines
from spacy_elmo import BiLM, pretrained_files

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


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
    sentences = text_lines(text, lines)
    typer.echo(machine())
    layers = {}
    for name in ("fp32", precision):
        bilm = BiLM.from_files(*files, precision=name, cache_size=0)
        start = time.perf_counter()
        layers[name] = bilm.embed_sentences(sentences)
        typer.echo(f"{name}: {time.perf_counter() - start:.1f} s")
    typer.echo(f"{len(sentences)} sentences, {sum(len(s) for s in sentences)} tokens")
    typer.echo("| layer | mean cosine | smallest cosine | largest abs difference | mean abs fp32 value |")
    typer.echo("|---|---|---|---|---|")
    for k, row in enumerate(layer_agreement(layers[precision], layers["fp32"])):
        typer.echo(
            f"| {k} | {row['mean_cosine']:.6f} | {row['smallest_cosine']:.6f} | {row['largest_difference']:.4f} "
            f"| {row['mean_abs']:.3f} |"
        )


if __name__ == "__main__":
    app()
