"""Throughput of spacy-elmo on one GPU, against this machine's CPU. Figures from one H200 are in
docs/component.md (GPU) and benchmarks/results/gpu_h200.txt.

    python benchmarks/gpu.py            # the full run: needs a CUDA GPU
    python benchmarks/gpu.py --quick    # tiny sizes, to check the script end to end (a CPU will do: < 1 min)

The first lines name the CPU and the GPU. Then one row per measurement:

- ``inference``: tokens/s of the biLM at the published Original size (2 x 4,096-cell LSTMs
  projected to 512, a char CNN of 2,048 filters, 2 highways; see docs/bilm.md), random weights
  (they cost what trained ones do), on the GPU in fp32 and bf16 products, with the fused LSTM loop
  replayed from CUDA graphs (the default: spacy_elmo/bilm/cuda_graphs.py), the fused loop launched
  step by step (spacy_elmo/bilm/fused_lstm.py) and the eager one, and on the CPU in fp32 (bf16
  too where the CPU multiplies it in hardware, AVX512-BF16 or AMX: elsewhere it is emulated, far
  slower than fp32). The biLM's forward
  pass over length-sorted batches of ``--max-batch-tokens``, layers left on the device, token
  cache off; the best of ``--repeats`` runs after a warm-up (on a GPU two passes: the graphs are
  captured in the second). Sentences: benchmarks/bilm_speed.py's.
- ``lstm``: the LSTM alone over random token vectors in the same batches: the biLM's stack against
  ``torch.nn.LSTM`` (cuDNN on a GPU) of the same layers and widths, the anchor of what a
  recurrent layer of these sizes costs on the machine.
- ``pipe``: words/s of ``nlp.pipe`` with an ``elmo`` pipe of the Original size (precision auto)
  over the same sentences as texts.
- ``steady``: ``spacy train`` where a long run spends its steps: the schedule's last batch size
  (1,000 words), second epoch (a frozen biLM's features then come from its feature cache), on a
  synthetic corpus of ``--steady-docs`` documents (WNUT-16's training set is about that size);
  frozen, fine-tuned, and spaCy's own CNN tok2vec without ELMo (what the NER head alone costs).
  The CPU's rows with ``--cpu-rows``.
- ``train``: words/s of the training step of spacy_elmo/configs/ner_elmo.cfg as shipped
  (the bundled ``en`` biLM), frozen and fine-tuned (``freeze = false``) on the GPU, frozen on
  the CPU: ``nlp.update`` with the config's batcher, dropout and optimizer, what ``spacy train
  --gpu-id 0`` repeats between evaluations (not timed). A synthetic NER corpus; every timed step
  is in the first epoch, at the schedule's first batch sizes (about 100 words).
- ``pretrain``: tokens/s (window positions per direction, as the training log counts them) of the
  ``base`` and ``elmo-original`` presets in fp32 and bf16 products, on
  benchmarks/pretrain_speed.py's Zipfian random corpus.

GPU rows also give the peak GPU memory torch allocated (``torch.cuda.max_memory_allocated``).
"""

import argparse
import contextlib
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import torch

from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.precision import cpu_has_native_bf16, gpu_has_native_bf16
from spacy_elmo.pretraining import get_preset
from spacy_elmo.pretraining.distributed import init_distributed
from spacy_elmo.pretraining.train import Trainer

sys.path.insert(0, str(Path(__file__).parent))
from bilm_speed import ORIGINAL, make_sentences  # noqa: E402  (a sibling script, not a package)
from pretrain_speed import zipf_corpus  # noqa: E402

CONFIGS = Path(__file__).resolve().parent.parent / "spacy_elmo" / "configs"
TINY = ElmoOptions(
    lstm_dim=24, projection_dim=8, n_layers=2, char_embedding_dim=4, filters=((1, 4), (2, 8), (3, 8)), n_highway=2
)
NAMES = {"PERSON": ["Alice", "Bob", "Carol", "Dmitri", "Esther"], "GPE": ["Paris", "London", "Lagos", "Lima", "Oslo"]}


