"""Variants of the ELMo tok2vec and textcat that the evaluation tried and did not adopt.

They are not in spacy-elmo: each lost to what ships (docs/evaluation.md, "What was tried"). They
live here so that the figures measured with them can be made again. Load them as spaCy loads
any user code, e.g. in ``project/``::

    python -m spacy train CONFIG --code code/elmo_variants.py ...
    python scripts/crossval.py run CONFIG ... --code code/elmo_variants.py ...
    python scripts/train.py CONFIG ... --code code/elmo_variants.py ...

and name one with a config override:

- the layers side by side (was ``concat_layers = true``):
  ``--components.ner.model.tok2vec.mix.@layers elmo_project.ConcatLayers.v1``
- ELMo at the encoder's output too (was ``skip_encoder = true``):
  ``--components.ner.model.tok2vec.@architectures elmo_project.ElmoListenerSkipEncoder.v1``
- dropping the bag of words' scores of some docs (was ``bow_dropout``):
  ``--components.textcat.model.@architectures elmo_project.ElmoBOWTextCat.v1
  --components.textcat.model.bow_dropout 0.5``
"""

from typing import Callable, List, Optional, Tuple

from spacy.ml.models.textcat import build_bow_text_classifier_v3
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Dropout, Model, chain, concatenate, noop
from thinc.types import Floats2d, Floats3d

from spacy_elmo.architectures import bow_beside_elmo, build_elmo_listener, encoder_of, without_labels
from spacy_elmo.layers import SelectLayers
from spacy_elmo.layers.listener import size_mismatch
from spacy_elmo.layers.scalar_mix import infer_layer_sizes


@registry.layers("elmo_project.ConcatLayers.v1")
def build_concat_layers(
    layers: Optional[List[int]] = None, layer_norm: bool = False, l2: float = 0.0, dropout: float = 0.0
) -> Model[List[Floats3d], List[Floats2d]]:
    """A listener's ``mix`` that puts the chosen layers side by side instead of mixing them:
    per doc (n_layers, n_tokens, width) -> (n_tokens, len(layers) x width), then ``dropout``.

    The next layer weights every feature of every layer itself. It takes the keys of
    ``spacy_elmo.ScalarMix.v1`` so that one override swaps it in; ``layer_norm`` and ``l2``
    belong to the scalar mix and must stay off.
    """
    if layer_norm or l2:
        raise ValueError(
            "layer_norm and l2 belong to the scalar mix of the ELMo layers; elmo_project.ConcatLayers.v1 "
            "has no mix: set layer_norm = false and l2 = 0.0"
        )
    side_by_side = chain(ConcatLayers(len(layers) if layers is not None else None), Dropout(dropout))
    return side_by_side if layers is None else chain(SelectLayers(layers), side_by_side)


def ConcatLayers(n_layers: Optional[int] = None, width: Optional[int] = None) -> Model[List[Floats3d], List[Floats2d]]:
    """Each doc's (n_layers, n_tokens, width) layers side by side: (n_tokens, n_layers * width).

    ``n_layers`` and ``width`` left None are learned at initialization from the sample."""
    n_out = n_layers * width if n_layers is not None and width is not None else None
    return Model(
        "elmo_concat_layers", _concat_forward, init=_concat_init, dims={"nL": n_layers, "nI": width, "nO": n_out}
    )


def _concat_init(model: Model, X: Optional[List[Floats3d]] = None, Y: Optional[object] = None) -> None:
    """Learn ``nL`` and ``nI`` (the width) from the sample when not given; ``nO`` follows."""
    infer_layer_sizes(model, X, width_dim="nI")
    if model.has_dim("nO") is None:
        model.set_dim("nO", model.get_dim("nL") * model.get_dim("nI"))


def _concat_forward(model: Model, Xs: List[Floats3d], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    n_layers, width = model.get_dim("nL"), model.get_dim("nI")
    for X in Xs:
        if X.shape[0] != n_layers or X.shape[2] != width:
            raise size_mismatch((n_layers, width), (X.shape[0], X.shape[2]))
    xp = model.ops.xp
    Ys = [xp.ascontiguousarray(X.transpose(1, 0, 2)).reshape(X.shape[1], n_layers * width) for X in Xs]

    def backprop(dYs: List[Floats2d]) -> List[Floats3d]:
        return [xp.ascontiguousarray(dY.reshape(dY.shape[0], n_layers, width).transpose(1, 0, 2)) for dY in dYs]

    return Ys, backprop


@registry.architectures("elmo_project.ElmoListenerSkipEncoder.v1")
def build_skip_encoder_listener(
    encode: Model[List[Floats2d], List[Floats2d]],
    width: Optional[int] = None,
    n_layers: Optional[int] = None,
    upstream: str = "*",
    mix: Optional[Model[List[Floats3d], List[Floats2d]]] = None,
    embed: Optional[Model[List[Doc], List[Floats2d]]] = None,
    bilm: Optional[Model[List[Doc], List[Floats3d]]] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """``spacy_elmo.ElmoListener.v2`` with the encoder's input (the ELMo mix and the embedding) beside
    its output: the paper's ELMo at the output of the task's encoder, ``[h_k; ELMo_k; x_k]``.

    Per doc (n_tokens, encoder width + mix width + embed width); the head reads ELMo directly,
    not only through the encoder's narrower width. The keys are the listener's.
    """
    features = build_elmo_listener(width, n_layers, upstream, mix, embed, None, bilm)
    model = chain(features, concatenate(encoder_of(encode), noop()))
    model.init = without_labels(model.init)
    return model


@registry.architectures("elmo_project.ElmoBOWTextCat.v1")
def build_bow_dropout_textcat(
    tok2vec: Model[List[Doc], List[Floats2d]],
    exclusive_classes: bool,
    ngram_size: int = 1,
    length: int = 262144,
    dropout: float = 0.1,
    nO: Optional[int] = None,
    bow_dropout: float = 0.0,
) -> Model[List[Doc], Floats2d]:
    """``spacy_elmo.ElmoBOWTextCat.v1`` that, in training, drops the bag of words' scores of a share
    ``bow_dropout`` of the docs (see :func:`RowDropout`), so that ELMo alone classifies those and
    its layer keeps learning once the bag of words fits the training set."""
    bow = build_bow_text_classifier_v3(exclusive_classes, ngram_size, no_output_layer=True, length=length, nO=nO)
    return bow_beside_elmo(chain(bow, RowDropout(bow_dropout)), tok2vec, exclusive_classes, dropout, nO)


def RowDropout(rate: float) -> Model[Floats2d, Floats2d]:
    """Zero each row of a (n_rows, width) array with probability ``rate`` in training (inverted
    dropout: kept rows are scaled by 1 / (1 - rate)); the identity in prediction.

    thinc's ``Dropout`` drops single entries, which for class scores would drop some classes of
    a doc and keep others."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"bow_dropout needs 0 <= rate < 1, got {rate}")
    # Not "dropout_rate": spaCy's nlp.update sets every layer's "dropout_rate" to its own drop.
    return Model("row_dropout", _row_dropout_forward, attrs={"row_dropout_rate": rate})


def _row_dropout_forward(model: Model, X: Floats2d, is_train: bool) -> Tuple[Floats2d, Callable]:
    rate = model.attrs["row_dropout_rate"]
    if not is_train or rate == 0.0:
        return X, lambda dY: dY
    mask = model.ops.get_dropout_mask((X.shape[0], 1), rate)  # (n_rows, 1): 0 or 1 / (1 - rate)
    return X * mask, lambda dY: dY * mask
