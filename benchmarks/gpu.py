"""Throughput of spacy-elmo on one GPU, against this machine's CPU. Every run so far, with its
command, is in benchmarks/results/gpu_*.txt.

    python benchmarks/gpu.py            # the full run: needs a CUDA GPU
    python benchmarks/gpu.py --quick    # tiny sizes, to check the script end to end (a CPU will do: < 1 min)

The first lines name the machine (the harness's machine line) and where bf16 runs in hardware.
Then one row per measurement:

- ``inference``: tokens/s of the biLM at the published Original size (2 x 4,096-cell LSTMs
  projected to 512, a char CNN of 2,048 filters, 2 highways; see docs/bilm.md), random weights
  (they cost what trained ones do), on the GPU in fp32 and bf16 products, with the fused LSTM loop
  replayed from CUDA graphs (the default: spacy_elmo/bilm/kernels/gpu/cuda_graphs.py), the fused loop launched
  step by step (spacy_elmo/bilm/kernels/gpu/fused_lstm.py) and the eager one, and on the CPU in fp32 (bf16
  too where the CPU multiplies it in hardware, AVX512-BF16 or AMX: elsewhere it is emulated, far
  slower than fp32). The biLM's forward
  pass over length-sorted batches of ``--max-batch-tokens``, layers left on the device, token
  cache off; the best of ``--repeats`` runs after a warm-up (on a GPU two passes: the graphs are
  captured in the second). Sentences: the harness's Zipfian made-up words
  (``zipf_sentences``).
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
  the harness's Zipfian random corpus (``zipf_corpus``), as benchmarks/train_speed.py pretrain.

GPU rows also give the peak GPU memory torch allocated (``torch.cuda.max_memory_allocated``).
"""

import os
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch
import typer

from harness import machine, ner_corpus, steady_train_rate, timed, training_session, zipf_corpus, zipf_sentences
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.bilm.precision.hardware import cpu_has_native_bf16, gpu_has_native_bf16
from spacy_elmo.pretraining import get_preset
from spacy_elmo.pretraining.distributed import init_distributed
from spacy_elmo.pretraining.train import Trainer

ORIGINAL = ElmoOptions(**ORIGINAL_SIZES)
TINY = ElmoOptions(
    lstm_dim=24, projection_dim=8, n_layers=2, char_embedding_dim=4, filters=((1, 4), (2, 8), (3, 8)), n_highway=2
)


# ---------------------------------------------------------------------- the machine
def bf16_support(device: torch.device) -> str:
    """Whether the CPU, and the GPU where one runs, multiply bf16 in hardware."""
    line = f"bf16 in hardware: CPU {'yes' if cpu_has_native_bf16() else 'no'}"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        native = gpu_has_native_bf16((props.major, props.minor))
        answer = "yes" if native else "no: its bf16 rows are emulated"
        line += f", GPU (compute capability {props.major}.{props.minor}) {answer}"
    else:
        line += "; GPU: none visible to torch, the rows run on the CPU"
    return line


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


@dataclass(frozen=True)
class Batching:
    """How the inference and LSTM rows batch their sentences and how often they time them."""

    max_batch_tokens: int
    repeats: int


# ---------------------------------------------------------------------- inference
# The GPU's LSTM loops: fused and replayed from CUDA graphs (the default in bf16; measured in
# fp32 too, where the default is the launched loop: cuda_graphs.GRAPH_DTYPES), fused and launched
# step by step (SPACY_ELMO_CUDA_GRAPHS=0), eager (SPACY_ELMO_FUSED_LSTM=0).
LOOPS = {"graphs": ("1", "1"), "fused": ("1", "0"), "eager": ("0", "1")}


