"""The listener: the ``tok2vec`` slot of a downstream component, fed by the upstream ``elmo`` pipe.

In training, the ``elmo`` pipe runs the biLM once per batch and hands every listener the layers
and a backprop callback (:meth:`ElmoListener.receive`). In prediction, the pipe stores each
doc's layers in ``doc._.elmo_features`` and the listener reads them there. A listener whose
upstream did not run raises an error: it never guesses with zeros.
"""

from typing import Callable, Iterable, List, Optional, Tuple

from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats3d

from .arrays import no_backprop

FEATURES_ATTR = "elmo_features"

MISSING_UPSTREAM = (
    "The ELMo listener in '{component}' found no ELMo features on the docs: its upstream 'elmo' "
    "component did not run on them. Add the 'elmo' component before '{component}' and keep it "
    "enabled; when training with 'elmo' in [training.frozen_components], also list it in "
    "[training.annotating_components]. To make '{component}' independent of 'elmo', use "
    "nlp.replace_listeners('elmo', '{component}', ['model.tok2vec'])."
)


def size_mismatch(
    listener_sizes: Tuple[int, int], bilm_sizes: Tuple[int, int], component: Optional[str] = None, upstream: Optional[str] = None
) -> ValueError:
    """The error for a listener sized for another biLM; sizes are (n_layers, width)."""
    listener = f"The ELMo listener in '{component}'" if component else "An ELMo listener"
    bilm = f"the '{upstream}' biLM" if upstream else "its upstream biLM"
    return ValueError(
        f"{listener} is configured for n_layers={listener_sizes[0]} and width={listener_sizes[1]}, but "
        f"{bilm} gives {bilm_sizes[0]} layers of width {bilm_sizes[1]}: set n_layers and width of "
        "spacy_elmo.ElmoListener.v1 to the biLM's sizes."
    )


class ElmoListener(Model):
    """Yields, per doc, the upstream biLM's layers: (n_layers + 1, n_tokens, width)."""

    name = "elmo_listener"

    def __init__(self, upstream_name: str, width: int, n_layers: int) -> None:
        Model.__init__(self, name=self.name, forward=forward, init=init, dims={"nO": width, "nL": n_layers})
        self.upstream_name = upstream_name
        self._batch_id: Optional[int] = None
        self._outputs: Optional[List[Floats3d]] = None
        self._backprop: Optional[Callable] = None
        # Set by init: the list of initialization docs whose shapes we may fake (see forward).
        self._init_sample: Optional[List[Doc]] = None
        self.component_name = "the downstream component"

    @classmethod
    def get_batch_id(cls, docs: Iterable[Doc]) -> int:
        """A content hash of the batch, to catch being handed another batch's outputs."""
        return sum(sum(token.orth for token in doc) for doc in docs)

    def receive(self, batch_id: int, outputs: List[Floats3d], backprop: Callable) -> None:
        """Store a training batch's layers and the upstream backprop callback."""
        self._batch_id = batch_id
        self._outputs = outputs
        self._backprop = backprop
        self._init_sample = None

    def backprop_and_clear(self, d_outputs: List[Floats3d]) -> List[Doc]:
        """The upstream backprop, after which the listener drops the batch: a fine-tuned biLM's
        graph and the batch's layers are freed now, not when the next batch arrives."""
        backprop = self._backprop
        self._batch_id = self._outputs = self._backprop = None
        return backprop(d_outputs) if backprop is not None else []

    def verify_inputs(self, docs: List[Doc]) -> None:
        batch_id = self.get_batch_id(docs)
        if batch_id != self._batch_id:
            raise ValueError(
                f"The ELMo listener in '{self.component_name}' received a batch (id {batch_id}) other "
                f"than the one its upstream 'elmo' processed (id {self._batch_id}); the 'elmo' "
                "component must update on the same batch just before its listeners."
            )


def init(model: ElmoListener, X: Optional[List[Doc]] = None, Y: Optional[object] = None) -> None:
    """Remember the initialization sample: the list object itself, not its content.

    Thinc's ``chain`` initializes a layer and then predicts on the same list of docs to learn the
    next layer's input shape, before the upstream ``elmo`` component has ever seen those docs.
    Only that list gets shape-only zeros; holding it keeps its identity from being reused.
    """
    if X is not None:
        model._init_sample = X


def forward(model: ElmoListener, docs: List[Doc], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    if is_train and model._batch_id is not None:
        model.verify_inputs(docs)
        return model._outputs, model.backprop_and_clear
    outputs = [doc._.get(FEATURES_ATTR) if Doc.has_extension(FEATURES_ATTR) else None for doc in docs]
    if all(output is not None for output in outputs):
        model._init_sample = None
        return outputs, no_backprop
    if docs is model._init_sample:
        # Only for shape inference during initialization: zeros of the right shape.
        shape = (model.get_dim("nL"), model.get_dim("nO"))
        return [model.ops.alloc3f(shape[0], len(doc), shape[1]) for doc in docs], no_backprop
    raise ValueError(MISSING_UPSTREAM.format(component=model.component_name))

