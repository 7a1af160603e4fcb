"""The CPU LSTM step's two costs apart from the products' arithmetic: the cell's elementwise math
and the layout of the bf16 weights, each timed against the form it replaced, at the Original
size's shapes (lstm_dim 4096, projection_dim 512, both directions) and a batch of ``--rows``.

    python benchmarks/lstm_layout.py [--threads 2] [--rows 64] [--repeats 50]

- cell: the gate nonlinearities, clipped memory and cell output of one step, in place, with
  torch.tanh (as before) and with tanh as 2 sigmoid(2x) - 1, the four gates in one sigmoid (as
  spacy_elmo.bilm.kernels.cell.cell_in_place does); microseconds per step.
- products: the input (2 rows x 512) @ (512 x 16384), recurrent (rows x 512) @ (512 x 16384) and
  projection (rows x 4096) @ (4096 x 512) products of both directions in bf16, the weight stored (in, out) as the parameters are, and
  stored (out, in) and read through its transposed view (as the biLM's bf16 copies are on a CPU);
  GFLOP/s.
"""

import argparse
import time
from typing import Callable

import torch

LSTM_DIM, PROJECTION_DIM, CLIP = 4096, 512, 3.0


def timed(run: Callable[[], object], repeats: int) -> float:
    """Seconds of ``run``'s fastest call, after one untimed call."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def cell_with_tanh(gates: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
    in_gate.sigmoid_().mul_(cell_input.tanh_())
    memory.mul_(forget_gate.sigmoid_()).add_(in_gate).clamp_(-CLIP, CLIP)
    return out_gate.sigmoid_().mul_(torch.tanh(memory, out=cell_input))


def cell_with_sigmoid(gates: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    in_gate, cell_input, forget_gate, out_gate = gates.chunk(4, dim=-1)
    cell_input.mul_(2.0)
    gates.sigmoid_()
    cell_input.mul_(2.0).sub_(1.0)
    memory.mul_(forget_gate).addcmul_(in_gate, cell_input).clamp_(-CLIP, CLIP)
    return out_gate.mul_(torch.mul(memory, 2.0, out=cell_input).sigmoid_().mul_(2.0).sub_(1.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    gates = torch.randn(2, args.rows, 4 * LSTM_DIM, generator=generator)
    memory = torch.randn(2, args.rows, LSTM_DIM, generator=generator)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rows} rows per direction")
    copy = timed(lambda: (gates.clone(), memory.clone()), args.repeats)
    for name, cell in (("torch.tanh", cell_with_tanh), ("one sigmoid", cell_with_sigmoid)):
        took = timed(lambda: cell(gates.clone(), memory.clone()), args.repeats) - copy
        print(f"cell, {name}: {took * 1e6:,.0f} us per step")
    shapes = {  # name: rows, inner, outer; the input product covers a window of 2 steps
        "input": (2 * args.rows, PROJECTION_DIM, 4 * LSTM_DIM),
        "recurrent": (args.rows, PROJECTION_DIM, 4 * LSTM_DIM),
        "projection": (args.rows, LSTM_DIM, PROJECTION_DIM),
    }
    for name, (rows, inner, outer) in shapes.items():
        x = torch.randn(2, rows, inner, generator=generator).bfloat16()
        weight = torch.randn(2, inner, outer, generator=generator).bfloat16()
        out_major = weight.transpose(1, 2).contiguous().transpose(1, 2)
        flops = 2 * 2 * rows * inner * outer
        for layout, w in (("(in, out)", weight), ("(out, in)", out_major)):
            took = timed(lambda: torch.bmm(x, w), args.repeats)
            print(f"{name} product, bf16, weight stored {layout}: {flops / took / 1e9:,.0f} GFLOP/s")


if __name__ == "__main__":
    main()
