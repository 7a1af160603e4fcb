"""A service's rates, beside the peer a spaCy user would pick: spacy-transformers with a BERT-base-sized model.

Three subcommands, on the same real English sentences (examples/word_senses.jsonl: 480 sentences,
5,365 whitespace-separated words; ``--texts`` takes the first N, so no cache serves a repeat),
sharing how the pipelines are built (random weights: they cost what trained ones do; nothing is
downloaded), how ``spacy-elmo serve`` is started and waited for, and ``--as-avx2`` (the libraries'
kernels capped at AVX2 and the CPU seen as AVX2-only, ``harness.as_avx2_cpu``; a service started
here inherits it). The BERT configurations need ``pip install "spacy-transformers==1.4.0"``
(brings transformers 4.53 and tokenizers 0.21, leaves spaCy 3.8 and thinc 8.3 as they are).

``rates``: one ``nlp.pipe``, ``nlp(text)`` one after another, ``nlp(text)`` from many threads
(which share biLM calls), and for ``elmo`` the HTTP service (``spacy-elmo serve``) at several
concurrent clients. Configurations (``--configs``): ``bundled``, the bundled English biLM (``en``);
``original``, the Original sizes; ``trf6-bf16``, spacy-transformers with a 6-layer BERT-base-sized
model, its weights cast to bf16 once as it loads (as a user serving BERT in bf16 does: an autocast
around each call would cast every weight again at each call), and ``trf6-fp32``, the same in
float32, as a CPU without bf16 in hardware runs it. ``elmo`` runs with ``precision = "auto"``. Each
in-process row: words/s (median of ``--rounds``, range) and its fraction of the configuration's
``nlp.pipe``; for ``elmo``, the smallest token cosine of the vectors from many threads to the serial
ones; each service row: requests/s, words/s, p50 / p99 latency of one text per request, after a few
untimed requests per client, each client on one keep-alive connection (as clients and proxies call
a service). ``--gpu-id N`` runs every pipeline, in-process and served (``spacy-elmo serve --gpu-id
N``), on GPU N.

``peer``: ``nlp.pipe`` words/s, time to first doc and memory, each configuration in a fresh
process. Configurations: ``trf-fp32``, spacy-transformers' ``transformer`` component with a
BERT-base-sized model (``transformers.BertConfig()`` defaults: 12 layers, hidden 768, 110 M
parameters), saved with ``save_pretrained`` beside a ``BertTokenizerFast`` over a WordPiece vocab of
the benchmark text's words and the special tokens; ``trf-bf16``, the same pipeline with
``nlp.pipe`` under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (the products in bf16,
reductions such as softmax and layer norm in float32); ``elmo-original-auto`` /
``elmo-original-fp32`` (and, when asked for, ``elmo-original-bf16`` / ``elmo-original-int8``): the
``elmo`` component with the biLM of the published Original size (93.6 M parameters) in that
precision; ``elmo-en``: the bundled English biLM. Each pipeline is built once (in a process of its
own: a child started by fork inherits its parent's ``ru_maxrss``, so the parent stays small); every
round runs each configuration in a fresh subprocess (rounds interleaved, so a slow spell of the
machine hits every configuration alike, and peak memory is the configuration's own), which
``spacy.load``s it, runs one warm-up sentence (not in the timed set), then ``nlp.pipe`` over the
docs. Printed per configuration and round: words/s of that ``nlp.pipe`` (spaCy tokens), time to
first doc (from the subprocess' start, the harness's ``STARTED``: imports, ``spacy.load`` and the
warm-up sentence), and memory: RSS after loading, the peak during ``nlp.pipe`` (sampled every 5 ms)
and the peak of the subprocess (its high-water mark, loading included).

``wrk``: ``spacy-elmo serve`` under keep-alive load from wrk (Debian's ``wrk``, which must be on
the PATH): one 14-word text per request, for ``--duration`` at each ``--connections``; per run
p50 / p99, requests/s, non-2xx (503: the queue full) and socket errors, from a Lua script this
writes to a temporary file for wrk's ``-s``.

    python benchmarks/serving.py rates --configs bundled,original,trf6-bf16 --texts 400 [--gpu-id 0]
    python benchmarks/serving.py peer [--texts 480] [--rounds 3] [--torch-threads 2] [--batch-size 64]
        [--configs trf-fp32,trf-bf16,elmo-original-auto,elmo-original-fp32,elmo-en]
    python benchmarks/serving.py wrk [--configs bundled] [--connections 1 --connections 8 --connections 64]
        [--duration 15s]
    ... [--as-avx2]   # any of them: the kernels of an AVX2-only CPU
"""

