"""ELMoForManyLangs' token encoder: the char CNN of :mod:`spacy_elmo.bilm.model.token_encoder` over its own vocabulary.

It differs from bilm-tf's (:class:`spacy_elmo.bilm.model.char_cnn.CharCNN`) in three ways: its characters are code
points looked up in ``char.dic`` (:mod:`.vocabulary`), whose ``<pad>`` row is a trained (random,
never updated) vector, not zero, so padding positions enter the convolutions; a word embedding
over ``word.dic`` (``<oov>`` for unknown words, case kept) is concatenated [word; highway output]
before the projection; and its highways are AllenNLP's: one linear layer to twice the width, the
first half the transform, the second the gate g, ``y = g * x + (1 - g) * relu(A x)``.
"""

from typing import Any, Dict, Hashable, Sequence

import torch
from torch import Tensor, nn

from ...memory.weight_copies import WeightCopies
from ...model.options import ElmoOptions
from ...model.token_encoder import SENTENCE_END, SENTENCE_START, TokenEncoder, TokenIds, linear
from .network import ManyLangsNetwork
from .vocabulary import PAD, Vocabulary


class GatedHighway(nn.Module):
    """AllenNLP's highway layer, as the reference stores it: ``y = g * x + (1 - g) * relu(A x + a)``
    with ``g = sigmoid(B x + b)``, ``[A; B]`` one (2 * width, width) linear layer."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.linear = nn.Linear(width, 2 * width)

    def forward(self, x: Tensor, dtype: torch.dtype, copies: WeightCopies, name: str) -> Tensor:
        """Shape: (n_tokens, width) -> (n_tokens, width), the product in ``dtype``, the rest float32;
        its low-precision weight kept in ``copies`` as ``name``."""
        projected = linear(x, self.linear, dtype, copies, name)
        gate = torch.sigmoid(projected[:, self.width :])
        return gate * x + (1 - gate) * torch.relu(projected[:, : self.width])


class ManyLangsTokenEncoder(TokenEncoder):
    """Layer 0 of an ELMoForManyLangs biLM: tokens -> (n_tokens, projection_dim).

    ``n_chars`` and ``n_words`` are the rows of the char and word embeddings (the dictionaries'
    sizes), ``word_dim`` the word embedding's width (0: none). A :class:`.BiLM` made with it as
    ``token_encoder`` holds an ELMoForManyLangs model.
    """

    def __init__(self, options: ElmoOptions, vocabulary: Vocabulary, n_chars: int, n_words: int, word_dim: int) -> None:
        super().__init__(options, n_chars, vocabulary.chars[PAD], GatedHighway, n_words=n_words, word_dim=word_dim)
        self.vocabulary = vocabulary
        # What the model's directory says beyond the weights, written back by write_manylangs:
        # its network config and config.json (training settings).
        self.network = ManyLangsNetwork(options, word_dim)
        self.model_config: Dict[str, Any] = {}

    def token_ids(self, tokens: Sequence[Hashable]) -> TokenIds:
        """Char ids (len(tokens), max_characters_per_token) and word ids (len(tokens),) as the
        reference makes them (:meth:`.Vocabulary.token_ids`); no word ids without a word embedding."""
        chars, words = self.vocabulary.token_ids(
            tokens, self.options.max_characters_per_token, (SENTENCE_START, SENTENCE_END)
        )
        return TokenIds(chars, None if self.word_embedding is None else words)
