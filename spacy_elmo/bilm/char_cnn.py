"""The context-independent token encoder: character CNN, highway layers, projection.

Peters et al. (2018), section 3.4, after Kim et al. (2016): every token becomes one vector
computed from its characters alone. It is layer 0 of the biLM output.
"""

from typing import List

import torch
from torch import Tensor, nn

from .chars import CHAR_PADDING
from .options import ElmoOptions


class Highway(nn.Module):
    """``y = t * relu(x W_t + b_t) + (1 - t) * x`` with gate ``t = sigmoid(x W_c + b_c)``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.transform = nn.Linear(width, width)
        self.carry = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        """Shape: (n_tokens, width) -> (n_tokens, width)."""
        gate = torch.sigmoid(self.carry(x))
        return gate * torch.relu(self.transform(x)) + (1.0 - gate) * x


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

    def forward(self, char_ids: Tensor) -> Tensor:
        """Shape: (n_tokens, max_characters_per_token) int64 -> (n_tokens, projection_dim).

        Each filter is a valid 1-D convolution over character positions; its maximum over
        positions goes through the activation (max first, then activation, as in bilm-tf).
        """
        char_ids = char_ids[:, : self._positions_needed(char_ids)]
        chars = self.char_embedding(char_ids).transpose(1, 2)  # (n_tokens, char_dim, positions)
        features: List[Tensor] = [
            self.activation(conv(chars).amax(dim=-1)) for conv in self.convolutions
        ]
        x = torch.cat(features, dim=-1)  # (n_tokens, n_filters)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x)

    def _positions_needed(self, char_ids: Tensor) -> int:
        """How many leading character positions give the same maxima as all of them.

        Every window that lies wholly in the padding after the longest token gives one and the
        same value per filter, so keeping one such window for the widest filter is exact; short
        tokens then cost a fraction of the 50 positions. Shape: (n_tokens, max_characters).
        """
        written = (char_ids != CHAR_PADDING).any(dim=0).nonzero()
        longest = int(written.max()) + 1 if len(written) else 0
        widest = max(width for width, _ in self.options.filters)
        return min(char_ids.shape[1], longest + widest)
