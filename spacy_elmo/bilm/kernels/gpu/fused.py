"""The fused time loop of a layer: inference on a CUDA GPU with Triton (see :mod:`..fused_lstm`),
replayed from a CUDA graph where one serves (:mod:`..cuda_graphs`)."""

from typing import Sequence

import torch
from torch import Tensor

from ...memory.weight_copies import WeightCopies
from ..bf16 import Bf16Kernel
from ..layer import BY_RULE, KernelChoice, LSTMLayer, Result
from . import cuda_graphs
from .fused_lstm import fused_layer


class FusedKernel:
    """The fused loop (a :class:`~spacy_elmo.bilm.kernels.LayerKernel`) with products in ``dtype``
    (float32 or bf16), without autograd, from CUDA graphs where ``choice`` says; bf16 copies in ``copies``."""

    def __init__(self, copies: WeightCopies, dtype: torch.dtype, choice: KernelChoice = BY_RULE) -> None:
        self.copies = copies
        self.dtype = dtype
        self.choice = choice

    def __call__(
        self, index: int, layer: LSTMLayer, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor
    ) -> Result:
        weights = fused_weights(self.copies, index, layer, self.dtype)
        bias = layer.gate_bias().contiguous()
        args = (inputs, active, hidden, memory, weights, bias, layer.cell_clip, layer.proj_clip)
        if self.choice.graphs(inputs.device, weights[1].dtype):  # replayed where a graph serves
            result = cuda_graphs.cache_for(self.copies, inputs.device).run(layer, *args)
            if result is not None:
                return result
        return fused_layer(*args)


def fused_weights(copies: WeightCopies, index: int, layer: LSTMLayer, dtype: torch.dtype) -> cuda_graphs.Weights:
    """The input, recurrent and projection weights as stored, (2, in, out), in ``dtype``: the
    parameters in float32, else copies kept in ``copies``."""
    if dtype == torch.float32:
        return layer.input_weight, layer.hidden_weight, layer.projection
    copies_made = Bf16Kernel(copies, out_major=False, dtype=dtype).product_weights(index, layer, scaled=False)
    return copies_made.input, copies_made.hidden, copies_made.projection  # type: ignore[return-value]
