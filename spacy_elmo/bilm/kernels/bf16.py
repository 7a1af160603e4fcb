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
from typing import Callable, Optional

import torch
from torch import Tensor

from ..memory.weight_copies import WeightCopies
from . import onednn_packs
from .cell import double_cell_input_
from .eager import Float32Kernel, LSTMWeights, Weight
from .gathered_gradients import GatheredWeight
from .layer import BY_RULE, KernelChoice, LSTMLayer
from .row_buckets import on_padded_rows


class Bf16Kernel(Float32Kernel):
    """The eager loop with products in ``dtype`` (bf16 by default; a :class:`~spacy_elmo.bilm.kernels.LayerKernel`).

    ``copies``: where the inference copies are kept, named by layer index; ``out_major``: each
    copy laid out (2, out, in) and served as its transposed view (on a CPU), or packed (``choice``).
    """

    def __init__(
        self, copies: WeightCopies, out_major: bool, dtype: torch.dtype = torch.bfloat16, choice: KernelChoice = BY_RULE
    ) -> None:
        super().__init__(copies, choice)
        self.out_major = out_major
        self.dtype = dtype

    def weights(self, index: int, layer: LSTMLayer) -> LSTMWeights:
        """The three weights in :attr:`dtype` from :attr:`copies`, and the bias, which that dtype
        would round: float32, added where the input product is converted to float32; all scaled
        for :func:`.cell.cell_in_place`."""
        weights = self.product_weights(index, layer, scaled=True)
        return weights._replace(bias=double_cell_input_(layer.gate_bias()).unsqueeze(1))

    def product_weights(self, index: int, layer: LSTMLayer, scaled: bool) -> LSTMWeights:
        """Layer ``index``'s three product weights (2, in, out) in :attr:`dtype`, kept while the
        parameters are unchanged; :attr:`out_major` (on a CPU): laid out (2, out, in) as transposed
        views, or packed where :func:`.onednn_packs.serves` them, else as stored (a GPU's loops).
        ``scaled``: for :func:`.cell.cell_in_place` (the cell input's columns of the input and
        recurrent weights doubled, the projection doubled), in :attr:`dtype`, where doubling is exact."""
        copies, dtype = self.copies, self.dtype

        def copy(name: str, weight: Tensor, double: Callable[[Tensor, int], Tensor]) -> Weight:
            name = f"{index}.{name}.scaled" if scaled else f"{index}.{name}"
            scale = double if scaled else lambda values, dim: values  # unscaled: the fused GPU loop's copies
            if not self.out_major:
                return copies.cast(name, dtype, [weight], lambda: scale(weight.detach().to(dtype, copy=True), -1))
            if onednn_packs.serves(weight, self.choice.packed_from):
                make = partial(onednn_packs.pack_directions, weight, dtype, lambda out_in: scale(out_in, 0))
                return copies.get(f"{name}.packed", ("oneDNN", dtype), [weight], make)
            return copies.cast(f"{name}.T", dtype, [weight], lambda: scale(_laid_out(weight, dtype), 1)).transpose(1, 2)

        return LSTMWeights(
            copy("input_weight", layer.input_weight, double_cell_input_),
            copy("hidden_weight", layer.hidden_weight, double_cell_input_),
            copy("projection", layer.projection, lambda values, dim: values.mul_(2.0)),  # in place
        )

    def gathered_weights(self, layer: LSTMLayer) -> LSTMWeights:
        """Copies made for this pass outside autograd, laid out as :meth:`weights` lays them out,
        unscaled; where a parameter is trained, its gradient gathered into it in float32."""
        sources, dtype = (layer.input_weight, layer.hidden_weight, layer.projection), self.dtype
        copies = [_laid_out(s, dtype).transpose(1, 2) if self.out_major else s.detach().to(dtype) for s in sources]
        input_weight, hidden, projection = (
            GatheredWeight(s, c) if s.requires_grad else c for s, c in zip(sources, copies)
        )
        return LSTMWeights(input_weight, hidden, projection, bias=layer.gate_bias().unsqueeze(1))

    def lowered_inputs(self, inputs: Tensor) -> Tensor:
        """The inputs in :attr:`dtype`."""
        return inputs.to(self.dtype)

    def lowered_state(self, hidden: Tensor) -> Tensor:
        """A copy of ``hidden`` in :attr:`dtype`, which each step writes its output into: the
        float32 states are gathered from the outputs once the steps are done."""
        return hidden.to(self.dtype)

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


def _laid_out(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """A copy of ``weight`` (2, in, out) in ``dtype``, laid out (2, out, in) in memory."""
    return weight.detach().transpose(1, 2).to(dtype, memory_format=torch.contiguous_format, copy=True)