# ---------------------------------------------------------------------- the machine
def cpu_name() -> str:
    """The CPU's model name (Linux), else what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_machine(device: torch.device) -> List[str]:
    lines = [
        f"CPU: {cpu_name()}; {os.cpu_count()} logical cores, torch {torch.__version__} on {torch.get_num_threads()} "
        f"threads, {torch.backends.cpu.get_cpu_capability()}, bf16 in hardware: {'yes' if cpu_has_native_bf16() else 'no'}"
    ]
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        native = gpu_has_native_bf16((props.major, props.minor))
        lines.append(
            f"GPU: {props.name}; {props.total_memory / 2**30:.0f} GiB, compute capability {props.major}.{props.minor}, "
            f"CUDA {torch.version.cuda}, native bf16: {'yes' if native else 'no (bf16 rows are emulated)'}"
        )
    else:
        lines.append("GPU: none visible to torch; the rows run on the CPU")
    return lines


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Callable[[], None], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start


class Table:
    """Rows printed as they are measured: a long run shows its progress."""

    def __init__(self) -> None:
        print(f"{'task':52} {'device':6} {'products':8} {'rate':>12} {'unit':9} {'peak GPU memory':>15}")

    def measure(self, task: str, device: torch.device, products: str, unit: str, rate: Callable[[], float]) -> None:
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        value = rate()
        memory = f"{torch.cuda.max_memory_allocated(device) / 2**30:13.2f} G" if device.type == "cuda" else ""
        print(f"{task:52} {device.type:6} {products:8} {value:12,.0f} {unit:9} {memory:>15}", flush=True)

    def skip(self, task: str, device: str, products: str, why: str) -> None:
        print(f"{task:52} {device:6} {products:8} {'-':>12} skipped: {why}", flush=True)


# ---------------------------------------------------------------------- inference
# The GPU's LSTM loops: fused and replayed from CUDA graphs (the default in bf16; measured in
# fp32 too, where the default is the launched loop: cuda_graphs.GRAPH_DTYPES), fused and launched
# step by step (SPACY_ELMO_CUDA_GRAPHS=0), eager (SPACY_ELMO_FUSED_LSTM=0).
LOOPS = {"graphs": ("1", "1"), "fused": ("1", "0"), "eager": ("0", "1")}


def with_lstm_loop(loop: str, rate: Callable[[], float]) -> float:
    """``rate()`` with the GPU's LSTM loop ``loop`` of :data:`LOOPS`."""
    from spacy_elmo.bilm import cuda_graphs
    from spacy_elmo.bilm.fused_lstm import FUSED_LSTM_ENV as FUSED

    saved = {name: os.environ.get(name) for name in (FUSED, cuda_graphs.CUDA_GRAPHS_ENV)}
    os.environ[FUSED], os.environ[cuda_graphs.CUDA_GRAPHS_ENV] = LOOPS[loop]
    graph_dtypes = cuda_graphs.GRAPH_DTYPES
    cuda_graphs.GRAPH_DTYPES = (torch.float32, torch.bfloat16)
    try:
        return rate()
    finally:
        cuda_graphs.GRAPH_DTYPES = graph_dtypes
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def inference_rate(
    options: ElmoOptions, device: torch.device, precision: str, sentences: Sequence[Sequence[str]],
    max_batch_tokens: int, repeats: int,
) -> float:
    """Tokens/s of the biLM's forward pass over ``sentences`` on ``device``; the best of ``repeats``."""
    torch.manual_seed(0)
    bilm = BiLM(options, cache_size=0, max_batch_tokens=max_batch_tokens, precision=precision)
    with torch.no_grad():
        for param in bilm.parameters():
            param.normal_(0.0, 0.02)
    bilm.to(device).eval()

    def run(chosen: Sequence[Sequence[str]]) -> None:
        with torch.no_grad():
            for batch in bilm.batches(chosen):
                bilm([chosen[i] for i in batch])

    run(sentences[:64])  # kernels, allocator pools, the bf16 weight copies
    if device.type == "cuda":  # CUDA graphs: each shape bucket is captured at its second use
        run(sentences)
        run(sentences)
    best = min(timed(lambda: run(sentences), device) for _ in range(repeats))
    return sum(len(s) for s in sentences) / best


