"""A service's rates, side by side: one ``nlp.pipe``, ``nlp(text)`` one after another, ``nlp(text)``
from many threads (which share biLM calls), and for ``elmo`` the HTTP service (``spacy-elmo
serve``) at several concurrent clients, all on the same real sentences. Run from the repository
root, e.g.:

    python benchmarks/serving.py --configs bundled,original,trf6-bf16 --texts 400

Configurations: ``bundled``, the bundled English biLM (``en``); ``original``, the Original sizes
with random weights (speed does not depend on the values); ``trf6-bf16``, the peer a spaCy user
would compare with: spacy-transformers with a 6-layer BERT-base-sized model of random weights,
its weights cast to bf16 once as it loads (as a user serving BERT in bf16 does: an autocast around
each call would cast every weight again at each call), and ``trf6-fp32``, the same in float32, as
a CPU without bf16 in hardware runs it (both need ``pip install "spacy-transformers==1.4.0"``; see
benchmarks/peer_transformers.py). ``--as-avx2``: the libraries'
kernels capped at AVX2 and the CPU seen as AVX2-only (``harness.as_avx2_cpu``). ``elmo`` runs with
``precision = "auto"``. Each in-process row: words/s (median of ``--rounds``, range) and its
fraction of the configuration's ``nlp.pipe``; for ``elmo``, the smallest token cosine of the
vectors from many threads to the serial ones; each service row: requests/s, words/s, p50 / p99
latency of one text per request, after a few untimed requests per client, each client on one
keep-alive connection (as clients and proxies call a service). ``--gpu-id N`` runs
every pipeline, in-process and served (``spacy-elmo serve --gpu-id N``), on GPU N.
"""

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import numpy
import requests
import spacy
import torch
import typer
from spacy.language import Language
from thinc.util import to_numpy

from harness import as_avx2_cpu, interleaved, machine, word_sense_texts
from memory import wait_healthy
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES

CONFIGS = ("bundled", "original", "trf6-bf16", "trf6-fp32")
WARM_UP_REQUESTS = 4  # per client, before each service row is timed
app = typer.Typer(add_completion=False)


def build(config: str, directory: Path, texts: List[str]) -> Path:
    """``config``'s pipeline, initialized and saved under ``directory``: its path."""
    directory.mkdir(parents=True)
    nlp = spacy.blank("en")
    if config == "bundled":
        nlp.add_pipe("elmo", config={"model": {"pretrained": "en"}})
    elif config == "original":
        (directory / "bilm").mkdir()
        files = {
            "options_file": str(directory / "bilm" / "options.json"),
            "weight_file": str(directory / "bilm" / "weights.hdf5"),
        }
        torch.manual_seed(0)
        BiLM(ElmoOptions(**ORIGINAL_SIZES)).to_files(files["options_file"], files["weight_file"])
        nlp.add_pipe("elmo", config={"model": files})
    else:
        from peer_transformers import build_bert

        print(build_bert(directory / "bert", texts, layers=6))
        nlp.add_pipe("transformer", config={"model": {"name": str(directory / "bert")}})
    nlp.initialize()
    nlp.to_disk(directory / "pipeline")
    return directory / "pipeline"


def loaded(config: str, path: Path) -> Language:
    """The saved pipeline; the bf16 peer's BERT cast to bf16 once, its outputs back to float32."""
    nlp = spacy.load(path)
    if config != "trf6-bf16":
        return nlp
    from peer_transformers import float32_outputs

    for node in nlp.get_pipe("transformer").model.walk():
        for shim in node.shims:
            shim._model.to(torch.bfloat16)
            shim._model.register_forward_hook(float32_outputs)
    return nlp


def in_process_runs(nlp: Language, texts: Sequence[str], threads: int) -> Dict[str, Callable[[], object]]:
    """The three ways a process calls the pipeline, each over all ``texts``."""
    pool = ThreadPoolExecutor(threads)
    return {
        "nlp.pipe": lambda: list(nlp.pipe(texts)),
        "nlp(text) serial": lambda: [nlp(text) for text in texts],
        f"nlp(text) from {threads} threads": lambda: list(pool.map(nlp, texts)),
    }


def thread_agreement(nlp: Language, texts: Sequence[str], threads: int) -> float:
    """The smallest cosine of a token's vector from ``threads`` threads at once to the same
    token's from serial ``nlp(text)`` calls (the issue's bar: 0.995)."""
    serial = [to_numpy(nlp(text).tensor) for text in texts]
    with ThreadPoolExecutor(threads) as pool:
        concurrent = [to_numpy(doc.tensor) for doc in pool.map(nlp, texts)]
    worst = 1.0
    for a, b in zip(concurrent, serial):
        if len(a):
            norms = numpy.linalg.norm(a, axis=1) * numpy.linalg.norm(b, axis=1)
            worst = min(worst, float(((a * b).sum(1) / numpy.maximum(norms, 1e-12)).min()))
    return worst


