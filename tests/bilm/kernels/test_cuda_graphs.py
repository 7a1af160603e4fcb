"""The CUDA graph cache of the fused LSTM loop (spacy_elmo/bilm/kernels/gpu/cuda_graphs.py), its logic on a CPU.

The cache captures through a runner; here :class:`CallingRunner` "captures" a loop by keeping it,
so that a replay launches the padded, masked loop, in Triton's interpreter on CPU tensors (on a
GPU where torch sees one). Buckets, keys, the second-use rule, invalidation on a weight change,
the LRU bound and the fallbacks are the same code as on a GPU; tests/gpu/test_gpu_fused_lstm.py
replays real graphs.
"""

import gc
import os
import warnings
from typing import Callable, List, Sequence

import pytest
import torch

from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels import KernelChoice
from spacy_elmo.bilm.kernels.gpu import cuda_graphs
from spacy_elmo.bilm.kernels.row_buckets import padded_rows
from spacy_elmo.bilm.model.lstm import ProjectedLSTM

from ...helpers import assert_float32_close, random_bilm, tiny_options
from ..helpers import eager_layer, fused_inputs, random_layer_batch, random_lstm_layer

pytest.importorskip("triton", reason="Triton is not installed (pip install spacy-elmo[test] brings it)")
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if DEVICE.type == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"


class CallingRunner:
    """A :class:`cuda_graphs.Runner` whose capture keeps the function: a replay calls it, or with
    ``computes=False`` does nothing (for tests that look only at which graphs are kept)."""

    def __init__(self, fail: bool = False, computes: bool = True) -> None:
        self.captures = 0
        self.fail = fail
        self.computes = computes
        self.under_capture = False

    def capturing(self) -> bool:
        return self.under_capture

    def capture(self, run: Callable[[], None]) -> Callable[[], None]:
        self.captures += 1
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        return run if self.computes else lambda: None


def new_cache(
    fail: bool = False, max_graphs: int = cuda_graphs.MAX_GRAPHS, computes: bool = True
) -> cuda_graphs.GraphCache:
    """A cache over :class:`CallingRunner`, its loops in windows of 8 positions (several per batch)."""
    return cuda_graphs.GraphCache(CallingRunner(fail, computes), DEVICE, max_graphs, window_positions=8)


def through_cache(cache: cuda_graphs.GraphCache, layer: ProjectedLSTM, lengths: Sequence[int], dtype=torch.float32):
    """(the cache's results or None, the eager loop's) over a random batch sorted longest first."""
    inputs, active, hidden, memory = batch = random_layer_batch(lengths, DEVICE)
    eager = eager_layer(layer, batch, dtype)
    with torch.no_grad():
        weights, bias = fused_inputs(layer, dtype)
        graphed = cache.run(layer, inputs, active, hidden, memory, weights, bias, layer.cell_clip, layer.proj_clip)
    return graphed, eager


def assert_same(graphed, eager) -> None:
    assert graphed is not None
    for name, a, b in zip(("outputs", "hidden", "memory"), graphed, eager):
        assert a.shape == b.shape, name
        assert_float32_close(a, b, err_msg=name)


def test_buckets_pad_by_at_most_an_eighth_or_the_grain() -> None:
    assert [padded_rows(n, 4) for n in (1, 7, 9, 21, 47, 100)] == [4, 8, 12, 24, 48, 104]
    assert [padded_rows(n, 16) for n in (1, 17, 334, 750)] == [16, 32, 352, 768]
    for grain in (4, 16):
        buckets = {padded_rows(n, grain) for n in range(1, 4097)}
        assert len(buckets) <= 8 * 13
        for n in range(1, 4097):
            padded = padded_rows(n, grain)
            assert padded % grain == 0 and 0 <= padded - n < max(grain, n / 8)


