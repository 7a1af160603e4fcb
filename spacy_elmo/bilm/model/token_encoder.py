"""Layer 0 of the biLM: each token's vector from the token alone, one base for every token encoder.

Peters et al. (2018), section 3.4, after Kim et al. (2016): a character CNN (each filter's maximum
over character positions, then the activation), highway layers, and a projection to the LSTM's
width. Both encoders the biLM reads are this network and differ only where :class:`TokenEncoder`
lets them: bilm-tf's :class:`.char_cnn.CharCNN` (UTF-8 bytes as characters, bilm-tf's highways)
and ELMoForManyLangs' :class:`.manylangs.ManyLangsTokenEncoder` (a character vocabulary,
AllenNLP's highways, a word embedding beside the characters). The biLM calls
:meth:`TokenEncoder.encode` and nothing else of theirs.
"""

import abc
from typing import Callable, Hashable, Iterable, Iterator, NamedTuple, Optional, Sequence, Tuple, cast

import numpy
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..kernels.row_buckets import on_padded_rows
from ..memory.weight_copies import WeightCopies
from .options import ElmoOptions

# Keys of the two boundary tokens in the biLM's token table; no string can be equal to them. Every
# encoder gives them characters (and a word) of their own.
SENTENCE_START: Hashable = ("<boundary>", "start")
SENTENCE_END: Hashable = ("<boundary>", "end")

# Tokens are encoded in chunks whose largest convolution's unfolded windows and products take at
# most this many bytes: bounded working memory whatever the batch and the token lengths. A GPU takes
# larger chunks (1,024 tokens of the longest): each chunk launches a few dozen kernels, whose host
# cost would otherwise leave the GPU idle (docs/performance.md, "NVIDIA H200").
CHUNK_BYTES = 16 * 2**20
GPU_CHUNK_BYTES = 256 * 2**20


def chunk_bytes(device: torch.device) -> int:
    """The working memory of one chunk of :meth:`TokenEncoder.encode` on ``device``."""
    return CHUNK_BYTES if device.type == "cpu" else GPU_CHUNK_BYTES


# The biLM's token encoder's weights were named ``char_cnn.*`` before it was ``token_encoder``:
# state dicts of then (pretraining checkpoints) still load, and weights' digests (:mod:`.identity`)
# keep the old names, so that stores and decisions recorded then still name the same weights.
STATE_PREFIX, LEGACY_STATE_PREFIX = "token_encoder.", "char_cnn."


def legacy_name(name: str) -> str:
    """A biLM state name as before the rename: ``token_encoder.x`` -> ``char_cnn.x``; others as they are."""
    return LEGACY_STATE_PREFIX + name[len(STATE_PREFIX) :] if name.startswith(STATE_PREFIX) else name


class TokenIds(NamedTuple):
    """What an encoder reads of tokens: ``chars`` (n_tokens, max_characters_per_token) int64, and
    ``words`` (n_tokens,) int64 for an encoder with a word embedding, else None."""

    chars: numpy.ndarray
    words: Optional[numpy.ndarray]


