"""The measuring harness every script in benchmarks/ shares, and the workloads several of them time.

Scripts run as ``python benchmarks/NAME.py`` and import this module as their sibling: Python puts a
script's folder first on ``sys.path``, so no script changes it.

Measuring:

- :func:`machine`: one line naming the CPU (model and the flags its matrix products depend on,
  from ``lscpu``), the torch build and its threads, and the GPU torch sees: print it first.
- :func:`interleaved`: each run warmed up, then timed in rounds in which the runs take turns, so
  that a slow spell of a shared machine hits every run alike; :class:`Timing` gives the median
  and the range of a run's rounds.
- :func:`isolated`: a function of a script called in a fresh Python process, which returns its
  result with that process's peak RSS: imports, allocator and high-water mark its own.
- :func:`rss_mib`, :func:`peak_rss_mib`, :func:`reset_peak_rss`, :class:`RssSampler`: resident memory
  now, the process's peak (restartable), and the peak during a block (Linux).

Micro-benchmarks of one operator use ``torch.utils.benchmark`` directly (``bilm_speed.py``).

Workloads: made-up sentences (:func:`zipf_sentences`, whose words repeat as in real text, and
:func:`fresh_sentences`, whose words are new), a pretraining corpus, the 480 real sentences of
examples/word_senses.jsonl, an NER corpus and the steps ``spacy train`` takes (:func:`steady_train_rate`),
:func:`layer_agreement`, how far one precision's layers are from another's, and
:func:`step_by_step`, a straightforward port of the biLM to check its outputs against.
"""

import contextlib
import gc
import importlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

STARTED = time.perf_counter()  # in a child of :func:`isolated`, about when the process started
REPO = Path(__file__).resolve().parent.parent
WORD_SENSES = REPO / "examples" / "word_senses.jsonl"
NER_CONFIG = REPO / "spacy_elmo" / "configs" / "ner_elmo.cfg"
NAMES = {"PERSON": ["Alice", "Bob", "Carol", "Dmitri", "Esther"], "GPE": ["Paris", "London", "Lagos", "Lima", "Oslo"]}
# The CPU flags that decide which product kernels run (bf16 and int8 in hardware, AMX tiles).
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# What ``--as-avx2`` sets before torch loads, as `make test-avx2` does: the libraries run their AVX2
# kernels (fbgemm's and oneDNN's int8 ones then add pairs of products in saturating int16).
AVX2_CAPS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
}
BEYOND_AVX2 = ("avx512", "amx", "avx_vnni")  # the features an AVX2-only CPU lacks, as torch names them
RESULT = "harness-result: "  # the child's last line of stdout with this prefix holds its JSON result
MIB = 2**20


# ---------------------------------------------------------------------- the machine
def cpu_description() -> Tuple[str, List[str]]:
    """The CPU's model name and which of :data:`KERNEL_FLAGS` it has (Linux's lscpu, else /proc/cpuinfo)."""
    text = ""
    if shutil.which("lscpu"):
        text = subprocess.run(["lscpu"], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}).stdout
    elif Path("/proc/cpuinfo").exists():
        text = Path("/proc/cpuinfo").read_text(encoding="utf8")
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    name = fields.get("model name") or sys.platform
    flags = set(fields.get("flags", "").split())
    return name, [flag for flag in KERNEL_FLAGS if flag in flags]


def as_avx2_cpu() -> None:
    """Run this script as on an AVX2-only CPU, approximately: re-executed with :data:`AVX2_CAPS` in
    its environment (they act only if set before torch loads), and with a ``sitecustomize`` on its
    ``PYTHONPATH`` that takes :data:`BEYOND_AVX2` out of torch's view of the CPU, which spacy-elmo
    reads; its Python subprocesses (a service, an isolated run) inherit both. The kernels are an
    AVX2-only CPU's; the cores, caches and memory stay this machine's."""
    if all(os.environ.get(name) == value for name, value in AVX2_CAPS.items()):
        return
    site = Path(tempfile.mkdtemp(prefix="spacy-elmo-avx2-"))
    (site / "sitecustomize.py").write_text(
        "import torch\n\n"
        "_probe = torch.cpu.get_capabilities\n"
        "torch.cpu.get_capabilities = lambda: {\n"
        f"    n: v for n, v in _probe().items() if not n.startswith({BEYOND_AVX2!r})\n"
        "}\n"
    )
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **AVX2_CAPS, "PYTHONPATH": path})


