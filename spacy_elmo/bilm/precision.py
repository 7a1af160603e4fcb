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
kept (see :class:`LowPrecisionWeights`) until the float32 parameter changes, and the biLM ignores
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

``"auto"`` is bf16 on a GPU only where the model's GPU multiplies bf16 natively: compute
capability 8.0 (Ampere) and up (:func:`gpu_has_native_bf16`). Older GPUs (V100, T4) have no bf16
tensor cores and emulate it, although ``torch.cuda.is_bf16_supported()`` answers yes for them.
On a CPU, whether bf16 or int8 pays depends on the CPU and on the model's shapes, so a biLM's
inference measures it (:mod:`.autotune`); training, and callers without a model, use the
hardware rule of :func:`resolve_precision`.
"""

import contextlib
import os
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Literal, Sequence, Tuple

import torch
from torch import Tensor

from .offload import offload

Precision = Literal["fp32", "bf16", "int8", "auto"]
PRECISIONS: Tuple[str, ...] = ("fp32", "bf16", "int8", "auto")
# The product dtype each precision passes through the layers; torch.qint8 stands for "dynamic int8
# products" (weights int8, activations quantized per call, float32 out: see .int8).
INT8 = torch.qint8
DTYPES: Dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": INT8}

# The CPU feature by which the hardware rule (training's "auto") takes bf16, as
# torch.cpu.get_capabilities() names it: AMX's bf16 tiles. AVX512-BF16 alone (dot-product
# instructions, no tiles) can go either way: on a 2-core Xeon with it and without AMX, 304 against
# 495 tokens/s of inference at the Small size and 1,373 against 2,035 tokens/s of `base`
# pretraining (benchmarks/bilm_speed.py, pretrain_speed.py); on a 2-core AMD EPYC, 1.4-1.8x
# float32's inference speed. Inference measures instead (.autotune).
FAST_BF16_FEATURE = "amx_bf16"

# Decides what "auto" means on a CPU, for inference (.autotune) and, where it names fp32 or bf16,
# for training too (resolve_precision).
PRECISION_ENV = "SPACY_ELMO_PRECISION"

# The compute capability from which NVIDIA GPUs have bf16 tensor cores (Ampere, sm_80).
NATIVE_BF16_CAPABILITY: Tuple[int, int] = (8, 0)


def check_precision(precision: str) -> None:
    """A clear error for an unknown precision name."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def cpu_has_amx_bf16() -> bool:
    """Whether this CPU has AMX bf16 tiles, as torch detects them: where bf16 beats float32.

    Without AMX torch runs bf16 products on AVX512-BF16 dot-product instructions or emulates them,
    slower than float32 in both cases.
    """
    return bool(torch.cpu.get_capabilities().get(FAST_BF16_FEATURE, False))


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware: AVX512-BF16 dot products or AMX tiles.

    Without either, torch emulates bf16 products, several times slower than float32.
    """
    capabilities = torch.cpu.get_capabilities()
    return bool(capabilities.get("avx512_bf16", False) or capabilities.get(FAST_BF16_FEATURE, False))


def token_encoder_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the token encoder's products (char CNN, highways, projection) when the
    LSTM's are ``dtype``: the same, except in int8.

    int8 highways lose too much (see :mod:`.int8`), so in int8 the encoder runs in bf16 where this
    CPU multiplies bf16 in hardware (:func:`cpu_has_native_bf16`; its large highway products reach
    several times float32's rate there, at bf16's accuracy), and in float32 elsewhere.
    """
    if dtype != INT8:
        return dtype
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def gpu_has_native_bf16(capability: Tuple[int, int]) -> bool:
    """Whether a GPU of this compute capability, ``(major, minor)``, multiplies bf16 natively.

    Ampere (8.0) and later have bf16 tensor cores; Volta (7.0) and Turing (7.5) have none and run
    bf16 products emulated, without the speed-up ``auto`` is for.
    """
    return tuple(capability) >= NATIVE_BF16_CAPABILITY


def cuda_has_native_bf16(device: torch.device) -> bool:
    """Whether the CUDA ``device`` (the model's, not the current one) multiplies bf16 natively.

    Not ``torch.cuda.is_bf16_supported()``: it answers for the current device, and by default
    counts emulated bf16 as supported.
    """
    return gpu_has_native_bf16(torch.cuda.get_device_capability(device))


def resolve_precision(precision: Precision, device: torch.device) -> torch.dtype:
    """The dtype of the products for ``precision`` on ``device``; cheap, and pure for explicit settings.

    ``"auto"`` here is the hardware rule: bf16 only on a CPU with AMX (:func:`cpu_has_amx_bf16`)
    or a GPU with native bf16 (:func:`cuda_has_native_bf16`); float32 elsewhere. On a CPU,
    ``SPACY_ELMO_PRECISION=fp32`` or ``bf16`` decides instead (``int8``, which has no gradient,
    leaves the rule in place), so that one setting pins training and inference alike. A biLM's
    inference on a CPU measures instead (``BiLM.compute_dtype``, :mod:`.autotune`); training
    keeps this rule (its backward pass and shapes differ, and int8 has no gradient).
    ``"int8"`` runs on a CPU only.
    """
    check_precision(precision)
    if precision == "int8" and device.type != "cpu":
        raise ValueError(
            f"precision 'int8' runs on a CPU only (PyTorch's dynamic int8 kernels), and this biLM is on {device}: "
            "use \"auto\" or \"bf16\" there, or move the biLM to the CPU"
        )
    if precision != "auto":
        return DTYPES[precision]
    if device.type == "cpu":
        override = os.environ.get(PRECISION_ENV, "").strip()
        if override in ("fp32", "bf16"):
            return DTYPES[override]
        native = cpu_has_amx_bf16()
    elif device.type == "cuda":
        native = cuda_has_native_bf16(device)
    else:
        native = False
    return torch.bfloat16 if native else torch.float32


