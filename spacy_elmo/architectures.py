"""Registered architectures of spacy-elmo: they compose the layers in :mod:`spacy_elmo.layers`."""

import functools
from typing import Any, Callable, List, Optional

from spacy.ml.models.textcat import build_bow_text_classifier_v3
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import (
    Dropout,
    Linear,
    Logistic,
    Maxout,
    Model,
    add,
    chain,
    concatenate,
    list2ragged,
    reduce_mean,
    softmax_activation,
    with_array,
    zero_init,
)
from thinc.types import Floats2d, Floats3d

from .layers import ElmoBiLMLayer, ElmoListener, ScalarMix, SelectLayers
from .layers.bilm_settings import ElmoBiLMSettings, takes_settings


@registry.architectures("spacy_elmo.ElmoBiLM.v1")
@takes_settings(ElmoBiLMSettings)
def build_elmo_bilm(**settings: Any) -> Model[List[Doc], List[Floats3d]]:
    """The ELMo biLM: docs in, one (n_layers + 1, n_tokens, 2 * projection_dim) array per doc out.

    The keys, their defaults (the ``elmo`` factory's) and what they do are the fields of
    :class:`~spacy_elmo.layers.bilm_settings.ElmoBiLMSettings`, which also make this function's
    signature. The weights are read once, at ``nlp.initialize()``.
    """
    return ElmoBiLMLayer(ElmoBiLMSettings(**settings))


@registry.layers("spacy_elmo.ScalarMix.v1")
def build_scalar_mix(
    layers: Optional[List[int]] = None, layer_norm: bool = False, l2: float = 0.0, dropout: float = 0.0
) -> Model[List[Floats3d], List[Floats2d]]:
    """A listener's mix of the biLM layers: per doc, (n_layers, n_tokens, width) -> (n_tokens, width).

    The paper's task-specific scalar mix (see :func:`~spacy_elmo.layers.ScalarMix`), with its
    ``layer_norm``, ``l2`` and ``dropout``, over the biLM ``layers`` the task reads (0 = the
    char CNN, 1.. = the LSTM layers; null: all). The sizes come from the listener's output at
    initialization.
    """
    mix = ScalarMix(len(layers) if layers is not None else None, layer_norm=layer_norm, l2=l2, dropout=dropout)
    return mix if layers is None else chain(SelectLayers(layers), mix)


