"""The biLM inside thinc: a :class:`thinc.api.PyTorchShim` whose module, a runtime holding the biLM,
may start empty and is saved as standard ELMo files (:mod:`spacy_elmo.layers.bilm` makes it).
"""

import copy
from typing import Optional, Tuple

import torch
from thinc.api import Optimizer, PyTorchGradScaler, PyTorchShim
from thinc.types import FloatsXd

from ..bilm.formats.serialize import bilm_from_bytes, bilm_to_bytes
from ..bilm.runtime import BiLMRuntime


class ScaledSteps:
    """``optimizer`` with its learning rate scaled by ``scale`` (weight decay and averages included)."""

    def __init__(self, optimizer: Optimizer, scale: float):
        self.optimizer, self.scale = optimizer, scale

    def __call__(self, key: Tuple[int, str], param: FloatsXd, grad: FloatsXd) -> Tuple[FloatsXd, FloatsXd]:
        return self.optimizer(key, param, grad, lr_scale=self.scale)


def _runtime_to_bytes(runtime: Optional[BiLMRuntime]) -> bytes:
    """thinc's ``serialize_model`` hook: the biLM's files and the runtime's settings (:func:`bilm_to_bytes`)."""
    return b"" if runtime is None else bilm_to_bytes(runtime.model, runtime.settings)  # type: ignore[arg-type]


def _runtime_from_bytes(_previous: Optional[BiLMRuntime], data: bytes, device: torch.device) -> Optional[BiLMRuntime]:
    """thinc's ``deserialize_model`` hook: a runtime of the biLM and settings of ``data`` on ``device``
    (module-level hooks, not lambdas: the shim, and the pipeline holding it, pickle)."""
    bilm = bilm_from_bytes(data, device)
    return None if bilm is None else BiLMRuntime(bilm, bilm.settings)


class BiLMShim(PyTorchShim):
    """A PyTorchShim that may start empty and serializes its biLM as standard ELMo files.

    ``learn_rate_scale`` scales every optimizer step of the biLM's weights, so that a biLM
    fine-tuned with its task moves more slowly than the task's freshly initialised layers, which
    share the optimizer (with Adam, scaling the gradients instead would change nothing).
    """

    def __init__(
        self,
        runtime: Optional[BiLMRuntime],
        mixed_precision: bool,
        grad_scaler: Optional[PyTorchGradScaler],
        learn_rate_scale: float,
    ):
        self.learn_rate_scale = learn_rate_scale
        super().__init__(
            runtime,
            mixed_precision=mixed_precision,
            grad_scaler=grad_scaler,
            serialize_model=_runtime_to_bytes,
            deserialize_model=_runtime_from_bytes,
        )

    def copy(self) -> "BiLMShim":
        """A deep copy with every setting of the runtime and its biLM (its token cache starts empty)."""
        return BiLMShim(
            copy.deepcopy(self._model), self._mixed_precision, copy.deepcopy(self._grad_scaler), self.learn_rate_scale
        )

    def finish_update(self, optimizer: Optimizer) -> None:
        stepped = any(param.grad is not None for param in self._model.parameters())  # what thinc's step writes
        super().finish_update(ScaledSteps(optimizer, self.learn_rate_scale))
        if stepped:  # a frozen biLM has no gradients: its caches stay valid
            self._model.model.weights_written()

    def to_device(self, device_type: str, device_id: int) -> None:  # pragma: no cover - GPU only
        if self._model is not None:
            super().to_device(device_type, device_id)
