"""Hostile text through ``BiLM.embed_sentences`` and the ``elmo`` pipe: never a crash, always
the right shapes, always finite values.

Run with ``--hypothesis-show-statistics`` to see how many inputs each property was tried on.
"""

import time
from typing import List

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spacy.language import Language
from spacy.tokens import Doc

from ..helpers import N_LAYERS, WIDTH, assert_float32_close, random_bilm

# Characters (and emoji sequences) that tokenizers, byte encoders and fixed-width char buffers get wrong.
HOSTILE_CHARS = [
    "\x00",
    "\x01",
    "\x07",
    "\x1b",
    "\x7f",
    "\x85",
    "\x9f",  # C0/C1 controls, DEL, NEL
    "\u0301",
    "\u0308",
    "\u20dd",
    "\u0489",  # combining marks (alone, they combine with nothing)
    "\u05d0",
    "\u0627",
    "\u202e",
    "\u202b",
    "\u200f",
    "\u2067",  # Hebrew, Arabic, RTL overrides/marks
    "\U0001f600",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\U0001f1fa\U0001f1f8",
    "\U0001f44d\U0001f3fd",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",  # zero-width characters, BOM
    " ",
    "\t",
    "\n",
    "\r",
    "\u00a0",
    "\u2028",
    "\u2029",
    "\u3000",  # whitespace
    "\ufffd",
    "\uffff",
    "\U0010ffff",
    "\ue000",  # replacement, non-characters, private use
]
LONG_TOKEN = 10_000

hostile_piece = st.one_of(st.sampled_from(HOSTILE_CHARS), st.characters(codec="utf-8"))
short_token = st.one_of(
    st.lists(hostile_piece, min_size=1, max_size=12).map("".join),
    st.text(st.sampled_from([" ", "\t", "\n", "\u00a0", "\u3000"]), min_size=1, max_size=4),  # whitespace-only
)
long_token = st.sampled_from(["a", "\u00e9", "\U0001f600", "e\u0301", "\u200b"]).map(lambda piece: piece * LONG_TOKEN)
hostile_token = st.one_of(short_token, long_token)
# A Python str may hold lone surrogates; the biLM drops what UTF-8 cannot encode.
surrogate_token = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
sentences = st.lists(st.lists(st.one_of(hostile_token, surrogate_token, st.just("")), max_size=12), max_size=6)

# The examples per property are the profile's (tests/conftest.py): fewer in make test-fast.
PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def assert_layers(layers: numpy.ndarray, n_tokens: int) -> None:
    assert layers.shape == (N_LAYERS, n_tokens, WIDTH)
    assert layers.dtype == numpy.float32
    assert numpy.isfinite(layers).all()


# ---------------------------------------------------------------------- BiLM.embed_sentences
@pytest.fixture(scope="module")
def tiny_bilm():
    return random_bilm()


@PROPERTY
@given(batch=sentences)
def test_embed_sentences_any_unicode(tiny_bilm, batch: List[List[str]]) -> None:
    results = tiny_bilm.embed_sentences(batch)
    assert len(results) == len(batch)
    for sentence, layers in zip(batch, results):
        assert_layers(layers, len(sentence))
    # A sentence's vectors do not depend on what else is in its batch (zero state, padding masked).
    for sentence, layers in zip(batch, results):
        (alone,) = tiny_bilm.embed_sentences([sentence])
        assert_float32_close(layers, alone)


def test_embed_sentences_surrogates_are_dropped_like_invalid_bytes(tiny_bilm) -> None:
    """A token of lone surrogates reads as the empty token: what bilm-tf does with unencodable text."""
    surrogates, empty = tiny_bilm.embed_sentences([["a", "\ud800\udfff", "b"], ["a", "", "b"]])
    assert_float32_close(surrogates, empty)


# ---------------------------------------------------------------------- the elmo pipe
def assert_annotated(doc: Doc) -> None:
    assert doc.tensor.shape == (len(doc), WIDTH)
    assert numpy.isfinite(doc.tensor).all()
    assert_layers(doc._.elmo_layers, len(doc))
    spaces = numpy.array([token.is_space for token in doc], dtype=bool)
    assert not doc._.elmo_layers[:, spaces].any(), "whitespace tokens must have zero vectors"
    assert numpy.isfinite(doc.vector).all() and doc.vector.shape == (WIDTH,)
    assert numpy.isfinite(doc.similarity(doc))


