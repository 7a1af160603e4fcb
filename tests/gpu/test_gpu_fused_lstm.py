"""The fused LSTM loop (spacy_elmo/bilm/kernels/gpu/fused_lstm.py) compiled for the GPU, on the bundled biLM's
trained weights, against the eager loop on the same GPU (``SPACY_ELMO_FUSED_LSTM=0``), and
replayed from CUDA graphs (spacy_elmo/bilm/kernels/gpu/cuda_graphs.py) against the eager loop.
tests/bilm/kernels/test_fused_lstm.py checks the same kernels on tiny sizes, in Triton's interpreter on a
CPU and compiled here."""

from typing import Callable, Iterator, List, Sequence, Tuple

import numpy
import pytest
import torch
from torch import Tensor

from spacy_elmo import BiLM
from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels import Float32Kernel, FusedKernel
from spacy_elmo.bilm.kernels.bf16 import Bf16Kernel
from spacy_elmo.bilm.kernels.gpu import cuda_graphs, fused_lstm
from spacy_elmo.bilm.memory.weight_copies import WeightCopies
from spacy_elmo.bilm.model.lstm import ProjectedLSTM, _active_rows

from ..helpers import assert_float32_close

pytestmark = pytest.mark.gpu

SENTENCES = [
    "The bank raised its interest rates by half a point on Tuesday , said Mr. Smith .".split(),
    ["Hi"],
    [],
    "Alice went to Paris and Bob stayed in London".split(),
] * 40


def layers_of(bilm: BiLM, fused: bool, monkeypatch) -> numpy.ndarray:
    monkeypatch.setenv(settings.FUSED_LSTM_ENV, "1" if fused else "0")
    return numpy.concatenate([layers.reshape(-1, layers.shape[-1]) for layers in bilm.embed_sentences(SENTENCES)])


def test_the_fused_loop_runs_on_the_gpu_and_gives_the_eager_layers(monkeypatch) -> None:
    bilm = BiLM.from_pretrained("en", precision="fp32", cache_size=0).cuda().eval()
    with torch.no_grad():
        assert fused_lstm.use_fused_lstm(bilm.device, bilm.runtime.resolved_precision.dtype)
    assert_float32_close(layers_of(bilm, True, monkeypatch), layers_of(bilm, False, monkeypatch))


def test_the_fused_bf16_loop_keeps_the_bf16_contract(monkeypatch) -> None:
    """Mean per-token cosine to float32 >= 0.999 per sentence, and no farther from float32 than the
    eager bf16 loop, beyond bf16's rounding."""
    bilm = BiLM.from_pretrained("en", precision="fp32", cache_size=0).cuda().eval()
    exact = layers_of(bilm, False, monkeypatch)
    bilm.runtime.precision = "bf16"
    fused, eager = layers_of(bilm, True, monkeypatch), layers_of(bilm, False, monkeypatch)
    cosines = (fused * exact).sum(-1) / (numpy.linalg.norm(fused, axis=-1) * numpy.linalg.norm(exact, axis=-1))
    assert cosines.mean() >= 0.999 and cosines.min() >= 0.99, (cosines.mean(), cosines.min())
    assert numpy.abs(fused - exact).max() <= 1.5 * numpy.abs(eager - exact).max() + 2**-8


# ---------------------------------------------------------------------- CUDA graphs (cuda_graphs.py)
@pytest.fixture
def graphs(monkeypatch) -> Iterator[Callable[[WeightCopies], int]]:
    """Graphs (in float32 too) and the fused loop on: yields the number of graphs a biLM's (or a
    layer's) weight copies hold."""
    monkeypatch.setattr(cuda_graphs, "GRAPH_DTYPES", (torch.float32, torch.bfloat16))
    monkeypatch.delenv(settings.CUDA_GRAPHS_ENV, raising=False)
    monkeypatch.delenv(settings.FUSED_LSTM_ENV, raising=False)
    yield lambda copies: len(cuda_graphs.cache_for(copies, torch.device("cuda", torch.cuda.current_device())))


def gpu_layer(seed: int) -> ProjectedLSTM:
    """A layer of 256 cells projected to 64, weights large enough for clipping to bite."""
    torch.manual_seed(seed)
    layer = ProjectedLSTM(input_dim=64, lstm_dim=256, projection_dim=64, cell_clip=3.0, proj_clip=3.0)
    with torch.no_grad():
        for param in layer.parameters():
            param.normal_(0.0, 0.1)
    return layer.cuda()


