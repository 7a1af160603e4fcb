"""The word-sense test set and its measure (examples/word_senses.py), and the bundled biLM on it."""

import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

import numpy
import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "word_senses.py"


@pytest.fixture(scope="module")
def senses():
    spec = importlib.util.spec_from_file_location("word_senses", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["word_senses"] = module
    spec.loader.exec_module(module)
    return module


def test_the_set_has_30_words_2_senses_5_sentences_each(senses) -> None:
    occurrences = senses.read_occurrences()
    per_sense = Counter((o.word, o.sense) for o in occurrences)
    words = Counter(word for word, _ in per_sense)
    assert len(words) >= 30 and set(words.values()) == {2} and min(per_sense.values()) >= 5
    for o in occurrences:
        tokens = re.findall(r"[A-Za-z0-9']+", o.text)
        assert tokens.count(o.word) == 1 and tokens[0] != o.word, o


def test_static_vectors_score_chance_and_separated_senses_score_one(senses) -> None:
    occurrences = [senses.Occurrence(w, s, "") for w in ("a", "b") for s in ("x", "y") for _ in range(3)]
    static = numpy.array([[1.0, 0.0] if o.word == "a" else [0.0, 1.0] for o in occurrences])
    assert senses.nearest_neighbour_accuracy(occurrences, static) == pytest.approx(2 / 5)  # (n - 1) / (2n - 1)
    by_sense = numpy.array(
        [[1.0, 0.1 * i] if o.sense == "x" else [0.0, 1.0 + 0.1 * i] for i, o in enumerate(occurrences)]
    )
    assert senses.nearest_neighbour_accuracy(occurrences, by_sense) == 1.0


@pytest.mark.slow  # the bundled biLM over the set's 300 sentences and their words alone
def test_the_default_pipe_tells_senses_apart_better_than_static_vectors(senses) -> None:
    result = senses.report(senses.default_pipeline(), senses.read_occurrences())
    assert result["layer 0 (context-free, static)"] == pytest.approx(5 / 11)
    assert result["token.vector (default pipe)"] >= 0.63  # the bundled biLM: 0.658 (en_small: 0.635)
