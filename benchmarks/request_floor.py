"""How close a lone sentence, a service's request, gets to the floor of its LSTM products.

    python benchmarks/request_floor.py [--sizes en,original] [--precisions auto] [--rows 1] [--batch 200] [--threads 2]

For each biLM (``en``, the bundled one; ``original``, the Original sizes with random weights) and
precision, three times, for a call of ``--rows`` sentences of 16 words (18 steps with their
boundaries; 1: a lone request, 8: a call 8 concurrent requests share):

- ``call``: the biLM's whole pass (``embed_sentences``: characters, CNN, LSTM, outputs);
- ``products``: the LSTM's products alone, as the precision's kernel runs them at those rows, on the
  model's own weight copies (int8: the quantized kernel with its rows' scaling, on the pack it
  takes at those rows; bf16 and fp32: the kernel's product, packed where it packs), both
  directions of every layer at every step, and each layer's input product;
- ``bandwidth``: the time to read those weights once per step at this machine's memory bandwidth,
  measured by a copy of 512 MiB (a weight that stays in cache reads faster than that);
- ``batch``: the biLM's pass over ``--batch`` such sentences in one call, as ``nlp.pipe`` runs it.

The three take turns over ``--rounds`` rounds (medians).

The fractions printed: ``products / call``, how much of a request the products are (the issue's
target for the Original size is 0.8 of that floor); the call's rate (sentences a second) as a
fraction of the batch call's, which issue 51 asks to be 0.25-0.3 one request at a time and 0.8
for calls of 8 concurrent requests; and the products' rate alone at those rows as a fraction of
the batch call's: the most a call of those rows could keep, were everything but its products
free. The products' time per row and step compares row counts: run with ``--rows 1``, ``8`` and ``64``.
"""

import statistics
import time
from functools import partial
from typing import Callable, List

import torch
import typer

from harness import interleaved, machine
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.kernels import Bf16Kernel, Float32Kernel, int8, int8_packs
from spacy_elmo.bilm.memory.weight_copies import WeightCopies
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.bilm.precision.autotune import cpu_auto_precision
from spacy_elmo.published import pretrained_files

SENTENCE = "the bank raised its rates on monday and the river bank flooded the old mill again".split()
app = typer.Typer(add_completion=False)


def load(size: str) -> BiLM:
    """The bundled ``en`` biLM, or the Original sizes with random weights, for inference."""
    if size == "en":
        options_file, weight_file = pretrained_files("en")
        model = BiLM.from_files(str(options_file), str(weight_file), cache_size=0)
    else:
        torch.manual_seed(0)
        model = BiLM(ElmoOptions(**ORIGINAL_SIZES), cache_size=0)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.normal_(0.0, 0.05)
    return model.eval().requires_grad_(False)


def lstm_products(model: BiLM, precision: str, steps: int, rows: int) -> Callable[[], object]:
    """A call's LSTM products at ``rows`` rows, as ``precision``'s kernel runs them."""
    layers = list(model.lstm.layers)
    runs: List[Callable[[], object]] = []
    for index, layer in enumerate(layers):
        if precision == "int8":
            gates, projection = int8.make_packs(layer)
            for d in range(2):
                for pack, width in (
                    (gates[d], layer.input_weight.shape[1] + layer.hidden_weight.shape[1]),
                    (projection[d], layer.lstm_dim),
                ):
                    staged = int8_packs.StagedRows(rows, width, pack.layout)
                    runs.append(partial(staged.linear, torch.rand(rows, width) * 2 - 1, pack))
            continue
        kernel = Bf16Kernel(WeightCopies(), out_major=True) if precision == "bf16" else Float32Kernel()
        weights = kernel.weights(index, layer)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        h = torch.randn(2, rows, layer.hidden_weight.shape[1]).to(dtype)
        c = torch.randn(2, rows, layer.projection.shape[1]).to(dtype)
        runs.append(lambda k=kernel, w=weights, h=h: k.product(h, w.hidden))
        runs.append(lambda k=kernel, w=weights, c=c: k.product(c, w.projection))
    # int8 multiplies each step's input within its gates' product; the eager loop, once per window
    inputs = [] if precision == "int8" else [input_product(layer, precision, steps, rows) for layer in layers]

    def run() -> None:
        for _ in range(steps):
            for product in runs:
                product()
        for product in inputs:
            product()

    return run