def random_batch(seed: int, lengths: Sequence[int]) -> Tuple[Tensor, List[int], Tensor, Tensor]:
    """inputs (time, 2, rows, 64), active, hidden, memory for rows sorted longest first."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    n_steps, rows = max(lengths), len(lengths)

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, device="cuda", generator=generator)

    return randn(n_steps, 2, rows, 64), _active_rows(lengths, n_steps), randn(2, rows, 64), randn(2, rows, 256)


def eager_of(layer: ProjectedLSTM, batch, dtype: torch.dtype) -> Tuple[Tensor, ...]:
    kernel = Float32Kernel() if dtype == torch.float32 else Bf16Kernel(WeightCopies(), out_major=False)
    inputs, active, hidden, memory = batch
    with torch.no_grad():  # the kernel updates its own copy of the states
        return kernel(0, layer, inputs, active, hidden.clone(), memory.clone())


def eager_and_graphed(
    layer: ProjectedLSTM, batch, dtype: torch.dtype, copies: WeightCopies
) -> Tuple[Tuple[Tensor, ...], Tuple[Tensor, ...]]:
    """The eager loop's results, and the fused kernel's (graphed where one serves). ``copies``:
    the layer's weight copies, kept across calls as a biLM keeps them (a bf16 graph is keyed on
    its copies' storage: fresh copies at every call would never be replayed)."""
    with torch.no_grad():
        return eager_of(layer, batch, dtype), FusedKernel(copies, dtype)(0, layer, *batch)


def assert_layer_close(fused, eager, dtype: torch.dtype, exact=None) -> None:
    """float32: to float32 rounding; bf16: no farther from float32 (``exact``) than the eager bf16 loop."""
    for name, a, b, reference in zip(("outputs", "hidden", "memory"), fused, eager, exact or eager):
        assert a.shape == b.shape, name
        if dtype == torch.float32:
            assert_float32_close(a, b, err_msg=name)
        else:
            assert (a - reference).abs().max() <= 1.5 * (b - reference).abs().max() + 2**-8, name


LENGTHS_A = [37, 30, 30, 22, 15, 9, 9, 3] * 5  # sorted below; 40 rows, 37 steps: bucket 48 rows x 40 steps
LENGTHS_B = [39, 38, 20, 11, 2] * 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_graphed_loop_gives_the_eager_results_on_the_real_rows(graphs, dtype) -> None:
    """First call launched, second captured and replayed, third replayed: each the eager loop's;
    then another batch of the same bucket gets its own results, and the first its own again."""
    layer, copies = gpu_layer(0), WeightCopies()
    batches = [random_batch(seed, sorted(lengths, reverse=True)) for seed, lengths in enumerate((LENGTHS_A, LENGTHS_B))]
    exact = [eager_of(layer, batch, torch.float32) for batch in batches]
    for call, index in enumerate((0, 0, 0, 1, 0)):
        eager, graphed = eager_and_graphed(layer, batches[index], dtype, copies)
        assert_layer_close(graphed, eager, dtype, exact[index])
        assert graphs(copies) == (0 if call == 0 else 1), call
        for row, length in enumerate(sorted((LENGTHS_A, LENGTHS_B)[index], reverse=True)):
            assert not graphed[0][length:, :, row].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_weight_changed_in_place_is_never_replayed_stale(graphs, dtype) -> None:
    layer, copies = gpu_layer(1), WeightCopies()
    batch = random_batch(2, sorted(LENGTHS_A, reverse=True))
    for _ in range(2):
        before = eager_and_graphed(layer, batch, dtype, copies)[1]
    assert graphs(copies) == 1
    with torch.no_grad():
        layer.hidden_weight.mul_(-1.0)  # as an optimizer step writes it: its version advances
    exact = eager_of(layer, batch, torch.float32)
    for _ in range(3):  # the new weights' first use, their capture, a replay
        eager, graphed = eager_and_graphed(layer, batch, dtype, copies)
        assert_layer_close(graphed, eager, dtype, exact)
    assert graphs(copies) == 1
    assert (graphed[0] - before[0]).abs().max() > 0.1


def test_without_graphs_the_fused_loop_is_launched(graphs, monkeypatch) -> None:
    monkeypatch.setenv(settings.CUDA_GRAPHS_ENV, "0")
    layer = gpu_layer(3)
    batch = random_batch(4, sorted(LENGTHS_B, reverse=True))
    copies = WeightCopies()
    for _ in range(3):
        eager, fused = eager_and_graphed(layer, batch, torch.float32, copies)
        assert_layer_close(fused, eager, torch.float32)
    assert len(copies) == 0 and graphs(copies) == 0  # no graph cache was made: the loop launched


def test_the_biLM_through_graphs_gives_the_eager_layers(graphs, monkeypatch) -> None:
    """The bundled biLM: three passes (launched, captured, replayed) against the eager loop."""
    bilm = BiLM.from_pretrained("en", precision="fp32", cache_size=0).cuda().eval()
    eager = layers_of(bilm, False, monkeypatch)
    for _ in range(3):
        assert_float32_close(layers_of(bilm, True, monkeypatch), eager)
    assert graphs(bilm.lstm.copies) >= bilm.options.n_layers
