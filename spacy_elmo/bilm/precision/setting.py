"""The biLM's precision: the setting, what it resolves to for a use, and inference's weight copies
made ahead (see :mod:`.precision` for what each precision computes)."""

from typing import TYPE_CHECKING, Optional, cast

import torch
from torch import nn

from ..errors import module_property
from ..memory.offload import evict, freeze_for_inference, return_freed_memory
from .resolved import Precision, ResolvedPrecision, check_precision

if TYPE_CHECKING:
    from ..model.lstm import BiLSTMStack
    from ..model.token_encoder import TokenEncoder


class PrecisionSetting(nn.Module):
    """The precision of :class:`~spacy_elmo.bilm.BiLM`'s matrix products, which is one.

    It reads the biLM's ``device`` and its token encoder's projection (whose ``requires_grad``
    tells a frozen biLM), and runs its forward pass.
    """

    _precision: Precision
    token_encoder: "TokenEncoder"
    lstm: "BiLSTMStack"

    @module_property
    def precision(self) -> Precision:
        """``"fp32"``, ``"bf16"``, ``"int8"`` or ``"auto"``: the setting, as given (see :attr:`resolved_precision`)."""
        return self._precision

    @precision.setter
    def precision(self, precision: Precision) -> None:
        check_precision(precision)
        self._precision = precision

    @module_property
    def resolved_precision(self) -> ResolvedPrecision:
        """What a call now runs its matrix products in: :meth:`resolved_precision_for` training while
        gradients reach the parameters, else inference."""
        return self.resolved_precision_for(training=self._training_now())

    def resolved_precision_for(self, training: bool, setting: Optional[Precision] = None) -> ResolvedPrecision:
        """``setting`` (default: :attr:`precision`) resolved on the model's device for training or
        for inference, whatever the gradient mode now (an ``embed`` manifest records inference's):
        see :class:`.precision.ResolvedPrecision`. ``"auto"`` on a CPU is this model's measured decision
        for that use, made once per machine, shapes and weights (:mod:`.autotune`)."""
        setting = self.precision if setting is None else setting
        device = cast(torch.device, self.device)  # the biLM's property
        return ResolvedPrecision.resolve(setting, device, training, measured=lambda: self._measured_auto(training))

    def _training_now(self) -> bool:
        return torch.is_grad_enabled() and self.token_encoder.projection.weight.requires_grad

    def _measured_auto(self, training: bool) -> str:
        from .autotune import cpu_auto_precision

        return cpu_auto_precision(self, training)  # type: ignore[arg-type]

    def prepare_inference(self) -> None:
        """Freeze the biLM for inference: make now, not in the first call, what inference's
        products need (``auto``'s decision, the low-precision weight copies or int8 packs), and
        let the float32 weights those copies replace move to disk (:mod:`.offload`), now and
        whenever a copy is made again. The first batch then does not hold the weights in two
        forms beside its own working memory, and a service's first request waits for none of it.
        One zero-state pass over one token, its outputs dropped; nothing to make in fp32. Not for
        a biLM being trained: an optimizer would write its weights back into memory.
        """
        from .timed_passes import timed_pass

        freeze_for_inference(self.parameters())
        precision = self.resolved_precision_for(training=False).precision
        if precision != "fp32":
            timed_pass(self, [["."]], precision)  # type: ignore[arg-type]

    def release_product_copies(self) -> None:
        """Forget every low-precision weight copy and int8 pack (the next pass remakes those of
        its precision), drop the float32 weights' pages read back from disk (:func:`.offload.evict`)
        and hand the freed memory back to the system. ``auto``'s measurement calls it after each
        candidate's pass, so that memory holds one candidate's weights at a time."""
        self.token_encoder.release_copies()
        self.lstm.release_copies()
        evict(self.parameters())
        return_freed_memory()
