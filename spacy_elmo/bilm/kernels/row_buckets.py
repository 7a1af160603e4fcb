"""Products on a CPU in bf16 or int8 run on a bounded set of row counts.

oneDNN, which runs PyTorch's bf16 and int8 products on a CPU, compiles a kernel for every shape it
meets and keeps it for the life of the process. The biLM's products see every row count from
one to a batch's rows (an LSTM step runs the rows still running; the char CNN's rows are tokens
times positions), so a service fed batches of varying sizes would grow with every new count,
without bound. Rounding the rows up to one of at most eight counts per
doubling bounds the kernels (72 up to 2,048 rows) for at most an eighth more rows. float32
products (MKL) and GPUs compile nothing per shape and run unpadded.
"""

from typing import Callable

from torch import Tensor
from torch.nn import functional as F


def padded_rows(rows: int, grain: int = 1) -> int:
    """``rows`` rounded up to one of at most eight counts per doubling (exact below 16) and to a
    multiple of ``grain`` (a power of two): at most ``max(grain - 1, rows / 8)`` of padding. The
    CUDA graphs key their captures on such counts of steps and rows too (:mod:`.gpu.cuda_graphs`)."""
    step = max(grain, 1 << max(0, rows.bit_length() - 4))
    return -(-rows // step) * step


def on_padded_rows(product: Callable[[Tensor], Tensor], x: Tensor, dim: int) -> Tensor:
    """``product(x)``, with ``x``'s dimension ``dim`` padded with zero rows to :func:`padded_rows`
    and the result cut back, on a CPU (elsewhere ``product(x)``). For the products in bf16 and int8.

    ``product`` must map each row along ``dim`` on its own (a matrix product by a weight), so the
    padded rows change nothing in the others. Shape: ``x`` (..., rows, ...) -> as ``product``'s
    result with ``rows`` along ``dim``.
    """
    rows = x.shape[dim]
    padded = padded_rows(rows)
    if padded == rows or x.device.type != "cpu":
        return product(x)
    pad = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [0, padded - rows]
    return product(F.pad(x, pad)).narrow(dim, 0, rows)
