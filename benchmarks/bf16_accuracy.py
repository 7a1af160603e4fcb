"""How far bf16 (or int8) products move the biLM's layers from float32, on real text.

Runs one biLM (default: the bundled English one; ``--size original|small``: random weights of a
published size, seeded) in float32 and in ``--precision`` (bf16 or int8) over the first lines of
a text file, a sentence per line, split on whitespace (without one: 64 made-up sentences of 20 to
30 words), and prints per layer the mean and the smallest per-token cosine between the two, and
the largest absolute difference. The contract of both is a mean per-token cosine of at least
0.999 in every layer.

    python benchmarks/bf16_accuracy.py project/corpus/lm/dev.txt [--lines 2000] [--precision int8]
        [--options-file F --weight-file F]
    python benchmarks/bf16_accuracy.py --size original --precision int8
"""

import time
from pathlib import Path
from typing import Optional

import torch
import typer

from harness import fresh_sentences, layer_agreement, machine, text_lines
from spacy_elmo import BiLM, ElmoOptions, pretrained_files
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES

SIZES = {"original": ORIGINAL_SIZES, "small": {}}  # ElmoOptions' defaults are the Small size's

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command()
def main(
    text: Optional[Path] = typer.Argument(None, help="A sentence per line [default: made-up sentences]"),
    lines: int = typer.Option(2000, help="How many lines of TEXT to read"),
    options_file: Optional[Path] = typer.Option(None, help="default: the bundled biLM --pretrained"),
    weight_file: Optional[Path] = typer.Option(None),
    pretrained: str = typer.Option("en", help="Which bundled biLM, without --options-file/--weight-file"),
    precision: str = typer.Option("bf16", help="Compared with fp32: bf16 or int8"),
    size: Optional[str] = typer.Option(None, help=f"Random weights of a size: {', '.join(SIZES)}"),
    seed: int = typer.Option(0, help="The random weights' seed, with --size"),
) -> None:
    if size is not None and size not in SIZES:
        raise typer.BadParameter(f"--size {size}: one of {', '.join(SIZES)}")
    files = (options_file, weight_file) if options_file and weight_file else pretrained_files(pretrained)
    sentences = text_lines(text, lines) if text else list(fresh_sentences(64, (20, 30), (1, 10)))
    typer.echo(machine())
    layers = {}
    for name in ("fp32", precision):
        if size is None:
            bilm = BiLM.from_files(*files, precision=name, cache_size=0)
        else:
            torch.manual_seed(seed)
            bilm = BiLM(ElmoOptions(**SIZES[size]), precision=name, cache_size=0).eval()
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