@pytest.mark.slow  # seconds in Triton's interpreter, which runs every padded row
def test_a_bucket_is_captured_at_its_second_use_then_replayed_with_each_batchs_values() -> None:
    cache, layer = new_cache(), random_lstm_layer(0, DEVICE)
    first, _ = through_cache(cache, layer, [9, 7, 4, 2, 1])
    assert first is None and cache.runner.captures == 0  # a one-off shape is launched
    for lengths in ([9, 7, 4, 2, 1], [10, 10, 3], [12, 1]):  # one bucket: 12 steps, 16 rows
        assert_same(*through_cache(cache, layer, lengths))
    assert cache.runner.captures == 1 and len(cache) == 1


@pytest.mark.slow  # seconds in Triton's interpreter, which runs every padded row
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_changed_weight_never_replays_a_stale_graph(dtype) -> None:
    """In place (an optimizer step: its version) in float32; in bf16 the layer makes a new copy.
    The old graph goes; the new weights are a new key, captured at their second use."""
    cache, layer = new_cache(), random_lstm_layer(1, DEVICE)
    for _ in range(2):
        graphed, _ = through_cache(cache, layer, [6, 6, 5], dtype)
    assert graphed is not None and len(cache) == 1
    with torch.no_grad():
        layer.hidden_weight.mul_(-1.0)
    graphed, eager = through_cache(cache, layer, [6, 6, 5], dtype)
    assert graphed is None and len(cache) == 0
    graphed, eager = through_cache(cache, layer, [6, 6, 5], dtype)
    assert cache.runner.captures == 2 and len(cache) == 1
    if dtype == torch.float32:
        assert_same(graphed, eager)
    else:  # bf16: the graph reads the new copy (the old one's results would be far off)
        assert (graphed[0] - eager[0]).abs().max() < 0.1


def test_at_most_max_graphs_are_kept_least_recently_used_out() -> None:
    cache, layer = new_cache(max_graphs=2, computes=False), random_lstm_layer(2, DEVICE)
    for lengths in ([10], [10], [6], [6], [10], [3], [3]):  # buckets of 12, 8, 12, 4 steps (largest first:
        through_cache(cache, layer, lengths)  # no buffer grows)
    assert len(cache) == 2 and cache.runner.captures == 3
    assert through_cache(cache, layer, [10])[0] is not None  # the 8 steps' graph went: 12 steps' was used later
    assert cache.runner.captures == 3
    assert through_cache(cache, layer, [7])[0] is not None  # met before: captured again at once
    assert cache.runner.captures == 4 and len(cache) == 2


@pytest.mark.slow  # seconds in Triton's interpreter, which runs every padded row
def test_a_larger_bucket_grows_the_buffers_and_drops_the_graphs_over_the_old_ones() -> None:
    cache, layer = new_cache(), random_lstm_layer(3, DEVICE)
    for lengths in ([3, 2], [3, 2], [30, 29, 1] * 8, [30, 29, 1] * 8):
        through_cache(cache, layer, sorted(lengths, reverse=True))
    assert len(cache) == 1
    assert_same(*through_cache(cache, layer, [3, 1]))  # met before: captured again, in the new buffers
    assert len(cache) == 2 and cache.runner.captures == 3


def test_the_graphs_of_a_freed_layer_go_at_the_next_call() -> None:
    cache, layer = new_cache(computes=False), random_lstm_layer(4, DEVICE)
    for _ in range(2):
        through_cache(cache, layer, [1])
    assert len(cache) == 1
    del layer
    gc.collect()
    through_cache(cache, random_lstm_layer(5, DEVICE), [1])
    assert len(cache) == 0


def test_a_failed_capture_warns_once_and_leaves_the_loop_launched() -> None:
    cache, layer = new_cache(fail=True), random_lstm_layer(6, DEVICE)
    through_cache(cache, layer, [4, 3])
    with pytest.warns(RuntimeWarning, match="capturing the fused LSTM loop failed"):
        graphed, _ = through_cache(cache, layer, [4, 3])
    assert graphed is None and cache.broken
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        graphed, _ = through_cache(cache, layer, [4, 3])
    assert graphed is None and cache.runner.captures == 1