import contextlib
import importlib.util
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy
import requests
import spacy
import torch
import typer
from spacy.language import Language
from thinc.util import to_numpy

from harness import (
    REPO,
    STARTED,
    WORD_SENSES,
    RssSampler,
    as_avx2_cpu,
    interleaved,
    isolated,
    machine,
    rss_mib,
    word_sense_texts,
)
from memory import wait_healthy

WARM_UP = "Apple is looking at buying a U.K. startup for one billion dollars."  # spaCy's first English example
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WARM_UP_REQUESTS = 4  # per client, before each service row of ``rates`` is timed
WRK_TEXT = "The loan officer at our local bank approved the mortgage within a week ."  # 14 words


@dataclass(frozen=True)
class Pipeline:
    """What a configuration's pipeline holds: an ``elmo`` component over the bundled ``en`` biLM or
    a random Original-size one (``bilm``), in ``precision`` on ``threads`` torch threads (None: the
    component's defaults, auto), or (``bilm`` None) spacy-transformers' ``transformer`` with a
    random BERT of ``bert_layers``."""

    bilm: Optional[str] = None
    precision: Optional[str] = None
    threads: Optional[int] = None
    bert_layers: int = 12

    @property
    def directory(self) -> str:
        """A name for the saved pipeline: configurations with the same pipeline share it."""
        if self.bilm is None:
            return f"bert{self.bert_layers}"
        return "-".join(str(part) for part in ("elmo", self.bilm, self.precision, self.threads) if part is not None)


# ``rates``' configurations, ``peer``'s (its default ones first) and ``wrk``'s (``rates``' elmo ones).
RATES_CONFIGS = {
    "bundled": Pipeline("en"),
    "original": Pipeline("original"),
    "trf6-bf16": Pipeline(bert_layers=6),
    "trf6-fp32": Pipeline(bert_layers=6),
}
PEER_DEFAULT = ["trf-fp32", "trf-bf16", "elmo-original-auto", "elmo-original-fp32", "elmo-en"]
PEER_CONFIGS = {
    "trf-fp32": Pipeline(),
    "trf-bf16": Pipeline(),  # the same pipeline, run under autocast
    **{f"elmo-original-{p}": Pipeline("original", p) for p in ("auto", "fp32", "bf16", "int8")},
    "elmo-en": Pipeline("en", "auto"),
}
WRK_CONFIGS = {name: pipeline for name, pipeline in RATES_CONFIGS.items() if pipeline.bilm}

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


# ---------------------------------------------------------------------- shared: options, pipelines, the service
def configs_option(default: str, known: Sequence[str]) -> Any:
    """``--configs``, as every subcommand takes it."""
    return typer.Option(default, help=f"Comma-separated: {', '.join(known)}")


def texts_option(default: int) -> Any:
    """``--texts``, as every subcommand that times texts takes it."""
    return typer.Option(default, help="Real English sentences (examples/word_senses.jsonl), at most 480")


def as_avx2_option() -> Any:
    """``--as-avx2``, as every subcommand takes it."""
    return typer.Option(False, "--as-avx2", help="The kernels of an AVX2-only CPU (harness.as_avx2_cpu)")


def start(as_avx2: bool, configs: str, known: Dict[str, Pipeline]) -> List[str]:
    """Every subcommand's start: re-executed as an AVX2-only CPU if asked (before torch's first
    product), the configurations checked (a BERT one needs spacy-transformers: said now, not in a
    child process later), the machine line printed first."""
    if as_avx2:
        as_avx2_cpu()
    chosen = [c.strip() for c in configs.split(",") if c.strip()]
    if not chosen or set(chosen) - set(known):
        raise typer.BadParameter(f"choose among {', '.join(known)}", param_hint="--configs")
    if any(known[c].bilm is None for c in chosen) and importlib.util.find_spec("spacy_transformers") is None:
        raise SystemExit(
            f"{', '.join(c for c in chosen if known[c].bilm is None)}: spacy-transformers is not installed "
            '(pip install "spacy-transformers==1.4.0")'
        )
    print(machine(), flush=True)
    return chosen


