"""NER scores of one trained pipeline with its biLM's products in each precision (int8's contract).

Loads a spaCy pipeline with an elmo component (e.g. a cross-validation fold's ``model-best``),
sets the biLM's precision for each run, and prints the entity precision, recall and F1 on a
DocBin. The pipeline is the same in every run, weights included: only the products differ.
``precision = "int8"`` must keep the F1 within 0.3 points of fp32's.

    python benchmarks/precision_ner.py MODEL_DIR DEV.spacy [--precisions fp32,bf16,int8] [--threads 2]
"""

import time
from pathlib import Path

import spacy
import torch
import typer
from spacy.training import Corpus

from harness import machine
from spacy_elmo.layers import get_bilm

app = typer.Typer(add_completion=False)


@app.command()
def main(
    model: Path = typer.Argument(..., exists=True, file_okay=False, help="A pipeline with an elmo component"),
    data: Path = typer.Argument(..., exists=True, dir_okay=False, help="Gold docs (.spacy)"),
    precisions: str = typer.Option("fp32,bf16,int8", help="Comma-separated"),
    threads: int = typer.Option(2, help="torch.set_num_threads"),
) -> None:
    torch.set_num_threads(threads)
    nlp = spacy.load(model)
    examples = list(Corpus(str(data))(nlp))
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    typer.echo(machine())
    typer.echo(f"{model}: {len(examples)} docs of {data}, {threads} threads")
    typer.echo("| precision | ents_p | ents_r | ents_f | seconds |\n|---|---|---|---|---|")
    for precision in precisions.split(","):
        bilm.runtime.precision = precision
        start = time.perf_counter()
        scores = nlp.evaluate(examples)
        typer.echo(
            f"| {precision} | {100 * scores['ents_p']:.2f} | {100 * scores['ents_r']:.2f} | "
            f"{100 * scores['ents_f']:.2f} | {time.perf_counter() - start:.1f} |"
        )


if __name__ == "__main__":
    app()
