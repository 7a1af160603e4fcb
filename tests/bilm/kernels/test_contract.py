"""The contract: every kernel the registry can pick gives the reference layer's outputs and final
states (spacy_elmo/bilm/kernels/reference.py, run in float64), each within its own tolerance.

Cases: 1 to 64 rows, ragged lengths (outputs zero past each row's), non-zero start states, both
directions; each kernel in every product dtype and gradient mode it runs. The GPU's fused loop
runs here in Triton's interpreter on CPU tensors (as tests/bilm/kernels/test_fused_lstm.py says),
where Triton is installed.
"""

import importlib.util
import os
from typing import Callable, Dict, List, NamedTuple

import pytest
import torch

from spacy_elmo.bilm import kernels
from spacy_elmo.bilm.kernels import int8_packs
from spacy_elmo.bilm.kernels.reference import ReferenceKernel
from spacy_elmo.bilm.memory.weight_copies import WeightCopies
from spacy_elmo.bilm.precision.kinds import PRODUCT_PRECISIONS

from ..helpers import random_layer_batch, random_lstm_layer

HAS_TRITON = importlib.util.find_spec("triton") is not None
if HAS_TRITON and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before the fused kernels are first defined
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

CPU = torch.device("cpu")
LENGTHS = {
    "one row": [5],
    "rows stop one by one": [9, 7, 4, 2, 1],
    "every row to the end": [6] * 8,
    "64 rows": [12 - row // 6 for row in range(64)],
}


class Tolerance(NamedTuple):
    """How far a kernel may be from the reference: the largest difference and the mean one, both
    as fractions of the reference's mean magnitude."""

    largest: float
    mean: float


# Each about twice the worst a kernel gave over these cases. Float32 products: float32's roundings
# (the in-place cell's scaled arithmetic, products in another order). bf16 products: 8 bits of
# mantissa in each. int8: 8-bit values and weights, in the layout this machine's kernel sums
# exactly (make test-avx2: the pair-safe one, whose worst is the largest here).
FLOAT32 = Tolerance(2e-5, 1e-6)
BF16 = Tolerance(0.3, 0.012)
INT8 = Tolerance(1.0, 0.05)


class Case(NamedTuple):
    """A kernel as a pass gets it: ``make`` from fresh weight copies, run with or without autograd."""

    kind: str
    make: Callable[[WeightCopies], kernels.LayerKernel]
    grad: bool
    tolerance: Tolerance


def registry_cases() -> Dict[str, Case]:
    """Each precision's kernel as :func:`kernels.kernel_for` picks it on a CPU, in each gradient
    mode it runs, and the fused loop in each dtype it runs."""
    cases: Dict[str, Case] = {}
    for name, kind in PRODUCT_PRECISIONS.items():
        if kind.kernel == "int8" and not int8_packs.int8_available():
            continue
        tolerance = {"fp32": FLOAT32, "bf16": BF16, "int8": INT8}[name]
        for grad in (False, True) if kind.trains else (False,):
            cases[f"{kind.kernel}-{name}-{'autograd' if grad else 'inference'}"] = Case(
                kind.kernel, lambda copies, dtype=kind.dtype: kernels.kernel_for(dtype, CPU, copies), grad, tolerance
            )
    cases["cast-bf16-gpu-layout"] = Case(
        "cast", lambda copies: kernels.Bf16Kernel(copies, out_major=False), False, BF16
    )
    if HAS_TRITON:
        for dtype, tolerance in ((torch.float32, FLOAT32), (torch.bfloat16, BF16)):
            cases[f"fused-{dtype}"] = Case(
                "fused", lambda copies, dtype=dtype: kernels.FusedKernel(copies, dtype), False, tolerance
            )
    return cases


CASES = registry_cases()
# Seconds a case of many rows in Triton's interpreter: the edit loop (make test-fast) runs the fused
# loop on one row and on rows stopping one by one, and leaves more rows to the whole suite.
PAIRS = [
    pytest.param(
        case,
        lengths,
        id=f"{case_id}-{lengths_id}",
        marks=[pytest.mark.slow] * (case.kind == "fused" and len(lengths) > len(LENGTHS["rows stop one by one"])),
    )
    for case_id, case in CASES.items()
    for lengths_id, lengths in LENGTHS.items()
]


def test_the_cases_cover_every_kernel_the_registry_can_pick():
    expected = {kind.kernel for kind in PRODUCT_PRECISIONS.values()} | ({"fused"} if HAS_TRITON else set())
    if not int8_packs.int8_available():
        expected.discard("int8")
    assert {case.kind for case in CASES.values()} == expected
    assert set(kernels.KERNELS) <= expected | {"int8"}


@pytest.mark.parametrize("case, lengths", PAIRS)
def test_every_kernel_gives_the_reference_layer_within_its_tolerance(case: Case, lengths: List[int]):
    layer = random_lstm_layer(0, CPU)
    batch = random_layer_batch(lengths, CPU)
    with torch.no_grad():
        expected = ReferenceKernel()(
            0, layer, batch.inputs.double(), batch.active, batch.hidden.double(), batch.memory.double()
        )
    kernel = case.make(WeightCopies())
    with torch.set_grad_enabled(case.grad):
        found = kernel(0, layer, batch.inputs, batch.active, batch.hidden.clone(), batch.memory.clone())
    for name, a, b in zip(("outputs", "final hidden", "final memory"), found, expected):
        assert a.dtype == torch.float32 and a.shape == b.shape, name
        difference = (a.detach().double() - b).abs()
        scale = float(b.abs().mean())
        assert float(difference.max()) <= case.tolerance.largest * scale, (name, float(difference.max()) / scale)
        assert float(difference.mean()) <= case.tolerance.mean * scale, (name, float(difference.mean()) / scale)
    padding = torch.tensor([[t >= n for n in lengths] for t in range(max(lengths))])  # (time, rows)
    assert not found[0].detach()[padding[:, None, :].expand(-1, 2, -1)].any()  # zero past each row's length


def test_the_reference_leaves_the_callers_states_alone_and_carries_gradients():
    layer = random_lstm_layer(0, CPU)
    batch = random_layer_batch([4, 2], CPU)
    hidden, memory = batch.hidden.clone().requires_grad_(), batch.memory.clone()
    outputs, final_hidden, _ = ReferenceKernel()(0, layer, batch.inputs, batch.active, hidden, memory)
    (outputs.sum() + final_hidden.sum()).backward()
    assert torch.equal(memory, batch.memory) and hidden.grad is not None and layer.input_weight.grad is not None
