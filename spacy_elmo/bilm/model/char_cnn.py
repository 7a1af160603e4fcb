"""bilm-tf's token encoder: a character CNN over the UTF-8 bytes of each token (see :mod:`.chars`).

The network is :class:`.token_encoder.TokenEncoder`'s; bilm-tf's own are its character ids, its
262-row character embedding whose row 0 (the padding token) stays zero, and its highway layer.
This is the token encoder of every biLM in the standard ``options.json`` + ``weights.hdf5`` layout.
"""

from typing import Hashable, Sequence

import torch
from torch import Tensor, nn

from ..memory.weight_copies import WeightCopies
from .chars import CHAR_PADDING, boundary_char_ids, tokens_char_ids
from .options import ElmoOptions
from .token_encoder import SENTENCE_END, SENTENCE_START, TokenEncoder, TokenIds, linear


class Highway(nn.Module):
    """``y = t * relu(x W_t + b_t) + (1 - t) * x`` with gate ``t = sigmoid(x W_c + b_c)``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.transform = nn.Linear(width, width)
        self.carry = nn.Linear(width, width)

    def forward(self, x: Tensor, dtype: torch.dtype, copies: WeightCopies, name: str) -> Tensor:
        """Shape: (n_tokens, width) -> (n_tokens, width), products in ``dtype``, the rest float32;
        their low-precision weights kept in ``copies`` as ``name.carry`` and ``name.transform``."""
        gate = torch.sigmoid(linear(x, self.carry, dtype, copies, f"{name}.carry"))
        return gate * torch.relu(linear(x, self.transform, dtype, copies, f"{name}.transform")) + (1.0 - gate) * x


class CharCNN(TokenEncoder):
    """Tokens -> one vector per token of width ``projection_dim``, from bilm-tf's character ids."""

    def __init__(self, options: ElmoOptions) -> None:
        # Row 0 is the padding token and stays zero; bilm-tf files hold rows 1..
        super().__init__(options, 262, CHAR_PADDING, Highway, zero_row=0)
        self._boundary_char_ids = boundary_char_ids(options.max_characters_per_token)

    def token_ids(self, tokens: Sequence[Hashable]) -> TokenIds:
        """Character ids (len(tokens), max_characters_per_token) as bilm-tf makes them; the boundary
        keys get the sentence-start and sentence-end characters. No word ids."""
        ids = tokens_char_ids([str(token) for token in tokens], self.options.max_characters_per_token)
        for row, token in enumerate(tokens):
            if token == SENTENCE_START or token == SENTENCE_END:
                ids[row] = self._boundary_char_ids[token == SENTENCE_END]
        return TokenIds(ids, None)
