"""What a kernel reads of a layer: its parameters and clips (a :class:`ProjectedLSTM` has them)."""

from typing import Iterator, Protocol

from torch import Tensor, nn


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
