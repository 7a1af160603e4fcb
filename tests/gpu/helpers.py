"""Small helpers of the GPU suite. CuPy is imported inside them: on a machine without it, the
modules still import, so that pytest collects the suite and reports it skipped."""

from typing import List

import numpy
from spacy.language import Language


def host(array) -> numpy.ndarray:
    """A CuPy (or NumPy) array as NumPy, for comparisons with CPU results."""
    import cupy

    return cupy.asnumpy(array)


def is_cupy_float32(array) -> bool:
    import cupy

    return isinstance(array, cupy.ndarray) and array.dtype == numpy.float32


def predictions(nlp: Language, texts: List[str]) -> List[tuple]:
    """What a user reads of each doc, on the host: the tensor, the categories, the entities."""
    return [(host(doc.tensor), dict(doc.cats), [(e.text, e.label_) for e in doc.ents]) for doc in nlp.pipe(texts)]


def assert_same_predictions(got: List[tuple], want: List[tuple], rtol: float = 1e-5, entities: bool = True) -> None:
    """Tensors equal up to float32 rounding of another batch shape, categories too, and (with
    ``entities``) the same entities."""
    from ..helpers import assert_float32_close

    for (tensor, cats, ents), (want_tensor, want_cats, want_ents) in zip(got, want):
        assert_float32_close(tensor, want_tensor, rtol=rtol)
        assert cats.keys() == want_cats.keys()
        for label in cats:
            assert abs(cats[label] - want_cats[label]) <= rtol * max(1.0, abs(want_cats[label])), label
        if entities:
            assert ents == want_ents
