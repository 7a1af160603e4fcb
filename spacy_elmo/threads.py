"""How many torch threads the biLM uses, so that it degrades to its fair share on a shared CPU.

Torch's default is one thread per core. Alone on the machine that is fastest; beside another
CPU-bound job, the threads of one matrix product wait for each other whenever the scheduler
parks one of them, and throughput collapses far below a fair share (figures and the retired
script that measured them: project/docs/lab-notebook.md, "Speed experiments retired from
benchmarks/"). ``"auto"`` counts the runnable threads of other processes before each biLM call
and leaves them their cores: all cores on an idle machine, fewer when others are busy.

torch's thread count, set from one thread, reaches the threads that have not run torch yet (a
thread that has keeps its own), and the biLM's calls run at the count of the thread that calls
(:mod:`spacy_elmo.bilm.compute_thread`). So ``"auto"`` changes it only while the process runs a
single Python thread besides the compute thread (:func:`shares_torch`); beside other threads (a
server's workers) it runs at torch's count as it finds it, and leaves it alone: set it once
yourself (``torch.set_num_threads``, before the threads start), or set a fixed ``threads``, which
each call sets and restores.

``precision = "auto"`` decides for the count a setting plans (:meth:`Cores.planned`), not for
the count of the moment: a busy machine runs a call on fewer threads, but neither changes the
decision nor measures again (:attr:`spacy_elmo.bilm.runtime.BiLMRuntime.planned_threads`).
"""

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Literal, Optional, Union

import torch

from .bilm.compute_thread import is_compute_thread
from .bilm.precision.autotune import torch_at
from .bilm.runtime import BiLMRuntime

Threads = Union[int, Literal["auto"]]

_LOADAVG = Path("/proc/loadavg")
_OWN_TASKS = Path("/proc/self/task")


def check_threads(threads: Threads) -> None:
    """A clear error for a setting that is neither a positive count nor ``"auto"``."""
    if threads != "auto" and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f'elmo threads must be a positive number of torch threads or "auto", got {threads!r}')


def available_cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def busy_elsewhere() -> Optional[int]:
    """Runnable threads of other processes right now, or None where the OS does not tell (non-Linux).

    The kernel's count of runnable threads (/proc/loadavg, field 4 "running/total") less this
    process's own runnable threads (/proc/self/task/*/stat).
    """
    try:
        running = int(_LOADAVG.read_text().split()[3].split("/")[0])
        own = sum(1 for task in _OWN_TASKS.iterdir() if _task_state(task) == "R")
    except (OSError, ValueError, IndexError):
        return None
    return max(0, running - own)


def shares_torch() -> bool:
    """Whether other Python threads run in this process: their torch calls would feel a change of
    torch's thread count, so ``"auto"`` makes none. The biLM's compute thread is not one of them:
    it runs every call at its caller's count."""
    return sum(1 for thread in threading.enumerate() if not is_compute_thread(thread)) > 1


@dataclass(frozen=True)
class Cores:
    """What ``"auto"`` asks of the machine before each biLM call (the OS, through the functions above, by
    default) and the counts it runs the call at; the ``elmo`` component holds one (:attr:`.Elmo.cores`)."""

    available_cores: Callable[[], int] = available_cores
    busy_elsewhere: Callable[[], Optional[int]] = busy_elsewhere
    shares_torch: Callable[[], bool] = shares_torch

    def planned(self, threads: Threads) -> int:
        """The count a setting runs the biLM at on an idle machine, which ``precision = "auto"``
        decides for: ``threads`` itself; for ``"auto"`` the cores this process may use, or torch's
        count where ``"auto"`` leaves it alone (:func:`shares_torch`)."""
        if threads != "auto":
            return int(threads)
        return torch.get_num_threads() if self.shares_torch() else self.available_cores()

    def resolve(self, threads: Threads, planned: Optional[int] = None) -> int:
        """The thread count for the next biLM call: ``threads`` itself, or for ``"auto"`` the cores
        others leave free (torch's count where ``"auto"`` leaves it alone: :func:`shares_torch`);
        ``planned``: :meth:`planned`'s count, where the caller has it."""
        cores = self.planned(threads) if planned is None else planned
        others = None if threads != "auto" or self.shares_torch() else self.busy_elsewhere()
        return cores if others is None else max(1, min(cores, cores - others))

    def torch_threads(self, threads: Threads, runtime: BiLMRuntime) -> ContextManager[None]:
        """A block at the count :meth:`resolve` gives, the previous count restored after; ``precision
        = "auto"`` decides for :meth:`planned` (``runtime``'s plan, set now)."""
        runtime.planned_threads = planned = self.planned(threads)
        return torch_at(self.resolve(threads, planned))


def _task_state(task: Path) -> str:
    """The state letter of one thread: the field after the parenthesised command name."""
    try:
        stat = (task / "stat").read_text()
    except OSError:  # the thread ended meanwhile
        return ""
    return stat[stat.rindex(")") + 2 :][:1]