def padded_batches(options: ElmoOptions, sentences: Sequence[Sequence[str]], max_batch_tokens: int) -> List[List[int]]:
    """The biLM's batches of ``sentences`` (length-sorted, ``max_batch_tokens`` each) as lists of
    lengths, boundaries included."""
    batcher = BiLM(TINY, max_batch_tokens=max_batch_tokens)
    return [[len(sentences[i]) + 2 for i in batch] for batch in batcher.batches(sentences)]


def lstm_rate(options: ElmoOptions, device: torch.device, precision: str, sentences: Sequence[Sequence[str]],
              max_batch_tokens: int, repeats: int, cudnn: bool) -> float:
    """Tokens/s of the LSTM alone over random token vectors in the biLM's batches: the biLM's own
    stack (``cudnn`` False), or ``torch.nn.LSTM`` (cuDNN on a GPU) with ``proj_size``, both
    directions, the same layers and widths, over packed sequences (the anchor: no clipping, and its
    second layer reads both directions' outputs, 2 x projection_dim wide, where ELMo's reads its own
    direction's). Products in ``precision`` (fp32: IEEE, no TF32)."""
    from spacy_elmo.bilm.lstm import BiLSTMStack
    from spacy_elmo.bilm.precision import Products, own_precision

    torch.manual_seed(0)
    dtype = Products(precision).dtype
    batches = padded_batches(options, sentences, max_batch_tokens)
    width = options.projection_dim
    if cudnn:
        model = torch.nn.LSTM(width, options.lstm_dim, num_layers=options.n_layers, bidirectional=True,
                              proj_size=width).to(device, dtype)
    else:
        model = BiLSTMStack(options).to(device)
    inputs = [(torch.randn(max(lengths), len(lengths), width, device=device),
               torch.tensor(lengths, device=device)) for lengths in batches]

    def run() -> None:
        with torch.no_grad(), own_precision(device, dtype):
            for x, lengths in inputs:
                if cudnn:
                    packed = torch.nn.utils.rnn.pack_padded_sequence(x.to(dtype), lengths.cpu(), enforce_sorted=False)
                    model(packed)
                else:
                    model(x, lengths, model.zero_state(len(lengths), x), dtype)

    run()
    best = min(timed(run, device) for _ in range(repeats))
    return sum(map(sum, batches)) / best


def pipe_rate(options: ElmoOptions, directory: Path, gpu_id: int, sentences: Sequence[Sequence[str]]) -> float:
    """Words/s of ``nlp.pipe`` with an ``elmo`` pipe of a random biLM of ``options`` (precision
    ``auto``, layers in doc.tensor), on GPU ``gpu_id`` (-1: the CPU); the best of two passes."""
    import spacy
    from thinc.api import require_cpu, require_gpu

    BiLM(options).to_files(directory / "pipe_options.json", directory / "pipe_weights.hdf5")
    texts = [" ".join(sentence) for sentence in sentences]
    if gpu_id >= 0:
        require_gpu(gpu_id)
    try:
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"model": {"options_file": str(directory / "pipe_options.json"),
                                               "weight_file": str(directory / "pipe_weights.hdf5"),
                                               "pretrained": None, "precision": "auto"}})
        nlp.initialize()
        device = torch.device("cuda", gpu_id) if gpu_id >= 0 else torch.device("cpu")
        words = sum(map(len, sentences))
        list(nlp.pipe(texts[:64]))
        return words / min(timed(lambda: list(nlp.pipe(texts)), device) for _ in range(2))
    finally:
        require_cpu()


# ---------------------------------------------------------------------- spacy train
def ner_corpus(path: Path, n_docs: int, seed: int = 0) -> None:
    """A DocBin of sentences of made-up words with PERSON and GPE entities (names from a short list)."""
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
            tokens[position], tags[position] = rng.choice(NAMES[label]), f"U-{label}"
        docs.append(Doc(vocab, words=tokens + ["."], ents=[t.replace("U-", "B-") for t in tags] + ["O"]))
    DocBin(docs=docs).to_disk(path)