def machine() -> str:
    """One line: CPU model, cores and kernel flags; torch, its CPU capability and threads; the GPU;
    the caps of :func:`as_avx2_cpu` where they are set."""
    import torch

    name, flags = cpu_description()
    line = (
        f"CPU {name}, {os.cpu_count()} logical cores, flags {' '.join(flags) or 'none of ' + ' '.join(KERNEL_FLAGS)}; "
        f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads"
    )
    if all(os.environ.get(name) == value for name, value in AVX2_CAPS.items()):
        line += "; run as an AVX2-only CPU (libraries capped at AVX2)"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        line += f"; GPU {props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}"
    return line


# ---------------------------------------------------------------------- time
@dataclass(frozen=True)
class Timing:
    """Seconds of each timed round of one run."""

    seconds: Tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def fastest(self) -> float:
        return min(self.seconds)

    @property
    def slowest(self) -> float:
        return max(self.seconds)

    def describe(self) -> str:
        """``median s (fastest-slowest)``."""
        return f"{self.median:.3f} s ({self.fastest:.3f}-{self.slowest:.3f})"

    def rate(self, count: float, unit: str = "/s") -> str:
        """``count`` per second at the median, and its range over the rounds: ``1,234/s (1,100-1,300)``."""
        return f"{count / self.median:,.0f}{unit} ({count / self.slowest:,.0f}-{count / self.fastest:,.0f})"


def synchronize(device: Optional[Any]) -> None:
    """Wait for a CUDA device's queued work (``device``: a ``torch.device``; None or a CPU: nothing to wait for)."""
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)


def timed(run: Callable[[], object], device: Optional[Any] = None) -> float:
    """Seconds of one ``run()``, after a garbage collection, its device's work included."""
    gc.collect()
    synchronize(device)
    start = time.perf_counter()
    result = run()
    synchronize(device)
    seconds = time.perf_counter() - start
    del result
    return seconds


