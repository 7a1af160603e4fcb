"""Throughput of spacy-elmo on one GPU, against this machine's CPU. Figures from one H200 are in
docs/component.md (GPU) and benchmarks/results/gpu_h200.txt.

    python benchmarks/gpu.py            # the full run: needs a CUDA GPU
    python benchmarks/gpu.py --quick    # tiny sizes, to check the script end to end (a CPU will do: < 1 min)

The first lines name the CPU and the GPU. Then one row per measurement:

- ``inference``: tokens/s of the biLM at the published Original size (2 x 4,096-cell LSTMs
  projected to 512, a char CNN of 2,048 filters, 2 highways; see docs/bilm.md), random weights
  (they cost what trained ones do), on the GPU in fp32 and bf16 products and on the CPU in fp32
  (bf16 too where the CPU has AMX: elsewhere it is emulated, slower than fp32). The biLM's forward
  pass over length-sorted batches of ``--max-batch-tokens``, layers left on the device, token
  cache off; the best of ``--repeats`` runs after a warm-up. Sentences: benchmarks/bilm_speed.py's.
- ``spacy train``: words/s of the training step of spacy_elmo/configs/ner_elmo.cfg as shipped
  (the bundled ``en`` biLM), frozen and fine-tuned (``freeze = false``) on the GPU, frozen on
  the CPU: ``nlp.update`` with the config's batcher, dropout and optimizer, what ``spacy train
  --gpu-id 0`` repeats between evaluations (not timed). A synthetic NER corpus; every timed step is in the first epoch, so the
  frozen biLM's feature cache, which serves later epochs, serves nothing here.
- ``pretrain``: tokens/s (window positions per direction, as the training log counts them) of the
  ``base`` and ``elmo-original`` presets in fp32 and bf16 products, on
  benchmarks/pretrain_speed.py's Zipfian random corpus.

GPU rows also give the peak GPU memory torch allocated (``torch.cuda.max_memory_allocated``).
"""

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch

from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.precision import cpu_has_amx_bf16, gpu_has_native_bf16
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
        f"threads, {torch.backends.cpu.get_cpu_capability()}, AMX bf16: {'yes' if cpu_has_amx_bf16() else 'no'}"
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
        print(f"{'task':40} {'device':6} {'products':8} {'rate':>12} {'unit':9} {'peak GPU memory':>15}")

    def measure(self, task: str, device: torch.device, products: str, unit: str, rate: Callable[[], float]) -> None:
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        value = rate()
        memory = f"{torch.cuda.max_memory_allocated(device) / 2**30:13.2f} G" if device.type == "cuda" else ""
        print(f"{task:40} {device.type:6} {products:8} {value:12,.0f} {unit:9} {memory:>15}", flush=True)

    def skip(self, task: str, device: str, products: str, why: str) -> None:
        print(f"{task:40} {device:6} {products:8} {'-':>12} skipped: {why}", flush=True)


# ---------------------------------------------------------------------- inference
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
    best = min(timed(lambda: run(sentences), device) for _ in range(repeats))
    return sum(len(s) for s in sentences) / best


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


def train_rate(corpus: Path, overrides: Dict[str, object], gpu_id: int, warmup: int, steps: int) -> float:
    """Words/s of ``steps`` training steps of ner_elmo.cfg, after ``warmup`` steps, as spacy train runs them."""
    import spacy
    from spacy.schemas import ConfigSchemaTraining
    from spacy.training.initialize import init_nlp
    from spacy.util import registry, resolve_dot_names
    from thinc.api import require_cpu, require_gpu

    if gpu_id >= 0:
        require_gpu(gpu_id)
    try:
        paths = {"paths.train": str(corpus), "paths.dev": str(corpus)}
        config = spacy.util.load_config(CONFIGS / "ner_elmo.cfg", overrides={**paths, **overrides}, interpolate=False)
        nlp = init_nlp(config, use_gpu=gpu_id)
        training = registry.resolve(nlp.config.interpolate()["training"], schema=ConfigSchemaTraining)
        train_corpus, _ = resolve_dot_names(nlp.config.interpolate(), [training["train_corpus"], training["dev_corpus"]])
        examples = list(train_corpus(nlp))
        random.Random(0).shuffle(examples)
        batches = iter(training["batcher"](examples))
        optimizer = training["optimizer"]

        def step(batch) -> None:
            nlp.update(batch, drop=training["dropout"], sgd=optimizer,
                       exclude=training["frozen_components"], annotates=training["annotating_components"])

        for _ in range(warmup):
            step(next(batches))
        timed_batches = [next(batches) for _ in range(steps)]  # the first epoch: the corpus is large enough
        device = torch.device("cuda", gpu_id) if gpu_id >= 0 else torch.device("cpu")
        seconds = timed(lambda: [step(batch) for batch in timed_batches], device)
        return sum(len(eg.reference) for batch in timed_batches for eg in batch) / seconds
    finally:
        require_cpu()


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
    parser.add_argument("--tasks", default="inference,train,pretrain", help="Which rows to measure (comma-separated)")
    parser.add_argument("--train-bilm", choices=["bundled", "original"], default="bundled",
                        help="The biLM of the spacy train rows: the bundled en, or random weights of the Original size")
    args = parser.parse_args(argv)
    tasks = set(args.tasks.split(","))
    has_gpu = torch.cuda.is_available()
    if not has_gpu and not args.quick and tasks != {"train"}:
        parser.error("torch sees no CUDA GPU here: run the full benchmark on a GPU machine, check it with --quick, "
                     "or time spacy train alone on this CPU with --tasks train")
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
    gpu_id = args.gpu_id if has_gpu else -1
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
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
            table.measure(task, device, precision, "tokens/s",
                          lambda: inference_rate(options, device, precision, sentences, args.max_batch_tokens, args.repeats))
    else:
        table.skip(task, "cuda", "fp32/bf16", "no CUDA GPU visible")
    cpu = torch.device("cpu")
    table.measure(task, cpu, "fp32", "tokens/s",
                  lambda: inference_rate(options, cpu, "fp32", cpu_sentences, args.max_batch_tokens, args.repeats))
    if cpu_has_amx_bf16():
        table.measure(task, cpu, "bf16", "tokens/s",
                      lambda: inference_rate(options, cpu, "bf16", cpu_sentences, args.max_batch_tokens, args.repeats))
    else:
        table.skip(task, "cpu", "bf16", "no AMX on this CPU: bf16 is emulated there, slower than fp32")


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
            if precision == "bf16" and device.type != "cuda" and not cpu_has_amx_bf16():
                table.skip(f"pretrain {preset}", "cpu", "bf16", "no AMX on this CPU")
                continue
            table.measure(f"pretrain {preset}", device, precision, "tokens/s", lambda: pretrain_rate(
                preset, precision, directory / "lm.txt", directory / f"{preset}-{precision}", warmup, steps))


if __name__ == "__main__":
    main()
