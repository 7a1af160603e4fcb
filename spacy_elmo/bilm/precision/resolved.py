"""The precision of the biLM's matrix products: float32, bfloat16, or int8 for inference on a CPU.

In ``"bf16"`` mode only the products run in bf16 (the char CNN's convolutions, the highways and
projection, the LSTM's input, recurrent and projection products, the pretraining softmax), each
accumulating in float32 inside the kernel; bf16 keeps float32's exponent range, so no loss scaling.
The rest stays float32: the parameters (the master weights the optimizer updates and the files
store), the cell state and its elementwise math, the skip connections, the outputs, the loss.
Products are cast explicitly rather than with ``torch.autocast``, which would also run the gate math
in bf16, cannot cast the ``out=`` products the inference loop reuses buffers with, and re-casts every
weight at every call: here a weight is cast once and the copy kept
(:class:`~..memory.weight_copies.WeightCopies`), and any autocast around the biLM is off (:func:`own_precision`).

``"fp32"`` on a GPU means IEEE float32 products, not TF32 (which torch uses for convolutions by
default on Ampere and later, and for matmuls where asked, rounding their inputs to 10 mantissa
bits): while a float32 call runs on CUDA, :func:`ieee_float32` holds cuBLAS's and cuDNN's
``fp32_precision`` at ``"ieee"``. The flags are process-wide (other threads' products during the
call are IEEE too), and a training step's backward pass runs after the call, under the process's
own settings: set both to ``"ieee"`` yourself to train in strict float32.

``"int8"`` (inference on a CPU only) runs the LSTM's products on dynamic int8 kernels (:mod:`.int8`).
Which of these a setting (``"auto"`` included) runs in is decided in one place: :class:`ResolvedPrecision`.
"""

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Literal, Optional, Tuple

import torch

from ..settings import switches
from . import kinds
from .hardware import MACHINE, Hardware
from .kinds import PRODUCT_PRECISIONS, ProductPrecision, product_precision

# The settings, for typing: the precisions of .kinds and "auto". A new precision adds its name here too.
Precision = Literal["fp32", "bf16", "int8", "auto"]
PRECISIONS: Tuple[str, ...] = (*PRODUCT_PRECISIONS, "auto")
# A setting decided: what the products run in (see ResolvedPrecision).
Explicit = Literal["fp32", "bf16", "int8"]
# The product dtype of dynamic int8 products (weights int8, activations quantized per row, float32 out: see .int8).
INT8 = kinds.INT8.dtype


