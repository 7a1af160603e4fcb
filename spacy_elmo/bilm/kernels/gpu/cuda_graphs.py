"""The fused LSTM loop of inference captured into CUDA graphs, and replayed: one launch per layer.

Launched from Python, a fused layer (:func:`.fused_lstm.fused_layer`) is four kernels per step,
and the host cannot launch them as fast as the GPU runs them: the pass is host-bound. A CUDA graph
of the whole loop is launched at once. A graph has fixed shapes and addresses, so:

- **Buckets.** A batch is padded to a shape bucket, steps and rows rounded up (:func:`..row_buckets.padded_rows`:
  at most an eighth more), so that buckets recur over a corpus of length-sorted batches. The
  captured loop is :func:`.fused_lstm.padded_layer`, every row at every step, masked by its length.
- **Static buffers.** Inputs, initial states, bias and lengths are copied into fixed buffers
  before a replay, and the outputs and final states copied out after it. All graphs of a biLM's
  device (its cache, kept with its LSTM's weight copies: :func:`cache_for`) share one set of
  buffers (:class:`StaticBuffers`, views of flat tensors grown to the largest bucket) and one
  memory pool for what a loop allocates (``torch.cuda.graph_pool_handle``): graphs replay one at
  a time on the current stream (threads take turns: a lock) and their results are copied out at
  once, so one graph overwriting another's buffers or temporaries is harmless, and the memory of
  the cache is that of one graph, not one per bucket.
- **Weights.** A graph reads the weights by address. A graph is keyed on the product weights'
  identity (address, device, dtype and version: :func:`.memory.weight_copies.tensor_versions`) and holds
  them, so that their memory cannot be reused while it lives: a weight written in place (an
  optimizer step) or a new bf16 copy makes a new key, never a stale replay. A layer's graphs of
  older weights are dropped at its next call, and graphs of a layer that was freed at any call.
- **When.** A bucket is captured at its second use (a one-off shape runs launched rather than
  pay a capture), at most :attr:`GraphCache.max_graphs` graphs are kept per cache (least
  recently used first out). Under another stream capture (the caller's own graph) the loop runs
  launched; a capture that fails turns graphs off for the device. Both warn once.

``SPACY_ELMO_CUDA_GRAPHS=0`` turns graphs off: the fused loop is launched step by step.

The cache's logic is independent of CUDA: a :class:`Runner` captures and replays, and the tests
give it a runner that merely calls the loop, on CPU tensors in Triton's interpreter.
"""

import math
import threading
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Dict, Hashable, NamedTuple, Optional, Protocol, Sequence, Tuple

import torch
from torch import Tensor

from ...memory.weight_copies import WeightCopies, tensor_versions
from ...precision.kinds import PRODUCT_PRECISIONS
from ...settings import CUDA_GRAPHS_ENV, switches
from ..row_buckets import padded_rows
from .fused_lstm import GPU_PRECOMPUTED_POSITIONS, LayerBuffers, padded_layer

STEP_GRAIN = 4  # steps are padded to a multiple of this at least
ROW_GRAIN = 16  # rows too: products of a multiple of 16 rows suit the GPU's matrix units
MAX_GRAPHS = 32  # per cache; a graph holds little beyond its kernels' arguments (see StaticBuffers)
MAX_SEEN = 256  # shapes remembered for the second-use rule
GRAPHS_NAME = "cuda_graphs"  # the cache's name among the weight copies
# The product dtypes whose loops replay graphs. In float32 a step's products keep the GPU busy
# longer than its launches take, so graphs save little and the padding of a bucket costs more
# (benchmarks/gpu.py: slower than the launched loop; figures in docs/performance.md, "NVIDIA H100").
GRAPH_DTYPES = tuple(kind.dtype for kind in PRODUCT_PRECISIONS.values() if kind.cuda_graphs)

Weights = Tuple[Tensor, Tensor, Tensor]
Result = Tuple[Tensor, Tensor, Tensor]


