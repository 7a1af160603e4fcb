"""Registered architectures of spacy-elmo: they compose the layers in :mod:`spacy_elmo.layers`."""

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from spacy.tokens import Doc
from spacy.util import registry
from spacy.ml.models.textcat import build_bow_text_classifier_v3
from thinc.api import (
    Dropout,
    Linear,
    Logistic,
    Maxout,
    Model,
    PyTorchGradScaler,
    add,
    chain,
    concatenate,
    list2ragged,
    noop,
    reduce_mean,
    softmax_activation,
    with_array,
    zero_init,
)
from thinc.types import Floats2d, Floats3d

from .bilm.model import StateMode
from .bilm.precision import Precision
from .layers import ConcatLayers, ElmoBiLMLayer, ElmoListener, RowDropout, ScalarMix, SelectLayers


@registry.architectures("spacy_elmo.ElmoBiLM.v1")
def build_elmo_bilm(
    pretrained: Optional[str],
    options_file: Optional[Path],
    weight_file: Optional[Path],
    lstm_dim: Optional[int],
    projection_dim: Optional[int],
    n_layers: Optional[int],
    char_embedding_dim: Optional[int],
    filters: Optional[List[List[int]]],
    n_highway: Optional[int],
    state: StateMode,
    freeze: bool,
    window: int,
    overlap: int,
    max_batch_tokens: int,
    token_cache_size: int,
    feature_cache_mb: float,
    dropout: float,
    mixed_precision: bool,
    grad_scaler_config: dict,
    precision: Precision = "auto",
    learn_rate_scale: float = 1.0,
) -> Model[List[Doc], List[Floats3d]]:
    """The ELMo biLM: docs in, one (n_layers + 1, n_tokens, 2 * projection_dim) array per doc out.

    The weights are read once, at ``nlp.initialize()``, from ``options_file`` and ``weight_file``
    (standard bilm-tf / AllenNLP files) when given, else from the biLM bundled as ``pretrained``
    (see :mod:`spacy_elmo.pretrained`); with ``pretrained = null`` and no files a fresh, untrained
    biLM is built. The sizes (``lstm_dim`` ... ``n_highway``) are null when the files decide them;
    a size that is set must agree with the files, and shapes a fresh biLM (unset sizes there take
    the published Small model's, see :class:`~spacy_elmo.bilm.ElmoOptions`). Defaults: the
    ``elmo`` factory's.
    ``freeze`` keeps the biLM's weights fixed (features computed without gradients and cached
    across epochs, up to ``feature_cache_mb``). ``window``/``overlap`` split text without
    sentence boundaries (see :mod:`spacy_elmo.layers.segmentation`). ``max_batch_tokens`` bounds the
    padded tokens per biLM call. ``precision``: of the biLM's matrix products, ``"fp32"``,
    ``"bf16"`` or ``"auto"`` (bf16 where the CPU or GPU multiplies it natively; see
    :mod:`spacy_elmo.bilm.precision`); features are float32 either way. ``mixed_precision`` and
    ``grad_scaler_config`` (arguments of thinc's PyTorchGradScaler) are passed to thinc's
    PyTorchShim; both only act on GPU, and thinc's autocast does not reach inside the biLM,
    which sets its precision itself. ``learn_rate_scale`` scales the optimizer's steps on the
    biLM's weights when ``freeze = false`` (e.g. 0.1: a tenth of the task layers' learning
    rate). ``precision`` and ``learn_rate_scale`` have defaults so that configs saved before
    they existed still load.
    """
    sizes: Dict[str, Any] = {
        "lstm_dim": lstm_dim,
        "projection_dim": projection_dim,
        "n_layers": n_layers,
        "char_embedding_dim": char_embedding_dim,
        "filters": tuple((int(width), int(count)) for width, count in filters) if filters is not None else None,
        "n_highway": n_highway,
    }
    grad_scaler = PyTorchGradScaler(**grad_scaler_config) if grad_scaler_config else None
    return ElmoBiLMLayer(
        pretrained=pretrained,
        options_file=options_file,
        weight_file=weight_file,
        sizes={name: value for name, value in sizes.items() if value is not None},
        state=state,
        freeze=freeze,
        window=window,
        overlap=overlap,
        max_batch_tokens=max_batch_tokens,
        token_cache_size=token_cache_size,
        feature_cache_mb=feature_cache_mb,
        dropout=dropout,
        precision=precision,
        mixed_precision=mixed_precision,
        grad_scaler=grad_scaler,
        learn_rate_scale=learn_rate_scale,
    )


