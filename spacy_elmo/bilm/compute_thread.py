"""The one thread of a process that runs the biLM's calls on a CPU (a pipeline's shared calls,
``precision = "auto"``'s measurements), and why it must be one.

torch multiplies on OpenMP threads, and each Python thread that runs a parallel torch operation
gets a team of them of its own, kept for the thread's life. While a process holds no more OpenMP
threads than cores, libgomp (the OpenMP of torch's Linux wheels) keeps a team spinning between
parallel regions; once it holds more, it wakes every team through the kernel for each region,
which the biLM's step loop of small operations pays many times over (docs/performance.md,
"Serving"). So every call runs on one thread, and the threads that hand it over first free their
own team (:func:`release_openmp_threads`; it is made again at their next parallel operation). The
compute thread frees its own after each call, so that other threads' torch work is not slowed by it.
"""

import contextvars
import ctypes
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import torch

THREAD_NAME = "spacy-elmo-biLM"
OMP_PAUSE_SOFT = 1  # OpenMP 5.0's omp_pause_soft: free the threads, keep nothing else
_OWN_MAPS = Path("/proc/self/maps")
Result = TypeVar("Result")


class _ComputeThread:
    """The thread, made at the first call; a forked child makes its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: Optional[ThreadPoolExecutor] = None
        self._pid = 0

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=THREAD_NAME)
                self._pid = os.getpid()
            return self._executor


# Process-wide by nature: the OpenMP teams it keeps hot are the process's, so every biLM of the
# process shares this one thread (see the module's docstring).
_COMPUTE_THREAD = _ComputeThread()


def is_compute_thread(thread: threading.Thread) -> bool:
    """Whether ``thread`` is the compute thread."""
    return thread.name.startswith(THREAD_NAME)


def on_compute_thread(function: Callable[..., Result], *args: Any) -> Result:
    """``function(*args)`` on the compute thread (inline where already on it), at the calling
    thread's torch thread count and in its context variables (the precision decision's planned
    threads, thinc's ops); the calling thread's OpenMP team freed first."""
    if is_compute_thread(threading.current_thread()):
        return function(*args)
    threads, context = torch.get_num_threads(), contextvars.copy_context()
    release_openmp_threads()
    return _COMPUTE_THREAD.executor().submit(context.run, _with_threads, threads, function, *args).result()


def _with_threads(threads: int, function: Callable[..., Result], *args: Any) -> Result:
    """``function(*args)`` at ``threads`` torch threads (a count set in one thread does not reach
    a thread that already ran torch, so the caller's is set here), the compute thread's OpenMP
    team freed after it: torch work of other threads between calls (training, ``embed``, after
    ``auto`` measured here) then has the cores' spinning to itself."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    try:
        return function(*args)
    finally:
        release_openmp_threads()


def release_openmp_threads() -> None:
    """Free the calling thread's team of OpenMP threads where torch runs on libgomp (elsewhere,
    nothing): see the module's docstring."""
    library = _libgomp()
    if library is not None:
        library.omp_pause_resource_all(OMP_PAUSE_SOFT)


@functools.lru_cache(maxsize=1)
def _libgomp() -> Optional[Any]:
    """The GNU OpenMP library torch runs on, where it has ``omp_pause_resource_all`` (OpenMP 5.0):
    the copy already loaded, found by its path in /proc/self/maps (Linux)."""
    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        paths = {line.split()[-1] for line in _OWN_MAPS.read_text().splitlines() if "libgomp" in line}
    except OSError:
        return None
    for path in sorted(paths):
        library = ctypes.CDLL(path)
        if hasattr(library, "omp_pause_resource_all"):
            library.omp_pause_resource_all.argtypes = [ctypes.c_int]
            library.omp_pause_resource_all.restype = ctypes.c_int
            return library
    return None
