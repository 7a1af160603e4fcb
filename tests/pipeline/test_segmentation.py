import numpy
import pytest
import spacy
from hypothesis import given, settings
from hypothesis import strategies as st
from spacy.tokens import Doc

from spacy_elmo.layers.segmentation import SKIPPED, _windows, plan_segments


@given(length=st.integers(0, 300), window=st.integers(1, 40), data=st.data())
@settings(max_examples=300, deadline=None)
def test_windows_partition_the_tokens_and_keep_context(length: int, window: int, data) -> None:
    overlap = data.draw(st.integers(0, window - 1))
    spans = _windows(length, window, overlap)
    owned = [i for _, _, own_first, own_last in spans for i in range(own_first, own_last)]
    assert owned == list(range(length))
    for k, (first, last, own_first, own_last) in enumerate(spans):
        assert last - first <= window
        assert first <= own_first <= own_last <= last
        if k > 0:
            assert own_first - first >= overlap // 2
        if k < len(spans) - 1:
            assert last - own_last >= overlap - overlap // 2


def test_whitespace_is_skipped_and_sentences_are_used() -> None:
    nlp = spacy.blank("xx")
    words = ["Hello", "\n\n", "world", ".", "Bye", "now"]
    doc = Doc(nlp.vocab, words=words, spaces=[False] * 6, sent_starts=[True, False, False, False, True, False])
    plan = plan_segments([doc, Doc(nlp.vocab)], window=64, overlap=16)
    assert plan.sentences == [["Hello", "world", "."], ["Bye", "now"]]
    assert plan.sources[0].tolist() == [0, SKIPPED, 1, 2, 3, 4]
    assert plan.sources[1].shape == (0,)


def test_long_text_without_sentences_is_windowed() -> None:
    nlp = spacy.blank("xx")
    doc = Doc(nlp.vocab, words=[f"w{i}" for i in range(10)])
    plan = plan_segments([doc], window=4, overlap=2)
    assert plan.sentences == [[f"w{i}" for i in range(a, a + 4)] for a in (0, 2, 4, 6)]
    # Tokens 0-2 from window 0, 3-4 from window 1, 5-6 from window 2, 7-9 from window 3.
    starts = numpy.array([0, 4, 8, 12])
    expected = [
        starts[0] + 0,
        starts[0] + 1,
        starts[0] + 2,
        starts[1] + 1,
        starts[1] + 2,
        starts[2] + 1,
        starts[2] + 2,
        starts[3] + 1,
        starts[3] + 2,
        starts[3] + 3,
    ]
    assert plan.sources[0].tolist() == expected


def test_bad_window_is_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        plan_segments([], window=4, overlap=4)
    with pytest.raises(ValueError, match="window"):
        plan_segments([], window=0, overlap=0)


def test_a_sentence_longer_than_the_window_is_windowed_too() -> None:
    nlp = spacy.blank("xx")
    words = ["A", "b", "."] + [f"x{i}" for i in range(6)]
    doc = Doc(nlp.vocab, words=words, sent_starts=[True, False, False, True] + [False] * 5)
    plan = plan_segments([doc], window=4, overlap=2)
    assert plan.sentences == [["A", "b", "."], ["x0", "x1", "x2", "x3"], ["x2", "x3", "x4", "x5"]]
    # x0-x2 from the first window (offset 3), x3-x5 from the second (offset 7, from its 2nd token).
    assert plan.sources[0].tolist() == [0, 1, 2, 3, 4, 5, 8, 9, 10]
