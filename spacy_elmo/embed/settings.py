"""What an embedding run computes: which layers it keeps, how the biLM runs, which model it is.

Everything here goes into the output's manifest, and a resumed run must agree with it: output
written with other settings or another model must never be mixed into one store. One exception:
``precision`` may be asked for otherwise (:func:`resume_identity`), as long as it resolves to the
products the manifest records.
"""

import json
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy

from ..bilm import BiLM, ElmoOptions
from ..bilm.formats.identity import weights_digest
from ..bilm.model.states import STATE_MODES, StateMode
from ..bilm.precision.resolved import Precision, check_precision
from ..bilm.runtime import BiLMRuntime
from ..option_fields import setting

LAYER_CHOICES = ("all", "top", "average", "mix")


@dataclass(frozen=True)
class EmbedSettings:
    """The options of ``spacy-elmo embed`` that decide the bytes of the output: the command builds
    an option per field from its ``setting(...)`` (see :mod:`spacy_elmo.option_fields`).

    ``layers``: ``"all"`` keeps (n_layers + 1, n_tokens, width); ``"top"`` the last LSTM layer,
    ``"average"`` the mean of the layers, ``"mix"`` the sum weighted by ``mix``: (n_tokens, width).
    ``gold_tokens``: ``.spacy`` Docs keep their own tokens (see :meth:`reader.SentenceSource.doc_tokens`).
    ``precision``: of the biLM's matrix products, as the component's (see
    :mod:`spacy_elmo.bilm.precision.resolved`); the manifest also records what it resolved to.
    """

    state: StateMode = setting("zero", "Where each batch's LSTM states start: zero, warm or carry")
    layers: str = setting("all", "Kept output: all, top, average or mix:W0,W1,W2 (one weight per layer)")
    mix: Optional[Tuple[float, ...]] = setting(None, "The weights of --layers mix:W0,W1,W2", given_by="layers")
    lang: str = setting("en", "Language of the spaCy tokenizer")
    whitespace: bool = setting(False, "Split text on whitespace (pre-tokenized input) instead of spaCy's tokenizer")
    gold_tokens: bool = setting(  # absent from manifests written before it: read as False
        False,
        ".spacy input: keep each Doc's own tokens, for training with gold_preproc = true, instead of "
        "its text tokenized as spacy train and nlp.evaluate give it to the elmo component",
    )
    shard_size: int = setting(10_000, "Sentences per output shard: the unit of resuming and of Ray tasks")
    batch_tokens: int = setting(4096, "Padded tokens per biLM call")
    precision: Precision = setting(
        "auto",
        "Matrix products in fp32, bf16, int8 (CPU, inference), or auto: on a GPU bf16 from compute capability "
        "8.0; on the CPU the fastest for this biLM, measured once per machine (`spacy-elmo bench`); with Ray, "
        "decided once on this machine for every worker (CPU workers: this CPU's measured choice)",
    )

    def __post_init__(self) -> None:
        if self.state not in STATE_MODES:
            raise ValueError(f"--state must be one of {', '.join(STATE_MODES)}, got {self.state!r}")
        if self.layers not in LAYER_CHOICES:
            raise ValueError(f"--layers must be all, top, average or mix:W0,W1,...; got {self.layers!r}")
        if (self.layers == "mix") != (self.mix is not None):
            raise ValueError("layer weights go with --layers mix:W0,W1,... and only there")
        if self.shard_size < 1 or self.batch_tokens < 1:
            raise ValueError(
                f"--shard-size and --batch-tokens must be at least 1, got {self.shard_size}, {self.batch_tokens}"
            )
        check_precision(self.precision)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["mix"] = list(self.mix) if self.mix is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "EmbedSettings":
        mix = data.get("mix")
        return cls(**{**data, "mix": tuple(mix) if mix is not None else None})

    def check_model(self, bilm: BiLM) -> None:
        """Refuse layer weights that do not fit the biLM, before any work."""
        if self.mix is not None and len(self.mix) != bilm.n_output_layers:
            raise ValueError(
                f"--layers mix has {len(self.mix)} weights but the biLM has {bilm.n_output_layers} output "
                "layers (token layer + LSTM layers): give one weight per layer"
            )

    def select(self, layers: numpy.ndarray) -> numpy.ndarray:
        """The kept output of one sentence's layers, (n_layers + 1, n_tokens, width), as float32."""
        if self.layers == "all":
            return layers
        if self.layers == "top":
            return numpy.ascontiguousarray(layers[-1])
        if self.layers == "average":
            return layers.mean(axis=0, dtype=numpy.float32)
        weights = numpy.asarray(self.mix, dtype=numpy.float32)
        return numpy.tensordot(weights, layers, axes=1).astype(numpy.float32, copy=False)

    @property
    def output_ndim(self) -> int:
        """Dimensions of one sentence's output: 3 for all layers, else 2."""
        return 3 if self.layers == "all" else 2


def parse_layers(text: str) -> Tuple[str, Optional[Tuple[float, ...]]]:
    """``all``, ``top``, ``average`` or ``mix:W0,W1,W2`` -> (choice, weights or None)."""
    choice, _, weights = text.partition(":")
    if choice != "mix":
        if weights or choice not in LAYER_CHOICES:
            raise ValueError(f"--layers must be all, top, average or mix:W0,W1,...; got {text!r}")
        return choice, None
    try:
        values = tuple(float(w) for w in weights.split(","))
    except ValueError:
        raise ValueError(f"--layers mix needs numbers, e.g. mix:0.2,0.3,0.5; got {text!r}") from None
    return "mix", values


def model_identity(runtime: BiLMRuntime) -> Dict[str, Any]:
    """The runtime's biLM's options, a SHA-256 of its weights (names, dtypes, shapes and values) and
    the products the runtime computes layers with (bf16 products give other values than fp32 ones):
    inference's, as ``embed`` and a frozen component run it, whatever the gradient mode now.

    Unlike :meth:`.BiLMRuntime.fingerprint`, which only tells in-process changes apart, this names the
    same weights the same way in every process and on every machine, however they were loaded.
    """
    bilm, products = runtime.model, runtime.resolved_precision_for(training=False).recorded
    return {"fingerprint": weights_digest(bilm), "products": products, "options": bilm.options.to_dict()}


def resume_identity(settings: Dict[str, Any]) -> Dict[str, Any]:
    """The settings a resumed run must share, all but ``precision``: the manifest's ``model.products``
    records what it resolved to, and that alone decides the kind of values a shard holds, however
    it was asked for (``auto`` on a bf16 GPU, or ``bf16`` on a CPU to finish that run there)."""
    return {key: value for key, value in settings.items() if key != "precision"}


def identity_differences(stored: Dict[str, Any], current: Dict[str, Any]) -> List[str]:
    """Human-readable ``key: stored -> current`` lines of two JSON-like dicts (empty if equal)."""
    return [
        f"{key}: {json.dumps(stored.get(key))} -> {json.dumps(current.get(key))}"
        for key in sorted(set(stored) | set(current))
        if json.dumps(stored.get(key), sort_keys=True) != json.dumps(current.get(key), sort_keys=True)
    ]


def output_tail_shape(options: ElmoOptions, settings: EmbedSettings) -> Tuple[int, ...]:
    """One sentence's output shape without its token axis: (n_layers + 1, width) or (width,)."""
    return (options.n_layers + 1, options.output_dim) if settings.layers == "all" else (options.output_dim,)