class TrainingSession:
    """ner_elmo.cfg (or the CNN variant) initialized on a corpus, stepped as ``spacy train`` steps it."""

    def __init__(self, nlp, training: Dict, examples: List) -> None:
        self.nlp = nlp
        self.training = training
        self.examples = examples
        self._rng = random.Random(0)

    def epoch_batches(self) -> List:
        """One epoch's batches, shuffled, by the config's batcher (``spacy train`` shuffles each epoch)."""
        examples = list(self.examples)
        self._rng.shuffle(examples)
        return list(self.training["batcher"](examples))

    def step(self, batch) -> None:
        training = self.training
        self.nlp.update(batch, drop=training["dropout"], sgd=training["optimizer"],
                        exclude=training["frozen_components"], annotates=training["annotating_components"])


def cnn_config(config):
    """ner_elmo.cfg without ELMo: spaCy's own CNN tok2vec (HashEmbedCNN, its default) inside ``ner``."""
    config = config.copy()
    config["nlp"]["pipeline"] = ["ner"]
    del config["components"]["elmo"]
    config["components"]["ner"]["model"]["tok2vec"] = {
        "@architectures": "spacy.HashEmbedCNN.v2", "width": 96, "depth": 4, "embed_size": 2000,
        "window_size": 1, "maxout_pieces": 3, "subword_features": True, "pretrained_vectors": None,
    }
    return config


@contextlib.contextmanager
def training_session(corpus: Path, overrides: Dict[str, object], gpu_id: int, cnn: bool = False) -> Iterator[TrainingSession]:
    """ner_elmo.cfg with ``overrides`` (``cnn``: without ELMo, see :func:`cnn_config`), initialized on
    ``corpus`` on GPU ``gpu_id`` (-1: the CPU)."""
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
        config = spacy.util.load_config(CONFIGS / "ner_elmo.cfg", overrides={**paths, **overrides}, interpolate=False)
        nlp = init_nlp(cnn_config(config) if cnn else config, use_gpu=gpu_id)
        training = registry.resolve(nlp.config.interpolate()["training"], schema=ConfigSchemaTraining)
        train_corpus, _ = resolve_dot_names(nlp.config.interpolate(), [training["train_corpus"], training["dev_corpus"]])
        yield TrainingSession(nlp, training, list(train_corpus(nlp)))
    finally:
        require_cpu()


def train_rate(corpus: Path, overrides: Dict[str, object], gpu_id: int, warmup: int, steps: int) -> float:
    """Words/s of ``steps`` training steps of ner_elmo.cfg, after ``warmup`` steps, as spacy train runs them."""
    with training_session(corpus, overrides, gpu_id) as session:
        batches = iter(session.epoch_batches())
        for _ in range(warmup):
            session.step(next(batches))
        timed_batches = [next(batches) for _ in range(steps)]  # the first epoch: the corpus is large enough
        device = torch.device("cuda", gpu_id) if gpu_id >= 0 else torch.device("cpu")
        seconds = timed(lambda: [session.step(batch) for batch in timed_batches], device)
        return sum(len(eg.reference) for batch in timed_batches for eg in batch) / seconds


def steady_train_rate(corpus: Path, overrides: Dict[str, object], gpu_id: int, cnn: bool = False,
                      max_steps: Optional[int] = None, batch_words: int = 1000) -> float:
    """Words/s of ``spacy train`` at the end of the batch schedule (1,000-word batches), in its second
    epoch, where a frozen biLM's features come from the feature cache: what a long run spends
    most of its steps on (a fine-tuned biLM caches nothing: 3 steps warm it up). At most
    ``max_steps`` steps are timed (default: the whole epoch). ``batch_words``: the schedule's end
    as shipped, or a larger batch to see what the GPU gains from it."""
    with training_session(corpus, {**overrides, "training.batcher.size": batch_words}, gpu_id, cnn) as session:
        frozen = cnn or overrides.get("components.elmo.model.freeze", True)
        warmup = session.epoch_batches()
        for batch in warmup if frozen else warmup[:3]:  # a trained biLM caches nothing: its steps are alike
            session.step(batch)
        timed_batches = session.epoch_batches()[:max_steps]
        device = torch.device("cuda", gpu_id) if gpu_id >= 0 else torch.device("cpu")
        seconds = timed(lambda: [session.step(batch) for batch in timed_batches], device)
        return sum(len(eg.reference) for batch in timed_batches for eg in batch) / seconds