def build_bert(directory: Path, texts: List[str], layers: int = 12) -> str:
    """A BERT-base-sized model (``layers`` layers) of random weights and a WordPiece tokenizer over
    the texts' words; a line on it."""
    from transformers import BertConfig, BertModel, BertTokenizerFast
    from transformers.models.bert.tokenization_bert import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=True)
    words = sorted({token for text in texts + [WARM_UP] for token in basic.tokenize(text)})
    directory.mkdir(parents=True, exist_ok=True)
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(SPECIAL + [w for w in words if w not in SPECIAL]) + "\n", encoding="utf8")
    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=layers))
    model.save_pretrained(directory)
    BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True).save_pretrained(directory)
    n_params = sum(p.numel() for p in model.parameters())
    return (
        f"BERT-base-sized model, {layers} layers: {n_params / 1e6:.1f} M parameters, "
        f"WordPiece vocab of {len(words) + len(SPECIAL)}"
    )


def build(pipeline: Pipeline, tmp: Path, texts: List[str]) -> Tuple[Path, Optional[str]]:
    """``pipeline`` initialized and saved under ``tmp`` (once: a later call finds it), the random
    Original-size biLM written once for all who use it; its path and a line on what was built."""
    from spacy_elmo import BiLM, ElmoOptions
    from spacy_elmo.bilm.model.options import ORIGINAL_SIZES

    path = tmp / "pipelines" / pipeline.directory
    if path.exists():
        return path, None
    note = None
    nlp = spacy.blank("en")
    if pipeline.bilm is None:
        bert = tmp / path.name
        note = build_bert(bert, texts, pipeline.bert_layers)
        nlp.add_pipe("transformer", config={"model": {"name": str(bert)}})
    else:
        model: Dict[str, Any] = {"pretrained": "en"}
        if pipeline.bilm == "original":
            options_file, weight_file = tmp / "original" / "options.json", tmp / "original" / "weights.hdf5"
            if not weight_file.exists():
                weight_file.parent.mkdir(parents=True, exist_ok=True)
                torch.manual_seed(0)
                BiLM(ElmoOptions(**ORIGINAL_SIZES)).to_files(options_file, weight_file)
            model = {"options_file": str(options_file), "weight_file": str(weight_file)}
        if pipeline.precision is not None:
            model["precision"] = pipeline.precision
        config: Dict[str, Any] = {"model": model}
        if pipeline.threads is not None:
            config["threads"] = pipeline.threads
        nlp.add_pipe("elmo", config=config)
    nlp.initialize()
    path.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(path)
    return path, note


def float32_outputs(module: Any, inputs: Any, output: Dict[str, Any]) -> Dict[str, Any]:
    """The transformer's outputs back in float32: NumPy (thinc's ``torch2xp``) has no bf16.

    Under autocast or bf16 weights BERT's last hidden state comes out bf16, and spacy-transformers
    fails on it (``TypeError: Got unsupported ScalarType BFloat16``); a user must cast as this
    forward hook does. Its cost (one conversion of the output per batch) is counted in the timing.
    """
    for key, value in output.items():
        if torch.is_tensor(value) and value.dtype == torch.bfloat16:
            output[key] = value.float()
    return output


def bert_shims(nlp: Language) -> Iterator[Any]:
    """The torch modules inside the pipeline's ``transformer``."""
    for node in nlp.get_pipe("transformer").model.walk():
        for shim in node.shims:
            yield shim._model