def interleaved(
    runs: Mapping[str, Callable[[], object]], rounds: int, warmup: int = 1, device: Optional[Any] = None
) -> Dict[str, Timing]:
    """Each run ``warmup`` times untimed, then ``rounds`` rounds in which every run is timed once, in turn."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: time at least one round")
    for run in runs.values():
        for _ in range(warmup):
            run()
    seconds: Dict[str, List[float]] = {label: [] for label in runs}
    for _ in range(rounds):
        for label, run in runs.items():
            seconds[label].append(timed(run, device))
    return {label: Timing(tuple(found)) for label, found in seconds.items()}


# ---------------------------------------------------------------------- memory
def rss_mib() -> float:
    """This process's resident memory now, in MiB (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def peak_rss_mib() -> float:
    """This process's peak resident memory since it started or since :func:`reset_peak_rss`, in
    MiB (Linux's ``VmHWM``)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024  # kB


def reset_peak_rss() -> None:
    """Restart :func:`peak_rss_mib` from the RSS now (Linux's ``/proc/self/clear_refs``), so that
    a peak belongs to what runs next."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


class RssSampler:
    """The peak RSS during a ``with`` block, sampled every ``interval`` seconds on a thread (:func:`peak_rss_mib`
    also covers what came before the block)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(self.interval):
            self.peak = max(self.peak, rss_mib())

    def __enter__(self) -> "RssSampler":
        self.peak = rss_mib()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib())


# ---------------------------------------------------------------------- process isolation
def isolated(function: Callable[..., Mapping[str, Any]], **kwargs: Any) -> Dict[str, Any]:
    """``function(**kwargs)`` in a fresh Python process; its result (a JSON-able mapping) with that
    process's ``peak_rss_mib``. ``function`` is a module-level function of a script here, and
    ``kwargs`` JSON-able. The child is started by exec, so its peak RSS is its own."""
    script = Path(sys.modules[function.__module__].__file__ or "").stem
    command = [sys.executable, str(Path(__file__).resolve()), script, function.__name__, json.dumps(kwargs)]
    done = subprocess.run(command, capture_output=True, text=True)
    results = [line[len(RESULT) :] for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode or not results:
        raise RuntimeError(
            f"{script}.{function.__name__}(**{kwargs}) failed in its own process:\n{done.stderr[-4000:]}"
        )
    return json.loads(results[-1])


def _run_child(script: str, function: str, kwargs: str) -> None:
    """The child's side of :func:`isolated`."""
    result = dict(getattr(importlib.import_module(script), function)(**json.loads(kwargs)))
    result.setdefault("peak_rss_mib", peak_rss_mib())
    print(RESULT + json.dumps(result), flush=True)


# ---------------------------------------------------------------------- workloads
def zipf_sentences(n: int, seed: int = 0) -> List[List[str]]:
    """``n`` sentences of 5-45 tokens drawn from a Zipfian vocabulary of 20,000 made-up words of 1-12 letters:
    words repeat as in real text, so the biLM's token cache and distinct-token batching work."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(1, 12))) for _ in range(20000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    return [rng.choices(vocab, weights, k=rng.randint(5, 45)) for _ in range(n)]


def fresh_sentences(
    n: int, words: Tuple[int, int] = (10, 40), letters: Tuple[int, int] = (3, 12), seed: int = 0
) -> Iterator[List[str]]:
    """``n`` sentences of ``words`` (inclusive range) random lowercase words of ``letters`` letters each,
    made one at a time: nearly every word is new, as a stream of fresh text makes them."""
    rng = random.Random(seed)
    for _ in range(n):
        length = rng.randint(*words)
        yield ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(*letters))) for _ in range(length)]


def zipf_corpus(path: Path, n_documents: int = 3000, vocab: int = 30_000, seed: int = 0) -> None:
    """A pretraining corpus: a document per line of 10-60 Zipfian words ``w0``, ``w1``, ... and a period."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    with path.open("w", encoding="utf8") as f:
        for _ in range(n_documents):
            f.write(" ".join(rng.choices(words, weights, k=rng.randint(10, 60))) + " .\n")


def word_sense_texts(n: int = 480) -> List[str]:
    """The first ``n`` of the 480 real English sentences of examples/word_senses.jsonl (5,365 words)."""
    lines = WORD_SENSES.read_text(encoding="utf8").splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    if not 0 < n <= len(texts):
        raise SystemExit(f"{n} sentences asked for: {WORD_SENSES} has {len(texts)}")
    return texts[:n]


def text_lines(path: Path, lines: int) -> List[List[str]]:
    """The first ``lines`` lines of a text file as sentences split on whitespace, empty ones left out."""
    with path.open(encoding="utf8") as f:
        sentences = [line.split() for _, line in zip(range(lines), f)]
    return [sentence for sentence in sentences if sentence]


def ner_corpus(path: Path, n_docs: int, seed: int = 0) -> None:
    """A DocBin of sentences of 8-40 Zipfian made-up words and a period, with 0-2 PERSON or GPE entities each."""
    import spacy
    from spacy.tokens import Doc, DocBin

    vocab = spacy.blank("en").vocab
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(20_000)]
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    docs = []
    for _ in range(n_docs):
        tokens = rng.choices(words, weights, k=rng.randint(8, 40))
        tags = ["O"] * len(tokens)
        for _ in range(rng.randint(0, 2)):
            label = rng.choice(sorted(NAMES))
            position = rng.randrange(len(tokens))
            tokens[position], tags[position] = rng.choice(NAMES[label]), f"B-{label}"
        docs.append(Doc(vocab, words=tokens + ["."], ents=tags + ["O"]))
    DocBin(docs=docs).to_disk(path)


def layer_agreement(found: Sequence[Any], expected: Sequence[Any]) -> List[Dict[str, float]]:
    """Per layer of two runs' outputs (lists of (n_layers, n_tokens, width) arrays, one per sentence):
    the mean and smallest per-token cosine, the largest absolute difference and the mean |expected|."""
    import numpy

    a, b = numpy.concatenate(list(found), axis=1), numpy.concatenate(list(expected), axis=1)
    rows = []
    for x, y in zip(a, b):
        cosine = (x * y).sum(-1) / (numpy.linalg.norm(x, axis=-1) * numpy.linalg.norm(y, axis=-1))
        rows.append(
            {
                "mean_cosine": float(cosine.mean()),
                "smallest_cosine": float(cosine.min()),
                "largest_difference": float(numpy.abs(x - y).max()),
                "mean_abs": float(numpy.abs(y).mean()),
            }
        )
    return rows


