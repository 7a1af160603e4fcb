"""Character ids, exactly as bilm-tf and AllenNLP compute them.

A token becomes ``max_chars`` ids: begin-of-word, its UTF-8 bytes + 1 (at most
``max_chars - 2`` of them), end-of-word, then padding. Id 0 is reserved for padding *tokens*
in a batch. Sentence boundaries are tokens of their own, made of one special character.

Unlike bilm-tf and AllenNLP, the literal strings "<S>" and "</S>" in the input are encoded as
the text they are; only the boundaries that the model adds around every sentence use the
special sentence-start and sentence-end characters.
"""

from typing import Sequence, Tuple

import numpy

BEGIN_OF_WORD = 259
END_OF_WORD = 260
CHAR_PADDING = 261
BEGIN_OF_SENTENCE_CHAR = 257
END_OF_SENTENCE_CHAR = 258


def tokens_char_ids(tokens: Sequence[str], max_chars: int) -> numpy.ndarray:
    """The character ids of each token. Shape: (len(tokens), max_chars), int64.

    Characters that cannot be encoded as UTF-8 (lone surrogates) are dropped, as bilm-tf does.
    Longer tokens keep their first ``max_chars - 2`` bytes, which may cut a multi-byte character.
    All tokens' bytes are placed with a few array operations: a Python loop over tokens costs
    microseconds each, the char CNN's GPU time per token is a fraction of that.
    """
    encoded = [token.encode("utf8", errors="ignore")[: max_chars - 2] for token in tokens]
    lengths = numpy.fromiter(map(len, encoded), dtype=numpy.int64, count=len(encoded))
    ids = numpy.full((len(encoded), max_chars), CHAR_PADDING, dtype=numpy.int64)
    ids[:, 0] = BEGIN_OF_WORD
    rows = numpy.repeat(numpy.arange(len(encoded)), lengths)
    starts = numpy.cumsum(lengths) - lengths  # each token's first byte in the joined bytes
    columns = numpy.arange(len(rows)) - numpy.repeat(starts, lengths) + 1
    ids[rows, columns] = numpy.frombuffer(b"".join(encoded), dtype=numpy.uint8).astype(numpy.int64) + 1
    ids[numpy.arange(len(encoded)), lengths + 1] = END_OF_WORD
    return ids


def boundary_char_ids(max_chars: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The ids of the sentence-start and sentence-end tokens. Shapes: (max_chars,) each."""
    start = numpy.full((max_chars,), CHAR_PADDING, dtype=numpy.int64)
    start[:3] = (BEGIN_OF_WORD, BEGIN_OF_SENTENCE_CHAR, END_OF_WORD)
    end = start.copy()
    end[1] = END_OF_SENTENCE_CHAR
    return start, end
