"""A long-running service's memory: spaCy's ``nlp.memory_zone()`` bounds the strings, and nothing of
the ``elmo`` component holds a zone's docs or strings, or grows per doc."""

import gc
import random
import string
from typing import Iterator, List

from spacy.language import Language
from spacy.tokens import Doc

from spacy_elmo.layers import get_runtime


def made_up_texts(n_docs: int, seed: int) -> Iterator[str]:
    """Texts of fresh made-up words, so that every doc adds strings to the vocab."""
    rnd = random.Random(seed)
    for _ in range(n_docs):
        words = ("".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(4, 12))) for _ in range(12))
        yield " ".join(words) + "."


def live_docs() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is Doc)


def test_memory_zones_bound_the_strings_and_nothing_of_elmo_keeps_a_zones_docs(nlp_elmo: Language) -> None:
    runtime = get_runtime(nlp_elmo.get_pipe("elmo").model)
    docs_before, strings_before = live_docs(), len(nlp_elmo.vocab.strings)
    vectors: List[float] = []
    for zone in range(3):
        with nlp_elmo.memory_zone():
            vectors += [float(doc[0].vector[0]) for doc in nlp_elmo.pipe(made_up_texts(40, seed=zone))]
            assert len(nlp_elmo.vocab.strings) > strings_before
        assert len(nlp_elmo.vocab.strings) == strings_before
    assert len(vectors) == 120 and len(set(vectors)) > 100  # fresh words: fresh vectors
    assert live_docs() == docs_before
    assert len(runtime.token_cache) <= runtime.token_cache.max_entries


def test_a_doc_from_a_zone_keeps_its_vectors_inside_it(nlp_elmo: Language) -> None:
    text = next(made_up_texts(1, seed=7))
    expected = nlp_elmo(text)[3].vector.copy()
    with nlp_elmo.memory_zone():
        inside = nlp_elmo(text)[3].vector.copy()
    again = nlp_elmo(text)[3].vector
    assert (inside == expected).all() and (again == expected).all()
