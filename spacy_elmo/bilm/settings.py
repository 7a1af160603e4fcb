"""The environment variables that switch how the biLM runs, read here and nowhere else in it.

Users set these to pin a choice on a fleet, or as a way out should a GPU path misbehave (the list:
docs/bilm.md, "Environment variables"). Each module that obeys a switch calls :func:`switches` where
it decides, so a variable set after import (a test's ``monkeypatch.setenv``) still counts: nothing
is cached. The variables ``torchrun`` sets are read here too (:func:`torchrun_launch`); the download
cache's belong to :mod:`spacy_elmo.published.settings`: these two modules are the package's only
readers of the environment (tests/test_layering.py keeps it so).
"""

import os
from dataclasses import dataclass
from typing import Mapping, Optional

PRECISION_ENV = "SPACY_ELMO_PRECISION"
OFFLOAD_ENV = "SPACY_ELMO_OFFLOAD"
FUSED_LSTM_ENV = "SPACY_ELMO_FUSED_LSTM"
CUDA_GRAPHS_ENV = "SPACY_ELMO_CUDA_GRAPHS"
WORLD_SIZE_ENV, RANK_ENV, LOCAL_RANK_ENV = "WORLD_SIZE", "RANK", "LOCAL_RANK"


@dataclass(frozen=True)
class BiLMSwitches:
    """The biLM's switches as the environment sets them; the defaults are those of an unset variable.

    - ``precision``: ``SPACY_ELMO_PRECISION`` (default None; stripped, empty counts as unset):
      ``fp32``, ``bf16`` or ``int8`` (inference only) decides ``"auto"`` on a CPU without measuring;
      an explicit ``precision`` wins. Checked where it is used (:mod:`.precision.autotune`).
    - ``offload``: ``SPACY_ELMO_OFFLOAD`` (default ``1``); ``0`` keeps the float32 weights of a
      bf16 or int8 biLM in memory instead of moving them to a file (:mod:`.memory.offload`).
    - ``fused_lstm``: ``SPACY_ELMO_FUSED_LSTM`` (default ``1``); ``0`` runs the eager LSTM loop
      on a GPU too, instead of the fused Triton loop (:mod:`.kernels.gpu.fused_lstm`).
    - ``cuda_graphs``: ``SPACY_ELMO_CUDA_GRAPHS`` (default ``1``); ``0`` launches the fused loop
      step by step instead of replaying CUDA graphs of it (:mod:`.kernels.gpu.cuda_graphs`).

    A switch is off only at ``0`` (spaces around it ignored); any other value leaves it on.
    """

    precision: Optional[str] = None
    offload: bool = True
    fused_lstm: bool = True
    cuda_graphs: bool = True


def switches(environ: Optional[Mapping[str, str]] = None) -> BiLMSwitches:
    """The switches as ``environ`` (default: this process's environment, read now) sets them."""
    env = os.environ if environ is None else environ
    return BiLMSwitches(
        precision=env.get(PRECISION_ENV, "").strip() or None,
        offload=_on_unless_zero(env.get(OFFLOAD_ENV)),
        fused_lstm=_on_unless_zero(env.get(FUSED_LSTM_ENV)),
        cuda_graphs=_on_unless_zero(env.get(CUDA_GRAPHS_ENV)),
    )


def _on_unless_zero(value: Optional[str]) -> bool:
    return value is None or value.strip() != "0"


@dataclass(frozen=True)
class TorchrunLaunch:
    """Where this process stands in a distributed run, as ``torchrun`` (or any launcher that sets
    the same variables) describes it; the defaults are a run alone.

    - ``world``: ``WORLD_SIZE`` (default ``1``), the number of processes in the run.
    - ``rank``: ``RANK`` (default ``0``; required where ``WORLD_SIZE`` > 1), this process's rank.
    - ``local_rank``: ``LOCAL_RANK`` (default ``0``), its rank on this node: the GPU it uses.
    """

    world: int = 1
    rank: int = 0
    local_rank: int = 0


def torchrun_launch(environ: Optional[Mapping[str, str]] = None) -> TorchrunLaunch:
    """The launch as ``environ`` (default: this process's environment, read now) describes it."""
    env = os.environ if environ is None else environ
    world = _whole_number(env, WORLD_SIZE_ENV, "1")
    if world > 1 and RANK_ENV not in env:
        raise ValueError(
            f"{WORLD_SIZE_ENV}={world} but {RANK_ENV} is not set: start each process with torchrun, "
            f"or set {RANK_ENV} (and {LOCAL_RANK_ENV}) as it does"
        )
    return TorchrunLaunch(
        world=world, rank=_whole_number(env, RANK_ENV, "0"), local_rank=_whole_number(env, LOCAL_RANK_ENV, "0")
    )


def _whole_number(env: Mapping[str, str], name: str, default: str) -> int:
    value = env.get(name, default)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} must be a whole number, as torchrun sets it") from None