@registry.architectures("spacy_elmo.ElmoListener.v2")
def build_elmo_listener(
    width: Optional[int] = None,
    n_layers: Optional[int] = None,
    upstream: str = "*",
    mix: Optional[Model[List[Floats3d], List[Floats2d]]] = None,
    embed: Optional[Model[List[Doc], List[Floats2d]]] = None,
    encode: Optional[Model[List[Floats2d], List[Floats2d]]] = None,
    bilm: Optional[Model[List[Doc], List[Floats3d]]] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """A ``tok2vec`` for downstream components: the upstream biLM's layers, mixed for this task.

    ``width`` is the biLM's output width (2 x projection_dim) and ``n_layers`` its number of
    output layers (lstm n_layers + 1). Left null, as in the shipped configs, they come from the
    upstream biLM's files at ``nlp.initialize()``, and the layers after the listener learn their
    input sizes from its output then (thinc's shape inference): a config fits any biLM. Set, they
    must agree with the biLM, or initialization stops with an error naming both.
    ``mix`` turns each doc's (n_layers, n_tokens, width) layers into (n_tokens, mix width), as
    spacy-transformers' listener takes its ``pooling``: by default (null) the scalar mix of all
    layers, ``spacy_elmo.ScalarMix.v1`` with its defaults; give that block to choose the layers or
    set ``layer_norm``, ``l2`` or ``dropout``. With ``embed`` (e.g. spacy.MultiHashEmbed.v2), its
    vectors are concatenated after ELMo's: the paper's ``[x_k; ELMo_k]``; output width is then
    the mix width + the embed width. With ``encode`` (e.g. spacy.MaxoutWindowEncoder.v2) those
    features go through a task-specific contextual encoder (see :func:`encoder_of`), as the paper
    feeds ELMo into the task's RNN; its width is then the output width. So ``embed`` + ``encode``
    as in spaCy's spacy.Tok2Vec.v2 give that tok2vec with ELMo added to its input. ``bilm``
    replaces the listener by an own biLM; it is what ``nlp.replace_listeners`` writes, rarely
    set by hand.
    """
    source = bilm if bilm is not None else ElmoListener(upstream, width, n_layers)
    model = chain(source, mix if mix is not None else ScalarMix())
    if embed is None and encode is None:
        return model
    if embed is not None:
        model = concatenate(model, embed)
    if encode is not None:
        model = chain(model, encoder_of(encode))
        model.set_dim("nO", encode.get_dim("nO"))
    # A head may hand its labels Y to a tok2vec whose width is still unknown (spaCy's
    # TextCatReduce does, through chain); concatenate would pass them on and the embedding would
    # take the number of labels for its width. The widths here come from the parts alone.
    model.init = without_labels(model.init)
    return model


def encoder_of(encode: Model[List[Floats2d], List[Floats2d]]) -> Model[List[Floats2d], List[Floats2d]]:
    """``encode`` after a maxout layer with layer normalization (as in spacy.MultiHashEmbed.v2) that
    brings the listener's (n_tokens, any width) features to the encoder's width."""
    return chain(with_array(Maxout(encode.get_dim("nO"), nP=3, normalize=True)), encode)


@registry.architectures("spacy_elmo.ElmoBOWTextCat.v1")
def build_elmo_bow_textcat(
    tok2vec: Model[List[Doc], List[Floats2d]],
    exclusive_classes: bool,
    ngram_size: int = 1,
    length: int = 262144,
    dropout: float = 0.1,
    nO: Optional[int] = None,
) -> Model[List[Doc], Floats2d]:
    """spaCy's bag-of-words classifier (spacy.TextCatBOW.v3) with ELMo added to its features.

    The scores (n_docs, nO) are the bag of words' linear scores plus a linear layer over the mean
    of the doc's ``tok2vec`` vectors (e.g. an ElmoListener; an empty doc adds zeros), then softmax
    (``exclusive_classes``) or logistic. That layer starts at zero, so the model starts as spaCy's
    efficiency textcat and keeps what ELMo adds to it: in spaCy's TextCatEnsemble.v2 the bag of
    words feeds a shared output layer and learns slowly beside a weak branch.
    """
    bow = build_bow_text_classifier_v3(exclusive_classes, ngram_size, no_output_layer=True, length=length, nO=nO)
    return bow_beside_elmo(bow, tok2vec, exclusive_classes, dropout, nO)


def bow_beside_elmo(
    bow: Model[List[Doc], Floats2d],
    tok2vec: Model[List[Doc], List[Floats2d]],
    exclusive_classes: bool,
    dropout: float,
    nO: Optional[int],
) -> Model[List[Doc], Floats2d]:
    """The classifier of :func:`build_elmo_bow_textcat` around a given bag of words (n_docs, nO)."""
    pooled = chain(tok2vec, list2ragged(), reduce_mean(), Dropout(dropout), Linear(nO, init_W=zero_init))
    activation = softmax_activation() if exclusive_classes else Logistic()
    model = chain(add(bow, pooled), activation)
    if nO is not None:
        model.set_dim("nO", nO)
    model.attrs["multi_label"] = not exclusive_classes
    return model


def without_labels(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` with the labels Y it is handed dropped: a tok2vec's widths come from its parts.

    A partial of a module-level function, not a closure, so that the model pickles."""
    return functools.partial(_init_without_labels, init)


def _init_without_labels(
    init: Callable[..., None],
    model: Model[List[Doc], List[Floats2d]],
    X: Optional[List[Doc]] = None,
    Y: Optional[Any] = None,
) -> None:
    init(model, X=X, Y=None)
