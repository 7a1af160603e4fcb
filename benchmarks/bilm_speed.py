"""Inference speed of the biLM on a CPU: the whole model against a step-by-step port, or its LSTM stack alone.

Two subcommands, sharing the sizes, the precisions, the threads and the interleaved rounds:

``model``: the biLM at the published 'Original' size (``--size``). Prints tokens/s (the median of
interleaved rounds, after one untimed run each, and the range), the floating-point rate reached
(nominal model FLOPs per token x tokens/s) as a fraction of this machine's measured matmul rate,
and the same for a straightforward implementation of the same model (as AllenNLP's
``LstmCellWithProjection``: per-step input and state products, one direction at a time, state
copies; the char CNN over all 50 character positions of every token; the LSTM steps are the
package's reference loop, ``harness.step_by_step``). Both run the same random weights on the same
sentences in one process, and their outputs are compared. Random weights of full size cost exactly
what trained ones do. The nominal count is the published model's: every token through the char CNN
at all positions, the LSTM at every token. spacy-elmo does less work for the same outputs (each
distinct token of a batch once, no padding windows or padded steps); the share of distinct tokens
is printed. Each ``--precisions`` row (fp32, bf16: see spacy_elmo.bilm.precision.resolved) is
compared with this machine's matmul rate in its own dtype, and the bf16 layers with the fp32 ones
(mean per-token cosine per layer, largest difference). Where the CPU has no AMX, bf16 is slower
than fp32 (with AVX512-BF16) or emulated and far slower (without): use ``--size small`` and few
sentences there.

``lstm``: ``BiLSTMStack`` alone (what an ``nlp.pipe`` pass spends most of its time in), inference,
on the batches an ``nlp.pipe(batch_size=64)`` of the 480 English sentences of
examples/word_senses.jsonl makes: each batch's sentence lengths (spaCy's blank English tokens, plus
the two boundary tokens), random token vectors. One pass runs every batch; the precisions (int8
too) take turns in ``--repeats`` rounds after one untimed pass each (packs, copies, caches).
Printed per precision: the median pass and the range, and words/s at the median and the fastest.
Two commits compare by running this on each, one after the other.

    python benchmarks/bilm_speed.py model [--size original] [--precisions fp32,bf16] [--sentences 1000]
        [--max-batch-tokens 16384] [--threads 2] [--repeats 3]
    python benchmarks/bilm_speed.py lstm [--size original] [--precisions int8,bf16,fp32] [--threads 2]
        [--repeats 15]
"""

from typing import Callable, Dict, List, Tuple

import numpy
import spacy
import torch
import typer
from torch.utils import benchmark

from harness import Timing, interleaved, layer_agreement, machine, step_by_step, timed, word_sense_texts, zipf_sentences
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.model.lstm import BiLSTMStack
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.bilm.precision.flops import flops_per_token
from spacy_elmo.bilm.precision.resolved import INT8

SIZES = {
    "original": ElmoOptions(**ORIGINAL_SIZES),
    "small": ElmoOptions(),
}  # ElmoOptions' defaults: the published Small
# The products' dtypes by precision name. ``model`` takes the first two (its roofline needs a
# matmul rate in the dtype, which torch.mm has no int8 one for); ``lstm`` all three.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": INT8}
MODEL_PRECISIONS = ("fp32", "bf16")
BATCH_SIZE = 64  # nlp.pipe's batch_size, for ``lstm``'s batches

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def size_option(default: str = "original") -> typer.models.OptionInfo:
    """``--size``, the same for both subcommands."""
    return typer.Option(default, help=f"Model size: {', '.join(SIZES)}")


def threads_option(default: int) -> typer.models.OptionInfo:
    """``--threads``, the same for both subcommands (only the default differs)."""
    return typer.Option(default, help="torch.set_num_threads")