def with_lstm_loop(loop: str, rate: Callable[[], float]) -> float:
    """``rate()`` with the GPU's LSTM loop ``loop`` of :data:`LOOPS`."""
    from spacy_elmo.bilm.kernels.gpu import cuda_graphs
    from spacy_elmo.bilm.settings import CUDA_GRAPHS_ENV, FUSED_LSTM_ENV

    saved = {name: os.environ.get(name) for name in (FUSED_LSTM_ENV, CUDA_GRAPHS_ENV)}
    os.environ[FUSED_LSTM_ENV], os.environ[CUDA_GRAPHS_ENV] = LOOPS[loop]
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
    options: ElmoOptions,
    device: torch.device,
    precision: str,
    sentences: Sequence[Sequence[str]],
    batching: Batching,
) -> float:
    """Tokens/s of the biLM's forward pass over ``sentences`` on ``device``; the best of ``batching.repeats``."""
    torch.manual_seed(0)
    bilm = BiLM(options, cache_size=0, max_batch_tokens=batching.max_batch_tokens, precision=precision)
    with torch.no_grad():
        for param in bilm.parameters():
            param.normal_(0.0, 0.02)
    bilm.to(device).eval()

    def run(chosen: Sequence[Sequence[str]]) -> None:
        with torch.no_grad():
            for batch in bilm.runtime.batches(chosen):
                bilm([chosen[i] for i in batch])

    run(sentences[:64])  # kernels, allocator pools, the bf16 weight copies
    if device.type == "cuda":  # CUDA graphs: each shape bucket is captured at its second use
        run(sentences)
        run(sentences)
    best = min(timed(lambda: run(sentences), device) for _ in range(batching.repeats))
    return sum(len(s) for s in sentences) / best


def padded_batches(options: ElmoOptions, sentences: Sequence[Sequence[str]], max_batch_tokens: int) -> List[List[int]]:
    """The biLM's batches of ``sentences`` (length-sorted, ``max_batch_tokens`` each) as lists of
    lengths, boundaries included."""
    batcher = BiLM(TINY, max_batch_tokens=max_batch_tokens)
    return [[len(sentences[i]) + 2 for i in batch] for batch in batcher.batches(sentences)]


def lstm_rate(
    options: ElmoOptions,
    device: torch.device,
    precision: str,
    sentences: Sequence[Sequence[str]],
    batching: Batching,
    cudnn: bool,
) -> float:
    """Tokens/s of the LSTM alone over random token vectors in the biLM's batches: the biLM's own
    stack (``cudnn`` False), or ``torch.nn.LSTM`` (cuDNN on a GPU) with ``proj_size``, both
    directions, the same layers and widths, over packed sequences (the anchor: no clipping, and its
    second layer reads both directions' outputs, 2 x projection_dim wide, where ELMo's reads its own
    direction's). Products in ``precision`` (fp32: IEEE, no TF32)."""
    from spacy_elmo.bilm.model.lstm import BiLSTMStack
    from spacy_elmo.bilm.precision.resolved import ResolvedPrecision, own_precision

    torch.manual_seed(0)
    dtype = ResolvedPrecision(precision).dtype
    batches = padded_batches(options, sentences, batching.max_batch_tokens)
    width = options.projection_dim
    if cudnn:
        model = torch.nn.LSTM(
            width, options.lstm_dim, num_layers=options.n_layers, bidirectional=True, proj_size=width
        ).to(device, dtype)
    else:
        model = BiLSTMStack(options).to(device)
    inputs = [
        (torch.randn(max(lengths), len(lengths), width, device=device), torch.tensor(lengths, device=device))
        for lengths in batches
    ]

    def run() -> None:
        with torch.no_grad(), own_precision(device, dtype):
            for x, lengths in inputs:
                if cudnn:
                    packed = torch.nn.utils.rnn.pack_padded_sequence(x.to(dtype), lengths.cpu(), enforce_sorted=False)
                    model(packed)
                else:
                    model(x, lengths, model.zero_state(len(lengths), x), dtype)

    run()
    best = min(timed(run, device) for _ in range(batching.repeats))
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
        nlp.add_pipe(
            "elmo",
            config={
                "model": {
                    "options_file": str(directory / "pipe_options.json"),
                    "weight_file": str(directory / "pipe_weights.hdf5"),
                    "pretrained": None,
                    "precision": "auto",
                }
            },
        )
        nlp.initialize()
        device = torch.device("cuda", gpu_id) if gpu_id >= 0 else torch.device("cpu")
        words = sum(map(len, sentences))
        list(nlp.pipe(texts[:64]))
        return words / min(timed(lambda: list(nlp.pipe(texts)), device) for _ in range(2))
    finally:
        require_cpu()


