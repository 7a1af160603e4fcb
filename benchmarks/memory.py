"""Memory of the ``elmo`` pipe: one batch's peak, a long stream with and without memory zones, one long doc.

Every measurement runs in a fresh subprocess, so the process's high-water mark of RSS is that
run's alone. The biLM is the bundled English one or a random one of the Original size
(``--size original``; memory does not depend on the values). Figures in MiB.

- ``pipe``: the peak RSS during ``nlp.initialize()`` and the RSS after it, then the peak of one
  ``nlp.pipe`` over ``--docs`` docs of fresh made-up words (the high-water mark restarted after
  ``initialize()``, so that its peak, where ``auto`` checks each precision, is not counted
  twice), and their ratio; the Original size also against its weights plus the rest of the
  bundled pipeline (its RSS after ``initialize()`` less its weights), measured in the same call.
- ``stream``: RSS every ``--every`` docs over ``--docs`` docs of fresh words, with each
  ``--every`` docs inside ``nlp.memory_zone()`` or not, and spaCy's string count.
- ``long-doc``: one doc of N tokens without sentence boundaries: what it adds beyond its outputs.

Run from the repository root, e.g.::

    python benchmarks/memory.py pipe
    python benchmarks/memory.py stream --docs 40000 --every 5000
    python benchmarks/memory.py long-doc --lengths 10000,50000,100000
"""

import random
import time
import warnings
from typing import Any, Dict, Iterator

import spacy
import typer
from spacy.language import Language
from spacy.tokens import Doc

from harness import MIB, fresh_sentences, isolated, machine, peak_rss_mib, reset_peak_rss, rss_mib
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.layers import get_bilm

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def pipeline(size: str, precision: str, threads: int) -> Language:
    """A blank English pipeline with ``elmo`` initialized: the bundled biLM or a random Original one."""
    warnings.simplefilter("ignore", UserWarning)  # the random biLM's "untrained" warning
    model: Dict[str, object] = {"precision": precision}
    if size == "original":
        model.update(pretrained=None, **ORIGINAL_SIZES)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": model, "threads": threads})
    nlp.initialize()
    return nlp


def made_up_texts(n_docs: int) -> Iterator[str]:
    """Sentences of 10-40 fresh made-up words of 3-12 letters: every doc adds strings and token encodings."""
    return (" ".join(words) + "." for words in fresh_sentences(n_docs))


def measure_pipe(size: str, precision: str, docs: int, threads: int) -> Dict[str, Any]:
    """``pipe``'s measurement, in a process of its own."""
    nlp = pipeline(size, precision, threads)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    weights = sum(p.numel() * p.element_size() for p in bilm.parameters()) / MIB
    init_peak, after_init = peak_rss_mib(), rss_mib()
    reset_peak_rss()
    start = time.perf_counter()
    n_tokens = sum(len(doc) for doc in nlp.pipe(made_up_texts(docs)))
    return {
        "weights": weights,
        "init_peak": init_peak,
        "after_init": after_init,
        "peak": peak_rss_mib(),
        "tokens": n_tokens,
        "seconds": time.perf_counter() - start,
    }


@app.command()
def pipe(
    sizes: str = typer.Option("bundled,original", help="bundled, original or both, comma-separated"),
    precision: str = typer.Option("auto", help="fp32, bf16, int8 or auto"),
    docs: int = typer.Option(256, help="docs in the one nlp.pipe call"),
    threads: int = typer.Option(1, help="torch threads"),
) -> None:
    """Peak RSS of one nlp.pipe call against RSS after nlp.initialize(); the Original size's
    also against its weights plus the bundled pipeline's rest."""
    typer.echo(f"precision {precision}, {docs} docs of fresh words, {threads} torch thread(s); {machine()}")
    rest = None
    for size in sizes.split(","):
        row = isolated(measure_pipe, size=size, precision=precision, docs=docs, threads=threads)
        line = (
            f"{size}: {row['tokens']} tokens in {row['seconds']:.1f} s; weights {row['weights']:.0f}, "
            f"initialize's peak {row['init_peak']:.0f}, after initialize {row['after_init']:.0f}, "
            f"pipe's peak {row['peak']:.0f}, pipe's peak / after initialize {row['peak'] / row['after_init']:.2f}"
        )
        if size == "bundled":
            rest = row["after_init"] - row["weights"]
        elif rest is not None:
            ratio = row["peak"] / (row["weights"] + rest)
            line += f", pipe's peak / (weights + the bundled rest, {rest:.0f}) {ratio:.2f}"
        typer.echo(line)