def setup(size: str, precisions: str, allowed: Tuple[str, ...], threads: int) -> Tuple[ElmoOptions, List[str]]:
    """Both subcommands' start: the options and precisions checked, torch's threads set, the seed
    fixed, the machine line printed first."""
    chosen = [p.strip() for p in precisions.split(",") if p.strip()]
    if size not in SIZES or not chosen or any(p not in allowed for p in chosen):
        raise typer.BadParameter(
            f"--size takes one of {', '.join(SIZES)}, --precisions a comma-separated list of {', '.join(allowed)}"
        )
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    print(machine())
    return SIZES[size], chosen


# ---------------------------------------------------------------------- model: the whole biLM
def matmul_rate(dtype: torch.dtype, threads: int) -> float:
    """This machine's square matrix product rate in ``dtype``, in FLOP/s, at the median of
    ``torch.utils.benchmark``'s blocked runs (2048 wide in float32; 1024 in bf16, which an emulating
    CPU takes minutes over at 2048)."""
    size = 2048 if dtype == torch.float32 else 1024
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    timer = benchmark.Timer("torch.mm(a, b)", globals={"torch": torch, "a": a, "b": b}, num_threads=threads)
    return 2 * size**3 / timer.blocked_autorange(min_run_time=0.5).median


def random_model(options: ElmoOptions, max_batch_tokens: int) -> BiLM:
    """A biLM of ``options`` with random weights (they cost what trained ones do), no token cache."""
    model = BiLM(options, cache_size=0, max_batch_tokens=max_batch_tokens).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.02)
    return model


def time_all(
    model: BiLM, texts: List[List[str]], precisions: List[str], repeats: int
) -> Tuple[Dict[str, Timing], Dict[str, List[numpy.ndarray]]]:
    """Each precision without a cache and the step-by-step port in interleaved rounds, then the first
    precision with a warm token cache; the timings by row name and each one's outputs."""
    outputs: Dict[str, List[numpy.ndarray]] = {}

    def embed(precision: str) -> Callable[[], None]:
        def run() -> None:
            model.runtime.precision = precision
            outputs[precision] = model.embed_sentences(texts)

        return run

    def port() -> None:
        outputs["port"] = step_by_step(model, texts)

    runs = {f"spacy-elmo {p} (no cache)": embed(p) for p in precisions}
    times = interleaved({**runs, "step-by-step port": port}, repeats)
    model.runtime.precision = precisions[0]
    model.runtime.token_cache = type(model.runtime.token_cache)(50_000)
    model.embed_sentences(texts)
    cached = Timing(tuple(timed(lambda: model.embed_sentences(texts)) for _ in range(repeats)))
    times[f"spacy-elmo {precisions[0]} (warm cache)"] = cached
    return times, outputs


def print_rates(times: Dict[str, Timing], n_tokens: int, per_token: int, peaks: Dict[str, float]) -> None:
    """Per row: tokens/s (median and range), GFLOP/s and its share of the matmul rate in its dtype."""
    print(f"{'implementation':28} {'tokens/s: median (range)':>30} {'GFLOP/s':>8} {'of matmul':>9}")
    for name, timing in times.items():
        precision = next((p for p in peaks if f" {p} " in name), "fp32")
        rate = per_token * n_tokens / timing.median
        share = f"{rate / peaks[precision]:9.0%}" if precision in peaks else ""
        print(f"{name:28} {timing.rate(n_tokens, ''):>30} {rate / 1e9:8.1f} {share}")
    for precision in peaks:
        speedup = times["step-by-step port"].median / times[f"spacy-elmo {precision} (no cache)"].median
        print(f"speed-up of {precision} over the step-by-step port (no cache): {speedup:.2f}x")


