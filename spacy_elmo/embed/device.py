"""Where ``spacy-elmo embed`` runs the biLM: ``--device``, and on Ray ``--gpus-per-worker``.

The device decides the speed of a run, not what it stores: it is kept out of the manifest, so
an output started on a GPU can be finished on a CPU or another GPU. What the device can change
is the precision of the matrix products (``--precision auto`` resolves on it), and that is
recorded (``model.products``) and checked when a run resumes.

The decisions are pure functions of what the machine has (:func:`resolve_device`,
:func:`worker_device`, :func:`worker_precision`), so their every case is tested without a GPU.
"""

import re
from typing import Callable, Optional, Tuple

import torch

from ..bilm.precision.hardware import MACHINE, Hardware
from ..bilm.precision.resolved import Explicit, Precision, ResolvedPrecision

_SPEC = re.compile(r"auto|cpu|cuda(?::(\d+))?")


def parse_device(spec: str) -> Tuple[str, Optional[int]]:
    """``spec`` as (``"auto"``, ``"cpu"`` or ``"cuda"``, the GPU index of ``cuda:N`` or None)."""
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N (N a GPU's index, e.g. cuda:1), got {spec!r}")
    index = match.group(1)
    return spec.partition(":")[0], None if index is None else int(index)


def resolve_device(spec: str, cuda_devices: int, thinc_gpu: Optional[int], prefer_gpu: bool) -> torch.device:
    """The torch device that ``--device spec`` names on a machine where torch sees ``cuda_devices``
    CUDA GPUs and thinc's current ops run on GPU ``thinc_gpu`` (None: on the CPU).

    ``auto`` follows spaCy's convention for a Python caller, who opts in to the GPU with
    ``spacy.require_gpu()`` / ``prefer_gpu()`` (``thinc_gpu``), and takes a visible GPU when
    ``prefer_gpu`` (the command line, where nobody could have called those, sets it): a corpus
    run is exactly the work a GPU is for. ``cuda`` without an index is thinc's GPU when thinc
    has one, so that the biLM and the pipeline around it share a device; else ``cuda:0``.
    Asking for a GPU torch cannot see is an error, never a silent fall back to the CPU.
    """
    kind, index = parse_device(spec)
    if kind == "cpu":
        return torch.device("cpu")
    if kind == "auto":
        if cuda_devices and thinc_gpu is not None:
            return torch.device("cuda", thinc_gpu)
        if cuda_devices and prefer_gpu:
            return torch.device("cuda", 0)
        return torch.device("cpu")
    if cuda_devices == 0:
        raise ValueError(
            f"--device {spec}: torch sees no CUDA GPU here (torch {torch.__version__}). Use --device cpu or "
            "auto, or install a CUDA build of torch and check CUDA_VISIBLE_DEVICES"
        )
    if index is None:
        index = thinc_gpu if thinc_gpu is not None else 0
    if index >= cuda_devices:
        raise ValueError(
            f"--device {spec}: torch sees {cuda_devices} CUDA GPU(s), cuda:0 to cuda:{cuda_devices - 1}: "
            "pick one of those (CUDA_VISIBLE_DEVICES renumbers them from 0)"
        )
    return torch.device("cuda", index)


def thinc_gpu(hardware: Hardware = MACHINE) -> Optional[int]:
    """The CUDA device thinc's current ops run on (after ``spacy.require_gpu()``), None on the CPU.

    Read from torch, as thinc's own ``get_torch_default_device`` does: ``require_gpu(n)`` makes
    ``n`` current for CuPy and torch alike, while ``CupyOps.device_id`` keeps its default.
    """
    from thinc.api import CupyOps, get_current_ops

    if not isinstance(get_current_ops(), CupyOps) or not hardware.cuda.is_available():
        return None
    return hardware.cuda.current_device()


def worker_device(spec: str, gpus_per_worker: float) -> str:
    """The device of every Ray worker's biLM, ``"cuda"`` or ``"cpu"``, for ``--device spec``.

    A worker gets a GPU only by asking Ray for one (``num_gpus``, here ``gpus_per_worker``);
    Ray then makes it the worker's only visible GPU, ``cuda:0`` inside the worker, so an index
    chosen on the driver would name nothing there. The biLM runs on one GPU: a fraction shares a
    GPU between workers (0.5: two per GPU), and more than one would reserve GPUs never used.
    """
    kind, index = parse_device(spec)
    if not 0 <= gpus_per_worker <= 1:
        raise ValueError(
            f"--gpus-per-worker must be between 0 and 1, got {gpus_per_worker}: a worker's biLM runs on one GPU "
            "(a fraction such as 0.5 puts two workers on a GPU); for more GPUs, raise --workers"
        )
    if gpus_per_worker > 0:
        if kind == "cpu":
            raise ValueError(
                f"--device cpu with --gpus-per-worker {gpus_per_worker}: the workers would hold GPUs they never use. "
                "Drop --gpus-per-worker to run on CPUs, or drop --device cpu to run on the GPUs"
            )
        if index is not None:
            raise ValueError(
                f"--device {spec} with --engine ray: Ray gives each worker its own GPU, which the worker sees as "
                "cuda:0; use --device cuda or auto"
            )
        return "cuda"
    if kind == "cuda":
        raise ValueError(
            f"--device {spec} with --engine ray: Ray gives a worker a GPU only when it asks for one. Add "
            "--gpus-per-worker 1 (or a fraction such as 0.5 to put two workers on a GPU)"
        )
    return "cpu"


def worker_precision(
    precision: Precision, device_kind: str, cuda_devices: int, cpu_auto: Optional[Callable[[], str]] = None
) -> Explicit:
    """An explicit precision: ``precision`` decided once, on the driver, for workers on ``device_kind``
    (:class:`~spacy_elmo.bilm.precision.resolved.ResolvedPrecision`, for inference).

    Every worker must compute the products the manifest records, or one store would mix bf16
    and fp32 values. Left to each worker, ``auto`` would follow each one's hardware; decided
    here, it follows this machine's (its CPU for CPU workers, its first GPU for GPU workers).
    ``cpu_auto``: the run's biLM's measured choice on this CPU, so that CPU workers compute what
    the local engine computes here. A driver without a GPU cannot decide ``auto`` for GPU
    workers: that is an error naming the choice.
    """
    if precision == "auto" and device_kind == "cuda" and not cuda_devices:
        raise ValueError(
            "--precision auto with --gpus-per-worker: auto is decided once, on this machine, so that every "
            "worker computes the products the manifest records, and this machine sees no GPU to decide it "
            "on. Give --precision bf16 (GPUs of compute capability 8.0 and up: A100, L4, H100, ...) or fp32"
        )
    device = torch.device("cuda", 0) if device_kind == "cuda" else torch.device("cpu")
    return ResolvedPrecision.resolve(precision, device, training=False, measured=cpu_auto).precision
