"""Whether this machine multiplies bf16 in hardware: what ``auto`` and the int8 token encoder ask."""

from typing import Tuple

import torch

from . import compat

# The compute capability from which NVIDIA GPUs have bf16 tensor cores (Ampere, sm_80).
NATIVE_BF16_CAPABILITY: Tuple[int, int] = (8, 0)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware: AVX512-BF16 dot products or AMX tiles.

    Without either, torch emulates bf16 products, several times slower than float32.
    """
    capabilities = compat.cpu_capabilities()
    return bool(capabilities.get("avx512_bf16", False) or capabilities.get("amx_bf16", False))


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
