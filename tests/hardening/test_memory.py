"""The pipe's memory on a long doc: the outputs, plus little more per token.

NumPy reports its allocations to tracemalloc, so the traced peak includes every array the
pipe makes on CPU (the biLM's own torch buffers are not traced; they are one batch at a time).
"""

import random
import tracemalloc

from spacy.language import Language
from spacy.tokens import Doc

from ..helpers import N_LAYERS, WIDTH

FLOAT32 = 4


def test_long_doc_needs_little_beyond_its_outputs(nlp_elmo: Language) -> None:
    n_tokens = 80_000
    rnd = random.Random(0)
    doc = Doc(nlp_elmo.vocab, words=[f"w{rnd.randrange(5000)}" for _ in range(n_tokens)])
    layers_bytes = N_LAYERS * n_tokens * WIDTH * FLOAT32
    outputs = layers_bytes + n_tokens * WIDTH * FLOAT32  # the layers (also doc._.elmo_layers, not copied) + doc.tensor
    tracemalloc.start()
    try:
        (doc,) = nlp_elmo.pipe([doc])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Concatenating all windows' layers, then gathering, then splitting held about four more
    # copies of the layers at once; writing each biLM batch into the outputs holds none.
    assert peak - outputs < layers_bytes / 2, f"{(peak - outputs) / n_tokens:.0f} bytes per token beyond the outputs"
