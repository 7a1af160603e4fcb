"""How far a lower precision (bf16, int8) moves results from float32: the biLM's layers, or NER scores.

Two subcommands, sharing the loop: one biLM, its products switched to each of ``--precisions`` in
turn (``runtime.precision``; the weights stay the same, only the products differ), the first
precision the reference the others are measured against, each run's seconds printed.

``layers``: one biLM (default: the bundled English one; ``--size original|small``: random weights
of a published size, seeded) over the first lines of a text file, a sentence per line, split on
whitespace (without one: 64 made-up sentences of 20 to 30 words); printed per precision and layer
the mean and the smallest per-token cosine to the reference's, and the largest absolute
difference. The contract of bf16 and int8 is a mean per-token cosine of at least 0.999 in every
layer.

``ner``: a spaCy pipeline with an elmo component (e.g. a cross-validation fold's ``model-best``)
evaluated on a DocBin in each precision: entity precision, recall and F1. ``precision = "int8"``
must keep the F1 within 0.3 points of fp32's.

    python benchmarks/precision_accuracy.py layers project/corpus/lm/dev.txt [--lines 2000]
        [--precisions fp32,int8] [--options-file F --weight-file F]
    python benchmarks/precision_accuracy.py layers --size original --precisions fp32,int8
    python benchmarks/precision_accuracy.py ner MODEL_DIR DEV.spacy [--precisions fp32,bf16,int8] [--threads 2]
"""

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar

import torch
import typer

from harness import fresh_sentences, layer_agreement, machine, text_lines
from spacy_elmo import BiLM, ElmoOptions, pretrained_files
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.bilm.precision.resolved import PRECISIONS

SIZES = {"original": ORIGINAL_SIZES, "small": {}}  # ElmoOptions' defaults are the Small size's
T = TypeVar("T")

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def precisions_option(default: str) -> Any:
    """``--precisions``, the same for both subcommands: the first is the reference."""
    return typer.Option(default, help=f"Comma-separated, of {', '.join(PRECISIONS)}; the first is the reference")


def threads_option() -> Any:
    """``--threads``, the same for both subcommands."""
    return typer.Option(2, help="torch.set_num_threads")


def start(precisions: str, threads: int) -> List[str]:
    """Both subcommands' start: ``--precisions`` checked (the first the reference), torch's threads
    set, the machine line printed first."""
    chosen = [p.strip() for p in precisions.split(",") if p.strip()]
    if len(chosen) < 2 or any(p not in PRECISIONS for p in chosen):
        raise typer.BadParameter(
            f"--precisions {precisions!r}: at least two of {', '.join(PRECISIONS)}, comma-separated, "
            "the first the reference"
        )
    torch.set_num_threads(threads)
    typer.echo(machine())
    return chosen


def in_each_precision(bilm: BiLM, precisions: List[str], run: Callable[[], T]) -> Dict[str, T]:
    """``run()`` with ``bilm``'s products in each precision, in order (the weights stay the same,
    only the products differ), each run's seconds printed; its result per precision."""
    results: Dict[str, T] = {}
    for precision in precisions:
        bilm.runtime.precision = precision
        begun = time.perf_counter()
        results[precision] = run()
        typer.echo(f"{precision}: {time.perf_counter() - begun:.1f} s")
    return results


@app.command()
def layers(
    text: Optional[Path] = typer.Argument(None, help="A sentence per line [default: made-up sentences]"),
    lines: int = typer.Option(2000, help="How many lines of TEXT to read"),
    options_file: Optional[Path] = typer.Option(None, help="default: the bundled biLM --pretrained"),
    weight_file: Optional[Path] = typer.Option(None),
    pretrained: str = typer.Option("en", help="Which bundled biLM, without --options-file/--weight-file"),
    precisions: str = precisions_option("fp32,bf16"),
    size: Optional[str] = typer.Option(None, help=f"Random weights of a size: {', '.join(SIZES)}"),
    seed: int = typer.Option(0, help="The random weights' seed, with --size"),
    threads: int = threads_option(),
) -> None:
    """How far each precision moves every layer of the biLM from the reference's (per-token cosines)."""
    if size is not None and size not in SIZES:
        raise typer.BadParameter(f"--size {size}: one of {', '.join(SIZES)}")
    chosen = start(precisions, threads)
    if size is None:
        files = (options_file, weight_file) if options_file and weight_file else pretrained_files(pretrained)
        bilm = BiLM.from_files(*files, cache_size=0)
    else:
        torch.manual_seed(seed)
        bilm = BiLM(ElmoOptions(**SIZES[size]), cache_size=0).eval()
    sentences = text_lines(text, lines) if text else list(fresh_sentences(64, (20, 30), (1, 10)))
    outputs = in_each_precision(bilm, chosen, lambda: bilm.embed_sentences(sentences))
    typer.echo(f"{len(sentences)} sentences, {sum(len(s) for s in sentences)} tokens")
    reference, *others = outputs
    typer.echo(
        f"| precision | layer | mean cosine | smallest cosine | largest abs difference | mean abs {reference} value |"
    )
    typer.echo("|---|---|---|---|---|---|")
    for precision in others:
        for k, row in enumerate(layer_agreement(outputs[precision], outputs[reference])):
            typer.echo(
                f"| {precision} | {k} | {row['mean_cosine']:.6f} | {row['smallest_cosine']:.6f} "
                f"| {row['largest_difference']:.4f} | {row['mean_abs']:.3f} |"
            )


@app.command()
def ner(
    model: Path = typer.Argument(..., exists=True, file_okay=False, help="A pipeline with an elmo component"),
    data: Path = typer.Argument(..., exists=True, dir_okay=False, help="Gold docs (.spacy)"),
    precisions: str = precisions_option("fp32,bf16,int8"),
    threads: int = threads_option(),
) -> None:
    """NER precision, recall and F1 of one trained pipeline with its biLM in each precision."""
    import spacy
    from spacy.training import Corpus

    from spacy_elmo.layers import get_bilm

    chosen = start(precisions, threads)
    nlp = spacy.load(model)
    examples = list(Corpus(str(data))(nlp))
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    typer.echo(f"{model}: {len(examples)} docs of {data}, {threads} threads")
    scores: Dict[str, Dict[str, Any]] = in_each_precision(bilm, chosen, lambda: nlp.evaluate(examples))
    rows: List[str] = ["| precision | ents_p | ents_r | ents_f | F1 against the reference |", "|---|---|---|---|---|"]
    reference = next(iter(scores))
    for precision, found in scores.items():
        rows.append(
            f"| {precision} | {100 * found['ents_p']:.2f} | {100 * found['ents_r']:.2f} | {100 * found['ents_f']:.2f} "
            f"| {100 * (found['ents_f'] - scores[reference]['ents_f']):+.2f} |"
        )
    typer.echo("\n".join(rows))


if __name__ == "__main__":
    app()