# ---------------------------------------------------------------------- spacy train
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


# ---------------------------------------------------------------------- pretraining
def pretrain_rate(preset_name: str, precision: str, corpus: Path, output_dir: Path, warmup: int, steps: int) -> float:
    """Tokens/s of pretraining steps of a preset, as benchmarks/train_speed.py pretrain counts them."""
    preset = get_preset(preset_name)
    config = preset.training.updated(max_steps=warmup + steps, precision=precision)
    env = init_distributed()  # the GPU when torch sees one
    trainer = Trainer(
        env, corpus, output_dir, preset.options, config, dev_path=None, init_from=None, resume=False, progress=False
    )
    for _ in range(warmup):
        trainer._train_step()

    def run() -> None:
        for _ in range(steps):
            trainer._train_step()

    return steps * config.batch_size * config.window / timed(run, env.device)


# ---------------------------------------------------------------------- the run
app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command()
def main(
    quick: bool = typer.Option(False, "--quick", help="Tiny sizes and few steps: checks the script, on any machine"),
    gpu_id: int = typer.Option(0, help="The CUDA device"),
    sentences: int = typer.Option(2000, help="Inference sentences on the GPU"),
    cpu_sentences: int = typer.Option(100, help="Inference sentences on the CPU (it is slow)"),
    max_batch_tokens: int = typer.Option(16384, help="The biLM's max_batch_tokens"),
    repeats: int = typer.Option(3, help="Timed passes of each inference and LSTM row; the fastest counts"),
    train_steps: int = typer.Option(50, help="Timed steps of each train row"),
    train_batch_words: Optional[int] = typer.Option(
        None, help="Words per training batch [default: the config's schedule, which starts at 100 words]"
    ),
    pretrain_steps: int = typer.Option(20, help="Timed steps of each pretrain row"),
    steady_docs: int = typer.Option(2400, help="Documents of the steady-state corpus (WNUT-16's training set: 2,394)"),
    steady_steps: Optional[int] = typer.Option(None, help="Steady-state steps timed [default: the second epoch]"),
    steady_batch_words: int = typer.Option(
        1000, help="Words per steady-state batch (the shipped schedule ends at 1,000)"
    ),
    cpu_rows: bool = typer.Option(
        False, "--cpu-rows", help="The CPU rows of steady, lstm and pipe too (slow at the Original size)"
    ),
    tasks: str = typer.Option(
        "inference,lstm,pipe,steady,train,pretrain", help="Which rows to measure, comma-separated"
    ),
    train_bilm: str = typer.Option("bundled", help="The train rows' biLM: bundled (en) or original (random weights)"),
) -> None:
    chosen = set(tasks.split(","))
    has_gpu = torch.cuda.is_available()
    if not has_gpu and not quick and not chosen <= {"train", "steady"}:
        raise typer.BadParameter(
            "torch sees no CUDA GPU here: run the full benchmark on a GPU machine, check it with "
            "--quick, or time spacy train alone on this CPU with --tasks train,steady"
        )
    if train_bilm not in ("bundled", "original"):
        raise typer.BadParameter(f"--train-bilm {train_bilm!r}: bundled or original")
    device = torch.device("cuda", gpu_id) if has_gpu else torch.device("cpu")
    if has_gpu:
        torch.cuda.set_device(device)
    options = TINY if quick else ORIGINAL
    gpu_batch = zipf_sentences(40 if quick else sentences)
    cpu_batch = gpu_batch[: 40 if quick else cpu_sentences]
    warmup, train_steps, pretrain_steps = (1, 3, 3) if quick else (5, train_steps, pretrain_steps)
    presets = ["tiny"] if quick else ["base", "elmo-original"]
    size = "tiny" if quick else "Original"
    batching = Batching(max_batch_tokens, repeats)

    print(machine())
    print(bf16_support(device))
    print(
        f"inference: {size} size, {len(gpu_batch)} sentences (GPU), {len(cpu_batch)} (CPU), "
        f"batches of {max_batch_tokens} tokens; spacy train: ner_elmo.cfg, batches of "
        f"{train_batch_words or 'the config schedule (100 words at first)'} words; pretrain: {', '.join(presets)}"
    )
    table = Table()
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(table, options, size, device, gpu_id if has_gpu else -1, Path(tmp))
        if "inference" in chosen:
            inference_rows(run, gpu_batch, cpu_batch, batching)
        if "lstm" in chosen:
            lstm_rows(run, gpu_batch, batching)
        if "pipe" in chosen:
            pipe_rows(run, gpu_batch, cpu_batch, cpu_rows)
        if "steady" in chosen:
            steady_rows(run, 120 if quick else steady_docs, steady_steps, cpu_rows, steady_batch_words)
        if "train" in chosen:
            bilm = options if quick or train_bilm == "original" else None
            train_rows(run, bilm, warmup, train_steps, quick, train_batch_words)
        if "pretrain" in chosen:
            pretrain_rows(run, presets, warmup, pretrain_steps, quick)


