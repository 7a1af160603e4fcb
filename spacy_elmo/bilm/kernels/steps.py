"""The time loop of inference on a CPU, written once: the kernels differ in their products, not in their steps.

Each step takes its running rows' gate pre-activations from the kernel (a :class:`StepProducts`),
runs the cell in their storage (:func:`.cell.cell_in_place`, on the scaled values it documents),
and writes the kernel's projection, clipped, into the outputs and the next step's recurrent input.
A run of steps covers both directions at once (:data:`BOTH`: one batched product for the two) or
one (:data:`EACH`: a step then reads one direction's weights, which stay in cache). Training's
loop (autograd, new tensors at every step) is :class:`.eager.Float32Kernel`'s own.
"""

from typing import Callable, Protocol, Sequence, Tuple

from torch import Tensor

from .cell import cell_in_place
from .layer import LSTMLayer

BOTH: Tuple[slice, ...] = (slice(0, 2),)  # one run of steps for both directions
EACH: Tuple[slice, ...] = (slice(0, 1), slice(1, 2))  # direction 0's steps, then direction 1's


class StepProducts(Protocol):
    """A kernel's products for one run of steps over ``directions`` (1 or 2) of a layer."""

    state: Tensor
    """(directions, batch, projection_dim): the recurrent input of the next step, in the dtype the
    products take; the loop writes each step's output into its running rows."""

    def gates(self, step: int, running: int) -> Tensor:
        """Step ``step``'s gate pre-activations of its first ``running`` rows, (directions, running,
        4 * lstm_dim) float32, bias included, the cell input's doubled
        (:func:`.cell.double_cell_input_`); writable: the cell runs in their storage."""

    def project(self, halved_output: Tensor) -> Tensor:
        """The projection of the halved cell output (directions, running, lstm_dim), in the dtype of
        :attr:`state`, by the doubled weight: (directions, running, projection_dim)."""


def infer_layer(
    layer: LSTMLayer,
    n_steps: int,
    active: Sequence[int],
    hidden: Tensor,
    memory: Tensor,
    groups: Sequence[slice],
    steps_of: Callable[[slice], StepProducts],
) -> Tensor:
    """Run a layer's steps without autograd: one run per group of directions, ``steps_of(group)``
    its products. Returns the outputs (time, 2, batch, projection_dim) float32, zero past each row's
    length; ``hidden`` (2, batch, projection_dim) and ``memory`` (2, batch, lstm_dim) become the
    states after each row's last step, in place (rows that never run keep theirs)."""
    written = hidden.new_zeros((n_steps, *hidden.shape))
    for directions in groups:
        _run(steps_of(directions), layer, active, hidden[directions], memory[directions], written[:, directions])
    return written


def _run(
    steps: StepProducts, layer: LSTMLayer, active: Sequence[int], hidden: Tensor, memory: Tensor, written: Tensor
) -> None:
    """One run of steps over the directions of ``hidden``, ``memory`` and ``written`` (views), in place;
    the memory doubled from the first step to the last (:func:`.cell.cell_in_place`)."""
    state = steps.state
    halved_output = state.new_empty((*memory.shape[:2], layer.lstm_dim))
    memory.mul_(2.0)
    for step, running in enumerate(active):
        cell_in_place(steps.gates(step, running), memory[:, :running], halved_output[:, :running], layer.cell_clip)
        output = written[step, :, :running]
        output.copy_(steps.project(halved_output[:, :running])).clamp_(-layer.proj_clip, layer.proj_clip)
        state[:, :running] = output
    memory.mul_(0.5)
    for step, (running, after) in enumerate(zip(active, [*active[1:], 0])):
        if after < running:  # rows sorted longest first stop in runs: these at this step
            hidden[:, after:running] = written[step, :, after:running]
