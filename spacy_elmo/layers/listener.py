"""The listener: the ``tok2vec`` slot of a downstream component, fed by the upstream ``elmo`` pipe.

In training, the ``elmo`` pipe runs the biLM once per batch and hands every listener the layers
and a backprop callback (:meth:`ElmoListener.receive`). In prediction, the pipe stores each
doc's layers in ``doc._.elmo_features``, with the ids of its listeners in
``doc._.elmo_features_unread``, and each listener reads them there. Once every listener has read
them in prediction, the last one releases them: all layers of a doc take 4 * (n_layers + 1) *
width bytes per token (docs/component.md has the sizes), on the GPU when the pipeline runs there,
and a doc that the user keeps must not keep them too. A listener whose upstream did not run
raises an error: it never guesses with zeros.
"""

from typing import Callable, Iterable, List, Optional, Tuple

from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats3d

from .arrays import no_backprop

InT = List[Doc]
OutT = List[Floats3d]  # per doc: (n_layers, n_tokens, width)

FEATURES_ATTR = "elmo_features"
UNREAD_ATTR = "elmo_features_unread"

UNREGISTERED = "the downstream component"

MISSING_SIZES = (
    "The ELMo listener in '{component}' has no width and n_layers: they come from the biLM of its "
    "upstream 'elmo' component, which has not given them. Initialize 'elmo' before '{component}' "
    "(nlp.initialize() does, in pipeline order), or set width and n_layers of spacy_elmo.ElmoListener.v2."
)

NO_UPSTREAM_SIZES = (
    "An ELMo listener has no width and n_layers, and no upstream component gives them: add the 'elmo' "
    "component (upstream = '{upstream}'; '*' is any) before the component that holds the listener, "
    "so that the sizes come from its biLM, or set width and n_layers of spacy_elmo.ElmoListener.v2."
)

MISSING_UPSTREAM = (
    "The ELMo listener in '{component}' found no ELMo features on the docs: its upstream 'elmo' "
    "component did not run on them. Add the 'elmo' component before '{component}' and keep it "
    "enabled; when training with 'elmo' in [training.frozen_components], also list it in "
    "[training.annotating_components]. To make '{component}' independent of 'elmo', use "
    "nlp.replace_listeners('elmo', '{component}', ['model.tok2vec']). The features of a doc are "
    "released once every listener has read them: to run '{component}' on a doc again, run 'elmo' "
    "on it again first."
)

NAMED_UPSTREAM = (
    " This listener listens to a component named '{upstream}' only (upstream = \"{upstream}\"): if the "
    'elmo component has another name (nlp.rename_pipe, add_pipe(..., name=...)), set upstream = "*", '
    "which listens to the elmo component before it whatever its name."
)


def size_mismatch(
    listener_sizes: Tuple[int, int],
    bilm_sizes: Tuple[int, int],
    component: Optional[str] = None,
    upstream: Optional[str] = None,
) -> ValueError:
    """The error for a listener sized for another biLM; sizes are (n_layers, width)."""
    listener = f"The ELMo listener in '{component}'" if component else "An ELMo listener"
    bilm = f"the '{upstream}' biLM" if upstream else "its upstream biLM"
    return ValueError(
        f"{listener} is configured for n_layers={listener_sizes[0]} and width={listener_sizes[1]}, but "
        f"{bilm} gives {bilm_sizes[0]} layers of width {bilm_sizes[1]}: set n_layers and width of "
        "spacy_elmo.ElmoListener.v2 to null (they then come from the biLM) or to the biLM's sizes."
    )


