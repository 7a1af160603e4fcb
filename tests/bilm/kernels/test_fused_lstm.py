"""The GPU's fused LSTM loop (spacy_elmo/bilm/kernels/gpu/fused_lstm.py) against the eager loop.

Where torch sees a CUDA GPU, on it; elsewhere Triton's interpreter runs the same kernels on CPU
tensors, so every CPU run of the suite checks the logic of the GPU path (strides, windows, rows
that stop, final states). The interpreter is chosen here, before the kernels are defined: nothing
else in a CPU run imports them.
"""

import os

import pytest
import torch
from torch import Tensor

from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels import KernelChoice
from spacy_elmo.bilm.kernels.gpu import fused_lstm
from spacy_elmo.bilm.model.lstm import ProjectedLSTM

from ...helpers import assert_float32_close, random_bilm, tiny_options
from ..helpers import eager_layer, fused_inputs, random_layer_batch, random_lstm_layer

pytest.importorskip("triton", reason="Triton is not installed (pip install spacy-elmo[test] brings it)")
# The interpreter computes exp in NumPy, which warns where it overflows to inf: the sigmoid is then 0, as it should.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if DEVICE.type == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

# The padded loop runs every padded row: seconds per case in Triton's interpreter, so the edit
# loop (make test-fast) leaves it to the full suite.
PADDED = pytest.param(True, marks=pytest.mark.slow)

LENGTHS = {
    "every row to the end": [6, 6, 6],
    "rows stop one by one": [9, 7, 4, 2, 1],
    "one row": [5],
    "one step": [1, 1],
}


def cases(*whole_suite_only: str) -> list:
    """:data:`LENGTHS` as parameters, the cases named in the full suite only."""
    return [
        pytest.param(lengths, id=name, marks=[pytest.mark.slow] * (name in whole_suite_only))
        for name, lengths in LENGTHS.items()
    ]


# The edit loop leaves the full batch's case to the full suite, and bf16's case of most rows too
# (about a second in the interpreter): its contract test runs rows stopping one by one on the fused
# loop in each dtype.
CASES = cases("every row to the end")
BF16_CASES = cases("every row to the end", "rows stop one by one")


def eager_and_fused(layer: ProjectedLSTM, lengths, dtype: torch.dtype, window_positions: int, padded: bool = False):
    """Both loops over the same random inputs and initial states: (eager, fused) results; the fused
    one launched, or ``padded`` as a CUDA graph runs it (:func:`padded_loop`)."""
    inputs, active, hidden, memory = batch = random_layer_batch(lengths, DEVICE)
    eager = eager_layer(layer, batch, dtype)
    with torch.no_grad():
        weights, bias = fused_inputs(layer, dtype)
        if padded:
            fused = padded_loop(inputs, lengths, hidden, memory, weights, bias, layer, window_positions)
        else:
            fused = fused_lstm.fused_layer(
                inputs, active, hidden, memory, weights, bias, layer.cell_clip, layer.proj_clip, window_positions
            )
    return eager, fused


def padded_loop(inputs, lengths, hidden, memory, weights, bias, layer: ProjectedLSTM, window_positions: int):
    """:func:`fused_lstm.padded_layer` over the batch padded to 3 more steps and 11 more rows,
    the padding holding random leftovers (of other batches, in a graph's buffers) and the outputs
    NaN before the loop: it must write them whole. Returns the real rows' results."""
    n_steps, _, batch, width = inputs.shape

    def padded(real: Tensor, shape) -> Tensor:
        buffer = torch.randn(shape, device=DEVICE)
        buffer[tuple(slice(0, size) for size in real.shape)] = real
        return buffer

    steps, rows = n_steps + 3, batch + 11
    buffers = fused_lstm.LayerBuffers(
        inputs=padded(inputs, (steps, 2, rows, width)),
        lengths=torch.tensor(list(lengths) + [0] * 11, dtype=torch.int32, device=DEVICE),  # 0: padding
        hidden=padded(hidden, (2, rows, hidden.shape[2])),
        memory=padded(memory, (2, rows, memory.shape[2])),
        bias=bias,
        outputs=torch.full((steps, 2, rows, hidden.shape[2]), float("nan"), device=DEVICE),
        final_hidden=torch.full((2, rows, hidden.shape[2]), float("nan"), device=DEVICE),
    )
    fused_lstm.padded_layer(buffers, weights, layer.cell_clip, layer.proj_clip, window_positions)
    assert not buffers.outputs.isnan().any() and not buffers.outputs[n_steps:].any()
    assert not buffers.outputs[:, :, batch:].any()
    return buffers.outputs[:n_steps, :, :batch], buffers.final_hidden[:, :batch], buffers.memory[:, :batch]