# ---------------------------------------------------------------------- pretraining
def pretrain_rate(preset_name: str, precision: str, corpus: Path, output_dir: Path, warmup: int, steps: int) -> float:
    """Tokens/s of pretraining steps of a preset, as benchmarks/pretrain_speed.py counts them."""
    preset = get_preset(preset_name)
    config = preset.training.updated(max_steps=warmup + steps, precision=precision)
    env = init_distributed()  # the GPU when torch sees one
    trainer = Trainer(env, corpus, output_dir, preset.options, config, dev_path=None, init_from=None,
                      resume=False, progress=False)
    for _ in range(warmup):
        trainer._train_step()

    def run() -> None:
        for _ in range(steps):
            trainer._train_step()

    return steps * config.batch_size * config.window / timed(run, env.device)


# ---------------------------------------------------------------------- the run
def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Tiny sizes and few steps: checks the script, on any machine")
    parser.add_argument("--gpu-id", type=int, default=0)
    parser.add_argument("--sentences", type=int, default=2000, help="Inference sentences on the GPU")
    parser.add_argument("--cpu-sentences", type=int, default=100, help="Inference sentences on the CPU (it is slow)")
    parser.add_argument("--max-batch-tokens", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=50)
    parser.add_argument("--train-batch-words", type=int, default=None,
                        help="Words per training batch; default: the config's schedule, which starts at 100 words")
    parser.add_argument("--pretrain-steps", type=int, default=20)
    parser.add_argument("--steady-docs", type=int, default=2400,
                        help="Documents of the steady-state training corpus (WNUT-16's training set has 2,394)")
    parser.add_argument("--steady-steps", type=int, default=None,
                        help="Steady-state steps timed (default: the whole second epoch)")
    parser.add_argument("--steady-batch-words", type=int, default=1000,
                        help="Words per steady-state batch (the shipped schedule ends at 1,000)")
    parser.add_argument("--cpu-rows", action="store_true",
                        help="The CPU rows of the steady-state, lstm and pipe tasks too (slow at the Original size)")
    parser.add_argument("--tasks", default="inference,lstm,pipe,steady,train,pretrain",
                        help="Which rows to measure (comma-separated)")
    parser.add_argument("--train-bilm", choices=["bundled", "original"], default="bundled",
                        help="The biLM of the spacy train rows: the bundled en, or random weights of the Original size")
    args = parser.parse_args(argv)
    tasks = set(args.tasks.split(","))
    has_gpu = torch.cuda.is_available()
    if not has_gpu and not args.quick and not tasks <= {"train", "steady"}:
        parser.error("torch sees no CUDA GPU here: run the full benchmark on a GPU machine, check it with --quick, "
                     "or time spacy train alone on this CPU with --tasks train,steady")
    device = torch.device("cuda", args.gpu_id) if has_gpu else torch.device("cpu")
    if has_gpu:
        torch.cuda.set_device(device)
    options = TINY if args.quick else ORIGINAL
    sentences = make_sentences(40 if args.quick else args.sentences)
    cpu_sentences = sentences[: 40 if args.quick else args.cpu_sentences]
    warmup, train_steps, pretrain_steps = (1, 3, 3) if args.quick else (5, args.train_steps, args.pretrain_steps)
    presets = ["tiny"] if args.quick else ["base", "elmo-original"]
    size = "tiny" if args.quick else "Original"

    for line in describe_machine(device):
        print(line)
    print(f"inference: {size} size, {len(sentences)} sentences (GPU), {len(cpu_sentences)} (CPU), "
          f"batches of {args.max_batch_tokens} tokens; spacy train: ner_elmo.cfg, batches of "
          f"{args.train_batch_words or 'the config schedule (100 words at first)'} words; pretrain: {', '.join(presets)}")
    table = Table()
    if "inference" in tasks:
        inference_rows(table, options, size, device, sentences, cpu_sentences, args)
    if "lstm" in tasks:
        lstm_rows(table, options, size, device, sentences, cpu_sentences, args)
    gpu_id = args.gpu_id if has_gpu else -1
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        if "pipe" in tasks:
            pipe_rows(table, options, size, directory, device, gpu_id, sentences, cpu_sentences, args.cpu_rows)
        if "steady" in tasks:
            steady_rows(table, options, size, directory, device, gpu_id, 120 if args.quick else args.steady_docs,
                        args.steady_steps, args.cpu_rows, args.steady_batch_words)
        if "train" in tasks:
            train_bilm = options if args.quick or args.train_bilm == "original" else None
            train_rows(table, directory, device, gpu_id, train_bilm, size, warmup, train_steps, args.quick,
                       args.train_batch_words)
        if "pretrain" in tasks:
            pretrain_rows(table, directory, device, presets, warmup, pretrain_steps, args.quick)


