"""The LSTM's kernels (spacy_elmo/bilm/kernels): one chosen per pass, their weight copies kept by the stack."""

from functools import partial

import pytest
import torch

from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels import Bf16Kernel, Float32Kernel, FusedKernel, Int8Kernel, KernelChoice, kernel_for
from spacy_elmo.bilm.kernels.cell import cell_in_place, double_cell_input_
from spacy_elmo.bilm.kernels.gpu import fused_lstm
from spacy_elmo.bilm.kernels.int8_packs import int8_available
from spacy_elmo.bilm.memory.weight_copies import WeightCopies

from ...helpers import REAL_TEXT, random_bilm


@pytest.mark.parametrize(
    "dtype, device, grad, expected",
    [
        (torch.float32, "cpu", False, Float32Kernel),
        (torch.float32, "cpu", True, Float32Kernel),
        (torch.bfloat16, "cpu", True, Bf16Kernel),
        (torch.qint8, "cpu", False, Int8Kernel),
        (torch.float32, "cuda", False, FusedKernel),
        (torch.bfloat16, "cuda", False, FusedKernel),
        (torch.bfloat16, "cuda", True, Bf16Kernel),  # training: autograd needs the eager loop
        (torch.float32, "cuda", True, Float32Kernel),
    ],
)
def test_a_pass_takes_the_kernel_of_its_products_device_and_gradient_mode(monkeypatch, dtype, device, grad, expected):
    monkeypatch.delenv(settings.FUSED_LSTM_ENV, raising=False)
    with_triton = KernelChoice(fused=partial(fused_lstm.use_fused_lstm, triton=True))
    with torch.set_grad_enabled(grad):
        kernel = kernel_for(dtype, torch.device(device), WeightCopies(), with_triton)
    assert type(kernel) is expected
    if expected is Bf16Kernel:  # oneDNN's CPU kernels read (out, in) copies faster; a GPU's take them as stored
        assert kernel.out_major is (device == "cpu")


def test_an_unknown_product_dtype_is_refused():
    with pytest.raises(ValueError, match="float32, bfloat16 or qint8, not torch.float16"):
        kernel_for(torch.float16, torch.device("cpu"), WeightCopies())


@pytest.mark.parametrize(
    "precision",
    [
        "bf16",
        pytest.param(
            "int8",
            marks=pytest.mark.skipif(not int8_available(), reason="this torch build has no int8 kernels for this CPU"),
        ),
    ],
)
def test_the_stack_keeps_every_layers_weight_copies_in_one_place(precision):
    model = random_bilm(precision=precision, cache_size=0)
    with torch.no_grad():
        model(REAL_TEXT[:2])
    stack = model.lstm
    caches = [c for m in stack.layers.modules() for c in vars(m).values() if isinstance(c, WeightCopies)]
    assert not caches  # no layer keeps copies of its own
    per_layer = 3 if precision == "bf16" else 1  # input, recurrent and projection copies; one entry of packs
    assert len(stack.copies) == per_layer * model.options.n_layers


@pytest.mark.parametrize("product_dtype", [torch.float32, torch.bfloat16])
def test_the_in_place_cell_on_scaled_values_gives_the_unscaled_arithmetic_to_the_bit(product_dtype):
    """cell_in_place takes the cell input's gates doubled, keeps the memory doubled and halves the
    output, for a doubled projection: powers of two, so every value is the unscaled one's exactly
    (the unscaled steps below are the in-place cell as it was before the scaling)."""
    torch.manual_seed(0)
    gates, memory = torch.randn(2, 5, 4 * 40) * 3, torch.randn(2, 5, 40)
    projection = torch.randn(2, 40, 8).to(product_dtype)

    expected_memory, unscaled = memory.clone(), gates.clone()
    i, j, f, o = unscaled.chunk(4, dim=-1)
    j.mul_(2.0)
    unscaled.sigmoid_()
    j.mul_(2.0).sub_(1.0)
    expected_memory.mul_(f).addcmul_(i, j).clamp_(-3.0, 3.0)
    cell_output = o.mul_(torch.mul(expected_memory, 2.0, out=j).sigmoid_().mul_(2.0).sub_(1.0))
    expected_output = torch.bmm(cell_output.to(product_dtype), projection)

    doubled_memory, halved = memory * 2, torch.empty(2, 5, 40, dtype=product_dtype)
    cell_in_place(double_cell_input_(gates.clone()), doubled_memory, halved, 3.0)
    assert torch.equal(doubled_memory, expected_memory * 2)
    assert torch.equal(torch.bmm(halved, projection * 2), expected_output)
