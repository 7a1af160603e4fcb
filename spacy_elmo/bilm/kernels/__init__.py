"""How a layer of the LSTM runs: one kernel per way, chosen once per pass (:func:`kernel_for`).

A kernel runs one :class:`~spacy_elmo.bilm.model.lstm.ProjectedLSTM` layer, both directions, over a
batch whose rows are sorted longest first; all take the same arguments and give the same results
(:class:`LayerKernel`):

- :class:`.eager.Float32Kernel`: float32 products; the training loop (autograd) and inference's
  (in place), on any device;
- :class:`.bf16.Bf16Kernel`: the same loop, its products cast to bf16 (or another dtype);
- :class:`.int8.Int8Kernel`: dynamic int8 products, inference on a CPU;
- :class:`.fused.FusedKernel`: inference on a CUDA GPU, the cell fused into Triton kernels, in
  float32 or bf16, replayed from CUDA graphs where they serve.

The weight copies the kernels multiply by (bf16 copies, int8 packs) are kept in one place for
all layers: the stack's :attr:`~spacy_elmo.bilm.model.lstm.BiLSTMStack.copies`, named by layer index.
"""

import hashlib
from pathlib import Path
from typing import Callable, Dict, Protocol, Sequence, Tuple

import torch
from torch import Tensor

from ..memory.weight_copies import WeightCopies
from ..precision.kinds import listed_dtypes, of_dtype
from .bf16 import Bf16Kernel
from .eager import Float32Kernel
from .gpu.fused import FusedKernel
from .int8 import Int8Kernel
from .layer import BY_RULE, KernelChoice, LSTMLayer


class LayerKernel(Protocol):
    """Runs a layer of the LSTM; one kernel object serves one pass, layer after layer."""

    def __call__(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """Run layer ``index``, ``layer``, over a batch whose rows are sorted by length, longest first.

        Shapes: ``inputs`` (time, 2, batch, input_dim) float32, already reversed for direction 1;
        ``active[t]`` is the number of rows still running at step t (non-increasing), so step t
        computes rows ``:active[t]`` only; ``hidden`` (2, batch, projection_dim) and ``memory``
        (2, batch, lstm_dim) float32, the kernel's own: inference's kernels update them in
        place, saving a copy of the states per layer. Returns the outputs (time, 2, batch,
        projection_dim) float32, zero past each row's length, and the states after each row's
        last step.
        """


# How each kind of loop is made, by the name a precision's record gives
# (:attr:`.precision.kinds.ProductPrecision.kernel`): from its weight copies, device, product dtype and choice.
KERNELS: Dict[str, Callable[[WeightCopies, torch.device, torch.dtype, KernelChoice], LayerKernel]] = {
    "eager": lambda copies, device, dtype, choice: Float32Kernel(copies, choice),
    "cast": lambda copies, device, dtype, choice: Bf16Kernel(copies, device.type == "cpu", dtype, choice),
    "int8": lambda copies, device, dtype, choice: Int8Kernel(copies, choice),
}


def source_digest() -> str:
    """A digest of the kernels' source files (this package): what ``auto``'s recorded decisions
    are keyed by, so that any change to a kernel, which can make one precision faster or less
    accurate than another, measures them again."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def kernel_for(
    dtype: torch.dtype, device: torch.device, copies: WeightCopies, choice: KernelChoice = BY_RULE
) -> LayerKernel:
    """The kernel of a pass with products in ``dtype`` (:attr:`.precision.ResolvedPrecision.dtype`) on
    ``device``, in the current gradient mode; ``copies``: where its weight copies are kept. The
    fused loop where it serves (``choice.fused``: :func:`.gpu.fused_lstm.use_fused_lstm`), else the precision's own."""
    kind = of_dtype(dtype)
    if kind is None:
        raise ValueError(f"the LSTM's products run in {listed_dtypes()}, not {dtype}")
    if choice.fused(device, dtype):
        return FusedKernel(copies, dtype, choice)
    return KERNELS[kind.kernel](copies, device, dtype, choice)


__all__ = [
    "Bf16Kernel",
    "Float32Kernel",
    "FusedKernel",
    "Int8Kernel",
    "KernelChoice",
    "LSTMLayer",
    "LayerKernel",
    "kernel_for",
    "source_digest",
]
