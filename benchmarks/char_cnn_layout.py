"""The char CNN's filters two ways: ``conv1d`` then the maximum over positions, against the windows
unfolded into rows, one matrix product and the maximum over rows (what
``spacy_elmo.bilm.token_encoder.filter_maxima`` does), at the published Original size's filters.

    python benchmarks/char_cnn_layout.py [--threads 2] [--tokens 800] [--positions 20] [--repeats 20]

For each product dtype (fp32, bf16): milliseconds for all seven filters' maxima of ``--tokens``
tokens of ``--positions`` character positions (about what a batch of fresh English words needs
once trimmed: ``positions_needed``), forward alone and forward + backward, the best of three
interleaved rounds, and the largest difference between the two results.
"""

import argparse
import time
from typing import Callable, List, Tuple

import torch
from torch.nn import functional as F

from spacy_elmo.bilm.options import ElmoOptions

ORIGINAL_FILTERS = ElmoOptions(lstm_dim=4096, projection_dim=512, n_layers=2, n_highway=2).filters


def through_conv1d(chars: torch.Tensor, weights: List[torch.Tensor]) -> torch.Tensor:
    """chars (n, positions, char_dim) -> (n, n_filters): conv1d over (n, char_dim, positions)."""
    by_channel = chars.transpose(1, 2)
    return torch.cat([F.conv1d(by_channel, w).amax(dim=-1) for w in weights], dim=-1)


def through_unfold(chars: torch.Tensor, weights: List[torch.Tensor]) -> torch.Tensor:
    """The same maxima from unfolded windows and one product per filter width."""
    maxima = []
    for w in weights:
        count, char_dim, width = w.shape
        windows = chars.unfold(1, width, 1)
        rows = windows.reshape(*windows.shape[:2], char_dim * width)
        maxima.append(F.linear(rows, w.reshape(count, char_dim * width)).amax(dim=1))
    return torch.cat(maxima, dim=-1)


def best_ms(run: Callable[[], None], repeats: int) -> float:
    run()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        best = min(best, (time.perf_counter() - start) / repeats * 1e3)
    return best


def timed(way: Callable, chars: torch.Tensor, weights: List[torch.Tensor], repeats: int) -> Tuple[float, float]:
    """(forward ms, forward + backward ms)."""
    with torch.no_grad():
        forward = best_ms(lambda: way(chars, weights), repeats)
    trainable = [w.detach().requires_grad_() for w in weights]
    both = best_ms(lambda: way(chars, trainable).float().sum().backward(), repeats)
    return forward, both


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=800)
    parser.add_argument("--positions", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads; {args.tokens} tokens x {args.positions} positions, "
          f"filters {ORIGINAL_FILTERS}")
    print("| dtype | conv1d + max, forward | unfolded + max, forward | conv1d, forward + backward | "
          "unfolded, forward + backward | largest difference |")
    print("|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        chars = torch.randn(args.tokens, args.positions, 16).to(dtype)
        weights = [(torch.randn(count, 16, width) * 0.1).to(dtype) for width, count in ORIGINAL_FILTERS]
        conv = timed(through_conv1d, chars, weights, args.repeats)
        unfold = timed(through_unfold, chars, weights, args.repeats)
        with torch.no_grad():
            difference = (through_conv1d(chars, weights).float() - through_unfold(chars, weights).float()).abs().max()
        print(f"| {str(dtype).replace('torch.', '')} | {conv[0]:.2f} ms | {unfold[0]:.2f} ms | {conv[1]:.2f} ms | "
              f"{unfold[1]:.2f} ms | {difference.item():.2g} |")


if __name__ == "__main__":
    main()
