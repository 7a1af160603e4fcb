"""What a kernel reads: a layer's parameters and clips (a :class:`ProjectedLSTM`'s), and its :class:`KernelChoice`."""

from typing import Callable, Iterator, NamedTuple, Optional, Protocol, Tuple

import torch
from torch import Tensor, nn

from .gpu.cuda_graphs import use_cuda_graphs
from .gpu.fused_lstm import use_fused_lstm
from .onednn_packs import MIN_PACKED_VALUES

# The float32 gates of a window of timesteps whose input products are computed in one product:
# small enough to stay in a CPU's cache between the product that writes them and the steps that
# read them (larger windows made the additions over them run at memory speed). At the Original
# size this is 128 positions, a product of 128 rows, still efficient; a batch of more rows takes
# one step.
WINDOW_GATES_BYTES = 16 * 2**20
Result = Tuple[Tensor, Tensor, Tensor]  # what a kernel returns: a layer's outputs and final states


class LSTMLayer(Protocol):
    """One layer, both directions. Shapes: ``input_weight`` (2, input_dim, 4 * lstm_dim),
    ``hidden_weight`` (2, projection_dim, 4 * lstm_dim), ``bias`` (2, 4 * lstm_dim),
    ``projection`` (2, lstm_dim, projection_dim); gate columns in TensorFlow's order i, j, f, o."""

    lstm_dim: int
    cell_clip: float
    proj_clip: float
    input_weight: nn.Parameter
    hidden_weight: nn.Parameter
    bias: nn.Parameter
    projection: nn.Parameter

    def gate_bias(self) -> Tensor:
        """The bias the gates add, (2, 4 * lstm_dim): the stored one plus the forget bias."""

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...


class KernelChoice(NamedTuple):
    """Which loop a pass takes beyond its precision, and its sizes: the rules by default. A stack
    given another (:attr:`.model.lstm.BiLSTMStack.kernels`) takes what they would not pick here."""

    fused: Callable[[torch.device, torch.dtype], bool] = use_fused_lstm  # the fused GPU loop, by device and dtype
    graphs: Callable[[torch.device, torch.dtype], bool] = use_cuda_graphs  # the fused loop replayed from CUDA graphs
    window_bytes: int = WINDOW_GATES_BYTES  # of the input gates an eager loop computes at once
    packed_from: int = MIN_PACKED_VALUES  # the values per direction of a bf16 weight packed for oneDNN
    int8_engine: Optional[str] = None  # the quantized engine int8 packs are made for (None: pack_engine's)


BY_RULE = KernelChoice()
