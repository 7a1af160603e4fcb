"""The product precisions the biLM knows, one record each: what every place that runs, tunes or
measures a precision reads of it, so that none of them lists precision names of its own.

A record says what the products run in (``dtype``), whether they train, where they run, which
kernel of :mod:`..kernels` runs the LSTM's time loop, whether the fused GPU loop and its CUDA graphs
serve them, how the roofline times them, how the token encoder runs beside them, and whether a CPU
runs them natively (which ``auto`` times). docs/bilm.md ("Adding a precision") says how to add one.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Optional

import torch

from .hardware import cpu_has_native_bf16

# The precision every other is checked against (``auto``'s accuracy contract) and that serves every setting.
REFERENCE = "fp32"


def _int8_kernels_available() -> bool:
    from ..kernels.int8_packs import int8_available  # kernels read these records: imported at use

    return int8_available()


@dataclass(frozen=True)
class ProductPrecision:
    """One precision of the biLM's matrix products.

    - ``name``: the setting (``precision = "bf16"``); ``dtype``: the product dtype the layers pass
      along (``torch.qint8`` stands for dynamic int8 products: weights int8, activations quantized
      per call, float32 out); an ``embed`` manifest records it by name (``"bfloat16"``).
    - ``trains``: whether its products have a gradient (training, pretraining, ``auto``'s training pass).
    - ``only_on``: the device type it runs on alone (``"cpu"``), with ``only_on_because`` saying
      why; None: every device.
    - ``kernel``: the key of :data:`..kernels.KERNELS` whose loop runs the LSTM in it;
      ``fused_on_gpu``: the fused Triton loop runs it on a CUDA GPU in inference; ``cuda_graphs``:
      that loop replays CUDA graphs in it.
    - ``roofline_dtype``: the dtype ``spacy-elmo bench`` times ``torch.bmm`` in; None: timed through
      the int8 kernel (:func:`..kernels.int8_packs.linear`).
    - ``encodes_tokens``: the token encoder's products run in it too; else in bf16 where the CPU
      multiplies bf16 natively, in float32 elsewhere.
    - ``runs_natively_on_cpu``: whether this CPU and torch build run it at full speed: ``auto``
      times it on a CPU only then.
    """

    name: str
    dtype: torch.dtype
    trains: bool
    kernel: str
    fused_on_gpu: bool
    cuda_graphs: bool
    roofline_dtype: Optional[torch.dtype]
    encodes_tokens: bool
    runs_natively_on_cpu: Callable[[], bool]
    only_on: Optional[str] = None
    only_on_because: str = ""

    @property
    def recorded(self) -> str:
        """The name an ``embed`` manifest records: ``"float32"``, ``"bfloat16"``, ``"qint8"``."""
        return str(self.dtype).replace("torch.", "")


FP32 = ProductPrecision(
    "fp32", torch.float32, trains=True, kernel="eager", fused_on_gpu=True, cuda_graphs=False,
    roofline_dtype=torch.float32, encodes_tokens=True, runs_natively_on_cpu=lambda: True,
)  # fmt: skip
BF16 = ProductPrecision(
    "bf16", torch.bfloat16, trains=True, kernel="cast", fused_on_gpu=True, cuda_graphs=True,
    roofline_dtype=torch.bfloat16, encodes_tokens=True, runs_natively_on_cpu=cpu_has_native_bf16,
)  # fmt: skip
INT8 = ProductPrecision(
    "int8", torch.qint8, trains=False, kernel="int8", fused_on_gpu=False, cuda_graphs=False,
    roofline_dtype=None, encodes_tokens=False, runs_natively_on_cpu=_int8_kernels_available,
    only_on="cpu", only_on_because="PyTorch's dynamic int8 kernels",
)  # fmt: skip

# Every precision by name, the reference first: the order ``auto`` measures them in.
PRODUCT_PRECISIONS: Dict[str, ProductPrecision] = {kind.name: kind for kind in (FP32, BF16, INT8)}


def product_precision(name: str) -> ProductPrecision:
    """The record of precision ``name`` (not ``"auto"``, which is decided: see :mod:`.resolved`)."""
    if name not in PRODUCT_PRECISIONS:
        raise ValueError(f"products run in {listed(PRODUCT_PRECISIONS)}, not {name!r}")
    return PRODUCT_PRECISIONS[name]


def of_dtype(dtype: torch.dtype) -> Optional[ProductPrecision]:
    """The precision whose products are in ``dtype``, if any."""
    return next((kind for kind in PRODUCT_PRECISIONS.values() if kind.dtype == dtype), None)


def listed_dtypes() -> str:
    """The product dtypes, as errors name them: ``"float32, bfloat16 or qint8"``."""
    return listed([kind.recorded for kind in PRODUCT_PRECISIONS.values()])


def listed(names: Iterable[str]) -> str:
    """``"a, b or c"``."""
    items = list(names)
    return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else "".join(items)