def inference_rows(table: Table, options: ElmoOptions, size: str, device: torch.device, sentences: List[List[str]],
                   cpu_sentences: List[List[str]], args: argparse.Namespace) -> None:
    task = f"inference, {size} size"
    if device.type == "cuda":
        for precision in ("fp32", "bf16"):
            for loop in LOOPS:
                table.measure(f"{task}, {loop} LSTM loop", device, precision, "tokens/s",
                              lambda: with_lstm_loop(loop, lambda: inference_rate(
                                  options, device, precision, sentences, args.max_batch_tokens, args.repeats)))
    else:
        table.skip(task, "cuda", "fp32/bf16", "no CUDA GPU visible")
    cpu = torch.device("cpu")
    table.measure(task, cpu, "fp32", "tokens/s",
                  lambda: inference_rate(options, cpu, "fp32", cpu_sentences, args.max_batch_tokens, args.repeats))
    if cpu_has_native_bf16():
        table.measure(task, cpu, "bf16", "tokens/s",
                      lambda: inference_rate(options, cpu, "bf16", cpu_sentences, args.max_batch_tokens, args.repeats))
    else:
        table.skip(task, "cpu", "bf16", "no AVX512-BF16 or AMX on this CPU: bf16 is emulated there, slower than fp32")


def lstm_rows(table: Table, options: ElmoOptions, size: str, device: torch.device, sentences: List[List[str]],
              cpu_sentences: List[List[str]], args: argparse.Namespace) -> None:
    """The LSTM alone: the biLM's stack against torch.nn.LSTM (cuDNN) at the same sizes and batches."""
    precisions = ("fp32", "bf16") if device.type == "cuda" else ("fp32",)
    for precision in precisions:
        for cudnn in (False, True):
            table.measure(f"LSTM alone, {size} size, " + ("torch.nn.LSTM" if cudnn else "spacy-elmo"), device,
                          precision, "tokens/s", lambda: lstm_rate(options, device, precision, sentences,
                                                                   args.max_batch_tokens, args.repeats, cudnn))


def pipe_rows(table: Table, options: ElmoOptions, size: str, directory: Path, device: torch.device, gpu_id: int,
              sentences: List[List[str]], cpu_sentences: List[List[str]], cpu_rows: bool) -> None:
    task = f"nlp.pipe, {size} size"
    if device.type == "cuda":
        table.measure(task, device, "auto", "words/s", lambda: pipe_rate(options, directory, gpu_id, sentences))
    if device.type != "cuda" or cpu_rows:
        table.measure(task, torch.device("cpu"), "auto", "words/s", lambda: pipe_rate(options, directory, -1, cpu_sentences))