def training_precision(precision: Precision, device: torch.device) -> Precision:
    """The explicit precision a training run on ``device`` uses for ``precision``: ``"auto"``
    decided by the hardware rule (:func:`resolve_precision`), which the run keeps, also when it
    evaluates without gradients."""
    dtype = resolve_precision(precision, device)
    return next(name for name, value in DTYPES.items() if value == dtype)  # type: ignore[return-value]


def _cuda_fp32_settings() -> List[Tuple[Any, str, Any]]:
    """``(object, attribute, strict value)`` of each setting that lets CUDA's float32 products run
    in TF32: cuBLAS's (the linear layers, the LSTM's batched products, the softmax) and cuDNN's
    convolutions' (the char CNN).

    torch >= 2.9 sets this per backend and operation (``fp32_precision``), and raises when the
    legacy ``allow_tf32`` flags are read after it was used; older versions have the flags only.
    """
    if hasattr(torch.backends.cudnn, "conv"):
        return [
            (torch.backends.cuda.matmul, "fp32_precision", "ieee"),
            (torch.backends.cudnn.conv, "fp32_precision", "ieee"),
        ]
    return [(torch.backends.cuda.matmul, "allow_tf32", False), (torch.backends.cudnn, "allow_tf32", False)]


class _IeeeFloat32:
    """Holds CUDA's float32 products at IEEE precision while at least one caller needs it.

    The settings are process-wide, so nested and concurrent callers (threads) share one save and
    restore: the first in saves the settings and sets them strict, the last out restores them.
    With a save and restore per caller, a call ending first would turn TF32 back on under one
    still running, and the last to end would leave it off for good.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._saved: List[Tuple[Any, str, Any]] = []

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                settings = _cuda_fp32_settings()
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


_IEEE_FLOAT32 = _IeeeFloat32()


@contextlib.contextmanager
def ieee_float32() -> Iterator[None]:
    """A block whose float32 CUDA matmuls and convolutions run in IEEE float32, not TF32.

    Sets ``torch.backends.cuda.matmul.fp32_precision`` and
    ``torch.backends.cudnn.conv.fp32_precision`` to ``"ieee"`` (before torch 2.9: the
    ``allow_tf32`` flags of both to False) and restores them when the last such block, of any
    thread, ends. CPU settings (``torch.backends.mkldnn``) are left alone.
    """
    with _IEEE_FLOAT32.held():
        yield


@contextlib.contextmanager
def own_precision(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Run the block at the biLM's precision, ``dtype`` (its :attr:`~spacy_elmo.BiLM.compute_dtype`).

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


def tensor_versions(tensors: Iterable[Tensor]) -> Tuple:
    """What tells the values of ``tensors`` apart within a process: storage, device, dtype, version.

    Caches of what a model computed key on it (:class:`LowPrecisionWeights`, and through
    ``BiLM.fingerprint`` the token and feature caches). torch advances a tensor's version counter
    at every in-place write it makes (an optimizer step, ``load_state_dict``, ``copy_``); a move or
    a cast gives new storage. Writes torch cannot see, through a NumPy or DLPack view as thinc's
    optimizers make them, must be reported with ``torch.autograd.graph.increment_version``
    (``BiLM.weights_written``), so that this one key covers every change.
    """
    return tuple((t.data_ptr(), t.device, t.dtype, t._version) for t in tensors)


class LowPrecisionWeights:
    """Copies of weights in a product dtype, made once and kept while their sources are unchanged.

    Without gradients (inference, held-out evaluation), a copy is keyed on the dtype and on the
    sources' :func:`tensor_versions`, so a stale copy is never served, and its large float32
    sources move to disk (:mod:`.offload`). With gradients, every call
    casts afresh, so that autograd carries the gradient back to the float32 parameters.
    """

    def __init__(self) -> None:
        self._copies: Dict[str, Tuple[Tuple, Tensor]] = {}

    def __len__(self) -> int:
        return len(self._copies)

    def clear(self) -> None:
        """Forget everything made; the next :meth:`get` makes it again."""
        self._copies.clear()

    def __deepcopy__(self, memo: Dict) -> "LowPrecisionWeights":
        return LowPrecisionWeights()  # copies are cheap to remake, and would point at old storage

    def get(self, name: str, dtype: torch.dtype, sources: Sequence[Tensor], make: Callable[[], Tensor]) -> Tensor:
        """``make().to(dtype)``, from the cache when ``sources`` have not changed since."""
        if torch.is_grad_enabled() and any(source.requires_grad for source in sources):
            return make().to(dtype)
        key = (dtype, tensor_versions(sources))
        cached = self._copies.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        copy = make().to(dtype)
        if copy.dtype != torch.float32:  # the copy does the work now: the float32 sources go to disk
            offload(sources)
            key = (dtype, tensor_versions(sources))
        self._copies[name] = (key, copy)
        return copy
