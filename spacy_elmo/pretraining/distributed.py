"""torch.distributed set-up for runs under ``torchrun`` (or any launcher that sets the env vars).

When ``WORLD_SIZE`` > 1 (with ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` as
torchrun sets them), the process joins the group with NCCL if CUDA is available, else gloo,
and uses GPU ``LOCAL_RANK``. Multi-node runs need nothing more: torchrun's rendezvous sets the
same variables on every node. The package reads the first three in
:func:`spacy_elmo.bilm.settings.torchrun_launch`; torch reads ``MASTER_ADDR`` and ``MASTER_PORT``.
"""

import gc
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, List

import torch
import torch.distributed as dist

from ..bilm.settings import torchrun_launch

# Rank 0 counts the vocabulary (a pass over the whole corpus) and evaluates while the others
# wait in a collective: allow far more than the default 30 minutes.
COLLECTIVE_TIMEOUT = timedelta(hours=4)


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def gather(self, value: Any) -> List[Any]:
        """Every process's ``value``, in rank order (all processes get the list)."""
        if not self.enabled:
            return [value]
        values: List[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every process."""
        if not self.enabled:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def any(self, flag: bool) -> bool:
        """True on every process if ``flag`` is true on any (e.g. to stop together)."""
        if not self.enabled:
            return flag
        tensor = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item())

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def init_distributed() -> Distributed:
    """Join the process group described by the environment, or run alone."""
    launch = torchrun_launch()
    cuda = torch.cuda.is_available()
    if launch.world <= 1:
        return Distributed(device=torch.device("cuda" if cuda else "cpu"))
    device = torch.device("cuda", launch.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo", timeout=COLLECTIVE_TIMEOUT)
    return Distributed(rank=launch.rank, world=launch.world, device=device)


def shutdown(env: Distributed) -> None:
    """Leave the process group, and end its threads while the interpreter still runs.

    The group's threads stop when the last object holding it (DistributedDataParallel) is freed;
    the collector frees those left in reference cycles first. A gloo thread still running at exit
    can drop a finished collective's tensors during interpreter finalization and abort the process
    (SIGABRT, "terminate called without an active exception") instead of letting it exit.
    """
    if env.enabled and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def all_sum(env: Distributed, tensor: torch.Tensor) -> torch.Tensor:
    """The element-wise sum of ``tensor`` over all processes (a copy)."""
    total = tensor.detach().clone().to(env.device)
    if env.enabled:
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.cpu()
