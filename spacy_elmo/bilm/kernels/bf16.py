"""The eager loop (:mod:`.eager`) with its products cast to a low-precision dtype: ``precision = "bf16"``.

Each product multiplies bf16 inputs by a bf16 copy of the weight and accumulates in float32
inside the kernel; the gates, states, the bias and the cell stay float32 (see
:mod:`spacy_elmo.bilm.precision.resolved`). Inference multiplies by copies made once and kept while the
float32 parameters are unchanged (:class:`~..memory.weight_copies.WeightCopies`, held by the stack);
training casts them once per pass, outside autograd, and gathers each weight's gradient in
float32. On a CPU, the copies are laid out (2, out, in) in memory and used as (in, out) views:
the layout oneDNN's bf16 kernels read faster at the LSTM's shapes, and inference's large ones
packed for oneDNN's linear instead (:mod:`.onednn_packs`: several times faster at few rows); the
products run on bounded row counts (:mod:`..row_buckets`).
"""

from functools import partial
from typing import Optional, Tuple

import torch
from torch import Tensor

from ..memory.weight_copies import WeightCopies
from . import onednn_packs
from .eager import Float32Kernel, LSTMWeights, Weight
from .gathered_gradients import GatheredWeight
from .layer import LSTMLayer
from .row_buckets import on_padded_rows


class Bf16Kernel(Float32Kernel):
    """The eager loop with products in ``dtype`` (bf16 by default; a :class:`~spacy_elmo.bilm.kernels.LayerKernel`).

    ``copies``: where the inference copies are kept, named by layer index; ``out_major``: each
    copy laid out (2, out, in) and served as its transposed view (on a CPU).
    """

    def __init__(self, copies: WeightCopies, out_major: bool, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__(copies)
        self.out_major = out_major
        self.dtype = dtype

    def weights(self, index: int, layer: LSTMLayer) -> LSTMWeights:
        """The three weights in :attr:`dtype`, without the bias, from :attr:`copies`."""
        return product_copies(self.copies, index, layer, self.dtype, self.out_major)

    def gathered_weights(self, index: int, layer: LSTMLayer) -> LSTMWeights:
        """Copies made for this pass outside autograd, laid out as :meth:`weights` lays them out;
        where a parameter is trained, its gradient gathered into it in float32."""
        sources = (layer.input_weight, layer.hidden_weight, layer.projection)
        copies = [_copy(source, self.dtype, self.out_major) for source in sources]
        return LSTMWeights(*(GatheredWeight(s, c) if s.requires_grad else c for s, c in zip(sources, copies)))

    def lowered_inputs(self, inputs: Tensor, layer: LSTMLayer) -> Tuple[Tensor, Optional[Tensor]]:
        """The inputs in :attr:`dtype`, and the bias, which it would round: float32, (2, 1, 4 * lstm_dim),
        added where the input product is converted to float32."""
        return inputs.to(self.dtype), layer.gate_bias().unsqueeze(1)

    def product(self, x: Tensor, weight: Weight) -> Tensor:
        """The product in :attr:`dtype` (its result in it too), on bounded row counts.
        Shape: (2, rows, in) -> (2, rows, out)."""
        return on_padded_rows(partial(super().product, weight=weight), x, 1)

    def input_gates(self, flat: Tensor, weight: Weight, bias: Optional[Tensor], out: Optional[Tensor]) -> Tensor:
        """Into ``out``, the product converted in place and the bias added there (``torch.add``
        into ``out`` would convert it into a temporary first: one more pass over the gates)."""
        if out is None:
            return torch.add(self.product(flat, weight), bias)  # type: ignore[arg-type]
        return out.copy_(self.product(flat, weight)).add_(bias)  # type: ignore[arg-type]

    def recurrent(self, hidden: Tensor, weight: Weight) -> Tensor:
        return self.product(hidden.to(self.dtype), weight)

    def project(self, cell_output: Tensor, weight: Weight) -> Tensor:
        return self.product(cell_output.to(self.dtype), weight).float()


def product_copies(
    copies: WeightCopies, index: int, layer: LSTMLayer, dtype: torch.dtype, out_major: bool
) -> LSTMWeights:
    """Layer ``index``'s three product weights as stored, (2, in, out), in ``dtype``, kept in
    ``copies`` while the parameters are unchanged; ``out_major`` (on a CPU): laid out (2, out, in)
    in memory and returned as transposed views, or, where :func:`.onednn_packs.serves` them, packed
    for oneDNN's linear (a GPU's loops take them as stored)."""

    def copy(name: str, weight: Tensor) -> Weight:
        if not out_major:
            return copies.cast(f"{index}.{name}", dtype, [weight], lambda: weight)
        if onednn_packs.serves(weight):
            make = partial(onednn_packs.pack_directions, weight, dtype)
            return copies.get(f"{index}.{name}.packed", ("oneDNN", dtype), [weight], make)
        laid_out = copies.cast(f"{index}.{name}.T", dtype, [weight], lambda: weight.transpose(1, 2).contiguous())
        return laid_out.transpose(1, 2)

    return LSTMWeights(
        copy("input_weight", layer.input_weight),
        copy("hidden_weight", layer.hidden_weight),
        copy("projection", layer.projection),
    )


def _copy(source: Tensor, dtype: torch.dtype, out_major: bool) -> Tensor:
    """``source`` (2, in, out) in ``dtype``, outside autograd; ``out_major``: laid out (2, out, in) in
    memory, returned as its transposed view."""
    with torch.no_grad():
        if not out_major:
            return source.detach().to(dtype)
        return source.transpose(1, 2).to(dtype, memory_format=torch.contiguous_format).transpose(1, 2)
