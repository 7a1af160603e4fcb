"""Whether this machine multiplies bf16 in hardware: what ``auto`` and the int8 token encoder ask."""

from dataclasses import dataclass
from typing import Any, Callable, Tuple

import torch

from . import compat

# The compute capability from which NVIDIA GPUs have bf16 tensor cores (Ampere, sm_80).
NATIVE_BF16_CAPABILITY: Tuple[int, int] = (8, 0)


def gpu_has_native_bf16(capability: Tuple[int, int]) -> bool:
    """Whether a GPU of this compute capability, ``(major, minor)``, multiplies bf16 natively: Ampere
    (8.0) and later have bf16 tensor cores; Volta (7.0) and Turing (7.5) emulate bf16 products."""
    return tuple(capability) >= NATIVE_BF16_CAPABILITY


@dataclass(frozen=True)
class Hardware:
    """A machine's probes, ``cuda`` (torch.cuda's API) and ``cpu_capabilities``: the real ones by default
    (:data:`MACHINE`), held by ``bilm.runtime.hardware`` and taken where a probe is asked, so that a test
    gives a fake machine instead of patching torch. A pickle holds none: it asks the machine it is on."""

    cuda: Any = torch.cuda
    cpu_capabilities: Callable[[], compat.Capabilities] = compat.cpu_capabilities

    def __reduce__(self) -> Tuple[type, Tuple[()]]:
        return (Hardware, ())

    def cpu_has_native_bf16(self) -> bool:
        """Whether this CPU multiplies bf16 in hardware: AVX512-BF16 dot products or AMX tiles (without
        either, torch emulates bf16 products, several times slower than float32)."""
        return any(self.cpu_capabilities().get(feature, False) for feature in ("avx512_bf16", "amx_bf16"))

    def cuda_has_native_bf16(self, device: torch.device) -> bool:
        """Whether the CUDA ``device`` (the model's, not the current one) multiplies bf16 natively. Not
        ``torch.cuda.is_bf16_supported()``: it answers for the current device, and by default counts
        emulated bf16 as supported."""
        return gpu_has_native_bf16(self.cuda.get_device_capability(device))


MACHINE = Hardware()
cpu_has_native_bf16 = MACHINE.cpu_has_native_bf16  # what ``auto`` asks before it times bf16 (.kinds)