@contextlib.contextmanager
def service(path: Path, port: int, gpu_id: int = -1) -> Iterator[str]:
    """``spacy-elmo serve`` of the saved pipeline on 127.0.0.1:``port``, healthy (loaded and warmed
    up): its URL; stopped at the end."""
    command = [sys.executable, "-m", "spacy_elmo", "serve", str(path), "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen([*command, "--gpu-id", str(gpu_id)])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, server)
        yield url
    finally:
        server.terminate()
        server.wait(60)


# ---------------------------------------------------------------------- rates
def rates_loaded(config: str, path: Path) -> Language:
    """The saved pipeline; the bf16 peer's BERT cast to bf16 once, its outputs back to float32."""
    nlp = spacy.load(path)
    if config == "trf6-bf16":
        for module in bert_shims(nlp):
            module.to(torch.bfloat16)
            module.register_forward_hook(float32_outputs)
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
    path: Path, texts: Sequence[str], n_words: int, clients: Sequence[int], port: int, gpu_id: int, pause_s: float
) -> List[str]:
    """Rows of ``spacy-elmo serve`` at each number of concurrent clients, one text per request, each
    client idle ``pause_s`` before each request (a sparse service); with a lone client among them,
    each p99 as a multiple of its p50 (the issue's bar: 3x at 8 clients)."""
    with service(path, port, gpu_id) as url:
        latencies = {n: _client_latencies(url, texts, n, pause_s) for n in clients}
    cuts = {n: statistics.quantiles(times, n=100) for n, (_, times) in latencies.items()}
    lone_p50 = cuts[1][49] if 1 in cuts else None
    rows = []
    for n, (seconds, _) in latencies.items():
        row = (
            f"service, {n} clients{f' pausing {pause_s * 1000:.0f} ms' if pause_s else ''}: "
            f"{len(texts) / seconds:,.1f} requests/s, {n_words / seconds:,.0f} words/s, "
            f"p50 {cuts[n][49] * 1000:.0f} ms, p99 {cuts[n][98] * 1000:.0f} ms"
        )
        if lone_p50 is not None and n > 1:
            row += f" ({cuts[n][98] / lone_p50:.1f}x a lone client's p50)"
        rows.append(row)
    return rows


def _client_latencies(url: str, texts: Sequence[str], clients: int, pause_s: float) -> Tuple[float, List[float]]:
    """``clients`` threads sending one text per request until all ``texts`` are sent, timed after
    :data:`WARM_UP_REQUESTS` each untimed: the steady state. (A burst from idle runs its first
    request alone while the others wait for it, and a batch of a new size builds oneDNN's kernels
    for its shapes: at the Original size the first 8 requests of 8 clients took 180 ms, later
    ones 110-130.) Returns the seconds it took and each request's latency."""

    connections = threading.local()  # one keep-alive session per client thread

    def request(text: str) -> float:
        if not hasattr(connections, "session"):
            connections.session = requests.Session()
        time.sleep(pause_s)
        begun = time.perf_counter()
        connections.session.post(f"{url}/pipe", json={"texts": [text]}, timeout=120).raise_for_status()
        return time.perf_counter() - begun

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(request, texts[: clients * WARM_UP_REQUESTS]))
        begun = time.perf_counter()
        latencies = list(pool.map(request, texts))
        return time.perf_counter() - begun, latencies


@app.command()
def rates(
    configs: str = configs_option("bundled,trf6-bf16", list(RATES_CONFIGS)),
    texts: int = texts_option(400),
    threads: int = typer.Option(8, help="Threads calling nlp(text) at once"),
    clients: List[int] = typer.Option([1, 8, 32], help="Concurrent HTTP clients (repeat the option)"),
    torch_threads: int = typer.Option(2, help="torch's threads"),
    rounds: int = typer.Option(2, help="Interleaved timed rounds"),
    port: int = typer.Option(8765, help="The service's port on 127.0.0.1"),
    gpu_id: int = typer.Option(-1, help="The GPU that runs the pipelines (spacy.require_gpu); -1: the CPU"),
    pause_ms: float = typer.Option(0.0, help="Each HTTP client's idle time before each request (a sparse service)"),
    as_avx2: bool = as_avx2_option(),
) -> None:
    """nlp.pipe, serial nlp(text), nlp(text) from threads and spacy-elmo serve, against a 6-layer BERT."""
    chosen = start(as_avx2, configs, RATES_CONFIGS)
    torch.set_num_threads(torch_threads)
    device = None
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)  # this thread's; the in-process runs' other threads use each model's own ops
        device = torch.device("cuda", gpu_id)
    sentences = word_sense_texts(texts)
    with tempfile.TemporaryDirectory() as tmp:
        for config in chosen:
            path, note = build(RATES_CONFIGS[config], Path(tmp), word_sense_texts(480))
            if note:
                print(note)
            nlp = rates_loaded(config, path)
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
                for row in service_rows(path, sentences, n_words, clients, port, gpu_id, pause_ms / 1000):
                    print(row)
            del nlp