def service_rows(
    path: Path, texts: Sequence[str], n_words: int, clients: Sequence[int], port: int, gpu_id: int
) -> List[str]:
    """Rows of ``spacy-elmo serve`` at each number of concurrent clients, one text per request; with
    a lone client among them, each p99 as a multiple of its p50 (the issue's bar: 3x at 8 clients)."""
    command = [sys.executable, "-m", "spacy_elmo", "serve", str(path), "--port", str(port), "--log-level", "warning"]
    command += ["--gpu-id", str(gpu_id)]
    server = subprocess.Popen(command)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, server)
        latencies = {n: _client_latencies(url, texts, n) for n in clients}
    finally:
        server.terminate()
        server.wait(60)
    cuts = {n: statistics.quantiles(times, n=100) for n, (_, times) in latencies.items()}
    lone_p50 = cuts[1][49] if 1 in cuts else None
    rows = []
    for n, (seconds, _) in latencies.items():
        row = (
            f"service, {n} clients: {len(texts) / seconds:,.1f} requests/s, {n_words / seconds:,.0f} words/s, "
            f"p50 {cuts[n][49] * 1000:.0f} ms, p99 {cuts[n][98] * 1000:.0f} ms"
        )
        if lone_p50 is not None and n > 1:
            row += f" ({cuts[n][98] / lone_p50:.1f}x a lone client's p50)"
        rows.append(row)
    return rows


def _client_latencies(url: str, texts: Sequence[str], clients: int) -> "tuple[float, List[float]]":
    """``clients`` threads sending one text per request until all ``texts`` are sent, timed after
    :data:`WARM_UP_REQUESTS` each untimed: the steady state. (A burst from idle runs its first
    request alone while the others wait for it, and a batch of a new size builds oneDNN's kernels
    for its shapes: at the Original size the first 8 requests of 8 clients took 180 ms, later
    ones 110-130.) Returns the seconds it took and each request's latency."""

    connections = threading.local()  # one keep-alive session per client thread

    def request(text: str) -> float:
        if not hasattr(connections, "session"):
            connections.session = requests.Session()
        start = time.perf_counter()
        connections.session.post(f"{url}/pipe", json={"texts": [text]}, timeout=120).raise_for_status()
        return time.perf_counter() - start

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(request, texts[: clients * WARM_UP_REQUESTS]))
        start = time.perf_counter()
        latencies = list(pool.map(request, texts))
        return time.perf_counter() - start, latencies


@app.command()
def main(
    configs: str = typer.Option("bundled,trf6-bf16", help=f"Comma-separated: {', '.join(CONFIGS)}"),
    texts: int = typer.Option(400, help="Real English sentences (examples/word_senses.jsonl), one per request"),
    threads: int = typer.Option(8, help="Threads calling nlp(text) at once"),
    clients: List[int] = typer.Option([1, 8, 32], help="Concurrent HTTP clients (repeat the option)"),
    torch_threads: int = typer.Option(2, help="torch's threads"),
    rounds: int = typer.Option(2, help="Interleaved timed rounds"),
    port: int = typer.Option(8765, help="The service's port on 127.0.0.1"),
    gpu_id: int = typer.Option(-1, help="The GPU that runs the pipelines (spacy.require_gpu); -1: the CPU"),
    as_avx2: bool = typer.Option(False, "--as-avx2", help="The kernels of an AVX2-only CPU (harness.as_avx2_cpu)"),
) -> None:
    if as_avx2:
        as_avx2_cpu()
    chosen = [c.strip() for c in configs.split(",") if c.strip()]
    if not chosen or set(chosen) - set(CONFIGS):
        raise typer.BadParameter(f"choose among {', '.join(CONFIGS)}", param_hint="--configs")
    torch.set_num_threads(torch_threads)
    device = None
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)  # this thread's; the in-process runs' other threads use each model's own ops
        device = torch.device("cuda", gpu_id)
    sentences = word_sense_texts(texts)
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        for config in chosen:
            path = build(config, Path(tmp) / config, word_sense_texts(480))
            nlp = loaded(config, path)
            n_words = sum(len(nlp.make_doc(text)) for text in sentences)
            print(
                f"\n{config}: {len(sentences)} sentences, {n_words:,} words; {rounds} rounds, {torch_threads} threads"
            )
            timings = interleaved(in_process_runs(nlp, sentences, threads), rounds, device=device)
            batch = timings["nlp.pipe"].median
            for label, timing in timings.items():
                print(f"{label}: {timing.rate(n_words, ' words/s')}, {batch / timing.median:.2f} of nlp.pipe")
            if not config.startswith("trf"):
                agreement = thread_agreement(nlp, sentences, threads)
                print(f"nlp(text) from {threads} threads against serial: token cosine at least {agreement:.5f}")
                for row in service_rows(path, sentences, n_words, clients, port, gpu_id):
                    print(row)
            del nlp


if __name__ == "__main__":
    app()