@pytest.mark.parametrize("padded", [False, PADDED], ids=["launched", "padded"])
@pytest.mark.parametrize("window_positions", [fused_lstm.GPU_PRECOMPUTED_POSITIONS, 4])
@pytest.mark.parametrize("lengths", CASES)
def test_fused_float32_layer_equals_the_eager_one(lengths, window_positions, padded) -> None:
    """Outputs (zero past each row's end), final hidden and memory states, inputs untouched; the
    padded loop masks the padding out in its kernels."""
    layer = random_lstm_layer(0, DEVICE)
    eager, fused = eager_and_fused(layer, lengths, torch.float32, window_positions, padded)
    for name, a, b in zip(("outputs", "hidden", "memory"), fused, eager):
        assert_float32_close(a, b, err_msg=name)
    for row, length in enumerate(lengths):
        assert not fused[0][length:, :, row].any()


@pytest.mark.parametrize("padded", [False, PADDED], ids=["launched", "padded"])
@pytest.mark.parametrize("lengths", BF16_CASES)
def test_fused_bf16_layer_is_as_close_to_float32_as_the_eager_one(lengths, padded) -> None:
    """The same bf16 roundings: a flip of a last bf16 bit (tanh is computed another way) carries
    through the recurrence, so the two bf16 loops are compared by their distance from float32."""
    layer = random_lstm_layer(1, DEVICE)
    torch.manual_seed(5)
    eager, fused = eager_and_fused(layer, lengths, torch.bfloat16, 4, padded)
    torch.manual_seed(5)
    exact, _ = eager_and_fused(layer, lengths, torch.float32, 4)
    for name, a, b, reference in zip(("outputs", "hidden", "memory"), fused, eager, exact):
        fused_error, eager_error = (a - reference).abs().max(), (b - reference).abs().max()
        assert fused_error <= 1.5 * eager_error + 2**-8, name
    cosine = torch.nn.functional.cosine_similarity(fused[0].flatten(1), exact[0].flatten(1), dim=-1)
    assert cosine.min() > 0.999


def test_the_fused_step_leaves_the_callers_states_alone() -> None:
    layer = random_lstm_layer(2, DEVICE)
    hidden, memory = torch.randn(2, 3, 8, device=DEVICE), torch.randn(2, 3, 24, device=DEVICE)
    kept = hidden.clone(), memory.clone()
    with torch.no_grad():
        fused_lstm.fused_layer(
            torch.randn(4, 2, 3, 8, device=DEVICE),
            [3, 3, 2, 1],
            hidden,
            memory,
            *fused_inputs(layer, torch.float32),
            layer.cell_clip,
            layer.proj_clip,
        )
    assert torch.equal(hidden, kept[0]) and torch.equal(memory, kept[1])


def test_a_biLM_through_the_fused_loop_gives_the_eager_layers_and_states() -> None:
    """The whole biLM, the stack choosing the fused loop (as on a GPU) or not, from a carried state."""
    model = random_bilm(3, options=tiny_options(lstm_dim=40)).to(DEVICE)
    sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hi"], [], ["a", "b", "c"]]
    state = model.runtime.initial_state(len(sentences))
    state = type(state)(torch.randn_like(state.hidden), torch.randn_like(state.memory))
    with torch.no_grad():
        eager = model(sentences, state=state)
        model.lstm.kernels = KernelChoice(fused=lambda device, dtype: dtype == torch.float32)
        fused = model(sentences, state=state)
    assert_float32_close(fused.layers, eager.layers)
    assert_float32_close(fused.state.hidden, eager.state.hidden)
    assert_float32_close(fused.state.memory, eager.state.memory)


@pytest.mark.parametrize(
    "device, dtype, grad, switch, expected",
    [
        ("cuda", torch.bfloat16, False, None, True),
        ("cuda", torch.float32, False, "1", True),
        ("cuda", torch.bfloat16, True, None, False),  # training: autograd needs the eager graph
        ("cuda", torch.qint8, False, None, False),
        ("cuda", torch.bfloat16, False, "0", False),
        ("cpu", torch.float32, False, None, False),
    ],
)
def test_which_passes_take_the_fused_loop(monkeypatch, device, dtype, grad, switch, expected) -> None:
    if switch is None:
        monkeypatch.delenv(settings.FUSED_LSTM_ENV, raising=False)
    else:
        monkeypatch.setenv(settings.FUSED_LSTM_ENV, switch)
    with torch.set_grad_enabled(grad):
        assert fused_lstm.use_fused_lstm(torch.device(device), dtype) is expected
