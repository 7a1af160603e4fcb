"""Character ids, all tokens at once, against the per-token rule of bilm-tf (ELMO_FORMAT.md)."""

import numpy
import pytest

from spacy_elmo.bilm.model.chars import BEGIN_OF_WORD, CHAR_PADDING, END_OF_WORD, tokens_char_ids
from spacy_elmo.bilm.model.token_encoder import SENTENCE_END, SENTENCE_START

from ...helpers import random_bilm


def one_token(token: str, max_chars: int) -> list:
    """bilm-tf's rule, spelt out: begin-of-word, the UTF-8 bytes + 1 (at most max_chars - 2),
    end-of-word, padding."""
    data = token.encode("utf8", errors="ignore")[: max_chars - 2]
    ids = [BEGIN_OF_WORD, *(byte + 1 for byte in data), END_OF_WORD]
    return ids + [CHAR_PADDING] * (max_chars - len(ids))


TOKENS = ["a", "", "ELMo", "naïve", "🙂", "日本語", "x" * 48, "y" * 60, "é" * 30, "bad\ud800surrogate", "<S>", " "]


@pytest.mark.parametrize("max_chars", [50, 5])
def test_every_token_gets_the_ids_of_the_per_token_rule(max_chars) -> None:
    ids = tokens_char_ids(TOKENS, max_chars)
    assert ids.shape == (len(TOKENS), max_chars) and ids.dtype == numpy.int64
    assert ids.tolist() == [one_token(token, max_chars) for token in TOKENS]


def test_no_tokens_give_no_rows() -> None:
    assert tokens_char_ids([], 50).shape == (0, 50)


def test_the_boundary_tokens_keep_their_own_characters() -> None:
    model = random_bilm()
    ids = model.token_encoder.token_ids([SENTENCE_START, "<S>", SENTENCE_END]).chars
    assert ids[0, :3].tolist() == [BEGIN_OF_WORD, 257, END_OF_WORD]
    assert ids[2, :3].tolist() == [BEGIN_OF_WORD, 258, END_OF_WORD]
    assert ids[1].tolist() == one_token("<S>", 50)
