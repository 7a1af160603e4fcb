"""The context-independent token encoder: character CNN, highway layers, projection.

Peters et al. (2018), section 3.4, after Kim et al. (2016): every token becomes one vector
computed from its characters alone. It is layer 0 of the biLM output.
"""

from typing import List, Sequence, Tuple

import numpy
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .chars import CHAR_PADDING
from .options import ElmoOptions
from .precision import LowPrecisionWeights
from .row_buckets import on_padded_rows


def linear(x: Tensor, layer: nn.Linear, dtype: torch.dtype, copies: LowPrecisionWeights, name: str) -> Tensor:
    """``layer(x)`` with the product in ``dtype``; float32 in and out. Shape: (n, in) -> (n, out).

    In bf16 the bias is added after the product, in float32, rather than rounded to bf16;
    ``copies`` keeps the bf16 weight under ``name``.
    """
    if dtype == torch.float32:
        return layer(x)
    weight = copies.get(name, dtype, [layer.weight], lambda: layer.weight)
    return on_padded_rows(lambda rows: F.linear(rows, weight), x.to(dtype), 0).float() + layer.bias


class Highway(nn.Module):
    """``y = t * relu(x W_t + b_t) + (1 - t) * x`` with gate ``t = sigmoid(x W_c + b_c)``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.transform = nn.Linear(width, width)
        self.carry = nn.Linear(width, width)
        self.low_precision = LowPrecisionWeights()

    def forward(self, x: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Shape: (n_tokens, width) -> (n_tokens, width), products in ``dtype``, the rest float32."""
        gate = torch.sigmoid(linear(x, self.carry, dtype, self.low_precision, "carry"))
        return gate * torch.relu(linear(x, self.transform, dtype, self.low_precision, "transform")) + (1.0 - gate) * x


class CharCNN(nn.Module):
    """Character ids of tokens -> one vector per token of width ``projection_dim``."""

    def __init__(self, options: ElmoOptions) -> None:
        super().__init__()
        self.options = options
        # Row 0 is the padding character and stays zero; bilm-tf files hold rows 1..
        self.char_embedding = nn.Embedding(262, options.char_embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(options.char_embedding_dim, count, width) for width, count in options.filters
        )
        self.highways = nn.ModuleList(Highway(options.n_filters) for _ in range(options.n_highway))
        self.projection = nn.Linear(options.n_filters, options.projection_dim)
        self.activation = torch.relu if options.activation == "relu" else torch.tanh
        self.low_precision = LowPrecisionWeights()

    def forward(self, char_ids: Tensor, dtype: torch.dtype = torch.float32, trimmed: bool = False) -> Tensor:
        """Shape: (n_tokens, max_characters_per_token) int64 -> (n_tokens, projection_dim) float32.

        ``trimmed``: the ids already end where :meth:`positions_needed` says (the biLM cuts them on
        the host, so that a GPU's work is not waited for to read how long the tokens are).

        Each filter is a valid 1-D convolution over character positions; its maximum over
        positions goes through the activation (max first, then activation, as in bilm-tf).
        ``dtype``: of the convolutions, highway and projection products (see
        :mod:`.precision`); embeddings, activations and the output are float32.
        """
        if not trimmed:
            char_ids = char_ids[:, : self.positions_needed(char_ids.cpu().numpy())]
        chars = self.char_embedding(char_ids)  # (n_tokens, positions, char_dim)
        chars_in_dtype = chars.to(dtype)
        features: List[Tensor] = [
            self.activation(self._filter_maxima(index, chars_in_dtype)) for index in range(len(self.convolutions))
        ]
        x = torch.cat(features, dim=-1)  # (n_tokens, n_filters)
        for highway in self.highways:
            x = highway(x, dtype)
        return linear(x, self.projection, dtype, self.low_precision, "projection")

    def _filter_maxima(self, index: int, chars: Tensor) -> Tensor:
        """Convolution ``index``'s maximum per filter over positions (see :func:`filter_maxima`)."""
        return filter_maxima(self.convolutions[index], chars, self.low_precision, f"conv{index}")

    def positions_per_token(self, written: numpy.ndarray) -> numpy.ndarray:
        """The character positions a chunk ending at each token needs, from the tokens' written
        (non-padding) ids, as :meth:`positions_needed` counts them. Shape: (n_tokens,) -> (n_tokens,)."""
        widest = max(width for width, _ in self.options.filters)
        return numpy.minimum(written + widest, self.options.max_characters_per_token)

    def bytes_per_position(self) -> int:
        """The float32 bytes that one token position takes in the largest convolution: its unfolded
        window (char_dim x width) and its products (one per filter)."""
        char_dim = self.options.char_embedding_dim
        return 4 * max(char_dim * width + count for width, count in self.options.filters)

    def positions_needed(self, char_ids: numpy.ndarray) -> int:
        """How many leading character positions give the same maxima as all of them (see
        :func:`positions_needed`). Shape: (n_tokens, max_characters)."""
        return positions_needed(char_ids, CHAR_PADDING, self.options.filters)


def filter_maxima(conv: nn.Conv1d, chars: Tensor, copies: LowPrecisionWeights, name: str) -> Tensor:
    """``conv``'s maximum per filter over positions.

    Shape: (n_tokens, positions, char_dim) -> (n_tokens, count), float32.

    The convolution is one matrix product: every window of ``width`` characters unfolded into a
    row of ``char_dim * width`` values, times the filters as a (count, char_dim * width) matrix,
    and the maximum taken over positions, which then run along rows. After ``conv1d`` the
    maximum is a reduction over a few positions inside each (token, filter) pair, which ran slower
    on a CPU than the convolution itself (``benchmarks/char_cnn_layout.py``; figures in
    docs/bilm.md). The bias is added after the maximum (max(x + b) = max(x) + b), in float32, to
    the (n_tokens, count) maxima only; in bf16 only those are converted to float32, since the
    maximum keeps order. ``copies`` keeps the bf16 weight under ``name``.
    """
    count, char_dim, width = conv.weight.shape
    weight = conv.weight
    if chars.dtype != torch.float32:
        weight = copies.get(name, chars.dtype, [conv.weight], lambda: conv.weight)
    windows = chars.unfold(1, width, 1)  # (n_tokens, positions - width + 1, char_dim, width), a view
    n_tokens, n_windows = windows.shape[:2]
    rows = windows.reshape(n_tokens * n_windows, char_dim * width)
    filters = weight.reshape(count, char_dim * width)
    if chars.dtype == torch.float32:
        products = F.linear(rows, filters)
    else:
        products = on_padded_rows(lambda padded: F.linear(padded, filters), rows, 0)
    return products.view(n_tokens, n_windows, count).amax(dim=1).float() + conv.bias


def positions_needed(char_ids: numpy.ndarray, padding: int, filters: Sequence[Tuple[int, int]]) -> int:
    """How many leading character positions give the same maxima as all of them.

    Every window that lies wholly in the padding (id ``padding``) after the longest token gives one
    and the same value per filter, so keeping one such window for the widest filter is exact;
    short tokens then cost a fraction of the positions. Shape: (n_tokens, max_characters).
    """
    written = numpy.flatnonzero((char_ids != padding).any(axis=0))
    longest = int(written[-1]) + 1 if len(written) else 0
    widest = max(width for width, _ in filters)
    return min(char_ids.shape[1], longest + widest)
