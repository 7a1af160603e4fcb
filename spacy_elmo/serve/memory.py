"""The service's own memory: what is resident, handing freed heap back to the system, and the
objects the garbage collector need not walk.

glibc's allocator keeps what a process frees for its next allocations: after a batch, the pages
of its docs, arrays and oneDNN's scratch stay resident, and each later batch of another size
leaves more of the heap in pieces too small for the next one. A serving process then climbs to
well above its live memory, and keeps rising. ``malloc_trim(0)`` after each batch returns every
free page of every arena (docs/serving.md#memory has the figures); elsewhere than glibc it does
not exist and nothing is done.

A full collection walks every Python object of a serving process (torch, spaCy, the HTTP stack)
while no thread runs, for longer than a request takes: those pauses were the slowest requests
(docs/performance.md, "Serving"). What the pipeline holds once warm lives as long as the
process, so the worker moves it out of the collector's reach (:func:`freeze_long_lived`).
"""

import ctypes
import gc
import os
from typing import Callable, Optional


def resident_mib() -> Optional[float]:
    """This process's resident memory in MiB (Linux's ``/proc/self/statm``); None elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


def _glibc_malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _glibc_malloc_trim()
HEAP_TRIM_AVAILABLE = _MALLOC_TRIM is not None


def release_free_heap() -> bool:
    """Return the allocator's free pages to the system (glibc's ``malloc_trim(0)``, short beside a
    batch); whether any were returned. False, doing nothing, where it does not exist."""
    return bool(_MALLOC_TRIM(0)) if _MALLOC_TRIM is not None else False


def freeze_long_lived() -> int:
    """Collect, then move every object still alive into the collector's permanent generation
    (``gc.freeze()``), which its passes skip: for a process whose objects so far (the loaded,
    warm pipeline) live as long as it does. Returns how many were frozen; ``gc.unfreeze()``
    gives them back to the collector."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