def input_product(layer: torch.nn.Module, precision: str, steps: int, rows: int) -> Callable[[], object]:
    """A layer's input product over the call's steps, as the eager loop runs it once per window."""
    kernel = Bf16Kernel(WeightCopies(), out_major=True) if precision == "bf16" else Float32Kernel()
    weights = kernel.weights(0, layer)
    inputs = kernel.lowered_inputs(torch.randn(steps, 2, rows, layer.input_weight.shape[1]))
    flat = inputs.transpose(0, 1).reshape(2, steps * rows, -1)
    return lambda: kernel.input_gates(flat, weights.input, weights.bias, None)


def weight_bytes(model: BiLM, precision: str) -> int:
    """Bytes of the LSTM's recurrent and projection weights (the input's, int8 reads per step too) read per step."""
    per_value = {"int8": 1, "bf16": 2, "fp32": 4}[precision]
    total = 0
    for layer in model.lstm.layers:
        total += layer.hidden_weight.numel() + layer.projection.numel()
        if precision == "int8":
            total += layer.input_weight.numel()
    return total * per_value


def bandwidth() -> float:
    """Bytes/s of a 512 MiB copy (read and written), the median of 5."""
    source = torch.ones(2**27)
    target = torch.empty_like(source)
    times = []
    for _ in range(5):
        began = time.perf_counter()
        target.copy_(source)
        times.append(time.perf_counter() - began)
    return 2 * source.numel() * 4 / statistics.median(times)


@app.command()
def main(
    sizes: str = typer.Option("en,original", help="Comma-separated: en, original"),
    precisions: str = typer.Option("auto", help="Comma-separated: auto, fp32, bf16, int8"),
    threads: int = typer.Option(2, help="torch's threads"),
    rounds: int = typer.Option(15, help="Timed rounds of each"),
    rows: int = typer.Option(1, help="Sentences in the call (1: a lone request)"),
    batch: int = typer.Option(200, help="Sentences in the batch call the rates are compared with (nlp.pipe's)"),
) -> None:
    torch.set_num_threads(threads)
    print(machine())
    bytes_per_s = bandwidth()
    print(f"memory bandwidth (a 512 MiB copy): {bytes_per_s / 1e9:.1f} GB/s")
    steps = len(SENTENCE) + 2
    print(f"a call of {rows} sentences of {len(SENTENCE)} words ({steps} steps), against one of {batch}\n")
    print(
        "| biLM | precision | call, ms | products, ms | bandwidth, ms | products / call "
        "| products a row and step, us | call's rate / batch's | products' rate / batch's |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes.split(","):
        model = load(size)
        for asked in precisions.split(","):
            precision = cpu_auto_precision(model) if asked == "auto" else asked
            model.runtime.precision = precision
            with torch.no_grad():
                runs = {
                    "call": partial(model.embed_sentences, [SENTENCE] * rows),
                    "products": lstm_products(model, precision, steps, rows),
                    "batch": partial(model.embed_sentences, [SENTENCE] * batch),
                }
                timings = interleaved(runs, rounds)
            call, products, batch_call = (1000 * timings[label].median for label in runs)
            batch_rate = batch / batch_call  # sentences a ms
            floor = 1000 * steps * weight_bytes(model, precision) / bytes_per_s
            label = f"{precision} (auto)" if asked == "auto" else precision
            per_row = 1000 * products / (rows * steps)
            print(
                f"| {size} | {label} | {call:.1f} | {products:.1f} | {floor:.1f} "
                f"| {products / call:.2f} | {per_row:.0f} "
                f"| {rows / call / batch_rate:.2f} | {rows / products / batch_rate:.2f} |"
            )


if __name__ == "__main__":
    app()