class ElmoListener(Model[InT, OutT]):
    """Yields, per doc, the upstream biLM's layers: (n_layers, n_tokens, width).

    Dims ``nL`` (n_layers: lstm n_layers + 1) and ``nO`` (width: 2 x projection_dim) are the
    biLM's. Left None, the upstream ``elmo`` component sets them (:meth:`take_sizes`) as soon as
    its biLM's sizes are known: when it registers the listener for a biLM built fresh, at its
    ``initialize`` for one read from files. spaCy initializes components in pipeline order, so
    the listener has them by its own initialization, where the layers after it learn their input
    sizes from its output.
    """

    name = "elmo_listener"

    def __init__(self, upstream_name: str, width: Optional[int] = None, n_layers: Optional[int] = None) -> None:
        Model.__init__(self, name=self.name, forward=forward, init=init, dims={"nO": width, "nL": n_layers})
        self.upstream_name = upstream_name
        self._batch_id: Optional[int] = None
        self._outputs: Optional[OutT] = None
        self._backprop: Optional[Callable[[OutT], InT]] = None
        # Set by init: the list of initialization docs whose shapes we may fake (see forward).
        self._init_sample: Optional[InT] = None
        self.component_name = UNREGISTERED  # until an upstream component registers the listener

    def take_sizes(self, n_layers: int, width: int, upstream: str) -> None:
        """Take the upstream biLM's sizes for the dims left unset; a set one it contradicts is an error."""
        bilm_sizes = (n_layers, width)
        own_layers, own_width = self.maybe_get_dim("nL"), self.maybe_get_dim("nO")
        configured = (n_layers if own_layers is None else own_layers, width if own_width is None else own_width)
        if configured != bilm_sizes:
            raise size_mismatch(configured, bilm_sizes, self.component_name, upstream)
        self.set_dim("nL", n_layers)
        self.set_dim("nO", width)

    @classmethod
    def get_batch_id(cls, docs: Iterable[Doc]) -> int:
        """A content hash of the batch, to catch being handed another batch's outputs."""
        return sum(sum(token.orth for token in doc) for doc in docs)

    def receive(self, batch_id: int, outputs: OutT, backprop: Callable[[OutT], InT]) -> None:
        """Store a training batch's layers and the upstream backprop callback."""
        self._batch_id, self._outputs, self._backprop = batch_id, outputs, backprop
        self._init_sample = None

    def backprop_and_clear(self, d_outputs: OutT) -> InT:
        """The upstream backprop, after which the listener drops the batch: a fine-tuned biLM's
        graph and the batch's layers are freed now, not when the next batch arrives."""
        backprop = self._backprop
        self._batch_id = self._outputs = self._backprop = None
        return backprop(d_outputs) if backprop is not None else []


def init(model: ElmoListener, X: Optional[InT] = None, Y: Optional[OutT] = None) -> None:
    """Remember the initialization sample: the list object itself, not its content.

    Thinc's ``chain`` initializes a layer and then predicts on the same list of docs to learn the
    next layer's input shape, before the upstream ``elmo`` component has ever seen those docs.
    Only that list gets shape-only zeros; holding it keeps its identity from being reused. The
    sizes must be known by now (see :class:`ElmoListener`): the layers after the listener learn
    theirs from these zeros.
    """
    if model.has_dim("nO") is not True or model.has_dim("nL") is not True:
        if model.component_name == UNREGISTERED:
            raise ValueError(NO_UPSTREAM_SIZES.format(upstream=model.upstream_name))
        raise ValueError(MISSING_SIZES.format(component=model.component_name))
    if X is not None:
        model._init_sample = X


def forward(model: ElmoListener, docs: InT, is_train: bool) -> Tuple[OutT, Callable[[OutT], InT]]:
    """The layers the upstream handed over (training) or left on the docs (prediction); zeros of
    the right shapes for the initialization sample only (see :func:`init`)."""
    if is_train and model._outputs is not None:  # received with its batch id (see receive)
        if (batch_id := model.get_batch_id(docs)) != model._batch_id:
            raise ValueError(
                f"The ELMo listener in '{model.component_name}' received a batch (id {batch_id}) other "
                f"than the one its upstream 'elmo' processed (id {model._batch_id}); the 'elmo' "
                "component must update on the same batch just before its listeners."
            )
        return model._outputs, model.backprop_and_clear
    outputs = [doc._.get(FEATURES_ATTR) if Doc.has_extension(FEATURES_ATTR) else None for doc in docs]
    if all(output is not None for output in outputs):
        model._init_sample = None
        if not is_train:
            release_read_features(docs, model.id)
        return outputs, no_backprop
    if docs is model._init_sample:
        # Only for shape inference during initialization: zeros of the right shape.
        shape = (model.get_dim("nL"), model.get_dim("nO"))
        return [model.ops.alloc3f(shape[0], len(doc), shape[1]) for doc in docs], no_backprop
    named = NAMED_UPSTREAM.format(upstream=model.upstream_name) if model.upstream_name != "*" else ""
    raise ValueError(MISSING_UPSTREAM.format(component=model.component_name) + named)


def release_read_features(docs: InT, listener_id: int) -> None:
    """Mark the docs' features as read by the listener ``listener_id``; drop those all have read.

    Only reads in prediction count: in training, a component listed in
    ``[training.annotating_components]`` reads a doc's features in its update and again when it
    annotates, and the components after it read them later in the same step. Features that were
    set by hand, without the ids of unread listeners, are left alone.
    """
    for doc in docs:
        unread = doc._.get(UNREAD_ATTR)
        if unread is None or listener_id not in unread:
            continue
        unread = tuple(other for other in unread if other != listener_id)
        doc._.set(UNREAD_ATTR, unread or None)
        if not unread:
            doc._.set(FEATURES_ATTR, None)
