"""The pipe's memory on a long doc: the outputs, plus little more per token.

NumPy reports its allocations to tracemalloc, so the traced peak includes every array the
pipe makes on CPU (the biLM's own torch buffers are not traced; they are one batch at a time).
"""

import random
import tracemalloc

import pytest
import spacy
from spacy.language import Language
from spacy.tokens import Doc

from ..helpers import N_LAYERS, WIDTH, elmo_config

FLOAT32 = 4
# Traced 80,000-token docs (a second each): the whole suite's, not the edit loop's (make test-fast).
pytestmark = pytest.mark.slow


def long_doc(nlp: Language, n_tokens: int) -> Doc:
    """A doc of ``n_tokens`` words, no sentence boundaries, few repeated windows."""
    rnd = random.Random(0)
    return Doc(nlp.vocab, words=[f"w{rnd.randrange(5000)}" for _ in range(n_tokens)])


def traced_peak(nlp: Language, doc: Doc) -> int:
    """The peak of what NumPy allocated while ``nlp`` ran over ``doc``, in bytes."""
    tracemalloc.start()
    try:
        list(nlp.pipe([doc]))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_long_doc_needs_little_beyond_its_outputs(nlp_elmo: Language) -> None:
    n_tokens = 80_000
    doc = long_doc(nlp_elmo, n_tokens)
    layers_bytes = N_LAYERS * n_tokens * WIDTH * FLOAT32
    outputs = layers_bytes + n_tokens * WIDTH * FLOAT32  # the layers (also doc._.elmo_layers, not copied) + doc.tensor
    peak = traced_peak(nlp_elmo, doc)
    # Concatenating all windows' layers, then gathering, then splitting held about four more
    # copies of the layers at once; writing each biLM batch into the outputs holds none.
    assert peak - outputs < layers_bytes / 2, f"{(peak - outputs) / n_tokens:.0f} bytes per token beyond the outputs"


def test_without_listeners_or_stored_layers_only_the_mix_is_made(nlp_elmo: Language, bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "threads": 1})
    nlp.initialize()
    n_tokens = 80_000
    vectors_bytes = n_tokens * WIDTH * FLOAT32  # doc._.elmo_vectors, also doc.tensor
    saved = traced_peak(nlp_elmo, long_doc(nlp_elmo, n_tokens)) - traced_peak(nlp, long_doc(nlp, n_tokens))
    # Beside what both make (the plan's Python objects, the vectors), storing the layers holds
    # all N_LAYERS of them at once; keeping only the mix never does (before, it saved nothing).
    assert saved > vectors_bytes, f"{saved / vectors_bytes:.1f} times the vectors saved"
