"""Where the time of spacy-elmo on a GPU goes: profiles of biLM inference and of spacy train steps.

    python benchmarks/gpu_profile.py [--tasks inference,graph,train] [--rows 15]

- ``inference``: one pass of the Original-size biLM (random weights) over benchmarks/gpu.py's
  sentences in bf16, under ``torch.profiler``: wall time, the GPU's busy time (the sum of its
  kernels' times: a pass whose kernels fill a small part of the wall time waits on the host, on
  kernel launches and Python), and the operators by host time and by GPU time.
- ``graph``: one fused LSTM layer (bf16, a batch of the inference benchmark's shape) launched from
  Python against the same loop replayed from its CUDA graph (the default; spacy_elmo/bilm/cuda_graphs.py):
  the host's share of its time, and the capture's cost.
- ``train``: steps of spacy_elmo/configs/ner_elmo.cfg with the Original-size biLM frozen, at the
  schedule's last batch size (1,000 words), in the second epoch of a small corpus, so that the
  feature cache serves: the same figures, then the Python functions by own time (cProfile) over
  the same steps.

A CPU will run it too (the GPU columns are then empty): the per-step host costs show there.
"""

import argparse
import cProfile
import io
import os
import pstats
import random
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from bilm_speed import ORIGINAL, make_sentences  # noqa: E402  (sibling scripts, not a package)
from gpu import TINY, describe_machine, ner_corpus, synchronize, training_session  # noqa: E402

from spacy_elmo import BiLM  # noqa: E402


def busy_seconds(prof: profile) -> float:
    """The GPU's busy time in a profile: the sum of its kernels' and copies' own times (the rows of
    device events; an operator's row repeats the time of the kernels it launched)."""
    from torch.autograd import DeviceType

    return sum(e.self_device_time_total for e in prof.key_averages() if e.device_type == DeviceType.CUDA) / 1e6


