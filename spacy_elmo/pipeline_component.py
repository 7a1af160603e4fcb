"""The ``elmo`` pipeline component: contextual vectors for spaCy, and ELMo features for listeners.

The pipe runs the biLM once per batch. It sets ``doc._.elmo_vectors`` (a fixed mix of the
layers, default their average), read by the vector/similarity user hooks, and ``doc.tensor`` where
no other component wrote it; optionally ``doc._.elmo_layers``; and it feeds every downstream
:class:`~spacy_elmo.layers.ElmoListener` (``ner``, ``textcat`` ...), each of which learns its own
mix of the layers. It coexists with spaCy's ``tok2vec`` anywhere in a pipeline, and its biLM's
weights come from files, never from training: added to a trained pipeline, it reads them on first
use, without the ``nlp.initialize()`` that would reset the other components.
"""

import os
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy
import torch
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.util import minibatch
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer
from thinc.types import Floats1d, Floats2d, Floats3d

from . import architectures  # noqa: F401  (registers the architectures named in DEFAULT_MODEL)
from .bilm import BiLM
from .bilm.runtime import token_groups
from .layers import ElmoBiLMSettings, ElmoListener, get_bilm, get_runtime, predict_mixed, set_bilm
from .layers.arrays import no_backprop
from .layers.language import choose_pretrained
from .layers.listener import FEATURES_ATTR, UNREAD_ATTR
from .pipeline_listeners import ElmoListeners
from .pipeline_serialization import ElmoSerialization
from .threads import Cores, Threads, check_threads
from .vector_hooks import VECTORS_ATTR, install_vector_hooks

LAYERS_ATTR = "elmo_layers"

# [components.elmo.model]: the bundled English biLM, frozen, with the defaults of ElmoBiLMSettings.
DEFAULT_MODEL = {"@architectures": "spacy_elmo.ElmoBiLM.v1", **ElmoBiLMSettings().to_config()}

for _attr in (FEATURES_ATTR, UNREAD_ATTR, LAYERS_ATTR):
    if not Doc.has_extension(_attr):
        Doc.set_extension(_attr, default=None)


# What the component sets, for ``nlp.analyze_pipes()`` (see :meth:`Elmo.set_annotations`). It
# requires nothing but tokens: a doc's sentences, where it has them, are run one by one, else whole.
ASSIGNS = ["doc.tensor", "doc.user_hooks", "doc.user_span_hooks", "doc.user_token_hooks"] + [
    f"doc._.{attr}" for attr in (VECTORS_ATTR, FEATURES_ATTR, UNREAD_ATTR, LAYERS_ATTR)
]


@Language.factory(
    "elmo",
    assigns=ASSIGNS,
    requires=[],
    default_config={
        "model": DEFAULT_MODEL,
        "store_layers": False,
        "tensor_weights": None,
        "pipe_batch_tokens": 4096,
        "threads": "auto",
        "features": None,
    },
)
def make_elmo(
    nlp: Language,
    name: str,
    model: Model[List[Doc], List[Floats3d]],
    store_layers: bool,
    tensor_weights: Optional[List[float]],
    pipe_batch_tokens: int,
    threads: Threads,
    features: Optional[str],
) -> "Elmo":
    """ELMo vectors for ``token.vector`` & co (``doc._.elmo_vectors``), and features for listeners.

    ``store_layers``: also keep every layer, as numpy, in ``doc._.elmo_layers``.
    ``tensor_weights``: one weight per biLM output layer for ``doc._.elmo_vectors`` (and
    ``doc.tensor`` where elmo writes it); null = average.
    ``pipe_batch_tokens``: in ``nlp.pipe``, docs are sorted by length and processed in groups of
    at most this many tokens, which bounds the memory the layers of a batch take.
    ``threads``: torch threads for the biLM; ``"auto"`` takes all cores on an idle machine and
    leaves other busy processes their cores (see :mod:`spacy_elmo.threads`).
    ``features``: a store written by ``spacy-elmo embed`` (Parquet directory or .hdf5 file) of the
    same biLM; biLM inputs found there take their layers from it, the others are computed.

    ``model.pretrained = "default"`` is the biLM bundled for ``nlp.lang`` (see
    :mod:`spacy_elmo.layers.language`): an error for a language with none bundled.
    """
    if "pretrained" in model.attrs:  # the ElmoBiLM layer (another architecture may stand in its place)
        model.attrs["pretrained"] = choose_pretrained(
            model.attrs["pretrained"], model.attrs["options_file"] is not None, nlp.lang or ""
        )
    return Elmo(
        nlp.vocab,
        model,
        name=name,
        store_layers=store_layers,
        tensor_weights=tensor_weights,
        pipe_batch_tokens=pipe_batch_tokens,
        threads=threads,
        features=features,
    )


