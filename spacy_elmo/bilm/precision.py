"""The precision of the biLM's matrix products: float32, or bfloat16 where the hardware has it.

bf16 keeps float32's exponent range with an 8-bit mantissa, so products need no loss scaling;
CPUs with AMX (and recent GPUs) multiply it several times faster than float32.
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
"""

import contextlib
from typing import Callable, Dict, Iterator, Literal, Sequence, Tuple

import torch
from torch import Tensor

Precision = Literal["fp32", "bf16", "auto"]
PRECISIONS: Tuple[str, ...] = ("fp32", "bf16", "auto")
DTYPES: Dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}

# The CPU feature that makes bf16 products pay, as torch.cpu.get_capabilities() names it: AMX's
# bf16 tiles. AVX512-BF16 alone (dot-product instructions, no tiles) is slower than float32 for the
# biLM: on a 2-core Xeon with it and without AMX, 304 against 495 tokens/s of inference at the
# Small size and 1,373 against 2,035 tokens/s of `base` pretraining (benchmarks/bilm_speed.py,
# pretrain_speed.py).
FAST_BF16_FEATURE = "amx_bf16"


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


def resolve_precision(precision: Precision, device: torch.device) -> torch.dtype:
    """The dtype of the products for ``precision`` on ``device``.

    ``"auto"`` is bf16 only where products in it are faster than float32: a CPU with AMX
    (:func:`cpu_has_amx_bf16`), or a GPU that supports bf16 (as
    thinc's mixed precision would use it); float32 elsewhere.
    """
    check_precision(precision)
    if precision != "auto":
        return DTYPES[precision]
    if device.type == "cpu":
        native = cpu_has_amx_bf16()
    elif device.type == "cuda":
        native = torch.cuda.is_bf16_supported()
    else:
        native = False
    return torch.bfloat16 if native else torch.float32


@contextlib.contextmanager
def own_precision(device: torch.device) -> Iterator[None]:
    """Run the block without any autocast set up around it: the biLM casts its products itself."""
    if device.type not in ("cpu", "cuda"):
        yield
        return
    with torch.autocast(device.type, enabled=False):
        yield


class LowPrecisionWeights:
    """Copies of weights in a product dtype, made once and kept while their sources are unchanged.

    Without gradients (inference, held-out evaluation), a copy is keyed on the dtype and on each
    source tensor's storage, device and version counter, which every in-place change (loading,
    an optimizer step) advances; a stale copy is never served. With gradients, every call casts
    afresh, so that autograd carries the gradient back to the float32 parameters.
    """

    def __init__(self) -> None:
        self._copies: Dict[str, Tuple[Tuple, Tensor]] = {}

    def __deepcopy__(self, memo: Dict) -> "LowPrecisionWeights":
        return LowPrecisionWeights()  # copies are cheap to remake, and would point at old storage

    def get(self, name: str, dtype: torch.dtype, sources: Sequence[Tensor], make: Callable[[], Tensor]) -> Tensor:
        """``make().to(dtype)``, from the cache when ``sources`` have not changed since."""
        if torch.is_grad_enabled() and any(source.requires_grad for source in sources):
            return make().to(dtype)
        key = (dtype, *((s.data_ptr(), s.device, s._version) for s in sources))
        cached = self._copies.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        copy = make().to(dtype)
        self._copies[name] = (key, copy)
        return copy