def use_cuda_graphs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the fused loop on ``device`` with products in ``dtype`` runs from CUDA graphs: on
    CUDA in :data:`GRAPH_DTYPES`, unless ``SPACY_ELMO_CUDA_GRAPHS=0``."""
    return device.type == "cuda" and dtype in GRAPH_DTYPES and switches().cuda_graphs


class Runner(Protocol):
    """Captures a function into something that replays it, and says when capture is impossible."""

    def capturing(self) -> bool:
        """Whether the current stream is being captured already (by the caller's own graph)."""

    def capture(self, run: Callable[[], None]) -> Callable[[], None]:
        """``run`` captured: calling the result replays it on the current stream."""


class CudaGraphRunner:
    """:class:`Runner` of ``torch.cuda.CUDAGraph`` on one device; its graphs share one memory pool."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        with torch.cuda.device(device):
            self.pool = torch.cuda.graph_pool_handle()
            self.stream = torch.cuda.Stream()  # warm-up and capture: a side stream, as capture requires

    def capturing(self) -> bool:
        with torch.cuda.device(self.device):
            return torch.cuda.is_current_stream_capturing()

    def capture(self, run: Callable[[], None]) -> Callable[[], None]:
        """Warm ``run`` up once on the side stream (Triton compiles, cuBLAS picks its kernels and
        workspace outside the capture), then capture it into the shared pool. ``thread_local``: a
        thread of the caller's that allocates meanwhile does not break the capture."""
        with torch.cuda.device(self.device):
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                run()
            torch.cuda.current_stream().wait_stream(self.stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
                run()
        return graph.replay


class Bucket(NamedTuple):
    """A graph's shape: padded steps and rows, and the layer's widths."""

    steps: int
    rows: int
    input_dim: int
    lstm_dim: int
    projection_dim: int

    @classmethod
    def of(cls, inputs: Tensor, memory: Tensor, hidden: Tensor) -> "Bucket":
        """The bucket of a batch, shaped as a :class:`~spacy_elmo.bilm.kernels.LayerKernel` takes it."""
        n_steps, _, batch, input_dim = inputs.shape
        return cls(
            padded_rows(n_steps, STEP_GRAIN), padded_rows(batch, ROW_GRAIN), input_dim, memory.shape[2], hidden.shape[2]
        )

    def buffer_shapes(self) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        """Shape and dtype of each of :class:`.fused_lstm.LayerBuffers`."""
        steps, rows, width = self.steps, self.rows, self.projection_dim
        return {
            "inputs": ((steps, 2, rows, self.input_dim), torch.float32),
            "lengths": ((rows,), torch.int32),
            "hidden": ((2, rows, width), torch.float32),
            "memory": ((2, rows, self.lstm_dim), torch.float32),
            "bias": ((2, 4 * self.lstm_dim), torch.float32),
            "outputs": ((steps, 2, rows, width), torch.float32),
            "final_hidden": ((2, rows, width), torch.float32),
        }


class StaticBuffers:
    """The static buffers of every graph of a device: per buffer of :class:`.fused_lstm.LayerBuffers`
    one flat tensor, viewed in each bucket's shape.

    A flat tensor too small for a new bucket is replaced by one a quarter larger than needed (a
    pass over length-sorted batches meets its largest buckets early), and :attr:`generation`
    advances: the graphs captured over the old ones must go.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.generation = 0
        self._flat: Dict[str, Tensor] = {}

    def views(self, shape: Bucket) -> LayerBuffers:
        views = {}
        for name, (size, dtype) in shape.buffer_shapes().items():
            needed = math.prod(size)
            flat = self._flat.get(name)
            if flat is None or flat.numel() < needed:
                flat = self._flat[name] = torch.zeros(needed + needed // 4, dtype=dtype, device=self.device)
                self.generation += 1
            views[name] = flat[:needed].view(size)
        return LayerBuffers(**views)


@dataclass
class _Graph:
    """A captured layer loop, with what it reads by address."""

    owner: "weakref.ref[object]"  # the layer whose loop this is; dead: the graph goes
    weights: Weights  # held, so that no other tensor can take their memory while the graph lives
    identity: Tuple
    buffers: LayerBuffers
    replay: Callable[[], None]


class GraphCache:
    """The graphs of one device, keyed on bucket, weights' identity and clips; see the module's docstring.

    ``runner`` captures and replays (:class:`CudaGraphRunner` on a GPU); ``max_graphs``: the most
    kept, least recently used dropped first; ``window_positions``: of the captured loop's input
    products (:data:`.fused_lstm.GPU_PRECOMPUTED_POSITIONS`).
    """

    def __init__(
        self,
        runner: Runner,
        device: torch.device,
        max_graphs: int = MAX_GRAPHS,
        window_positions: int = GPU_PRECOMPUTED_POSITIONS,
    ) -> None:
        self.runner = runner
        self.buffers = StaticBuffers(device)
        self.max_graphs = max_graphs
        self.window_positions = window_positions
        self.broken = False  # a capture failed: graphs are off for this device
        self._warned = False
        self._graphs: "OrderedDict[Hashable, _Graph]" = OrderedDict()
        self._seen: "OrderedDict[Hashable, None]" = OrderedDict()
        # One batch at a time: all graphs share the static buffers, so another thread's batch
        # copied in between this one's copy and replay would be computed in its place.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._graphs)

    def run(
        self,
        owner: object,
        inputs: Tensor,
        active: Sequence[int],
        hidden: Tensor,
        memory: Tensor,
        weights: Weights,
        bias: Tensor,
        cell_clip: float,
        proj_clip: float,
    ) -> Optional[Result]:
        """:func:`.fused_lstm.fused_layer`'s results from a graph, or None where the caller must
        launch the loop: the bucket's first use, under another capture, or graphs broken.
        ``owner``: the layer, whose graphs of older weights this call makes stale."""
        with self._lock:
            if self.broken:
                return None
            if self.runner.capturing():
                self._warn("the stream is being captured already (by a graph of the caller's): the loop is launched")
                return None
            identity, dtype = tensor_versions(weights), weights[1].dtype
            # Drop the graphs of freed layers, and owner's of other weights in the same dtype.
            for stale, old in list(self._graphs.items()):
                layer = old.owner()
                if layer is None or (layer is owner and old.weights[1].dtype == dtype and old.identity != identity):
                    del self._graphs[stale]
            shape = Bucket.of(inputs, memory, hidden)
            key = (shape, identity, cell_clip, proj_clip)
            graph = self._graphs.get(key)
            if graph is None:
                seen = key in self._seen  # captured at its second use (of the last MAX_SEEN keys)
                self._seen[key] = None
                self._seen.move_to_end(key)
                while len(self._seen) > MAX_SEEN:
                    self._seen.popitem(last=False)
                graph = self._capture(key, owner, weights) if seen else None
                if graph is None:
                    return None
            self._graphs.move_to_end(key)
            return _replay(graph, inputs, active, hidden, memory, bias)

    def _capture(self, key: Tuple[Bucket, Tuple, float, float], owner: object, weights: Weights) -> Optional[_Graph]:
        """Capture the padded loop of ``key`` (its bucket, weights' identity and clips) over the
        static buffers; None if capture failed."""
        shape, identity, cell_clip, proj_clip = key
        generation = self.buffers.generation
        buffers = self.buffers.views(shape)
        if self.buffers.generation != generation:
            self._graphs.clear()  # they read the replaced buffers
        window = self.window_positions
        try:
            replay = self.runner.capture(lambda: padded_layer(buffers, weights, cell_clip, proj_clip, window))
        except Exception as error:
            self.broken = True
            self._warn(
                f"capturing the fused LSTM loop failed ({error!r}): graphs are off on this device, the loop is launched"
            )
            return None
        graph = self._graphs[key] = _Graph(weakref.ref(owner), weights, identity, buffers, replay)
        while len(self._graphs) > self.max_graphs:
            self._graphs.popitem(last=False)
        return graph

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"spacy-elmo, CUDA graphs: {message} (set {CUDA_GRAPHS_ENV}=0 to launch it always)",
                RuntimeWarning,
                stacklevel=4,
            )


def _replay(
    graph: _Graph, inputs: Tensor, active: Sequence[int], hidden: Tensor, memory: Tensor, bias: Tensor
) -> Result:
    """Copy the batch into the graph's buffers, replay, copy the results out (the next replay of
    any graph of the device overwrites them). Shapes as in :func:`.fused_lstm.fused_layer`."""
    buffers = graph.buffers
    n_steps, _, batch, _ = inputs.shape
    # Each row's length, 0 for padding: the steps at which it is among ``active``; made on the host even where
    # thinc made CUDA torch's default device (a device tensor made from a list would wait for the GPU's queue).
    running = torch.tensor(active, dtype=torch.int32, device="cpu").unsqueeze(1)
    rows = torch.arange(buffers.lengths.shape[0], dtype=torch.int32, device="cpu")
    buffers.lengths.copy_((running > rows).sum(0, dtype=torch.int32), non_blocking=True)
    buffers.inputs[:n_steps, :, :batch].copy_(inputs)
    buffers.hidden[:, :batch].copy_(hidden)
    buffers.memory[:, :batch].copy_(memory)
    buffers.bias.copy_(bias)
    graph.replay()
    outputs = buffers.outputs[:n_steps, :, :batch].clone()
    return outputs, buffers.final_hidden[:, :batch].clone(), buffers.memory[:, :batch].clone()


def cache_for(copies: WeightCopies, device: torch.device) -> GraphCache:
    """The graph cache of ``device`` kept with a biLM's weight copies (its LSTM stack's, which
    clears it with them), made at its first use."""
    return copies.get(
        GRAPHS_NAME, device, (), lambda: GraphCache(CudaGraphRunner(device), device), replaces_sources=False
    )
