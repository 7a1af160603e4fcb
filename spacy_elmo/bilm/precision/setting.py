"""The biLM's precision setting at work: what it resolves to for a use, and inference's weight
copies made ahead (see :mod:`.resolved` for what each precision computes).

:class:`~spacy_elmo.bilm.BiLM` holds the setting and calls these with itself. They live here, not
in the model, because ``auto`` on a CPU is a measurement of the model's own passes
(:mod:`.autotune`, :mod:`.timed_passes`), which the model does not import.
"""

from typing import Protocol

import torch

from ..memory.offload import freeze_for_inference
from .kinds import REFERENCE
from .resolved import Precision, ResolvedPrecision
from .timed_passes import TunedModel, timed_pass


class PrecisionOwner(TunedModel, Protocol):
    """What resolving a biLM's precision reads of it besides what ``auto`` times: its device."""

    @property
    def device(self) -> torch.device: ...


def resolve_for(model: PrecisionOwner, setting: Precision, training: bool) -> ResolvedPrecision:
    """``setting`` resolved on ``model``'s device for training or for inference: see
    :class:`.resolved.ResolvedPrecision`. ``"auto"`` on a CPU is ``model``'s measured decision for
    that use, made once per machine, shapes and weights (:mod:`.autotune`)."""

    def measured() -> str:
        from .autotune import cpu_auto_precision

        return cpu_auto_precision(model, training)

    return ResolvedPrecision.resolve(setting, model.device, training, measured=measured)


def make_inference_copies(model: PrecisionOwner, setting: Precision) -> None:
    """Freeze ``model`` for inference and make now what inference's products in ``setting`` need
    (``auto``'s decision, the low-precision weight copies or int8 packs), letting the float32
    weights they replace move to disk (:mod:`..memory.offload`): one zero-state pass over one
    token, its outputs dropped; nothing to make in the reference precision, fp32."""
    freeze_for_inference(model.parameters())
    precision = resolve_for(model, setting, training=False).precision
    if precision != REFERENCE:
        timed_pass(model, [["."]], precision)
