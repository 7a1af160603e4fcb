"""ELMo's ``token.vector``, ``span.vector``, ``doc.vector`` and ``.similarity``, from ``doc._.elmo_vectors``.

The ``elmo`` component keeps its mix of the biLM layers, (n_tokens, width), in its own Doc
extension and the hooks read it there, not from ``doc.tensor``: spaCy's ``tok2vec`` writes
``doc.tensor`` for its listeners, which read it at prediction time, so the pipe leaves a tensor
that another component wrote (see :meth:`~spacy_elmo.pipeline_component.Elmo.set_annotations`),
and the vectors stay ELMo's wherever ``elmo`` stands. The extension is user data: it survives
``Doc.to_bytes`` (and so ``nlp.pipe(n_process=...)``) and ``DocBin(store_user_data=True)``.
"""

from typing import Union

from spacy.attrs import IS_SPACE
from spacy.tokens import Doc, Span, Token
from thinc.api import get_array_module
from thinc.types import Floats1d, Floats2d

VECTORS_ATTR = "elmo_vectors"

if not Doc.has_extension(VECTORS_ATTR):
    Doc.set_extension(VECTORS_ATTR, default=None)

NO_VECTORS = (
    "This doc has no ELMo vectors (doc._.elmo_vectors is None): run the 'elmo' component on it, or, to "
    "keep them with a serialized doc, serialize its user data (Doc.to_bytes() keeps it by default; "
    "DocBin needs store_user_data=True)."
)


def install_vector_hooks(doc: Doc) -> None:
    """Make ``token.vector``, ``span.vector``, ``doc.vector`` and ``.similarity`` use ``doc._.elmo_vectors``.

    The hooks take precedence over the vocab's static vectors. A span's or doc's vector is the
    mean over its non-whitespace tokens (whitespace tokens have zero vectors); similarity is the
    cosine, 0.0 when either vector is zero. Hooks are not serialized: after ``Doc.from_bytes`` or
    ``nlp.pipe(n_process=...)``, call this function again on the doc; a doc without ELMo vectors
    is an error.
    """
    _vectors(doc)
    doc.user_hooks.update(vector=_doc_vector, has_vector=_has_vector, similarity=_similarity)
    doc.user_span_hooks.update(vector=_span_vector, has_vector=_has_vector, similarity=_similarity)
    doc.user_token_hooks.update(vector=_token_vector, has_vector=_has_vector, similarity=_similarity)


def _vectors(doc: Doc) -> Floats2d:
    """The doc's ELMo vectors, (n_tokens, width)."""
    vectors = doc._.get(VECTORS_ATTR)
    if vectors is None:
        raise ValueError(NO_VECTORS)
    return vectors


def _token_vector(token: Token) -> Floats1d:
    return _vectors(token.doc)[token.i]


def _span_vector(span: Span) -> Floats1d:
    return _mean_of_words(span.doc, span.start, span.end)


def _doc_vector(doc: Doc) -> Floats1d:
    return _mean_of_words(doc, 0, len(doc))


def _mean_of_words(doc: Doc, start: int, end: int) -> Floats1d:
    """Mean of the ELMo vectors of tokens ``start:end`` over the non-whitespace ones: shape (width,)."""
    vectors = _vectors(doc)
    xp = get_array_module(vectors)
    words = xp.asarray(doc.to_array(IS_SPACE)[start:end] == 0) if end > start else None
    if words is None or not bool(words.any()):
        return xp.zeros(vectors.shape[1], dtype="float32")
    return vectors[start:end][words].mean(axis=0)


def _has_vector(obj: Union[Doc, Span, Token]) -> bool:
    vectors = (obj if isinstance(obj, Doc) else obj.doc)._.get(VECTORS_ATTR)
    return vectors is not None and vectors.size > 0


def _similarity(obj: Union[Doc, Span, Token], other: Union[Doc, Span, Token]) -> float:
    """Cosine similarity of the two vectors; 0.0 if either is all zeros."""
    a, b = obj.vector, other.vector
    norms = float((a**2).sum() ** 0.5) * float((b**2).sum() ** 0.5)
    return float((a * b).sum()) / norms if norms else 0.0