# ---------------------------------------------------------------------- peer
def build_pipelines(configs: List[str], directory: str, threads: int) -> Dict[str, Any]:
    """Each ``peer`` configuration's pipeline, saved under ``directory``, its ``elmo`` on ``threads``
    torch threads: their paths, and what was built (``notes``). Run in a process of its own
    (:func:`~harness.isolated`): a child started by fork inherits its parent's ``ru_maxrss``, so
    the parent stays small."""
    texts = word_sense_texts(480)  # the WordPiece vocabulary: every sentence
    paths: Dict[str, str] = {}
    notes: List[str] = []
    for config in configs:
        pipeline = PEER_CONFIGS[config]
        if pipeline.bilm is not None:
            pipeline = replace(pipeline, threads=threads)
        path, note = build(pipeline, Path(directory), texts)
        paths[config] = str(path)
        notes += [note] if note else []
    return {"paths": paths, "notes": notes}


def measure(config: str, pipeline: str, texts: int, threads: int, batch_size: int) -> Dict[str, Any]:
    """One ``peer`` configuration, one round, in a process of its own (:func:`~harness.isolated`):
    load, first doc, timed ``nlp.pipe``."""
    torch.set_num_threads(threads)
    imported = time.perf_counter()
    sentences = word_sense_texts(texts)
    nlp = spacy.load(pipeline)
    loaded = time.perf_counter()
    rss_loaded = rss_mib()
    autocast: contextlib.AbstractContextManager = contextlib.nullcontext()
    if config == "trf-bf16":
        autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        for module in bert_shims(nlp):
            module.register_forward_hook(float32_outputs)
    with autocast, RssSampler() as sampler:  # RSS during nlp.pipe alone (ru_maxrss also covers spacy.load)
        list(nlp.pipe([WARM_UP]))
        first = time.perf_counter()
        n_words = 0
        begun = time.perf_counter()
        for doc in nlp.pipe(sentences, batch_size=batch_size):
            n_words += len(doc)
        elapsed = time.perf_counter() - begun
    return {
        "words": n_words,
        "seconds": elapsed,
        "words_per_s": n_words / elapsed,
        "import_s": imported - STARTED,
        "load_s": loaded - imported,
        "first_doc_s": first - STARTED,
        "rss_loaded_mb": rss_loaded,
        "pipe_peak_rss_mb": sampler.peak,
        "threads": torch.get_num_threads(),
    }


@app.command()
def peer(
    configs: str = configs_option(",".join(PEER_DEFAULT), list(PEER_CONFIGS)),
    texts: int = texts_option(480),
    rounds: int = typer.Option(3, help="Interleaved rounds, each configuration's in a fresh process"),
    torch_threads: int = typer.Option(2, help="torch's threads"),
    batch_size: int = typer.Option(64, help="nlp.pipe batch_size"),
    as_avx2: bool = as_avx2_option(),
) -> None:
    """nlp.pipe words/s, time to first doc and peak RSS against a 12-layer BERT, each in a fresh process."""
    chosen = start(as_avx2, configs, PEER_CONFIGS)
    sentences = word_sense_texts(texts)
    print(
        f"{len(sentences)} sentences from {WORD_SENSES.relative_to(REPO)}, "
        f"{sum(len(t.split()) for t in sentences)} whitespace-separated words; {torch_threads} torch threads, "
        f"nlp.pipe batch_size {batch_size}",
        flush=True,
    )
    results: Dict[str, List[Dict[str, Any]]] = {c: [] for c in chosen}
    with tempfile.TemporaryDirectory() as tmp:
        built = isolated(build_pipelines, configs=chosen, directory=tmp, threads=torch_threads)
        print("\n".join(built["notes"]), flush=True)
        for round_ in range(1, rounds + 1):
            for config in chosen:
                path = built["paths"][config]
                row = isolated(
                    measure, config=config, pipeline=path, texts=texts, threads=torch_threads, batch_size=batch_size
                )
                results[config].append(row)
                print(
                    f"round {round_} {config:20s} {row['words_per_s']:8.0f} words/s ({row['words']} words in "
                    f"{row['seconds']:.2f} s)  first doc {row['first_doc_s']:.2f} s (imports "
                    f"{row['import_s']:.2f}, load {row['load_s']:.2f})  RSS loaded {row['rss_loaded_mb']:.0f} MB, "
                    f"peak in nlp.pipe {row['pipe_peak_rss_mb']:.0f} MB, peak of the process "
                    f"{row['peak_rss_mib']:.0f} MB",
                    flush=True,
                )
    print(
        "\n| configuration | words/s over rounds | peak RSS in nlp.pipe / of the process | time to first doc |\n"
        "|---|---|---|---|"
    )
    for config, rows in results.items():
        found = [r["words_per_s"] for r in rows]
        peaks = [r["peak_rss_mib"] for r in rows]
        pipe_peaks = [r["pipe_peak_rss_mb"] for r in rows]
        firsts = [r["first_doc_s"] for r in rows]
        print(
            f"| {config} | {min(found):,.0f}-{max(found):,.0f} | {max(pipe_peaks):,.0f} / {max(peaks):,.0f} MB | "
            f"{min(firsts):.1f}-{max(firsts):.1f} s |"
        )
    if "elmo-original-auto" in results and "trf-bf16" in results:
        ours = statistics.median(r["words_per_s"] for r in results["elmo-original-auto"])
        theirs = statistics.median(r["words_per_s"] for r in results["trf-bf16"])
        print(f"\nelmo-original-auto / trf-bf16 (median words/s): {ours / theirs:.2f}x")