@dataclass(frozen=True)
class Run:
    """What every row of one run shares."""

    table: Table
    options: ElmoOptions
    size: str  # the options' name in the rows' labels
    device: torch.device  # the GPU, else the CPU
    gpu_id: int  # -1: no GPU
    directory: Path  # scratch files

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"


def inference_rows(run: Run, sentences: List[List[str]], cpu_sentences: List[List[str]], batching: Batching) -> None:
    """The biLM's inference: each LSTM loop and precision on the GPU, then fp32 (and native bf16) on the CPU."""
    task = f"inference, {run.size} size"
    if run.on_gpu:
        for precision in ("fp32", "bf16"):
            for loop in LOOPS:
                rate = partial(inference_rate, run.options, run.device, precision, sentences, batching)
                run.table.measure(
                    f"{task}, {loop} LSTM loop", run.device, precision, "tokens/s", partial(with_lstm_loop, loop, rate)
                )
    else:
        run.table.skip(task, "cuda", "fp32/bf16", "no CUDA GPU visible")
    cpu = torch.device("cpu")
    for precision in ("fp32", "bf16"):
        if precision == "bf16" and not cpu_has_native_bf16():
            run.table.skip(
                task, "cpu", "bf16", "no AVX512-BF16 or AMX on this CPU: bf16 is emulated there, slower than fp32"
            )
            continue
        rate = partial(inference_rate, run.options, cpu, precision, cpu_sentences, batching)
        run.table.measure(task, cpu, precision, "tokens/s", rate)


def lstm_rows(run: Run, sentences: List[List[str]], batching: Batching) -> None:
    """The LSTM alone: the biLM's stack against torch.nn.LSTM (cuDNN) at the same sizes and batches."""
    for precision in ("fp32", "bf16") if run.on_gpu else ("fp32",):
        for cudnn in (False, True):
            name = f"LSTM alone, {run.size} size, " + ("torch.nn.LSTM" if cudnn else "spacy-elmo")
            rate = partial(lstm_rate, run.options, run.device, precision, sentences, batching, cudnn)
            run.table.measure(name, run.device, precision, "tokens/s", rate)


def pipe_rows(run: Run, sentences: List[List[str]], cpu_sentences: List[List[str]], cpu_rows: bool) -> None:
    """nlp.pipe on the GPU, and on the CPU where there is none or ``cpu_rows`` asks for it."""
    task = f"nlp.pipe, {run.size} size"
    if run.on_gpu:
        run.table.measure(
            task, run.device, "auto", "words/s", partial(pipe_rate, run.options, run.directory, run.gpu_id, sentences)
        )
    if not run.on_gpu or cpu_rows:
        run.table.measure(
            task,
            torch.device("cpu"),
            "auto",
            "words/s",
            partial(pipe_rate, run.options, run.directory, -1, cpu_sentences),
        )


