"""How far the same text's vectors move when everything around it changes, on a bundled biLM.

Runs real sentences (the AllenNLP fixture's 30 newswire sentences and the contextual-similarity
examples) through ``nlp.pipe`` with a bundled English biLM in float32, then again with other batch sizes,
a shuffled order, 4 threads at once, 2 processes and after a save/load round trip. It prints the
largest absolute difference of any layer value to the reference run (batch size 8), beside the
float32 error itself (the reference against the same biLM in float64, through the harness's
step-by-step port).

    python benchmarks/determinism.py [--pretrained DIRECTORY]     # default: the bundled en
"""

import json
import random
import runpy
import tempfile
import threading
from typing import Callable, Dict, List

import numpy
import spacy
import torch
import typer
from spacy.language import Language

from harness import REPO, machine, step_by_step
from spacy_elmo.layers import get_bilm

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])
Layers = Dict[str, numpy.ndarray]


def sentences() -> List[str]:
    """The AllenNLP fixture's sentences and the contextual-similarity examples' sentences."""
    fixture = json.loads((REPO / "tests" / "fixtures" / "allennlp_elmo" / "sentences.json").read_text())
    cases = runpy.run_path(str(REPO / "examples" / "contextual_similarity.py"))["CASES"]
    return [s for group in fixture for s in group] + [s for case in cases for s in case[1:]]


def run(nlp: Language, texts: List[str], **kwargs: object) -> Layers:
    return {doc.text: doc._.elmo_layers for doc in nlp.pipe(texts, **kwargs)}


def in_threads(nlp: Language, texts: List[str], n: int = 4) -> List[Layers]:
    results: List[Layers] = [{} for _ in range(n)]

    def work(i: int) -> None:
        results[i] = run(nlp, texts, batch_size=8)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def float64_layers(nlp: Language, texts: List[str]) -> Layers:
    """The pipe's biLM in float64 through the harness's step-by-step port: float32's error."""
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    bilm.to(torch.float64)
    try:
        words = [[t.text for t in nlp.make_doc(text)] for text in texts]
        return dict(zip(texts, step_by_step(bilm, words)))
    finally:
        bilm.to(torch.float32)


def largest_difference(runs: List[Layers], reference: Layers) -> float:
    return max(float(numpy.abs(got[t] - reference[t]).max()) for got in runs for t in reference if reference[t].size)


@app.command()
def main(pretrained: str = typer.Option("en", help="Which bundled biLM (or a directory)")) -> None:
    torch.set_num_threads(1)
    texts = sentences()
    nlp = spacy.blank("en")
    # float32 products, whatever ``auto`` would pick here, from the zero state the port starts from:
    # the float64 row measures float32's error.
    nlp.add_pipe(
        "elmo", config={"store_layers": True, "model": {"pretrained": pretrained, "precision": "fp32", "state": "zero"}}
    )
    nlp.initialize()
    reference = run(nlp, texts, batch_size=8)
    shuffled = texts[:]
    random.Random(0).shuffle(shuffled)
    with tempfile.TemporaryDirectory() as tmp:
        nlp.to_disk(tmp)
        loaded = spacy.load(tmp)
    variants: Dict[str, Callable[[], List[Layers]]] = {
        "batch size 1": lambda: [run(nlp, texts, batch_size=1)],
        "batch size 64": lambda: [run(nlp, texts, batch_size=64)],
        "shuffled order (batch size 8)": lambda: [run(nlp, shuffled, batch_size=8)],
        "4 threads at once (batch size 8)": lambda: in_threads(nlp, texts),
        "2 processes (batch size 8)": lambda: [run(nlp, texts, batch_size=8, n_process=2)],
        "saved and loaded (batch size 8)": lambda: [run(loaded, texts, batch_size=8)],
        "float64 biLM (the float32 error)": lambda: [float64_layers(nlp, texts)],
    }
    n_tokens = sum(len(v[0]) for v in reference.values())
    scale = max(float(numpy.abs(v).max()) for v in reference.values())
    print(machine())
    print(f"{len(texts)} texts, {n_tokens} tokens, bundled biLM {pretrained!r}; largest |layer value| {scale:.2f}")
    print("| compared to the reference (batch size 8) | largest absolute difference |")
    print("|---|---:|")
    for name, variant in variants.items():
        print(f"| {name} | {largest_difference(variant(), reference):.2e} |")


if __name__ == "__main__":
    app()