def check_precision(precision: str) -> None:
    """A clear error for an unknown precision name."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


@dataclass(frozen=True)
class ResolvedPrecision:
    """What the biLM's matrix products run in: a precision setting decided, ``precision`` being
    ``"fp32"``, ``"bf16"`` or ``"int8"``. :meth:`resolve` is where a setting becomes it:

    - An explicit setting is what it says, in training and inference and on every device, except
      that ``"int8"`` runs on a CPU only and has no gradient (:func:`.int8.check_no_gradient`).
    - ``"auto"`` on a GPU is bf16 where that GPU (the model's, not the current one) multiplies bf16
      natively (:meth:`.Hardware.cuda_has_native_bf16`), else fp32, as on other devices.
    - ``"auto"`` on a CPU is ``measured`` for the use at hand, inference or a training step: no CPU
      flag predicts whether bf16 or int8 beats fp32 there (:func:`.autotune.cpu_auto_precision`). A
      frozen biLM never decides training's. A caller without a model to time gets fp32, or what
      ``SPACY_ELMO_PRECISION`` names of fp32 and bf16.

    A pretraining run resolves its setting once and keeps it; an ``embed`` manifest records the
    products by dtype name (:attr:`recorded`), and such stored layers stand in for a biLM's by :meth:`serves`.
    """

    precision: Explicit

    def __post_init__(self) -> None:
        product_precision(self.precision)  # a clear error for an unknown name

    @classmethod
    def resolve(
        cls,
        setting: Precision,
        device: torch.device,
        training: bool,
        measured: Optional[Callable[[], str]] = None,
        hardware: Hardware = MACHINE,
    ) -> "ResolvedPrecision":
        """``setting`` decided on ``device``, for training or inference (see the class docstring).

        ``measured``: the model's measured choice on a CPU for this use (training or inference),
        called only where that decides; ``hardware``: the machine whose GPU ``auto`` asks.
        """
        check_precision(setting)
        if setting != "auto":
            _check_device(product_precision(setting), device)
            return cls(setting)
        if device.type == "cpu":
            return cls(measured()) if measured is not None else cls._unmeasured()  # type: ignore[arg-type]
        return cls("bf16" if device.type == "cuda" and hardware.cuda_has_native_bf16(device) else "fp32")

    @classmethod
    def _unmeasured(cls) -> "ResolvedPrecision":
        """``auto`` on a CPU with no model to time: fp32, unless ``SPACY_ELMO_PRECISION`` names a
        precision that trains (fp32 or bf16)."""
        override = switches().precision
        trains = override in PRODUCT_PRECISIONS and PRODUCT_PRECISIONS[override].trains
        return cls(override if trains else "fp32")  # type: ignore[arg-type]

    @classmethod
    def from_recorded(cls, name: str) -> "ResolvedPrecision":
        """The products an ``embed`` manifest records as ``name`` (:attr:`recorded`)."""
        for kind in PRODUCT_PRECISIONS.values():
            if kind.recorded == name:
                return cls(kind.name)  # type: ignore[arg-type]
        raise ValueError(f"unknown matrix products {name!r}: a manifest records {kinds.listed_dtypes()}")

    @property
    def kind(self) -> ProductPrecision:
        """The record of the products' precision (:mod:`.kinds`)."""
        return product_precision(self.precision)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the LSTM's products and the pretraining softmax's: :data:`INT8` in int8."""
        return self.kind.dtype

    def token_encoder_dtype(self, hardware: Hardware = MACHINE) -> torch.dtype:
        """The dtype of the token encoder's products (char CNN, highways, projection) on ``hardware``:
        :attr:`dtype`, except in int8, whose highways would lose too much (see :mod:`.int8`): bf16
        where the CPU multiplies bf16 in hardware (:meth:`.Hardware.cpu_has_native_bf16`), else float32.
        """
        if self.kind.encodes_tokens:
            return self.dtype
        return torch.bfloat16 if hardware.cpu_has_native_bf16() else torch.float32

    @property
    def recorded(self) -> str:
        """The name an ``embed`` manifest records: ``"float32"``, ``"bfloat16"`` or ``"qint8"``."""
        return self.kind.recorded

    def serves(self, setting: Precision) -> bool:
        """Whether layers computed with these products may stand in for a biLM set to ``setting``
        (a feature store, :mod:`spacy_elmo.embed.store`).

        float32 products serve every setting (a CPU's store feeds a GPU pipeline whose ``auto`` is
        bf16, with more precise values); bf16 and int8 products serve their own setting and
        ``auto``, even where it resolves to float32 here, and no other: a pipeline that asks for
        float32 (or bf16) must not be fed bf16 (or int8) values silently.
        """
        return self.precision == kinds.REFERENCE or setting in ("auto", self.precision)


def _check_device(kind: ProductPrecision, device: torch.device) -> None:
    """Refuse a precision that runs on another device type only (int8 off the CPU)."""
    if kind.only_on is None or device.type == kind.only_on:
        return
    where = "a CPU" if kind.only_on == "cpu" else f"a {kind.only_on} device"
    raise ValueError(
        f"precision {kind.name!r} runs on {where} only ({kind.only_on_because}), and this biLM is on {device}: "
        f'use "auto" (or another precision that runs there), or move the biLM to {where}'
    )


def _cuda_fp32_settings(backends: Any) -> List[Tuple[Any, str, Any]]:
    """``(object, attribute, strict value)`` of each setting that lets CUDA's float32 products run
    in TF32: cuBLAS's and cuDNN's convolutions'. torch >= 2.9 sets them per backend and operation
    (``fp32_precision``), and raises when the legacy ``allow_tf32`` flags (all older versions have)
    are read after it was used.
    """
    if hasattr(backends.cudnn, "conv"):
        return [(backends.cuda.matmul, "fp32_precision", "ieee"), (backends.cudnn.conv, "fp32_precision", "ieee")]
    return [(backends.cuda.matmul, "allow_tf32", False), (backends.cudnn, "allow_tf32", False)]


class _IeeeFloat32:
    """Holds CUDA's float32 products at IEEE precision while at least one caller needs it.

    The settings are process-wide, so nested and concurrent callers (threads) share one save and
    restore: the first in saves the settings and sets them strict, the last out restores them (a
    save and restore per caller would turn TF32 back on under a call still running).
    """

    def __init__(self, backends: Any = torch.backends) -> None:
        self._backends = backends
        self._lock = threading.Lock()
        self._holders = 0
        self._saved: List[Tuple[Any, str, Any]] = []

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A block whose float32 CUDA matmuls and convolutions run in IEEE float32, not TF32
        (:func:`_cuda_fp32_settings`); CPU settings (``torch.backends.mkldnn``) are left alone."""
        with self._lock:
            if self._holders == 0:
                settings = _cuda_fp32_settings(self._backends)
                self._saved = [(owner, name, getattr(owner, name)) for owner, name, _ in settings]
                for owner, name, strict in settings:
                    setattr(owner, name, strict)
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    for owner, name, value in self._saved:
                        setattr(owner, name, value)


ieee_float32 = _IeeeFloat32().held  # the process's one holder of CUDA's float32 settings (see held)


@contextlib.contextmanager
def own_precision(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Run the block at the biLM's precision, ``dtype`` (its products' :attr:`ResolvedPrecision.dtype`).

    Any autocast set up around it is off: the biLM casts its products itself. On CUDA in float32,
    TF32 is off too (:func:`ieee_float32`), so that ``"fp32"`` means float32.
    """
    if device.type not in ("cpu", "cuda"):
        yield
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.autocast(device.type, enabled=False))
        if device.type == "cuda" and dtype == torch.float32:
            stack.enter_context(ieee_float32())
        yield