@registry.architectures("spacy_elmo.ElmoListener.v1")
def build_elmo_listener(
    width: Optional[int] = None,
    n_layers: Optional[int] = None,
    upstream: str = "*",
    layer_norm: bool = False,
    l2: float = 0.0,
    dropout: float = 0.0,
    embed: Optional[Model[List[Doc], List[Floats2d]]] = None,
    encode: Optional[Model[List[Floats2d], List[Floats2d]]] = None,
    bilm: Optional[Model[List[Doc], List[Floats3d]]] = None,
    skip_encoder: bool = False,
    layers: Optional[List[int]] = None,
    concat_layers: bool = False,
) -> Model[List[Doc], List[Floats2d]]:
    """A ``tok2vec`` for downstream components: the upstream biLM's layers, mixed for this task.

    ``width`` is the biLM's output width (2 x projection_dim) and ``n_layers`` its number of
    output layers (lstm n_layers + 1). Left null, as in the shipped configs, they come from the
    upstream biLM's files at ``nlp.initialize()``, and the layers after the listener learn their
    input sizes from its output then (thinc's shape inference): a config fits any biLM. Set, they
    must agree with the biLM, or initialization stops with an error naming both. The
    task-specific mix (see :func:`ScalarMix`) has ``layer_norm``, ``l2`` and ``dropout``. With
    ``embed`` (e.g. spacy.MultiHashEmbed.v2), its vectors are concatenated after ELMo's: the
    paper's ``[x_k; ELMo_k]``; output width is then ``width + embed width``. With ``encode``
    (e.g. spacy.MaxoutWindowEncoder.v2) those features go through a task-specific contextual
    encoder, as the paper feeds ELMo into the task's RNN:
    a maxout layer with layer normalization (as in spacy.MultiHashEmbed.v2) brings them to the
    encoder's width, which is then the output width. So ``embed`` + ``encode`` as in spaCy's
    spacy.Tok2Vec.v2 give that tok2vec with ELMo added to its input. ``skip_encoder`` also puts
    the encoder's input (ELMo and the embedding) beside its output, the paper's ELMo at the
    output of the task's encoder, ``[h_k; ELMo_k; x_k]``: the head reads ELMo directly, not only
    through the encoder's narrower width; output width is then the sum. ``layers`` chooses the
    biLM layers the task reads (0 = the char CNN, 1.. = the LSTM layers; all by default).
    ``concat_layers`` puts them side by side, (n_tokens, len(layers) x width), in place of the
    scalar mix, so the next layer weights every feature of every layer itself; ``dropout`` then
    applies to that concatenation, and ``layer_norm`` and ``l2`` (the mix's) must stay off. ``bilm`` replaces the
    listener by an own biLM; it is what ``nlp.replace_listeners`` writes, rarely set by hand.
    """
    if skip_encoder and encode is None:
        raise ValueError("skip_encoder = true puts the encoder's input beside its output: it needs an encode model")
    source = bilm if bilm is not None else ElmoListener(upstream, width, n_layers)
    if layers is not None and (n_layers is None or list(layers) != list(range(n_layers))):
        source = chain(source, SelectLayers(layers, n_layers))
    n_chosen = len(layers) if layers is not None else n_layers
    mixed = chain(source, _combine_layers(n_chosen, width, concat_layers, layer_norm, l2, dropout))
    # None while the biLM's sizes are unknown: chain and concatenate learn it at initialization.
    mixed_width = _mixed_width(n_chosen, width, concat_layers)
    if mixed_width is not None:
        mixed.set_dim("nO", mixed_width)
    if embed is None and encode is None:
        return mixed
    model = mixed if embed is None else concatenate(mixed, embed)
    if embed is not None and embed.has_dim("nO") is True and mixed_width is not None:
        model.set_dim("nO", mixed_width + embed.get_dim("nO"))
    if encode is not None:
        encoded_width = encode.get_dim("nO")
        input_width = model.get_dim("nO") if model.has_dim("nO") is True else None
        encoder = chain(with_array(Maxout(encoded_width, nP=3, normalize=True)), encode)
        if skip_encoder:
            model = chain(model, concatenate(encoder, noop()))
            if input_width is not None:
                model.set_dim("nO", encoded_width + input_width)
        else:
            model = chain(model, encoder)
            model.set_dim("nO", encoded_width)
    # A head may hand its labels Y to a tok2vec whose width is still unknown (spaCy's
    # TextCatReduce does, through chain); concatenate would pass them on and the embedding would
    # take the number of labels for its width. The widths here come from the parts alone.
    model.init = _without_labels(model.init)
    return model