def step_by_step(model: Any, sentences: Sequence[Sequence[str]]) -> List[Any]:
    """A biLM's layers for ``sentences`` computed by a straightforward port, as AllenNLP's
    ``LstmCellWithProjection``: every token through the char CNN at all its character positions,
    then one timestep at a time, one direction at a time, in the dtype of the model's parameters
    (float64 gives a reference for float32's error). The LSTM steps are the package's reference
    loop (spacy_elmo/bilm/kernels/reference.py, the spec its kernels are held to), called, not
    copied: the port and the contract tests check against one definition. One (n_layers + 1, len,
    2 * projection_dim) array per sentence, as ``BiLM.embed_sentences`` returns them."""
    import torch

    opts = model.options
    outputs = []
    with torch.no_grad():
        for batch in model.runtime.batches(sentences):
            rows = [sentences[i] for i in batch]
            n_steps = max(len(s) for s in rows) + 2
            tokens = [[("<boundary>", "start"), *s, ("<boundary>", "end")] for s in rows]
            flat = [tok for sent in tokens for tok in sent]
            embedded = _char_cnn_every_position(model, flat)
            x = torch.zeros(len(rows), n_steps, opts.projection_dim, dtype=embedded.dtype)
            offset = 0
            for r, sent in enumerate(tokens):
                x[r, : len(sent)] = embedded[offset : offset + len(sent)]
                offset += len(sent)
            lengths = [len(t) for t in tokens]
            layers = [torch.cat([x, x], -1)]
            directions = [_run_direction(model, x, lengths, d) for d in (0, 1)]
            for index in range(opts.n_layers):
                layers.append(torch.cat([directions[0][index], directions[1][index]], -1))
            stacked = torch.stack(layers).numpy()
            for r, i in enumerate(batch):
                outputs.append((i, stacked[:, r, 1 : lengths[r] - 1]))
    return [o for _, o in sorted(outputs, key=lambda pair: pair[0])]


def _char_cnn_every_position(model: Any, tokens: Sequence[Any]) -> Any:
    """The char CNN as published: all 50 character positions of every token, 1024 at a time."""
    import torch

    cnn = model.token_encoder
    char_ids = torch.from_numpy(cnn.token_ids(tokens).chars)
    encoded = []
    for chunk in char_ids.split(1024):
        chars = cnn.char_embedding(chunk).transpose(1, 2)
        x = torch.cat([cnn.activation(conv(chars).amax(dim=-1)) for conv in cnn.convolutions], dim=-1)
        for highway in cnn.highways:
            x = highway(x, torch.float32, cnn.copies, "highway")
        encoded.append(cnn.projection(x))
    return torch.cat(encoded)


def _run_direction(model: Any, x: Any, lengths: List[int], direction: int) -> List[Any]:
    """One direction of every LSTM layer over ``x`` (batch, time, projection_dim), step by step: the
    package's own reference loop (:meth:`ReferenceKernel.direction`, one :func:`reference_step` a
    timestep on the rows still running), fed as it wants its rows (longest first, time-major,
    direction 1 reversed within each row's length), the skip connections added between layers."""
    from spacy_elmo.bilm.kernels.reference import ReferenceKernel

    opts = model.options
    batch, n_steps, _ = x.shape
    order = sorted(range(batch), key=lambda r: -lengths[r])
    sorted_lengths = [lengths[r] for r in order]
    active = [sum(n > t for n in sorted_lengths) for t in range(n_steps)]
    x = x[order].transpose(0, 1)  # (time, batch, projection_dim), rows longest first
    if direction == 1:
        x = _reverse_within(x, sorted_lengths)
    results = []
    for index, layer in enumerate(model.lstm.layers):
        h = x.new_zeros(batch, opts.projection_dim)
        c = x.new_zeros(batch, opts.lstm_dim)
        out, _, _ = ReferenceKernel.direction(layer, direction, x, active, h, c)
        if index > 0 and opts.use_skip_connections:
            out = out + x
        results.append(out)
        x = out
    unsorted = [0] * batch
    for position, r in enumerate(order):
        unsorted[r] = position
    return [(_reverse_within(y, sorted_lengths) if direction == 1 else y).transpose(0, 1)[unsorted] for y in results]


def _reverse_within(x: Any, lengths: List[int]) -> Any:
    """``x`` (time, batch, width) with each row's first ``lengths[row]`` steps in reverse order."""
    import torch

    return torch.stack([torch.cat([x[:n, r].flip(0), x[n:, r]]) for r, n in enumerate(lengths)], dim=1)


