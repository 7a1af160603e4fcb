"""The parts of torch's API that changed within the releases spacy-elmo supports (setup.cfg's floor).

Where a newer call only makes things faster or better informed, the older torch gets a fallback
here rather than an ``AttributeError``: the biLM computes the same values, perhaps more slowly.
``make test-floors`` runs the suite on the oldest torch allowed (constraints/floors.txt).
"""

import functools
from pathlib import Path
from typing import Dict, Optional, Union

import torch

Capabilities = Dict[str, Union[bool, int, str]]

# Linux's description of the CPU: its first "flags" line names the features the kernel reports.
CPUINFO = Path("/proc/cpuinfo")


def cpu_capabilities(cpuinfo: Optional[Path] = None) -> Capabilities:
    """This CPU's features, as ``torch.cpu.get_capabilities()`` names them: ``{"avx512_bf16": True,
    "amx_bf16": False, ..., "cpu_name": "Intel Xeon"}``.

    That call came with torch 2.11. Before it, the features come from the flags of ``cpuinfo``
    (:data:`CPUINFO`), which name those spacy-elmo looks for as torch does; without the file, none:
    ``auto`` then times no bf16 and int8 weights are packed for torch's default engine, slower at worst.
    """
    if (probe := getattr(torch.cpu, "get_capabilities", None)) is not None:
        return probe()
    return dict(_cpuinfo_capabilities(cpuinfo or CPUINFO))


@functools.lru_cache(maxsize=None)
def _cpuinfo_capabilities(path: Path) -> Capabilities:
    """The flags of ``path`` (a /proc/cpuinfo) as ``{flag: True}`` with ``cpu_name``, its model
    name; ``{}`` where it cannot be read. Read once: the CPU does not change under a process."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    capabilities: Capabilities = {flag: True for flag in fields.get("flags", "").split()}
    capabilities["cpu_name"] = fields.get("model name", "")
    return capabilities