@registry.architectures("spacy_elmo.ElmoBOWTextCat.v1")
def build_elmo_bow_textcat(
    tok2vec: Model[List[Doc], List[Floats2d]],
    exclusive_classes: bool,
    ngram_size: int = 1,
    length: int = 262144,
    dropout: float = 0.1,
    nO: Optional[int] = None,
    bow_dropout: float = 0.0,
) -> Model[List[Doc], Floats2d]:
    """spaCy's bag-of-words classifier (spacy.TextCatBOW.v3) with ELMo added to its features.

    The scores (n_docs, nO) are the bag of words' linear scores plus a linear layer over the mean
    of the doc's ``tok2vec`` vectors (e.g. an ElmoListener; an empty doc adds zeros), then softmax
    (``exclusive_classes``) or logistic. That layer starts at zero, so the model starts as spaCy's
    efficiency textcat and keeps what ELMo adds to it: in spaCy's TextCatEnsemble.v2 the bag of
    words feeds a shared output layer and learns slowly beside a weak branch. ``bow_dropout``
    drops the bag of words' scores of that share of the docs in training (see
    :func:`~spacy_elmo.layers.RowDropout`): once the bag of words fits the training set, the ELMo
    layer otherwise gets almost no gradient.
    """
    bow = build_bow_text_classifier_v3(exclusive_classes, ngram_size, no_output_layer=True, length=length, nO=nO)
    if bow_dropout > 0.0:
        bow = chain(bow, RowDropout(bow_dropout))
    pooled = chain(tok2vec, list2ragged(), reduce_mean(), Dropout(dropout), Linear(nO, init_W=zero_init))
    activation = softmax_activation() if exclusive_classes else Logistic()
    model = chain(add(bow, pooled), activation)
    if nO is not None:
        model.set_dim("nO", nO)
    model.attrs["multi_label"] = not exclusive_classes
    return model


def _mixed_width(n_layers: Optional[int], width: Optional[int], concat_layers: bool) -> Optional[int]:
    """The listener's output width before any embedding or encoder: None until the sizes are known."""
    if width is None or (concat_layers and n_layers is None):
        return None
    return n_layers * width if concat_layers else width


def _combine_layers(
    n_layers: Optional[int], width: Optional[int], concat_layers: bool, layer_norm: bool, l2: float, dropout: float
) -> Model[List[Floats3d], List[Floats2d]]:
    """The scalar mix of the layers, or (``concat_layers``) the layers side by side with dropout.

    Sizes left None are learned from the layers at initialization."""
    if not concat_layers:
        return ScalarMix(n_layers, width, layer_norm=layer_norm, l2=l2, dropout=dropout)
    if layer_norm or l2:
        raise ValueError(
            "layer_norm and l2 belong to the scalar mix of the ELMo layers; with concat_layers = true "
            "there is no mix: set layer_norm = false and l2 = 0.0"
        )
    return chain(ConcatLayers(n_layers, width), Dropout(dropout))


def _without_labels(init: Callable) -> Callable:
    def init_from_inputs(model: Model, X: Optional[Any] = None, Y: Optional[Any] = None) -> None:
        init(model, X=X, Y=None)

    return init_from_inputs