pipe_text = st.one_of(
    st.just(""),
    st.lists(st.sampled_from([" ", "\n", "\t", "\u00a0", "\u3000", "\r\n"]), min_size=1, max_size=8).map("".join),
    st.lists(hostile_piece, max_size=80).map("".join),
    # spaCy's tokenizer is slow on 10,000-character words: those go in pre-tokenized docs below.
    st.lists(short_token, min_size=1, max_size=8).map(" ".join),
)


@PROPERTY
@given(texts=st.lists(pipe_text, max_size=8), batch_size=st.integers(1, 8))
def test_pipe_mixed_batches(nlp_elmo: Language, texts: List[str], batch_size: int) -> None:
    docs = list(nlp_elmo.pipe(texts, batch_size=batch_size))
    assert [doc.text for doc in docs] == texts
    for doc in docs:
        assert_annotated(doc)
    # The same text alone gives the same vectors as in any batch.
    for text, doc in zip(texts, docs):
        assert_float32_close(nlp_elmo(text).tensor, doc.tensor)


@PROPERTY
@given(data=st.data())
def test_pipe_docs_from_words_with_random_sentences(nlp_elmo: Language, data: st.DataObject) -> None:
    """Pre-tokenized docs, whitespace tokens included, with and without sentence boundaries."""
    words = data.draw(st.lists(hostile_token, min_size=1, max_size=40), label="words")
    spaces = data.draw(st.lists(st.booleans(), min_size=len(words), max_size=len(words)), label="spaces")
    sent_starts = data.draw(
        st.one_of(
            st.none(), st.lists(st.booleans(), min_size=len(words), max_size=len(words)).map(lambda s: [True] + s[1:])
        ),
        label="sent_starts",
    )
    doc = Doc(nlp_elmo.vocab, words=words, spaces=spaces, sent_starts=sent_starts)
    (doc,) = nlp_elmo.pipe([doc])
    assert_annotated(doc)


def test_empty_and_whitespace_only_docs(nlp_elmo: Language) -> None:
    texts = ["", " ", "\n\n\n", " \t \u3000 ", "\u00a0"]
    for doc in nlp_elmo.pipe(texts):
        assert_annotated(doc)
        assert not doc.tensor.any()
        assert not doc.vector.any() and doc.similarity(doc) == 0.0


def test_ten_thousand_character_tokens(nlp_elmo: Language) -> None:
    words = ["a" * LONG_TOKEN, "\U0001f600" * LONG_TOKEN, "e\u0301" * (LONG_TOKEN // 2), "short"]
    doc = nlp_elmo(Doc(nlp_elmo.vocab, words=words))
    assert_annotated(doc)
    # Only the first max_characters_per_token - 2 bytes are read: a longer run of "a" is the same token.
    longer = nlp_elmo(Doc(nlp_elmo.vocab, words=["a" * (LONG_TOKEN * 2)] + words[1:]))
    assert_float32_close(longer.tensor, doc.tensor)


def test_hundred_thousand_tokens_without_sentence_boundaries(nlp_elmo: Language) -> None:
    n_tokens = 100_000
    words = [f"w{i % 997}" for i in range(n_tokens)]
    doc = Doc(nlp_elmo.vocab, words=words)
    assert not doc.has_annotation("SENT_START")
    start = time.perf_counter()
    (doc,) = nlp_elmo.pipe([doc])
    elapsed = time.perf_counter() - start
    assert_annotated(doc)
    assert elapsed < 60.0, f"100,000 tokens took {elapsed:.1f} s with a tiny model"
    # Layer 0 is context-free: the last token's is the same as in a short doc.
    tail = nlp_elmo(Doc(nlp_elmo.vocab, words=words[-16:]))
    assert_float32_close(doc._.elmo_layers[0, -1], tail._.elmo_layers[0, -1])
