"""A service's rates: one ``nlp.pipe``, ``nlp(text)`` one after another, ``nlp(text)`` from many
threads (which share biLM calls), and the HTTP service (``spacy-elmo serve``) at several
concurrent clients, on the same real sentences. Run from the repository root, e.g.:

    python benchmarks/serving.py --size bundled --texts 400
    python benchmarks/serving.py --size original --texts 200 --clients 1 --clients 8 --clients 32

``bundled`` is the bundled English biLM (``en``); ``original`` the Original sizes with random
weights (speed does not depend on the values). Each row: words/s (median of ``--rounds``, range),
its fraction of one ``nlp.pipe``'s, and for the service requests/s with p50 / p99 latency.
"""

import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Sequence

import requests
import spacy
import torch
import typer
from spacy.language import Language

from harness import interleaved, machine, word_sense_texts
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES

app = typer.Typer(add_completion=False)


def pipeline(size: str, directory: Path) -> Language:
    """A blank English pipeline with ``elmo`` (``precision = "auto"``), saved to ``directory``."""
    nlp = spacy.blank("en")
    if size == "bundled":
        nlp.add_pipe("elmo", config={"model": {"pretrained": "en"}})
    else:
        bilm = BiLM(ElmoOptions(**ORIGINAL_SIZES))
        (directory / "bilm").mkdir()
        bilm.to_files(directory / "bilm" / "options.json", directory / "bilm" / "weights.hdf5")
        files = {
            "options_file": str(directory / "bilm" / "options.json"),
            "weight_file": str(directory / "bilm" / "weights.hdf5"),
        }
        nlp.add_pipe("elmo", config={"model": files})
    nlp.initialize()
    nlp.to_disk(directory / "pipeline")
    return nlp


def in_process_runs(nlp: Language, texts: Sequence[str], threads: int) -> Dict[str, object]:
    """The three ways a process calls the pipeline, each over all ``texts``."""
    pool = ThreadPoolExecutor(threads)
    return {
        "nlp.pipe": lambda: list(nlp.pipe(texts)),
        "nlp(text) serial": lambda: [nlp(text) for text in texts],
        f"nlp(text) from {threads} threads": lambda: list(pool.map(nlp, texts)),
    }


def serve_rates(directory: Path, texts: Sequence[str], clients: Sequence[int], port: int) -> List[str]:
    """Rows of the HTTP service at each number of concurrent clients, one text per request."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spacy_elmo",
            "serve",
            str(directory / "pipeline"),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server)
        return [_client_row(url, texts, n) for n in clients]
    finally:
        server.terminate()
        server.wait(60)


def _client_row(url: str, texts: Sequence[str], clients: int) -> str:
    """``clients`` threads sending one text per request until all ``texts`` are sent."""

    def request(text: str) -> float:
        start = time.perf_counter()
        requests.post(f"{url}/pipe", json={"texts": [text]}, timeout=120).raise_for_status()
        return time.perf_counter() - start

    with ThreadPoolExecutor(clients) as pool:
        start = time.perf_counter()
        latencies = list(pool.map(request, texts))
        seconds = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100)
    return (
        f"service, {clients} clients: {len(texts) / seconds:,.1f} requests/s, "
        f"p50 {cuts[49] * 1000:.0f} ms, p99 {cuts[98] * 1000:.0f} ms"
    )


def _wait_healthy(url: str, server: subprocess.Popen, timeout: float = 300) -> None:
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


@app.command()
def main(
    size: str = typer.Option("bundled", help="bundled (the bundled en biLM) or original (random weights)"),
    texts: int = typer.Option(400, help="Real English sentences (examples/word_senses.jsonl), one per request"),
    threads: int = typer.Option(8, help="Threads calling nlp(text) at once"),
    clients: List[int] = typer.Option([1, 8, 32], help="Concurrent HTTP clients (repeat the option)"),
    torch_threads: int = typer.Option(2, help="torch's threads"),
    rounds: int = typer.Option(2, help="Interleaved timed rounds"),
    port: int = typer.Option(8765, help="The service's port on 127.0.0.1"),
) -> None:
    if size not in ("bundled", "original"):
        raise typer.BadParameter("bundled or original", param_hint="--size")
    torch.set_num_threads(torch_threads)
    sentences = word_sense_texts(texts)
    with tempfile.TemporaryDirectory() as tmp:
        nlp = pipeline(size, Path(tmp))
        n_words = sum(len(nlp.make_doc(text)) for text in sentences)
        print(machine())
        print(f"{size} biLM, precision auto; {len(sentences)} sentences, {n_words:,} words; {rounds} rounds")
        timings = interleaved(in_process_runs(nlp, sentences, threads), rounds)
        batch = timings["nlp.pipe"].median
        for label, timing in timings.items():
            print(f"{label}: {timing.rate(n_words, ' words/s')}, {batch / timing.median:.2f} of nlp.pipe")
        for row in serve_rates(Path(tmp), sentences, clients, port):
            print(row)


if __name__ == "__main__":
    app()
