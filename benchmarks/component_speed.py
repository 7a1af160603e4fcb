"""Speed of the ``elmo`` component: ``nlp.pipe`` words/s, and frozen-training epoch times.

The biLM has random weights of the chosen size (speed does not depend on the values), the
text is synthetic sentences of 5-40 words. Run from the repository root, e.g.:

    python benchmarks/component_speed.py --size small --n-docs 200
    python benchmarks/component_speed.py --size small --n-process 2 --torch-threads 1
"""

import random
import tempfile
import time
import warnings
from pathlib import Path
from typing import Dict, List

import spacy
import torch
import typer
from spacy.language import Language
from spacy.training import Example
from spacy.util import minibatch

from harness import machine, timed
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES

SIZES: Dict[str, ElmoOptions] = {
    "tiny": ElmoOptions(
        lstm_dim=64,
        projection_dim=16,
        filters=((1, 4), (2, 8), (3, 16), (4, 32), (5, 64)),
        n_highway=2,
        char_embedding_dim=4,
    ),
    "small": ElmoOptions(),  # the published 'Small' sizes: lstm 1024, projection 128
    "original": ElmoOptions(**ORIGINAL_SIZES),
}
WORDS = (
    "the of and to in a is that for it as was with be by on not he I this are or his from at which "
    "but have an they you were her she there one been all their has would will what if can when so "
    "London Paris December government company market people research system Washington"
).split()

app = typer.Typer(add_completion=False)


def synthetic_texts(n: int, seed: int = 0) -> List[str]:
    """``n`` sentences of 5-40 words drawn from :data:`WORDS` and a period: the token cache serves repeats."""
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(5, 40))) + " ." for _ in range(n)]


def build(size: str, directory: Path, textcat: bool, feature_cache_mb: float) -> Language:
    options_file, weight_file = directory / "options.json", directory / "weights.hdf5"
    if not weight_file.exists():
        torch.manual_seed(0)
        BiLM(SIZES[size]).to_files(options_file, weight_file)
    files = {"options_file": str(options_file), "weight_file": str(weight_file)}
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {**files, "feature_cache_mb": feature_cache_mb}})
    if textcat:
        nlp.add_pipe(
            "textcat",
            config={
                "model": {
                    "@architectures": "spacy.TextCatReduce.v1",
                    "exclusive_classes": True,
                    "use_reduce_first": False,
                    "use_reduce_last": False,
                    "use_reduce_max": False,
                    "use_reduce_mean": True,
                    "nO": None,
                    "tok2vec": {
                        "@architectures": "spacy_elmo.ElmoListener.v2",
                        "width": SIZES[size].output_dim,
                        "n_layers": SIZES[size].n_layers + 1,
                    },
                }
            },
        )
    return nlp


@app.command()
def main(
    size: str = typer.Option("small", help=f"biLM sizes: {', '.join(SIZES)}"),
    n_docs: int = typer.Option(200, help="documents for nlp.pipe and for each training epoch"),
    n_process: int = typer.Option(1, help="processes for nlp.pipe"),
    torch_threads: int = typer.Option(0, help="torch threads in this process (0: torch's default)"),
    epochs: int = typer.Option(3, help="training epochs to time (0: skip the training benchmark)"),
) -> None:
    if torch_threads:
        torch.set_num_threads(torch_threads)
    warnings.simplefilter("ignore", UserWarning)
    texts = synthetic_texts(n_docs)
    with tempfile.TemporaryDirectory() as tmp:
        nlp = build(size, Path(tmp), textcat=False, feature_cache_mb=512)
        nlp.initialize()
        n_words = sum(len(doc) for doc in nlp.tokenizer.pipe(texts))
        list(nlp.pipe(texts[:8]))  # warm up
        elapsed = timed(lambda: list(nlp.pipe(texts, n_process=n_process, batch_size=64)))
        typer.echo(machine())
        typer.echo(
            f"nlp.pipe: size={size} n_process={n_process} torch_threads={torch.get_num_threads()} "
            f"{n_words} words in {elapsed:.2f}s = {n_words / elapsed:.0f} words/s"
        )
        if epochs:
            for cache_mb in (512.0, 0.0):
                times = time_epochs(build(size, Path(tmp), textcat=True, feature_cache_mb=cache_mb), texts, epochs)
                ratios = ", ".join(f"{t / times[0]:.3f}" for t in times[1:])
                typer.echo(
                    f"frozen training, feature_cache_mb={cache_mb:g}: epoch times "
                    f"{', '.join(f'{t:.2f}s' for t in times)}; epoch k / epoch 1: {ratios}"
                )


def time_epochs(nlp: Language, texts: List[str], epochs: int) -> List[float]:
    """Seconds of each of ``epochs`` training epochs of ``nlp`` on ``texts`` labelled A/B in turn."""
    examples = [
        Example.from_dict(nlp.make_doc(text), {"cats": {"A": float(i % 2), "B": float(1 - i % 2)}})
        for i, text in enumerate(texts)
    ]
    nlp.initialize(lambda: examples)
    optimizer = nlp.create_optimizer()
    times = []
    for epoch in range(epochs):
        random.Random(epoch).shuffle(examples)
        start = time.perf_counter()
        for batch in minibatch(examples, size=32):
            nlp.update(batch, sgd=optimizer)
        times.append(time.perf_counter() - start)
    return times


if __name__ == "__main__":
    app()