class Elmo(ElmoSerialization, ElmoListeners, TrainablePipe):
    """Runs the biLM once per batch; see the module docstring. Saved and read back as
    :class:`~spacy_elmo.pipeline_serialization.ElmoSerialization` says; its listeners are
    registered as :class:`~spacy_elmo.pipeline_listeners.ElmoListeners` says."""

    cores = Cores()  # what threads = "auto" asks of the machine (the OS; tests set their own)

    def __init__(
        self,
        vocab: Vocab,
        model: Model[List[Doc], List[Floats3d]],
        name: str = "elmo",
        *,
        store_layers: bool = False,
        tensor_weights: Optional[List[float]] = None,
        pipe_batch_tokens: int = 4096,
        threads: Threads = "auto",
        features: Optional[Union[str, Path]] = None,
    ) -> None:
        if pipe_batch_tokens < 1:
            raise ValueError(f"elmo pipe_batch_tokens must be at least 1, got {pipe_batch_tokens}")
        check_threads(threads)
        self.vocab = vocab
        self.model = model
        self.name = name
        self.listener_map: Dict[str, List[ElmoListener]] = {}
        self.cfg = {
            "store_layers": store_layers,
            "tensor_weights": list(tensor_weights) if tensor_weights is not None else None,
            "pipe_batch_tokens": pipe_batch_tokens,
            "threads": threads,
            "features": str(features) if features is not None else None,
        }
        self._pid = os.getpid()
        self._loaded = False  # the biLM's weights are in place (see _load_once)
        self._backprop_pending = False  # a fine-tuning forward pass awaits its listeners' gradients
        self._deferred_sgd: Optional[Optimizer] = None
        if features is not None:  # the frozen biLM reads precomputed layers there (opened on first use)
            from .embed.store import FeatureStore

            if not self.model.attrs["freeze"]:
                raise ValueError(
                    "elmo features: precomputed layers need a frozen biLM (freeze = true); a biLM being "
                    "fine-tuned changes its outputs. Set [components.elmo] features = null or freeze = true."
                )
            self.model.attrs["feature_store"] = FeatureStore(Path(features))

    # ------------------------------------------------------------------ prediction
    def predict(self, docs: Iterable[Doc]) -> List[Floats3d]:
        """Each doc's layers, (n_layers + 1, n_tokens, width), on the device of the model's ops."""
        docs = list(docs)
        if not docs:
            return []
        self._load_once()
        with self.cores.torch_threads(self._threads(), get_runtime(self.model)):
            return self.model.predict(docs)

    def __call__(self, doc: Doc) -> Doc:
        """Annotate one doc (see :meth:`set_annotations`)."""
        try:
            self._annotate([doc])
        except Exception as err:
            self.get_error_handler()(self.name, self, [doc], err)
        return doc

    def _annotate(self, docs: List[Doc]) -> None:
        """:meth:`predict` and :meth:`set_annotations`; where nothing reads the layers (no
        listener, no ``store_layers``), only their mix is made (:func:`~.layers.predict_mixed`)."""
        if self.listeners or self.cfg["store_layers"]:
            self.set_annotations(docs, self.predict(docs))
            return
        self._load_once()
        with self.cores.torch_threads(self._threads(), get_runtime(self.model)):
            mixed = predict_mixed(self.model, docs, self._tensor_weights())
        for doc, vectors in zip(docs, mixed):
            _set_vectors(doc, vectors)

    def set_annotations(self, docs: Sequence[Doc], layers: Sequence[Floats3d]) -> None:
        """Set ``doc._.elmo_vectors`` (n_tokens, width), the vector hooks that read it, the tensor
        where it is free, and the layers where needed.

        ``doc.tensor`` gets the same array only when it is empty or was written by elmo itself:
        spaCy's ``tok2vec`` listeners read ``doc.tensor`` at prediction time, so a tensor that a
        ``tok2vec`` before elmo wrote stays its own, and one after elmo overwrites it as spaCy
        expects. The layers go to ``doc._.elmo_features`` only for the listeners, with the ids of
        those that have yet to read them; the last of them to read releases them (see
        :mod:`spacy_elmo.layers.listener`). Without listeners nothing is kept but the vectors and,
        with ``store_layers``, ``doc._.elmo_layers``.
        """
        weights = self._tensor_weights()
        unread = tuple(listener.id for listener in self.listeners)
        for doc, doc_layers in zip(docs, layers):
            _set_vectors(doc, self.model.ops.xp.tensordot(weights, doc_layers, axes=1))
            if unread:
                doc._.set(FEATURES_ATTR, doc_layers)
                doc._.set(UNREAD_ATTR, unread)
            if self.cfg["store_layers"]:
                doc._.set(LAYERS_ATTR, self.model.ops.to_numpy(doc_layers))

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Process docs in length-sorted groups of at most ``pipe_batch_tokens`` tokens."""
        error_handler = self.get_error_handler()
        for batch in minibatch(stream, size=batch_size):
            for group in token_groups(sorted(batch, key=len), len, self.cfg["pipe_batch_tokens"]):
                try:
                    self._annotate(group)
                except Exception as err:
                    error_handler(self.name, self, group, err)
            yield from batch

    def _tensor_weights(self) -> Floats1d:
        n_layers = self.model.get_dim("nL")
        weights = self.cfg["tensor_weights"]
        if weights is None:
            return self.model.ops.asarray1f(numpy.full(n_layers, 1.0 / n_layers, dtype="float32"))
        if len(weights) != n_layers:
            raise ValueError(
                f"elmo tensor_weights has {len(weights)} values but the biLM has {n_layers} output "
                "layers (token layer + LSTM layers); give one weight per layer or null for the average"
            )
        return self.model.ops.asarray1f(weights)

    def __setstate__(self, state: Tuple) -> None:
        """Unpickled (a ``spawn`` or ``forkserver`` worker, Spark, Dask, Ray): the component runs
        in this process as its own, with its ``threads`` setting (see :meth:`_threads`)."""
        super().__setstate__(state)  # spaCy's pipes pickle their fields as a tuple
        self._pid = os.getpid()

    def _threads(self) -> Threads:
        """The ``threads`` setting; one thread in a process forked from the one that made or
        unpickled the component (``nlp.pipe(n_process=...)`` under ``fork``); torch's count as it
        is where the model's ops are on a GPU.

        Several processes each running torch's full thread pool oversubscribe the cores, and a
        thread pool inherited through fork can deadlock. An unpickled copy keeps its setting:
        ``"auto"`` leaves other busy processes (the other workers) their cores.
        """
        if os.getpid() != self._pid:
            torch.set_num_threads(1)
            return 1
        if self.model.ops.device_type != "cpu":  # the products run on the GPU: no /proc read before each call
            return torch.get_num_threads()
        return self.cfg["threads"]

    # ------------------------------------------------------------------ training
    @property
    def is_trainable(self) -> bool:
        """A frozen biLM is not: spaCy then neither steps it nor logs a loss column for it, which
        would read 0.00 at every step. Its ``update`` still feeds the listeners."""
        return not self.model.attrs["freeze"]

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Run the biLM once on the batch and hand the layers to every listener.

        With a frozen biLM the listeners' gradients stop at their mixes, and ``losses`` gets no
        entry for it. Otherwise the gradients of all listeners are summed (their squared sum is its
        loss), and the last listener's backprop call (the last component to update) runs the
        biLM's backward pass and the optimizer step, once.
        """
        losses = {} if losses is None else losses
        if self.is_trainable:
            losses.setdefault(self.name, 0.0)
        validate_examples(examples, "Elmo.update")
        docs = [eg.predicted for eg in examples]
        if not self.listeners:
            return losses
        self._load_once()
        with self.cores.torch_threads(self._threads(), get_runtime(self.model)):
            outputs, backprop_layers = self.model.begin_update(docs)
        batch_id = ElmoListener.get_batch_id(docs)
        if self.model.attrs["freeze"]:
            for listener in self.listeners:
                listener.receive(batch_id, outputs, no_backprop)
            return losses
        d_outputs = [self.model.ops.alloc3f(*output.shape) for output in outputs]
        self._backprop_pending, self._deferred_sgd = True, None

        def accumulate_gradient(one_d_outputs: List[Floats3d]) -> List[Doc]:
            for d_output, one in zip(d_outputs, one_d_outputs):
                d_output += one
                losses[self.name] += float((one**2).sum())
            return []

        def backprop(one_d_outputs: List[Floats3d]) -> List[Doc]:
            accumulate_gradient(one_d_outputs)
            backprop_layers(d_outputs)
            self._backprop_pending = False
            optimizer = sgd if sgd is not None else self._deferred_sgd
            self._deferred_sgd = None  # held no longer than the step: a pickled pipeline must not carry it
            if optimizer is not None:
                self.finish_update(optimizer)
            return []

        for listener in self.listeners[:-1]:
            listener.receive(batch_id, outputs, accumulate_gradient)
        self.listeners[-1].receive(batch_id, outputs, backprop)
        return losses

    def finish_update(self, sgd: Optimizer) -> None:
        """Step the biLM, or defer the step while its listeners have not sent their gradients back.

        ``nlp.update`` calls each component's ``finish_update`` right after its ``update``, before
        the components downstream run: a step then would write the weights that the pending
        backward pass needs, and apply the gradients a batch late. The last listener's backprop
        takes the deferred step instead. (``spacy train`` steps after every backprop has run.)
        """
        if self._backprop_pending:
            self._deferred_sgd = sgd
            return
        super().finish_update(sgd)

    def get_loss(self, examples: Iterable[Example], scores) -> None:
        """The biLM has no loss of its own here: gradients come from the listeners."""
        return None

    def initialize(
        self, get_examples: Optional[Callable[[], Iterable[Example]]] = None, *, nlp: Optional[Language] = None
    ) -> None:
        """Load or build the biLM, once, and open the feature store if one is set; no examples are needed."""
        self._load()
        store = self.model.attrs.get("feature_store")
        if store is not None:
            store.check()  # training with a missing or wrong store is an error; a loaded pipeline only warns

    def _load(self) -> None:
        """Read the biLM's weights (loaded weights stay), check ``tensor_weights``, size the listeners."""
        self.model.initialize()
        self._tensor_weights()
        for listener in self.listeners:
            self._size_listener(listener)
        self._loaded = True
        self._prepare_inference()

    def _load_once(self) -> None:
        """:meth:`_load` on first use (predict, update, saving) where no weights are in place (see the
        module docstring); deserialized weights count as in place."""
        if not self._loaded:
            self._load()

    def add_label(self, label: str) -> int:
        raise NotImplementedError("The elmo component has no labels")

    # ------------------------------------------------------------------ the biLM, for the serializers
    def _loaded_bilm(self) -> BiLM:
        """The biLM, its weights read first if need be: a pipeline saved before its first doc holds them."""
        self._load_once()
        return get_bilm(self.model)

    def _set_bilm(self, bilm: BiLM) -> None:
        """Install deserialized weights: their first use reads no files."""
        set_bilm(self.model, bilm)
        self._loaded = True
        self._prepare_inference()

    def _prepare_inference(self) -> None:
        """A frozen CPU biLM makes its inference weights as it loads (:meth:`.BiLMRuntime.prepare_inference`)."""
        runtime = get_runtime(self.model)
        if self.model.attrs["freeze"] and runtime.model.device.type == "cpu":
            with self.cores.torch_threads(self._threads(), runtime):
                runtime.prepare_inference()


def _set_vectors(doc: Doc, vectors: Floats2d) -> None:
    """``doc._.elmo_vectors`` (n_tokens, width), the vector hooks that read it, and the tensor
    where it is free (empty, or elmo's own)."""
    if doc.tensor.size == 0 or doc.tensor is doc._.get(VECTORS_ATTR):
        doc.tensor = vectors
    doc._.set(VECTORS_ATTR, vectors)
    install_vector_hooks(doc)
