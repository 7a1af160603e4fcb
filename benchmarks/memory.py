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
- ``serve``: the real ``spacy-elmo serve`` on 127.0.0.1: its RSS (``/proc/PID/status``) at rest
  after the warm-up and after each of ``--rounds`` rounds of ``--requests`` requests of fresh
  made-up words from ``--clients`` concurrent clients, and each against the rest.

Run from the repository root, e.g.::

    python benchmarks/memory.py pipe
    python benchmarks/memory.py stream --docs 40000 --every 5000
    python benchmarks/memory.py long-doc --lengths 10000,50000,100000
    python benchmarks/memory.py serve --rounds 10
"""

import random
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List

import requests
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


def measure_pipe(size: str, precision: str, docs: int, threads: int, batch_size: int) -> Dict[str, Any]:
    """``pipe``'s measurement, in a process of its own."""
    nlp = pipeline(size, precision, threads)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    weights = sum(p.numel() * p.element_size() for p in bilm.parameters()) / MIB
    init_peak, after_init = peak_rss_mib(), rss_mib()
    reset_peak_rss()
    start = time.perf_counter()
    n_tokens = sum(len(doc) for doc in nlp.pipe(made_up_texts(docs), batch_size=batch_size))
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
    batch_size: int = typer.Option(1000, help="nlp.pipe's batch_size (spaCy's default: 1000)"),
) -> None:
    """Peak RSS of one nlp.pipe call against RSS after nlp.initialize(); the Original size's
    also against its weights plus the bundled pipeline's rest."""
    typer.echo(
        f"precision {precision}, {docs} docs of fresh words in batches of {batch_size}, {threads} torch thread(s); "
        f"{machine()}"
    )
    rest = None
    for size in sizes.split(","):
        row = isolated(measure_pipe, size=size, precision=precision, docs=docs, threads=threads, batch_size=batch_size)
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


# The worker releases the heap after answering a batch's requests: a reading waits for that.
SETTLE_SECONDS = 1.0


def process_rss_mib(pid: int) -> float:
    """Another process's resident memory now, in MiB (Linux's ``VmRSS``)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024  # kB


def wait_healthy(url: str, server: subprocess.Popen, timeout: float = 600) -> None:
    """Until ``GET /health`` answers 200 (loaded and warmed up); exits if the server dies or takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        try:
            if requests.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the server did not answer /health within {timeout:.0f} s")


def send_round(url: str, bodies: List[List[str]], clients: int) -> None:
    """Each of ``bodies`` as one ``POST /pipe``, from ``clients`` threads at once; a non-200 stops the run."""

    def post(texts: List[str]) -> None:
        requests.post(f"{url}/pipe", json={"texts": texts}, timeout=300).raise_for_status()

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(post, bodies))


@app.command("serve")
def serve_rss(
    pipeline_name: str = typer.Option("en", "--pipeline", help="What spacy-elmo serve loads (a published biLM: en)"),
    rounds: int = typer.Option(8, help="rounds of requests after the warm-up"),
    requests_per_round: int = typer.Option(150, "--requests", help="requests per round"),
    texts: int = typer.Option(8, help="texts per request"),
    words: int = typer.Option(20, help="made-up words per text"),
    clients: int = typer.Option(8, help="concurrent clients"),
    port: int = typer.Option(8766, help="the service's port on 127.0.0.1"),
) -> None:
    """The service's RSS at rest and after each round of fresh words, against the rest (issue 51: within 1.3x, flat)."""
    command = [sys.executable, "-m", "spacy_elmo", "serve", pipeline_name, "--port", str(port)]
    server = subprocess.Popen([*command, "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    sentences = fresh_sentences(rounds * requests_per_round * texts, words=(words, words), seed=int(time.time()))
    try:
        wait_healthy(url, server)
        rest = process_rss_mib(server.pid)
        typer.echo(f"spacy-elmo serve {pipeline_name}; {clients} clients, rounds of {requests_per_round} requests")
        typer.echo(f"of {texts} texts of {words} fresh made-up words; {machine()}")
        typer.echo(f"at rest after the warm-up: {rest:.0f} MiB")
        for done in range(1, rounds + 1):
            bodies = [[" ".join(next(sentences)) for _ in range(texts)] for _ in range(requests_per_round)]
            start = time.perf_counter()
            send_round(url, bodies, clients)
            seconds = time.perf_counter() - start
            time.sleep(SETTLE_SECONDS)
            rss = process_rss_mib(server.pid)
            typer.echo(f"round {done:>3}: {rss:>6.0f} MiB, {rss / rest:.2f}x the rest ({seconds:.0f} s)")
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    app()
