"""The precision of the biLM's matrix products: float32, bfloat16, or int8 for inference on a CPU.

bf16 keeps float32's exponent range with an 8-bit mantissa, so products need no loss scaling;
CPUs with AMX (and recent GPUs) multiply it several times faster than float32, some CPUs with
AVX512-BF16 alone faster too, others slower.
In ``"bf16"`` mode only the products run in bf16 (the char CNN's convolutions, the highways
and projection, the LSTM's input, recurrent and projection products, the pretraining softmax),
each accumulating in float32 inside the kernel. Everything else stays float32: the parameters
(master weights, which the optimizer updates and the files store), the cell state and the
elementwise cell math, the skip connections, the outputs, the loss.

Products are cast explicitly rather than with ``torch.autocast``: autocast would also run the
elementwise gate math in bf16, cannot cast the ``out=`` products the inference loop reuses
buffers with, and re-casts every weight at every call. Here a weight is cast once and the copy
kept (see :class:`~..memory.weight_copies.WeightCopies`) until the float32 parameter changes, and the biLM ignores
any autocast around it (:func:`own_precision`): it sets its precision itself.

``"fp32"`` on a GPU means IEEE float32 products, not TF32. On Ampere and later GPUs torch runs
float32 convolutions in TF32 by default, and float32 matmuls too where a user or library asked for
it (``torch.set_float32_matmul_precision("high")``); TF32 rounds each product's inputs to 10
mantissa bits instead of float32's 23, so the layers would not be float32's. So while a float32
biLM call runs on CUDA, :func:`own_precision` sets ``torch.backends.cuda.matmul.fp32_precision`` and
``torch.backends.cudnn.conv.fp32_precision`` to ``"ieee"`` and restores them afterwards (see
:func:`ieee_float32`). The flags are process-wide: products of other threads running during the
call are IEEE too. The backward pass of a training step runs after the forward call has returned,
under the process's own settings: set both to ``"ieee"`` yourself to train in strict float32.

``"int8"`` (inference on a CPU only) runs the LSTM's products on dynamic int8 kernels; see
:mod:`.int8`.

Which of these a setting (``"auto"`` included) runs in, on a device, in training or inference, is
decided in one place: :class:`ResolvedPrecision`.
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
      that ``"int8"`` runs on a CPU only (PyTorch's dynamic int8 kernels): elsewhere it is an error.
      It has no gradient either: a call with gradients refuses it (:func:`.int8.check_no_gradient`).
    - ``"auto"`` on a GPU is bf16 where that GPU (the model's, not the current one) multiplies bf16
      natively: compute capability 8.0 (Ampere) and up (:meth:`.Hardware.cuda_has_native_bf16`); fp32 on
      older ones, which emulate bf16, and on other devices.
    - ``"auto"`` on a CPU is ``measured``, for the use at hand: whether bf16 or int8 beats fp32
      there depends on the CPU, on the model's shapes and on the pass (a training step's backward
      pass has products of other shapes, and int8 none), and no CPU flag predicts it, so a biLM
      times its own inference, or its own training step, once per machine and shapes, checks its
      accuracy once per weights, or takes ``SPACY_ELMO_PRECISION`` instead
      (:func:`.autotune.cpu_auto_precision`). A frozen biLM runs inference alone, and never
      decides training's. A caller without a
      model to time gets fp32, or what ``SPACY_ELMO_PRECISION`` names of fp32 and bf16.

    A pretraining run resolves its setting once and keeps it, held-out evaluation included; an
    ``embed`` run records its products in the manifest by dtype name (:attr:`recorded`), and such
    stored layers stand in for what a biLM computes by :meth:`serves`.
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
        :attr:`dtype`, except in int8.

        int8 highways lose too much (see :mod:`.int8`), so in int8 the encoder runs in bf16 where
        the CPU multiplies bf16 in hardware (:meth:`.Hardware.cpu_has_native_bf16`: its large highway
        products run much faster there, at bf16's accuracy), and in float32 elsewhere.
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

        float32 products serve every setting: a store written on a CPU feeds a GPU pipeline whose
        ``auto`` is bf16 there, with values more precise than its own. bf16 and int8 products serve
        their own setting and ``auto``, a setting that accepts them wherever the hardware makes
        them fast, even where it resolves to float32 here. They serve no other: a pipeline that
        asks for float32 (or bf16) must not be fed bf16 (or int8) values silently.
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
    in TF32: cuBLAS's (the linear layers, the LSTM's batched products, the softmax) and cuDNN's
    convolutions' (the char CNN).

    torch >= 2.9 sets this per backend and operation (``fp32_precision``), and raises when the
    legacy ``allow_tf32`` flags are read after it was used; older versions have the flags only.
    """
    if hasattr(backends.cudnn, "conv"):
        return [(backends.cuda.matmul, "fp32_precision", "ieee"), (backends.cudnn.conv, "fp32_precision", "ieee")]
    return [(backends.cuda.matmul, "allow_tf32", False), (backends.cudnn, "allow_tf32", False)]


class _IeeeFloat32:
    """Holds CUDA's float32 products at IEEE precision while at least one caller needs it.

    The settings are process-wide, so nested and concurrent callers (threads) share one save and
    restore: the first in saves the settings and sets them strict, the last out restores them.
    With a save and restore per caller, a call ending first would turn TF32 back on under one
    still running, and the last to end would leave it off for good.
    """

    def __init__(self, backends: Any = torch.backends) -> None:
        self._backends = backends
        self._lock = threading.Lock()
        self._holders = 0
        self._saved: List[Tuple[Any, str, Any]] = []

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A block whose float32 CUDA matmuls and convolutions run in IEEE float32, not TF32.

        Sets ``torch.backends.cuda.matmul.fp32_precision`` and
        ``torch.backends.cudnn.conv.fp32_precision`` to ``"ieee"`` (before torch 2.9: the
        ``allow_tf32`` flags of both to False) and restores them when the last such block, of any
        thread, ends. CPU settings (``torch.backends.mkldnn``) are left alone.
        """
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
