"""The settings of the biLM layer: the one list of ``[components.elmo.model]``'s keys and defaults.

:class:`ElmoBiLMSettings` flows from the ``elmo`` factory's default config (its defaults) through
the architecture ``spacy_elmo.ElmoBiLM.v1`` (whose signature is made from its fields, see
:func:`takes_settings`) to the layer (:func:`~spacy_elmo.layers.ElmoBiLMLayer`) and from there, as
:class:`~spacy_elmo.bilm.runtime.BiLMSettings`, to the :class:`~spacy_elmo.bilm.BiLM`. A new setting
is one field here plus its use.
"""

import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar

from thinc.api import PyTorchGradScaler

from ..bilm.model.states import StateMode
from ..bilm.precision.resolved import Precision, check_precision
from ..bilm.runtime import BiLMSettings
from .language import DEFAULT_PRETRAINED
from .segmentation import check_window

# ElmoOptions' sizes: null in a config means "as the files say" (or the Small model's, fresh).
SIZE_KEYS = ("lstm_dim", "projection_dim", "n_layers", "char_embedding_dim", "filters", "n_highway")

# Config keys whose BiLMSettings field has another name; the others share theirs.
BILM_FIELD_KEYS = {"cache_size": "token_cache_size"}


@dataclass(frozen=True)
class ElmoBiLMSettings:
    """Every key of ``[components.elmo.model]`` (``spacy_elmo.ElmoBiLM.v1``), with its default.

    Where the weights come from: ``options_file`` and ``weight_file`` (standard bilm-tf / AllenNLP
    files, paths or URLs) when given, else ``pretrained`` (a registry name, URL or directory, see
    :mod:`spacy_elmo.published.resolve`; default ``"default"``: the biLM bundled for the pipeline's
    language, English's ``"en"``, see :mod:`.language`); with ``pretrained = null`` and no files a
    fresh, untrained biLM is built. The sizes (``lstm_dim`` ... ``n_highway``) are null when the
    files decide them; a size that is set must agree with the files, and shapes a fresh biLM (unset
    sizes there take the published Small model's, see :class:`~spacy_elmo.bilm.ElmoOptions`).

    ``state``: where each batch's LSTM states start (see :class:`~spacy_elmo.bilm.BiLM`).
    ``freeze`` keeps the biLM's weights fixed (features computed without gradients and cached
    across epochs, up to ``feature_cache_mb``); ``learn_rate_scale`` scales the optimizer's steps
    on the biLM's weights when ``freeze = false`` (e.g. 0.1: a tenth of the task layers' learning
    rate). ``window``/``overlap`` split text without sentence boundaries (see
    :mod:`spacy_elmo.layers.segmentation`). ``max_batch_tokens`` bounds the padded tokens per biLM
    call; ``token_cache_size`` is the number of token encodings kept; ``dropout`` is between the
    LSTM layers, in training. ``precision``: of the biLM's matrix products (see
    :mod:`spacy_elmo.bilm.precision.resolved`); ``"auto"`` here, bf16 where the hardware multiplies it
    natively, where a bare :class:`~spacy_elmo.bilm.BiLM` keeps fp32. ``mixed_precision`` and
    ``grad_scaler_config`` (arguments of thinc's PyTorchGradScaler) go to thinc's PyTorchShim;
    both act on GPU only, and thinc's autocast does not reach inside the biLM.
    """

    pretrained: Optional[str] = DEFAULT_PRETRAINED
    options_file: Optional[Path] = None
    weight_file: Optional[Path] = None
    lstm_dim: Optional[int] = None
    projection_dim: Optional[int] = None
    n_layers: Optional[int] = None
    char_embedding_dim: Optional[int] = None
    filters: Optional[List[List[int]]] = None
    n_highway: Optional[int] = None
    state: StateMode = BiLMSettings.state
    freeze: bool = True
    learn_rate_scale: float = 1.0
    window: int = 64
    overlap: int = 16
    max_batch_tokens: int = BiLMSettings.max_batch_tokens
    token_cache_size: int = BiLMSettings.cache_size
    feature_cache_mb: float = 512.0
    dropout: float = BiLMSettings.dropout
    precision: Precision = "auto"
    mixed_precision: bool = False
    grad_scaler_config: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse settings no biLM can run with, naming the key to change."""
        if (self.options_file is None) != (self.weight_file is None):
            raise ValueError("elmo: give both options_file and weight_file, or neither (for `pretrained`)")
        check_window(self.window, self.overlap)
        check_precision(self.precision)
        if not self.learn_rate_scale > 0:
            raise ValueError(
                f"elmo learn_rate_scale must be above 0, got {self.learn_rate_scale}; "
                "to keep the biLM fixed, set freeze = true"
            )
        if self.feature_cache_mb < 0:
            raise ValueError(f"elmo feature_cache_mb must be 0 or more, got {self.feature_cache_mb}")

    @property
    def sizes(self) -> Dict[str, Any]:
        """The sizes that are set, as keyword arguments of :class:`~spacy_elmo.bilm.ElmoOptions`."""
        sizes = {key: getattr(self, key) for key in SIZE_KEYS if getattr(self, key) is not None}
        if "filters" in sizes:
            sizes["filters"] = tuple((int(width), int(count)) for width, count in sizes["filters"])
        return sizes

    @property
    def bilm_settings(self) -> BiLMSettings:
        """The part the :class:`~spacy_elmo.bilm.BiLM` itself takes: each of its fields from the key of
        the same name (or the one in ``BILM_FIELD_KEYS``)."""
        return BiLMSettings(
            **{f.name: getattr(self, BILM_FIELD_KEYS.get(f.name, f.name)) for f in dataclasses.fields(BiLMSettings)}
        )

    def grad_scaler(self) -> Optional[PyTorchGradScaler]:
        """thinc's grad scaler from ``grad_scaler_config``; None (thinc's default) when it is empty."""
        return PyTorchGradScaler(**self.grad_scaler_config) if self.grad_scaler_config else None

    def to_config(self) -> Dict[str, Any]:
        """The settings as config keys and values: the ``elmo`` factory's default model block."""
        return dataclasses.asdict(self)


Builder = TypeVar("Builder", bound=Callable[..., Any])


def takes_settings(settings_type: type) -> Callable[[Builder], Builder]:
    """Give a ``def build(**settings)`` the keyword parameters of ``settings_type``'s fields.

    confection validates a registered function's config block, and ``spacy init fill-config``
    fills in its defaults, from the function's signature (``inspect.signature``, which reads
    ``__signature__``); so the fields' names, types and defaults are the function's, and live in
    the dataclass alone.
    """
    hints = typing.get_type_hints(settings_type)

    def default(f: "dataclasses.Field[Any]") -> Any:
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default

    parameters = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default(f), annotation=hints[f.name])
        for f in dataclasses.fields(settings_type)
    ]

    def decorate(build: Builder) -> Builder:
        returns = inspect.signature(build).return_annotation
        build.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
        return build

    return decorate