@app.command()
def model(
    size: str = size_option(),
    precisions: str = typer.Option("fp32,bf16", help=f"Comma-separated, of {', '.join(MODEL_PRECISIONS)}"),
    sentences: int = typer.Option(1000, help="Sentences of made-up Zipfian words"),
    threads: int = threads_option(torch.get_num_threads()),
    max_batch_tokens: int = typer.Option(16384, help="BiLM max_batch_tokens: large batches suit the Original size"),
    repeats: int = typer.Option(3, help="Interleaved rounds of every implementation"),
) -> None:
    """The whole biLM per precision against the step-by-step port (make benchmark)."""
    options, chosen = setup(size, precisions, MODEL_PRECISIONS, threads)
    texts = zipf_sentences(sentences)
    n_tokens = sum(len(s) for s in texts)
    bilm = random_model(options, max_batch_tokens)
    print(
        f"{size} size: {sum(p.numel() for p in bilm.parameters()) / 1e6:.1f} M parameters; "
        f"{sentences} sentences, {n_tokens} tokens"
    )
    # Nominal model FLOPs per token, the usual utilisation convention: the char CNN and the LSTM
    # for every token; boundary positions and padding are not counted.
    per_token = flops_per_token(options).total
    print(f"nominal cost: {per_token / 1e6:.0f} MFLOP per token")
    distinct = sum(len({token for i in batch for token in texts[i]}) for batch in bilm.runtime.batches(texts))
    print(f"distinct tokens per batch: {distinct / n_tokens:.0%} of all tokens")
    times, outputs = time_all(bilm, texts, chosen, repeats)
    peaks = {p: matmul_rate(DTYPES[p], threads) for p in chosen}
    for precision, peak in peaks.items():
        print(f"measured {precision} matmul rate: {peak / 1e9:.1f} GFLOP/s (torch.utils.benchmark, median)")
    print_rates(times, n_tokens, per_token, peaks)
    difference = max(float(numpy.abs(a - b).max()) for a, b in zip(outputs[chosen[0]], outputs["port"]))
    print(f"largest difference between {chosen[0]} and the port: {difference:.2e}")
    if "fp32" in outputs and "bf16" in outputs:
        for k, row in enumerate(layer_agreement(outputs["bf16"], outputs["fp32"])):
            print(
                f"bf16 against fp32, layer {k}: mean per-token cosine {row['mean_cosine']:.6f}, "
                f"largest difference {row['largest_difference']:.2e}"
            )


# ---------------------------------------------------------------------- lstm: the LSTM stack alone
def batch_lengths() -> List[torch.Tensor]:
    """Per ``nlp.pipe`` batch, its sentences' lengths with the boundary tokens."""
    lengths = [len(doc) + 2 for doc in spacy.blank("en").pipe(word_sense_texts(480))]
    return [torch.tensor(lengths[i : i + BATCH_SIZE]) for i in range(0, len(lengths), BATCH_SIZE)]


def one_pass(
    stack: BiLSTMStack, inputs: List[torch.Tensor], batches: List[torch.Tensor], dtype: torch.dtype
) -> Callable[[], None]:
    """A pass of every batch through the stack, to time."""

    def run() -> None:
        with torch.no_grad():
            for tokens, lengths in zip(inputs, batches):
                stack(tokens, lengths, stack.zero_state(len(lengths), tokens), dtype)

    return run


@app.command()
def lstm(
    size: str = size_option(),
    precisions: str = typer.Option("int8,bf16,fp32", help=f"Comma-separated, of {', '.join(DTYPES)}"),
    threads: int = threads_option(2),
    repeats: int = typer.Option(15, help="Interleaved rounds"),
) -> None:
    """The LSTM stack alone per precision, on nlp.pipe's batches of examples/word_senses.jsonl."""
    options, chosen = setup(size, precisions, tuple(DTYPES), threads)
    stack = BiLSTMStack(options)
    batches = batch_lengths()
    inputs = [torch.randn(int(lengths.max()), len(lengths), options.projection_dim) for lengths in batches]
    words = sum(int(lengths.sum()) - 2 * len(lengths) for lengths in batches)
    print(f"{words} words in {len(batches)} batches of up to {BATCH_SIZE} sentences; LSTM of the {size} size")
    runs = {name: one_pass(stack, inputs, batches, DTYPES[name]) for name in chosen}
    for name, timing in interleaved(runs, repeats).items():
        print(
            f"{name}: pass {timing.describe()}; {timing.rate(words, ' words/s')}, "
            f"{words / timing.fastest:,.0f} words/s at the fastest"
        )


if __name__ == "__main__":
    app()
