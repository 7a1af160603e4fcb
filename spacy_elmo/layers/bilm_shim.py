"""The biLM inside thinc: a :class:`thinc.api.PyTorchShim` that may start empty and is saved as
standard ELMo files (the layer, :mod:`spacy_elmo.layers.bilm`, says when it makes the module).
"""

import copy
from typing import Optional, Tuple

import torch
from thinc.api import Optimizer, PyTorchGradScaler, PyTorchShim
from thinc.types import FloatsXd

from ..bilm import BiLM
from ..bilm.formats.serialize import bilm_from_bytes, bilm_to_bytes


class ScaledSteps:
    """``optimizer`` with its learning rate scaled by ``scale`` (weight decay and averages included)."""

    def __init__(self, optimizer: Optimizer, scale: float):
        self.optimizer, self.scale = optimizer, scale

    def __call__(self, key: Tuple[int, str], param: FloatsXd, grad: FloatsXd) -> Tuple[FloatsXd, FloatsXd]:
        return self.optimizer(key, param, grad, lr_scale=self.scale)


def _bilm_from_shim_bytes(_previous: Optional[BiLM], data: bytes, device: torch.device) -> Optional[BiLM]:
    """thinc's ``deserialize_model`` hook: the biLM of ``data`` (:func:`bilm_to_bytes`) on ``device``.

    A module-level function, not a lambda, so that the shim, and the pipeline holding it, pickle."""
    return bilm_from_bytes(data, device)


class BiLMShim(PyTorchShim):
    """A PyTorchShim that may start empty and serializes its biLM as standard ELMo files.

    ``learn_rate_scale`` scales every optimizer step of the biLM's weights, so that a biLM
    fine-tuned with its task moves more slowly than the task's freshly initialised layers, which
    share the optimizer (with Adam, scaling the gradients instead would change nothing).
    """

    def __init__(
        self,
        bilm: Optional[BiLM],
        mixed_precision: bool,
        grad_scaler: Optional[PyTorchGradScaler],
        learn_rate_scale: float,
    ):
        self.learn_rate_scale = learn_rate_scale
        super().__init__(
            bilm,
            mixed_precision=mixed_precision,
            grad_scaler=grad_scaler,
            serialize_model=bilm_to_bytes,
            deserialize_model=_bilm_from_shim_bytes,
        )

    def copy(self) -> "BiLMShim":
        """A deep copy with every setting of the biLM (its token cache starts empty)."""
        return BiLMShim(
            copy.deepcopy(self._model), self._mixed_precision, copy.deepcopy(self._grad_scaler), self.learn_rate_scale
        )

    def finish_update(self, optimizer: Optimizer) -> None:
        stepped = any(param.grad is not None for param in self._model.parameters())  # what thinc's step writes
        super().finish_update(ScaledSteps(optimizer, self.learn_rate_scale))
        if stepped:  # a frozen biLM has no gradients: its caches stay valid
            self._model.weights_written()

    def to_device(self, device_type: str, device_id: int) -> None:  # pragma: no cover - GPU only
        if self._model is not None:
            super().to_device(device_type, device_id)