def steady_rows(run: Run, n_docs: int, max_steps: Optional[int], cpu_rows: bool, batch_words: int) -> None:
    """spacy train at the schedule's end, second epoch (see :func:`steady_train_rate`): the biLM
    frozen and fine-tuned, and spaCy's CNN config without ELMo, on a corpus of ``n_docs`` documents."""
    corpus = run.directory / "steady.spacy"
    ner_corpus(corpus, n_docs, seed=1)
    options_file, weight_file = run.directory / "steady_options.json", run.directory / "steady_weights.hdf5"
    BiLM(run.options).to_files(options_file, weight_file)
    bilm = {"paths.elmo_options": str(options_file), "paths.elmo_weights": str(weight_file)}
    devices = [(run.device, run.gpu_id)] + ([(torch.device("cpu"), -1)] if run.on_gpu and cpu_rows else [])
    steps = {"max_steps": max_steps, "batch_words": batch_words}
    for where, where_id in devices:
        # The CPU's fine-tuned row would take minutes at the Original size: the GPU's is compared
        # with the CPU's frozen one.
        for freeze in (True, False) if where == run.device else (True,):
            name = f"spacy train, {run.size} size, {'frozen' if freeze else 'fine-tuned'}, steady, {batch_words} w"
            overrides = {**bilm, "components.elmo.model.freeze": freeze}
            run.table.measure(
                name, where, "auto", "words/s", partial(steady_train_rate, corpus, overrides, where_id, **steps)
            )
        run.table.measure(
            f"spacy train, spaCy CNN, no ELMo, steady, {batch_words} w",
            where,
            "fp32",
            "words/s",
            partial(steady_train_rate, corpus, {}, where_id, cnn=True, **steps),
        )


def train_rows(
    run: Run, bilm: Optional[ElmoOptions], warmup: int, steps: int, quick: bool, batch_words: Optional[int]
) -> None:
    """spacy train rows with the bundled biLM, or (``bilm``) random weights of those sizes; batches of
    ``batch_words`` words, or the config's schedule."""
    enough = 0 if batch_words is None else (warmup + steps + 1) * batch_words // 20  # documents of 9-41 words
    corpus = run.directory / "train.spacy"
    ner_corpus(corpus, max(60 if quick else 4000, enough))
    overrides: Dict[str, object] = {} if batch_words is None else {"training.batcher.size": batch_words}
    name = "spacy train ner_elmo.cfg"
    if bilm is not None:
        options_file, weight_file = run.directory / "options.json", run.directory / "weights.hdf5"
        BiLM(bilm).to_files(options_file, weight_file)
        overrides.update({"paths.elmo_options": str(options_file), "paths.elmo_weights": str(weight_file)})
        name = f"spacy train, {run.size} size"
    rows = [(run.device, run.gpu_id, freeze) for freeze in (True, False)]
    if run.on_gpu:  # the same steps on this machine's CPU, for the GPU's gain
        rows.append((torch.device("cpu"), -1, True))
    for where, where_id, freeze in rows:
        overrides_here = {**overrides, "components.elmo.model.freeze": freeze}
        run.table.measure(
            name + (", frozen" if freeze else ", fine-tuned"),
            where,
            "auto",
            "words/s",
            partial(train_rate, corpus, overrides_here, where_id, warmup, steps),
        )


def pretrain_rows(run: Run, presets: List[str], warmup: int, steps: int, quick: bool) -> None:
    """Pretraining steps of each preset in fp32 and bf16 (bf16 on a CPU only where it is native)."""
    # elmo-original reads 384 x 20 positions a step: 20,000 documents (~700 k tokens) last the run
    corpus = run.directory / "lm.txt"
    zipf_corpus(corpus, n_documents=300 if quick else 20_000)
    for preset in presets:
        for precision in ("fp32", "bf16"):
            if precision == "bf16" and not run.on_gpu and not cpu_has_native_bf16():
                run.table.skip(f"pretrain {preset}", "cpu", "bf16", "no AVX512-BF16 or AMX on this CPU")
                continue
            output = run.directory / f"{preset}-{precision}"
            run.table.measure(
                f"pretrain {preset}",
                run.device,
                precision,
                "tokens/s",
                partial(pretrain_rate, preset, precision, corpus, output, warmup, steps),
            )


if __name__ == "__main__":
    app()
