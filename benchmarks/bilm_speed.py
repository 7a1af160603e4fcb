"""Inference speed of the biLM at the published 'Original' size, against a step-by-step port.

Prints tokens/s, the floating-point rate reached (nominal model FLOPs per token x tokens/s) as
a fraction of this machine's measured float32 matmul rate, and the same for a straightforward
implementation of the same model (as AllenNLP's ``LstmCellWithProjection``: per-step input and
state products, one direction at a time, state copies; the char CNN over all 50 character
positions of every token). Both run the same random weights on the same sentences in one
process, and their outputs are compared. Random weights of full size cost exactly what trained
ones do. The nominal count is the published model's: every token through the char CNN at all
positions, the LSTM at every token. spacy-elmo does less work for the same outputs (each distinct
token of a batch once, no padding windows or padded steps); the share of distinct tokens is printed.

spacy-elmo runs in each ``--precisions`` (fp32, bf16: see spacy_elmo.bilm.precision); each row's
rate is compared with this machine's matmul rate in its own dtype, and the bf16 layers with the
fp32 ones (mean per-token cosine per layer, largest difference). Where the CPU has no AMX, bf16 is
slower than fp32 (with AVX512-BF16) or emulated and far slower (without): use ``--size small`` and few
sentences there.

    python benchmarks/bilm_speed.py [--size original] [--precisions fp32,bf16] [--sentences 1000]
        [--max-batch-tokens 16384] [--threads 2] [--repeats 3]
"""

import argparse
import random
import string
import time
from typing import List, Sequence

import numpy
import torch

from spacy_elmo import BiLM, ElmoOptions