# ---------------------------------------------------------------------- spacy train's steps
class TrainingSession:
    """A pipeline initialized from a training config, stepped as ``spacy train`` steps it."""

    def __init__(self, nlp: Any, training: Dict[str, Any], examples: List[Any]) -> None:
        self.nlp = nlp
        self.training = training
        self.examples = examples
        self._rng = random.Random(0)

    def epoch_batches(self) -> List[List[Any]]:
        """One epoch's batches, shuffled, by the config's batcher (``spacy train`` shuffles each epoch)."""
        examples = list(self.examples)
        self._rng.shuffle(examples)
        return list(self.training["batcher"](examples))

    def step(self, batch: List[Any]) -> None:
        """One ``nlp.update`` with the config's dropout, optimizer, frozen and annotating components."""
        training = self.training
        self.nlp.update(
            batch,
            drop=training["dropout"],
            sgd=training["optimizer"],
            exclude=training["frozen_components"],
            annotates=training["annotating_components"],
        )


def cnn_config(config: Any) -> Any:
    """ner_elmo.cfg without ELMo: spaCy's own CNN tok2vec (HashEmbedCNN, its default) inside ``ner``."""
    config = config.copy()
    config["nlp"]["pipeline"] = ["ner"]
    del config["components"]["elmo"]
    config["components"]["ner"]["model"]["tok2vec"] = {
        "@architectures": "spacy.HashEmbedCNN.v2",
        "width": 96,
        "depth": 4,
        "embed_size": 2000,
        "window_size": 1,
        "maxout_pieces": 3,
        "subword_features": True,
        "pretrained_vectors": None,
    }
    return config


@contextlib.contextmanager
def training_session(
    corpus: Path, overrides: Dict[str, Any], gpu_id: int, cnn: bool = False
) -> Iterator[TrainingSession]:
    """spacy_elmo/configs/ner_elmo.cfg with ``overrides`` (``cnn``: without ELMo, see :func:`cnn_config`),
    initialized on ``corpus`` (also its dev set) on GPU ``gpu_id`` (-1: the CPU)."""
    import spacy
    from spacy.schemas import ConfigSchemaTraining
    from spacy.training.initialize import init_nlp
    from spacy.util import registry, resolve_dot_names
    from thinc.api import require_cpu, require_gpu

    if gpu_id >= 0:
        require_gpu(gpu_id)
    try:
        paths = {"paths.train": str(corpus), "paths.dev": str(corpus)}
        if cnn:
            overrides = {k: v for k, v in overrides.items() if not k.startswith(("components.elmo", "paths.elmo"))}
        config = spacy.util.load_config(NER_CONFIG, overrides={**paths, **overrides}, interpolate=False)
        nlp = init_nlp(cnn_config(config) if cnn else config, use_gpu=gpu_id)
        training = registry.resolve(nlp.config.interpolate()["training"], schema=ConfigSchemaTraining)
        train_corpus, _ = resolve_dot_names(
            nlp.config.interpolate(), [training["train_corpus"], training["dev_corpus"]]
        )
        yield TrainingSession(nlp, training, list(train_corpus(nlp)))
    finally:
        require_cpu()


def steady_train_rate(
    corpus: Path,
    overrides: Dict[str, Any],
    gpu_id: int,
    cnn: bool = False,
    max_steps: Optional[int] = None,
    batch_words: int = 1000,
) -> float:
    """Words/s of ``spacy train`` at the end of the batch schedule (``batch_words``-word batches, as
    shipped 1,000) in its second epoch, where a frozen biLM's features come from the feature cache:
    what a long run spends most of its steps on (a fine-tuned biLM caches nothing: 3 steps warm it
    up). At most ``max_steps`` steps are timed (default: the whole epoch)."""
    with training_session(corpus, {**overrides, "training.batcher.size": batch_words}, gpu_id, cnn) as session:
        frozen = cnn or overrides.get("components.elmo.model.freeze", True)
        warmup = session.epoch_batches()
        for batch in warmup if frozen else warmup[:3]:
            session.step(batch)
        timed_batches = session.epoch_batches()[:max_steps]
        seconds = timed(lambda: [session.step(batch) for batch in timed_batches], _device(gpu_id))
        return sum(len(eg.reference) for batch in timed_batches for eg in batch) / seconds


def _device(gpu_id: int) -> Any:
    import torch

    return torch.device("cuda", gpu_id) if gpu_id >= 0 else torch.device("cpu")


if __name__ == "__main__":
    sys.modules["harness"] = sys.modules[__name__]  # the script's ``import harness`` finds this one, STARTED included
    _run_child(*sys.argv[1:])
