"""Why ``precision="int8"`` leaves the char CNN in float32: its int8 highways lose the accuracy contract.

Runs the bundled English biLM over the first lines of a text file (a sentence per line, split on
whitespace) in float32, in the shipped int8 (LSTM products int8, char CNN float32), and in int8
with the char CNN's highways and projection int8 too (``spacy_elmo.bilm.int8.pack`` and ``linear``,
patched into ``spacy_elmo.bilm.char_cnn.linear`` and ``spacy_elmo.bilm.token_encoder.linear`` for
the run). Prints per layer the mean per-token cosine to float32; the contract is at least 0.999 in
every layer.

    python benchmarks/int8_char_cnn.py TEXT [--lines 500] [--pretrained en]
"""

from pathlib import Path
from typing import Dict, List

import numpy
import typer

from spacy_elmo import BiLM, pretrained_files
from spacy_elmo.bilm import char_cnn, int8, token_encoder

app = typer.Typer(add_completion=False)


def layers(bilm: BiLM, sentences: List[List[str]]) -> numpy.ndarray:
    return numpy.concatenate(bilm.embed_sentences(sentences), axis=1)


def with_int8_char_cnn(bilm: BiLM, sentences: List[List[str]]) -> numpy.ndarray:
    """The layers with every char-CNN linear (highways, projection) through the int8 kernel as well."""
    packs: Dict[int, int8.Packed] = {}
    modules = (char_cnn, token_encoder)  # the highways' linear, and the projection's
    shipped = [module.linear for module in modules]

    def linear(x, layer, dtype, copies, name):
        if id(layer) not in packs:
            packs[id(layer)] = int8.pack(layer.weight, layer.bias)
        return int8.linear(x, packs[id(layer)])

    for module in modules:
        module.linear = linear
    try:
        return layers(bilm, sentences)
    finally:
        for module, original in zip(modules, shipped):
            module.linear = original


@app.command()
def main(
    text: Path = typer.Argument(..., help="A sentence per line"),
    lines: int = typer.Option(500, help="How many lines of TEXT to read"),
    pretrained: str = typer.Option("en", help="Which bundled biLM"),
) -> None:
    with text.open(encoding="utf8") as f:
        sentences = [s for s in (line.split() for _, line in zip(range(lines), f)) if s]
    files = pretrained_files(pretrained)
    expected = layers(BiLM.from_files(*files, cache_size=0), sentences)
    bilm = BiLM.from_files(*files, precision="int8", cache_size=0)
    typer.echo(f"{len(sentences)} sentences, {expected.shape[1]} tokens; mean per-token cosine to float32 per layer")
    for label, found in (("int8, char CNN float32 (shipped)", layers(bilm, sentences)),
                         ("int8, char CNN linears int8 too", with_int8_char_cnn(bilm, sentences))):
        cosines = (found * expected).sum(-1) / (numpy.linalg.norm(found, axis=-1) * numpy.linalg.norm(expected, axis=-1))
        typer.echo(f"{label}: " + ", ".join(f"{c:.6f}" for c in cosines.mean(axis=1)))


if __name__ == "__main__":
    app()