def report(title: str, run: Callable[[], None], device: torch.device, rows: int) -> None:
    """Profile ``run`` once and print wall time, GPU busy time and the top operators."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        run()
        synchronize(device)
        wall = time.perf_counter() - start
    print(f"\n## {title}: wall {wall * 1e3:.1f} ms (under the profiler), GPU busy {busy_seconds(prof) * 1e3:.1f} ms")
    averages = prof.key_averages()
    print(averages.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=40))
    if device.type == "cuda":
        print(averages.table(sort_by="self_device_time_total", row_limit=rows, max_name_column_width=40))


def python_profile(run: Callable[[], None], rows: int) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(run)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(rows)
    stats.sort_stats("cumulative").print_stats(rows)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))


def profile_inference(device: torch.device, quick: bool, n_sentences: int, rows: int) -> None:
    torch.manual_seed(0)
    options = TINY if quick else ORIGINAL
    bilm = BiLM(options, cache_size=0, max_batch_tokens=16384, precision="bf16" if device.type == "cuda" else "fp32")
    with torch.no_grad():
        for param in bilm.parameters():
            param.normal_(0.0, 0.02)
    bilm.to(device).eval()
    sentences = make_sentences(n_sentences)

    def run() -> None:
        with torch.no_grad():
            for batch in bilm.batches(sentences):
                bilm([sentences[i] for i in batch])

    run()
    run()  # CUDA graphs: each shape bucket is captured at its second use
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    seconds = time.perf_counter() - start
    tokens = sum(map(len, sentences))
    print(f"\ninference: {len(sentences)} sentences, {tokens} tokens, {tokens / seconds:,.0f} tokens/s unprofiled")
    report("inference, one pass", run, device, rows)


def graph_replay_gain(device: torch.device, quick: bool) -> None:
    """How much of one fused LSTM layer's time is host work: the layer launched step by step from
    Python (``SPACY_ELMO_CUDA_GRAPHS=0``) against the same loop replayed from its CUDA graph
    (spacy_elmo/bilm/cuda_graphs.py: the default), for one batch of the inference benchmark's shape
    (bf16), and what the capture cost (the bucket's second use: warm-up, capture, replay)."""
    if device.type != "cuda":
        print("\ngraph replay: needs a CUDA GPU")
        return
    from spacy_elmo.bilm.cuda_graphs import CUDA_GRAPHS_ENV
    from spacy_elmo.bilm.kernels import FusedKernel
    from spacy_elmo.bilm.lstm import BiLSTMStack, _active_rows
    from spacy_elmo.bilm.precision import LowPrecisionWeights

    options = TINY if quick else ORIGINAL
    layer = BiLSTMStack(options).layers[0].to(device)
    kernel = FusedKernel(LowPrecisionWeights(), torch.bfloat16)
    rng = random.Random(0)
    lengths = sorted((rng.randint(7, 47) for _ in range(16384 // 49)), reverse=True)
    active = _active_rows(lengths, max(lengths))
    x = torch.randn(max(lengths), 2, len(lengths), options.projection_dim, device=device)
    hidden = torch.zeros(2, len(lengths), options.projection_dim, device=device)
    memory = torch.zeros(2, len(lengths), options.lstm_dim, device=device)

    def seconds(graphs: str, calls: int) -> float:
        """Mean seconds of ``calls`` calls of the layer, ``SPACY_ELMO_CUDA_GRAPHS=graphs``."""
        os.environ[CUDA_GRAPHS_ENV] = graphs
        synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            kernel(0, layer, x, active, hidden, memory)
        synchronize(device)
        return (time.perf_counter() - start) / calls

    saved = os.environ.get(CUDA_GRAPHS_ENV)
    try:
        with torch.no_grad():
            seconds("0", 3)
            launched = seconds("0", 10)
            seconds("1", 1)  # the bucket's first use: launched
            capture = seconds("1", 1)
            replayed = seconds("1", 10)
    finally:
        if saved is None:
            del os.environ[CUDA_GRAPHS_ENV]
        else:
            os.environ[CUDA_GRAPHS_ENV] = saved
    print(f"\ngraph replay: one fused layer, {len(lengths)} rows x {max(lengths)} steps, bf16: launched "
          f"{launched * 1e3:.2f} ms, replayed {replayed * 1e3:.2f} ms ({launched / replayed:.1f}x); "
          f"capture {capture * 1e3:.0f} ms")


def profile_training(device: torch.device, quick: bool, rows: int, steps: int) -> None:
    import tempfile

    gpu_id = device.index or 0 if device.type == "cuda" else -1
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        ner_corpus(directory / "train.spacy", 120 if quick else 800)  # ~20,000 words: one epoch is ~20 steps
        overrides = {"training.batcher.size": 1000, "components.elmo.model.freeze": True}
        BiLM(TINY if quick else ORIGINAL).to_files(directory / "options.json", directory / "weights.hdf5")
        overrides.update({"paths.elmo_options": str(directory / "options.json"),
                          "paths.elmo_weights": str(directory / "weights.hdf5")})
        with training_session(directory / "train.spacy", overrides, gpu_id) as session:
            first_epoch = session.epoch_batches()
            for batch in first_epoch:  # fills the feature cache
                session.step(batch)
            timed: List = session.epoch_batches()[:steps]
            words = sum(len(eg.reference) for batch in timed for eg in batch)
            synchronize(device)
            start = time.perf_counter()
            for batch in timed:
                session.step(batch)
            synchronize(device)
            print(f"\ntrain: {len(timed)} steps of {words / len(timed):.0f} words in epoch 2, "
                  f"{words / (time.perf_counter() - start):,.0f} words/s unprofiled")
            report("train, epoch 2 steps", lambda: [session.step(batch) for batch in timed], device, rows)
            python_profile(lambda: [session.step(batch) for batch in timed], rows)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="inference,graph,train")
    parser.add_argument("--quick", action="store_true", help="Tiny sizes: checks the script on any machine")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--rows", type=int, default=15)
    args = parser.parse_args(argv)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    random.seed(0)
    for line in describe_machine(device):
        print(line)
    tasks = set(args.tasks.split(","))
    if "inference" in tasks:
        profile_inference(device, args.quick, 40 if args.quick else args.sentences, args.rows)
    if "graph" in tasks:
        graph_replay_gain(device, args.quick)
    if "train" in tasks:
        profile_training(device, args.quick, args.rows, args.steps)


if __name__ == "__main__":
    main()