def steady_rows(table: Table, options: ElmoOptions, size: str, directory: Path, device: torch.device, gpu_id: int,
                n_docs: int, max_steps: Optional[int], cpu_rows: bool, batch_words: int) -> None:
    """spacy train at the schedule's end, second epoch (see :func:`steady_train_rate`): the biLM
    frozen and fine-tuned, and spaCy's CNN config without ELMo, on a corpus of ``n_docs`` documents."""
    corpus = directory / "steady.spacy"
    ner_corpus(corpus, n_docs, seed=1)
    BiLM(options).to_files(directory / "steady_options.json", directory / "steady_weights.hdf5")
    bilm = {"paths.elmo_options": str(directory / "steady_options.json"),
            "paths.elmo_weights": str(directory / "steady_weights.hdf5")}
    devices = [(device, gpu_id)] + ([(torch.device("cpu"), -1)] if device.type == "cuda" and cpu_rows else [])
    for where, where_id in devices:
        # The CPU's fine-tuned row would take minutes at the Original size: the GPU's is compared
        # with the CPU's frozen one.
        for freeze in (True, False) if where == device else (True,):
            name = f"spacy train, {size} size, {'frozen' if freeze else 'fine-tuned'}, steady, {batch_words} w"
            table.measure(name, where, "auto", "words/s", lambda: steady_train_rate(
                corpus, {**bilm, "components.elmo.model.freeze": freeze}, where_id, max_steps=max_steps,
                batch_words=batch_words))
        table.measure(f"spacy train, spaCy CNN, no ELMo, steady, {batch_words} w", where, "fp32", "words/s",
                      lambda: steady_train_rate(corpus, {}, where_id, cnn=True, max_steps=max_steps,
                                                batch_words=batch_words))


def train_rows(table: Table, directory: Path, device: torch.device, gpu_id: int, bilm: Optional[ElmoOptions],
               size: str, warmup: int, steps: int, quick: bool, batch_words: Optional[int]) -> None:
    """spacy train rows with the bundled biLM, or (``bilm``) random weights of those sizes, named
    ``size``; batches of ``batch_words`` words, or the config's schedule."""
    enough = 0 if batch_words is None else (warmup + steps + 1) * batch_words // 20  # documents of 9-41 words
    ner_corpus(directory / "train.spacy", max(60 if quick else 4000, enough))
    overrides: Dict[str, object] = {} if batch_words is None else {"training.batcher.size": batch_words}
    name = "spacy train ner_elmo.cfg"
    if bilm is not None:
        BiLM(bilm).to_files(directory / "options.json", directory / "weights.hdf5")
        overrides.update({"paths.elmo_options": str(directory / "options.json"),
                          "paths.elmo_weights": str(directory / "weights.hdf5")})
        name = f"spacy train, {size} size"
    for freeze in (True, False):
        table.measure(name + (", frozen" if freeze else ", fine-tuned"), device, "auto", "words/s", lambda: train_rate(
            directory / "train.spacy", {**overrides, "components.elmo.model.freeze": freeze}, gpu_id, warmup, steps))
    if device.type == "cuda":  # the same steps on this machine's CPU, for the GPU's gain
        table.measure(name + ", frozen", torch.device("cpu"), "auto", "words/s", lambda: train_rate(
            directory / "train.spacy", {**overrides, "components.elmo.model.freeze": True}, -1, warmup, steps))


def pretrain_rows(table: Table, directory: Path, device: torch.device, presets: List[str], warmup: int, steps: int,
                  quick: bool) -> None:
    # elmo-original reads 384 x 20 positions a step: 20,000 documents (~700 k tokens) last the run
    zipf_corpus(directory / "lm.txt", n_documents=300 if quick else 20_000)
    for preset in presets:
        for precision in ("fp32", "bf16"):
            if precision == "bf16" and device.type != "cuda" and not cpu_has_native_bf16():
                table.skip(f"pretrain {preset}", "cpu", "bf16", "no AVX512-BF16 or AMX on this CPU")
                continue
            table.measure(f"pretrain {preset}", device, precision, "tokens/s", lambda: pretrain_rate(
                preset, precision, directory / "lm.txt", directory / f"{preset}-{precision}", warmup, steps))


if __name__ == "__main__":
    main()
