"""Weight gradients of the LSTM's many small products, computed in a few large ones.

A layer multiplies by the same weights at every timestep, a product of the batch's rows (64 in an
``nlp.pipe`` or pretraining batch). Autograd computes each weight's gradient as one product per
step, (in, rows) @ (rows, out), into a new tensor, and sums them in the weight's dtype: with so
few rows, each is bound by writing its (in, out) result, far below the rate at which the same CPU
multiplies large products, and in bf16 they are a large share of a training step.

:class:`GatheredWeight` gives the float32 parameter its gradient itself, once the backward pass
has gone through every step. In float32 each step's product is added into one sum in place. In
bf16 the steps' inputs and output gradients are kept and multiplied together,
:data:`GATHERED_ROWS` rows at a time, each product's result added into a float32 sum. Same
gradient, other roundings (bf16 ones fewer: autograd summed the steps in bf16). Only once
differentiable: a gradient of the gradient is not available.
"""

from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

# Rows of kept bf16 inputs and output gradients multiplied at once: a product large enough to run
# at the CPU's rate (a whole batch of 64 sentences of 30 words, usually), while what is kept stays
# bounded (at the Original size, 2,048 rows of both directions' gate gradients are 134 MB).
GATHERED_ROWS = 2048


class GatheredWeight:
    """A float32 weight, (directions, in, out), for many products whose weight gradient is gathered.

    ``copy``: the weight in the products' dtype and layout, made outside autograd (``source``
    itself, detached, in float32). Call it on each step's input (directions, rows, in) for
    ``torch.bmm(input, copy)``; the gradient reaches ``source``, in float32, when the backward
    pass reaches it, after every product's. ``rows``: of each gathered product (:data:`GATHERED_ROWS`).
    """

    def __init__(self, source: Tensor, copy: Tensor, rows: int = GATHERED_ROWS) -> None:
        # The autograd nodes hold the gathering, not this object: no reference cycle through the graph.
        self._gathering = _Gathering(rows)
        self._source = _Gathered.apply(source, self._gathering)
        self._copy = copy

    def __call__(self, inputs: Tensor) -> Tensor:
        return _Product.apply(inputs, self._source, self._copy, self._gathering)


class _Gathering:
    """The weight gradient's float32 sum, and in bf16 the products' inputs and output gradients
    not yet multiplied, until they reach ``max_rows``.

    It holds tensors only while the backward pass runs: :meth:`gradient` ends with none.
    """

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._inputs: List[Tensor] = []
        self._gradients: List[Tensor] = []
        self._rows = 0
        self._sum: Optional[Tensor] = None

    def keep(self, inputs: Tensor, gradient: Tensor) -> None:
        """One product's input (directions, rows, in) and output gradient (directions, rows, out)."""
        if gradient.dtype == torch.float32:  # added into the sum at once: no copies kept
            part = inputs.transpose(1, 2)
            self._sum = torch.bmm(part, gradient) if self._sum is None else self._sum.baddbmm_(part, gradient)
            return
        self._inputs.append(inputs)
        self._gradients.append(gradient)
        self._rows += inputs.shape[1]
        if self._rows >= self.max_rows:
            self._multiply()

    def gradient(self) -> Optional[Tensor]:
        """The weight's gradient, float32 (None if no product had one), and a fresh start."""
        self._multiply()
        found, self._sum = self._sum, None
        return found

    def _multiply(self) -> None:
        if not self._inputs:
            return
        inputs = torch.cat(self._inputs, dim=1).transpose(1, 2)
        part = torch.bmm(inputs, torch.cat(self._gradients, dim=1)).float()
        self._sum = part if self._sum is None else self._sum.add_(part)
        self._inputs, self._gradients, self._rows = [], [], 0


class _Gathered(torch.autograd.Function):
    """The float32 weight as it is; its backward, which autograd runs after every product's,
    returns the gathered gradient."""

    @staticmethod
    def forward(ctx: FunctionCtx, weight: Tensor, gathering: _Gathering) -> Tensor:
        ctx.gathering = gathering  # type: ignore[attr-defined]
        ctx.set_materialize_grads(False)  # the products pass no gradient here
        return weight.view_as(weight)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, _unused: Optional[Tensor]) -> Tuple[Optional[Tensor], None]:
        return ctx.gathering.gradient(), None


class _Product(torch.autograd.Function):
    """``torch.bmm(inputs, copy)``, whose gradient for the weight is kept by its :class:`_Gathering`;
    ``source`` (the float32 weight, through :class:`_Gathered`) makes the weight's backward wait for it."""

    @staticmethod
    def forward(ctx: FunctionCtx, inputs: Tensor, source: Tensor, copy: Tensor, gathering: _Gathering) -> Tensor:
        ctx.save_for_backward(inputs, copy)
        ctx.gathering = gathering  # type: ignore[attr-defined]
        return torch.bmm(inputs, copy)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, gradient: Tensor) -> Tuple[Optional[Tensor], None, None, None]:
        inputs, copy = ctx.saved_tensors
        if ctx.needs_input_grad[1]:
            ctx.gathering.keep(inputs, gradient)
        found = torch.bmm(gradient, copy.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        return found, None, None, None