# ---------------------------------------------------------------------- wrk
def wrk_script(text: str) -> str:
    """wrk's Lua for ``POST /pipe`` with one text, and a ``RESULT`` line at the end: p50 and p99 in
    ms, requests, non-2xx responses and each kind of socket error."""
    body = json.dumps({"texts": [text]})
    return (
        'wrk.method = "POST"\n'
        f"wrk.body = [[{body}]]\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
        "done = function(summary, latency, requests)\n"
        '  io.write(string.format("RESULT p50_ms=%.1f p99_ms=%.1f requests=%d non2xx=%d connect=%d read=%d '
        'write=%d timeout=%d\\n",\n'
        "    latency:percentile(50)/1000, latency:percentile(99)/1000, summary.requests, summary.errors.status,\n"
        "    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))\n"
        "end\n"
    )


def wrk_row(output: str, connections: int, duration_s: float) -> str:
    """A row of one wrk run from its ``RESULT`` line (the whole output where it has none)."""
    found = re.search(r"^RESULT (.*)$", output, re.MULTILINE)
    if found is None:
        return f"wrk, {connections} connections: no RESULT line\n{output}"
    fields = dict(pair.split("=") for pair in found.group(1).split())
    errors = sum(int(fields[kind]) for kind in ("connect", "read", "write", "timeout"))
    return (
        f"wrk, {connections} connections: {int(fields['requests']) / duration_s:,.1f} requests/s, "
        f"p50 {fields['p50_ms']} ms, p99 {fields['p99_ms']} ms, non-2xx {fields['non2xx']}, socket errors {errors} "
        f"({found.group(0)})"
    )


@app.command()
def wrk(
    configs: str = configs_option("bundled", list(WRK_CONFIGS)),
    connections: List[int] = typer.Option([1, 8, 64], help="wrk's keep-alive connections (repeat the option)"),
    duration: int = typer.Option(15, help="Seconds of load at each --connections"),
    wrk_threads: int = typer.Option(1, help="wrk's threads (-t)"),
    timeout: int = typer.Option(30, help="wrk's --timeout, seconds"),
    port: int = typer.Option(8821, help="The service's port on 127.0.0.1"),
    gpu_id: int = typer.Option(-1, help="The GPU the service runs on (spacy-elmo serve --gpu-id); -1: the CPU"),
    as_avx2: bool = as_avx2_option(),
) -> None:
    """spacy-elmo serve under keep-alive load from wrk: p50 / p99, non-2xx and socket errors."""
    program = shutil.which("wrk")
    if program is None:
        raise SystemExit("wrk is not on the PATH: install it (Debian and Ubuntu: apt-get install wrk)")
    chosen = start(as_avx2, configs, WRK_CONFIGS)
    print(f"one {len(WRK_TEXT.split())}-word text per request: {WRK_TEXT!r}")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "pipe.lua"
        script.write_text(wrk_script(WRK_TEXT), encoding="utf8")
        for config in chosen:
            path, _ = build(WRK_CONFIGS[config], Path(tmp), [])
            print(f"\n{config}:", flush=True)
            with service(path, port, gpu_id) as url:
                for n in connections:
                    command = [program, f"-t{wrk_threads}", f"-c{n}", f"-d{duration}s", "--timeout", f"{timeout}s"]
                    done = subprocess.run([*command, "-s", str(script), f"{url}/pipe"], capture_output=True, text=True)
                    print(wrk_row(done.stdout + done.stderr, n, duration), flush=True)


if __name__ == "__main__":
    app()