def measure_stream(docs: int, every: int, threads: int, zones: bool) -> Dict[str, Any]:
    """``stream``'s measurement with or without memory zones, in a process of its own."""
    nlp = pipeline("bundled", "auto", threads)
    rows = [{"docs": 0, "rss": rss_mib(), "strings": len(nlp.vocab.strings)}]
    texts = made_up_texts(docs)
    for done in range(every, docs + 1, every):
        chunk = [next(texts) for _ in range(every)]
        if zones:
            with nlp.memory_zone():
                for _ in nlp.pipe(chunk):
                    pass
        else:
            for _ in nlp.pipe(chunk):
                pass
        rows.append({"docs": done, "rss": rss_mib(), "strings": len(nlp.vocab.strings)})
    return {"rows": rows}


@app.command()
def stream(
    docs: int = typer.Option(40000, help="docs of fresh made-up words in all"),
    every: int = typer.Option(5000, help="docs per nlp.pipe call (and per memory zone), and between readings"),
    threads: int = typer.Option(1, help="torch threads"),
) -> None:
    """RSS over a long stream through the bundled biLM, with and without nlp.memory_zone()."""
    runs = {
        zones: isolated(measure_stream, docs=docs, every=every, threads=threads, zones=zones)["rows"]
        for zones in (False, True)
    }
    typer.echo(f"bundled biLM, precision auto, fresh made-up words; {machine()}")
    typer.echo(f"{'docs':>7} {'RSS':>6} {'strings':>8} | {'RSS, zones':>10} {'strings':>8}  (MiB)")
    for plain, zoned in zip(runs[False], runs[True]):
        plain_row = f"{plain['docs']:>7} {plain['rss']:>6.0f} {plain['strings']:>8}"
        typer.echo(f"{plain_row} | {zoned['rss']:>10.0f} {zoned['strings']:>8}")


def measure_long_doc(n_tokens: int, threads: int) -> Dict[str, Any]:
    """``long-doc``'s measurement for one length, in a process of its own."""
    nlp = pipeline("bundled", "fp32", threads)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    words = next(made_up_texts(1)).split()
    list(nlp.pipe([Doc(nlp.vocab, words=words)]))  # warm up: allocator, torch kernels, caches
    baseline = peak_rss_mib()
    rnd = random.Random(0)
    doc = Doc(nlp.vocab, words=[f"w{rnd.randrange(5000)}" for _ in range(n_tokens)])  # no repeated windows
    start = time.perf_counter()
    list(nlp.pipe([doc]))
    outputs = 4 * n_tokens * bilm.output_dim / MIB  # the vectors (also doc.tensor): no layers are kept
    return {
        "tokens": n_tokens,
        "seconds": time.perf_counter() - start,
        "baseline": baseline,
        "added": peak_rss_mib() - baseline,
        "outputs": outputs,
    }


@app.command("long-doc")
def long_doc(
    lengths: str = typer.Option("10000,50000,100000", help="document lengths in tokens, comma-separated"),
    threads: int = typer.Option(1, help="torch threads"),
) -> None:
    """One long doc without sentence boundaries (bundled biLM, fp32): working memory stays flat as it grows."""
    typer.echo(f"bundled biLM, fp32; {machine()}")
    typer.echo(f"{'tokens':>8} {'seconds':>8} {'baseline':>9} {'peak-base':>10} {'outputs':>8} {'working':>8}  (MiB)")
    for n_tokens in (int(n) for n in lengths.split(",")):
        row = isolated(measure_long_doc, n_tokens=n_tokens, threads=threads)
        typer.echo(
            f"{n_tokens:>8} {row['seconds']:>8.1f} {row['baseline']:>9.0f} {row['added']:>10.0f} "
            f"{row['outputs']:>8.0f} {row['added'] - row['outputs']:>8.0f}"
        )


if __name__ == "__main__":
    app()