ORIGINAL = ElmoOptions(lstm_dim=4096, projection_dim=512, n_layers=2, n_highway=2)
SIZES = {"original": ORIGINAL, "small": ElmoOptions()}  # ElmoOptions' defaults: the published Small
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def make_sentences(n: int, seed: int = 0) -> List[List[str]]:
    """Sentences of 5-45 tokens drawn from a Zipfian vocabulary of made-up words."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 12))) for _ in range(20000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    return [rng.choices(vocab, weights, k=rng.randint(5, 45)) for _ in range(n)]


def matmul_rate(dtype: torch.dtype = torch.float32, size: int = 2048, repeats: int = 10) -> float:
    """GEMM rate of this machine in ``dtype``, in FLOP/s: the best of several timed runs."""
    if dtype != torch.float32:
        size, repeats = 1024, 3  # an emulated bf16 product of 2048 takes minutes
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def char_cnn_flops(opts: ElmoOptions) -> int:
    """FLOPs of the char CNN, highways and projection for one token."""
    width = opts.max_characters_per_token
    conv = sum(2 * (width - w + 1) * w * opts.char_embedding_dim * n for w, n in opts.filters)
    return conv + opts.n_highway * 2 * 2 * opts.n_filters**2 + 2 * opts.n_filters * opts.projection_dim


def lstm_flops(opts: ElmoOptions) -> int:
    """FLOPs of both directions of every LSTM layer for one position."""
    per_direction = 2 * (2 * opts.projection_dim * 4 * opts.lstm_dim) + 2 * opts.lstm_dim * opts.projection_dim
    return 2 * opts.n_layers * per_direction


def step_by_step(model: BiLM, sentences: Sequence[Sequence[str]]) -> List[numpy.ndarray]:
    """The straightforward port: every token through the CNN, then one timestep at a time."""
    opts = model.options
    outputs = []
    with torch.no_grad():
        for batch in model.batches(sentences):
            rows = [sentences[i] for i in batch]
            n_steps = max(len(s) for s in rows) + 2
            tokens = [[("<boundary>", "start"), *s, ("<boundary>", "end")] for s in rows]
            flat = [tok for sent in tokens for tok in sent]
            embedded = _char_cnn_every_position(model, flat)
            x = torch.zeros(len(rows), n_steps, opts.projection_dim)
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


def _char_cnn_every_position(model: BiLM, tokens: Sequence) -> torch.Tensor:
    """The char CNN as published: all 50 character positions of every token, 1024 at a time."""
    cnn = model.token_encoder
    char_ids = torch.from_numpy(cnn.token_ids(tokens).chars)
    encoded = []
    for chunk in char_ids.split(1024):
        chars = cnn.char_embedding(chunk).transpose(1, 2)
        x = torch.cat([cnn.activation(conv(chars).amax(dim=-1)) for conv in cnn.convolutions], dim=-1)
        for highway in cnn.highways:
            x = highway(x)
        encoded.append(cnn.projection(x))
    return torch.cat(encoded)


def _run_direction(model: BiLM, x: torch.Tensor, lengths: List[int], direction: int) -> List[torch.Tensor]:
    opts = model.options
    batch, n_steps, _ = x.shape
    if direction == 1:
        x = torch.stack([torch.cat([x[r, : lengths[r]].flip(0), x[r, lengths[r] :]]) for r in range(batch)])
    results = []
    for index, layer in enumerate(model.lstm.layers):
        input_weight, hidden_weight = layer.input_weight[direction], layer.hidden_weight[direction]
        bias = layer.bias[direction] + layer.forget_bias
        h = torch.zeros(batch, opts.projection_dim)
        c = torch.zeros(batch, opts.lstm_dim)
        out = torch.zeros(batch, n_steps, opts.projection_dim)
        for t in range(n_steps):
            gates = x[:, t] @ input_weight + h @ hidden_weight + bias
            i, j, f, o = gates.chunk(4, 1)
            new_c = (torch.sigmoid(i) * torch.tanh(j) + torch.sigmoid(f) * c).clamp(-opts.cell_clip, opts.cell_clip)
            new_h = ((torch.sigmoid(o) * torch.tanh(new_c)) @ layer.projection[direction]).clamp(
                -opts.proj_clip, opts.proj_clip
            )
            running = torch.tensor([t < n for n in lengths]).unsqueeze(1)
            h = torch.where(running, new_h, h).clone()
            c = torch.where(running, new_c, c).clone()
            out[:, t] = new_h
        if index > 0 and opts.use_skip_connections:
            out = out + x
        results.append(out)
        x = out
    if direction == 1:
        results = [
            torch.stack([torch.cat([y[r, : lengths[r]].flip(0), y[r, lengths[r] :]]) for r in range(batch)])
            for y in results
        ]
    return results


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def compare_layers(found: Sequence[numpy.ndarray], expected: Sequence[numpy.ndarray]) -> str:
    """Per layer, the mean per-token cosine of ``found`` to ``expected``, and the largest difference."""
    a, b = numpy.concatenate(found, axis=1), numpy.concatenate(expected, axis=1)
    cosines = (a * b).sum(-1) / (numpy.linalg.norm(a, axis=-1) * numpy.linalg.norm(b, axis=-1))
    means = ", ".join(f"{c:.6f}" for c in cosines.mean(axis=1))
    return f"mean per-token cosine per layer {means}; largest difference {numpy.abs(a - b).max():.2e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="original")
    parser.add_argument("--precisions", default="fp32,bf16", help="Comma-separated: fp32, bf16")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--max-batch-tokens", type=int, default=16384, help="BiLM max_batch_tokens: large batches suit the Original size")
    parser.add_argument("--repeats", type=int, default=3, help="Timed runs of each; the best counts")
    args = parser.parse_args()
    precisions = args.precisions.split(",")
    if not precisions or any(p not in DTYPES for p in precisions):
        parser.error(f"--precisions takes a comma-separated list of {', '.join(DTYPES)}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    options = SIZES[args.size]
    sentences = make_sentences(args.sentences)
    n_tokens = sum(len(s) for s in sentences)
    model = BiLM(options, cache_size=0, max_batch_tokens=args.max_batch_tokens).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.02)
    # Measured again at the end: the best of both, on a shared machine.
    peaks = {p: matmul_rate(DTYPES[p]) for p in precisions}
    print(f"{args.size} size: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters; "
          f"{args.sentences} sentences, {n_tokens} tokens; {args.threads} threads; CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}")

    # Nominal model FLOPs per token, the usual utilisation convention: the char CNN and the LSTM
    # for every token; boundary positions and padding are not counted.
    flops_per_token = char_cnn_flops(options) + lstm_flops(options)
    print(f"nominal cost: {flops_per_token / 1e6:.0f} MFLOP per token")
    distinct = sum(len({token for i in batch for token in sentences[i]}) for batch in model.batches(sentences))
    print(f"distinct tokens per batch: {distinct / n_tokens:.0%} of all tokens")

    times = {p: float("inf") for p in precisions}
    outputs = {}
    base_time = float("inf")
    for precision in precisions:  # warm up kernels
        model.precision = precision
        model.embed_sentences(sentences[:4])
    # The best of interleaved runs: other virtual machines share the host, and a noisy minute
    # then hits every implementation alike.
    for _ in range(args.repeats):
        for precision in precisions:
            model.precision = precision
            outputs[precision], seconds = timed(lambda: model.embed_sentences(sentences))
            times[precision] = min(times[precision], seconds)
        base, seconds = timed(lambda: step_by_step(model, sentences))
        base_time = min(base_time, seconds)
    model.precision = precisions[0]
    difference = max(float(numpy.abs(a - b).max()) for a, b in zip(outputs[precisions[0]], base))
    model.token_cache = type(model.token_cache)(50_000)
    model.embed_sentences(sentences)
    cached_time = min(timed(lambda: model.embed_sentences(sentences))[1] for _ in range(args.repeats))

    peaks = {p: max(peak, matmul_rate(DTYPES[p])) for p, peak in peaks.items()}
    for precision, peak in peaks.items():
        print(f"measured {precision} matmul rate (best of start and end): {peak / 1e9:.1f} GFLOP/s")
    first = precisions[0]
    rows = [(f"spacy-elmo {p} (no cache)", times[p], p) for p in precisions]
    rows.insert(1, (f"spacy-elmo {first} (warm cache)", cached_time, first))
    rows.append(("step-by-step port", base_time, "fp32"))
    print(f"{'implementation':28} {'tokens/s':>9} {'GFLOP/s':>8} {'of matmul':>9}")
    for name, seconds, precision in rows:
        rate = flops_per_token * n_tokens / seconds
        share = f"{rate / peaks[precision]:9.0%}" if precision in peaks else f"{'':9}"
        print(f"{name:28} {n_tokens / seconds:9.0f} {rate / 1e9:8.1f} {share}")
    for precision in precisions:
        print(f"speed-up of {precision} over the step-by-step port (no cache): {base_time / times[precision]:.2f}x")
    print(f"largest difference between {first} and the port: {difference:.2e}")
    if "fp32" in outputs and "bf16" in outputs:
        print(f"bf16 against fp32: {compare_layers(outputs['bf16'], outputs['fp32'])}")


if __name__ == "__main__":
    main()