def test_under_another_capture_the_loop_is_launched_into_it() -> None:
    """The calls made under the caller's capture count as no use: after it, a bucket is captured at
    its second use as ever (what a replay then gives: the tests above)."""
    cache, layer = new_cache(computes=False), random_lstm_layer(7, DEVICE)
    cache.runner.under_capture = True
    with pytest.warns(RuntimeWarning, match="captured already"):
        results: List = [through_cache(cache, layer, [4, 3])[0] for _ in range(3)]
    assert results == [None] * 3 and cache.runner.captures == 0 and not cache.broken
    cache.runner.under_capture = False
    results = [through_cache(cache, layer, [4, 3])[0] for _ in range(2)]
    assert results[0] is None and results[1] is not None and cache.runner.captures == 1


@pytest.mark.slow  # seconds in Triton's interpreter, which runs every padded row
def test_threads_take_turns_with_the_shared_buffers() -> None:
    """Thread A's replay starts another thread's batch of the same bucket and waits a moment for
    it: that batch must wait for A's to be copied out, not overwrite A's inputs in the buffers."""
    import threading

    cache, layer = new_cache(), random_lstm_layer(8, DEVICE)
    for _ in range(2):
        through_cache(cache, layer, [6, 5, 2])  # captured: the next call replays
    (graph,) = cache._graphs.values()
    replay, results, threads = graph.replay, {}, []

    def interleaved() -> None:
        graph.replay = replay  # once
        threads.append(threading.Thread(target=lambda: results.update(other=through_cache(cache, layer, [6, 4, 1]))))
        threads[0].start()
        threads[0].join(timeout=1.0)  # without the lock the other batch runs whole meanwhile
        replay()

    graph.replay = interleaved
    first = through_cache(cache, layer, [6, 5, 2])
    threads[0].join()
    assert_same(*first)
    assert_same(*results["other"])


@pytest.mark.parametrize(
    "device, dtype, switch, expected",
    [
        ("cuda", torch.bfloat16, None, True),
        ("cuda", torch.bfloat16, "1", True),
        ("cuda", torch.bfloat16, "0", False),
        ("cuda", torch.float32, None, False),
        ("cpu", torch.bfloat16, None, False),
    ],
)
def test_which_fused_passes_replay_graphs(monkeypatch, device, dtype, switch, expected) -> None:
    if switch is None:
        monkeypatch.delenv(settings.CUDA_GRAPHS_ENV, raising=False)
    else:
        monkeypatch.setenv(settings.CUDA_GRAPHS_ENV, switch)
    assert cuda_graphs.use_cuda_graphs(torch.device(device), dtype) is expected


@pytest.mark.slow  # seconds in Triton's interpreter, which runs every padded row
def test_a_biLM_through_graphs_gives_the_eager_layers_and_states() -> None:
    """The whole biLM, the stack taking the fused loop and graphs (as on a GPU): the first pass
    launched, the second capturing both layers' graphs, the third replaying them."""
    model = random_bilm(3, options=tiny_options(lstm_dim=40)).to(DEVICE)
    sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hi"], [], ["a", "b", "c"]]
    state = model.runtime.initial_state(len(sentences))
    state = type(state)(torch.randn_like(state.hidden), torch.randn_like(state.memory))
    cache = new_cache()
    with torch.no_grad():
        eager = model(sentences, state=state)
        model.lstm.kernels = KernelChoice(
            fused=lambda device, dtype: dtype == torch.float32, graphs=lambda device, dtype: True
        )
        # The biLM's cache, kept with its LSTM's copies, keyed as its tensors name their device
        # (on a GPU "cuda:0", not DEVICE's "cuda"): this test's, made first.
        device = next(model.parameters()).device
        model.lstm.copies.get(cuda_graphs.GRAPHS_NAME, device, (), lambda: cache, replaces_sources=False)
        passes = [model(sentences, state=state) for _ in range(3)]
    assert cache.runner.captures == 2 and len(cache) == 2
    for fused in passes:
        assert_float32_close(fused.layers, eager.layers)
        assert_float32_close(fused.state.hidden, eager.state.hidden)
        assert_float32_close(fused.state.memory, eager.state.memory)