class TokenEncoder(nn.Module, abc.ABC):
    """Tokens (strings, or :data:`SENTENCE_START` and :data:`SENTENCE_END`) -> (n_tokens, projection_dim).

    A subclass says how tokens become ids (:meth:`token_ids`) and which highway layer it has
    (``highway(width)``: a module mapping (n, width), a product dtype, the encoder's weight copies
    and a name for its own among them to (n, width)); the network
    and the way tokens go through it are this class's. The char embedding has ``n_chars`` rows, row
    ``zero_row`` (if any) kept at zero. ``padding_char`` is the id that fills a token's positions
    after its characters; every window wholly in it gives the same value, which is what lets
    :meth:`encode` cut the positions short (:func:`positions_needed`). ``word_dim`` > 0 adds a
    word embedding of ``n_words`` rows, concatenated [word; chars] before the projection.
    """

    def __init__(
        self,
        options: ElmoOptions,
        n_chars: int,
        padding_char: int,
        highway: Callable[[int], nn.Module],
        zero_row: Optional[int] = None,
        n_words: int = 0,
        word_dim: int = 0,
    ) -> None:
        super().__init__()
        self.options = options
        self.padding_char = padding_char
        self.char_embedding = nn.Embedding(n_chars, options.char_embedding_dim, padding_idx=zero_row)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(options.char_embedding_dim, count, width) for width, count in options.filters
        )
        self.highways = nn.ModuleList(highway(options.n_filters) for _ in range(options.n_highway))
        self.word_embedding = nn.Embedding(n_words, word_dim) if word_dim else None
        self.projection = nn.Linear(word_dim + options.n_filters, options.projection_dim)
        self.activation = torch.relu if options.activation == "relu" else torch.tanh
        # The low-precision copies of every product's weight, the highways' too: see :meth:`release_copies`.
        self.copies = WeightCopies()

    @abc.abstractmethod
    def token_ids(self, tokens: Sequence[Hashable]) -> TokenIds:
        """The ids of ``tokens`` (strings, or the boundary keys) that :meth:`forward` reads."""

    def encode(self, tokens: Sequence[Hashable], dtype: torch.dtype, budget_bytes: Optional[int] = None) -> Tensor:
        """The vectors of ``tokens``, products in ``dtype`` (float32 or bf16: the biLM chooses it,
        see :meth:`.precision.ResolvedPrecision.token_encoder_dtype`). Shape: (len(tokens), projection_dim).

        Tokens go through shortest first, in chunks of at most ``budget_bytes`` of working memory
        (by default the device's, :func:`chunk_bytes`), each cut at its padding on the host
        (:meth:`positions_needed`), so that a GPU's work is not waited for to read how long the tokens are.
        """
        device = self.projection.weight.device
        if not len(tokens):
            return self.projection.weight.new_zeros((0, self.options.projection_dim))
        ids = self.token_ids(tokens)
        written = (ids.chars != self.padding_char).sum(axis=1)
        order = numpy.argsort(written, kind="stable")
        encoded = []
        budget = (budget_bytes or chunk_bytes(device)) // self.bytes_per_position()  # positions a chunk may hold
        for chunk in _chunks(self.positions_per_token(written[order]), budget):
            rows = order[chunk]
            chunk_ids = ids.chars[rows]
            chars = torch.from_numpy(chunk_ids[:, : self.positions_needed(chunk_ids)]).to(device)
            words = None if ids.words is None else torch.from_numpy(ids.words[rows]).to(device)
            encoded.append(self(chars, words, dtype))
        restore = torch.from_numpy(numpy.argsort(order)).to(device)
        return torch.cat(encoded)[restore]

    def forward(
        self, char_ids: Tensor, word_ids: Optional[Tensor] = None, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """Shapes: ``char_ids`` (n_tokens, positions), ``word_ids`` (n_tokens,) int64 (read where
        there is a word embedding) -> (n_tokens, projection_dim) float32. The positions may stop
        where :meth:`positions_needed` says; the vectors are those of all of them.

        Each filter is a valid 1-D convolution over character positions; its maximum over
        positions goes through the activation (max first, then activation, as in bilm-tf).
        ``dtype``: of the convolutions, highway and projection products (see :mod:`.precision`);
        embeddings, activations and the output are float32.
        """
        chars = self.char_embedding(char_ids).to(dtype)  # (n_tokens, positions, char_dim)
        convolutions = cast(Iterable[nn.Conv1d], self.convolutions)
        maxima = [filter_maxima(conv, chars, self.copies, f"conv{i}") for i, conv in enumerate(convolutions)]
        x = torch.cat([self.activation(m) for m in maxima], dim=-1)
        for index, highway in enumerate(self.highways):
            x = highway(x, dtype, self.copies, f"highway{index}")
        if self.word_embedding is not None:
            x = torch.cat([self.word_embedding(word_ids), x], dim=-1)
        return linear(x, self.projection, dtype, self.copies, "projection")

    def release_copies(self) -> None:
        """Forget the low-precision weight copies; the next pass remakes those of its precision."""
        self.copies.clear()

    def positions_needed(self, char_ids: numpy.ndarray) -> int:
        """How many leading character positions give the same maxima as all of them (see
        :func:`positions_needed`). Shape: (n_tokens, max_characters)."""
        return positions_needed(char_ids, self.padding_char, self.options.filters)

    def positions_per_token(self, written: numpy.ndarray) -> numpy.ndarray:
        """The character positions a chunk ending at each token needs, from the tokens' written
        (non-padding) ids, as :meth:`positions_needed` counts them. Shape: (n_tokens,) -> (n_tokens,)."""
        widest = max(width for width, _ in self.options.filters)
        return numpy.minimum(written + widest, self.options.max_characters_per_token)

    def bytes_per_position(self) -> int:
        """The float32 bytes that one token position takes in the largest convolution: its unfolded
        window (char_dim x width) and its products (one per filter)."""
        return 4 * max(self.options.char_embedding_dim * width + count for width, count in self.options.filters)


def linear(x: Tensor, layer: nn.Linear, dtype: torch.dtype, copies: WeightCopies, name: str) -> Tensor:
    """``layer(x)`` with the product in ``dtype``; float32 in and out. Shape: (n, in) -> (n, out).

    In bf16 the bias is added after the product, in float32, rather than rounded to bf16;
    ``copies`` keeps the bf16 weight under ``name``.
    """
    if dtype == torch.float32:
        return layer(x)
    weight = copies.cast(name, dtype, [layer.weight], lambda: layer.weight)
    return on_padded_rows(lambda rows: F.linear(rows, weight), x.to(dtype), 0).float() + layer.bias


def filter_maxima(conv: nn.Conv1d, chars: Tensor, copies: WeightCopies, name: str) -> Tensor:
    """``conv``'s maximum per filter over positions.

    Shape: (n_tokens, positions, char_dim) -> (n_tokens, count), float32.

    The convolution is one matrix product: every window of ``width`` characters unfolded into a
    row of ``char_dim * width`` values, times the filters as a (count, char_dim * width) matrix,
    and the maximum taken over positions, which then run along rows (after ``conv1d`` that
    reduction ran slower on a CPU than the convolution itself: project/docs/lab-notebook.md,
    "Speed experiments retired from benchmarks/"). The bias is added after the maximum (max(x + b)
    = max(x) + b), in float32, to the (n_tokens, count) maxima only; in bf16 only those are
    converted to float32, since the maximum keeps order. ``copies`` keeps the bf16 weight under ``name``.
    """
    assert conv.bias is not None  # nn.Conv1d's default, which every token encoder keeps
    count, char_dim, width = conv.weight.shape
    weight = conv.weight
    if chars.dtype != torch.float32:
        weight = copies.cast(name, chars.dtype, [conv.weight], lambda: conv.weight)
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
    return min(char_ids.shape[1], longest + max(width for width, _ in filters))


def _chunks(positions: numpy.ndarray, budget: int) -> Iterator[slice]:
    """Consecutive slices of tokens, each needing at most ``budget`` positions (or one token).

    ``positions``: the character positions each token needs, non-decreasing (tokens sorted by
    length), so a chunk's padded width is that of its last token.
    """
    begin = 0
    while begin < len(positions):
        padded = numpy.arange(1, len(positions) - begin + 1) * positions[begin:]  # a chunk ending at each token
        end = begin + max(1, int(numpy.searchsorted(padded, budget, side="right")))
        yield slice(begin, end)
        begin = end
