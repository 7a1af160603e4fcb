"""Checkpoints: everything a run needs to continue exactly where it stopped.

One file, ``OUTPUT_DIR/checkpoint.pt``, replaced atomically (see :mod:`spacy_elmo.fileio`), so a kill
or a full disk at any moment leaves either the previous checkpoint or the new one. It holds only tensors
and plain containers, read with ``torch.load(weights_only=True)``: loading one never runs pickled code.

SIGINT (Ctrl-C) and SIGTERM (a scheduler, torchrun stopping its workers) during the loop only
ask the run to stop (:func:`stop_requests`): it saves a checkpoint at the end of the step, then
raises :class:`Interrupted`, so stopping a run never loses the steps since the last checkpoint.
"""

import contextlib
import random
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple, cast

import numpy
import torch

from ..bilm.precision.hardware import MACHINE, Hardware
from ..fileio import OPTIONS_NAME, WEIGHTS_NAME, OutputError, atomic_path, remove_stale_temporaries

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run stopped on a signal after saving its checkpoint.

    A KeyboardInterrupt, so that code calling ``pretrain`` stops as on Ctrl-C; the message says
    where the checkpoint is and how to resume (empty on the processes that do not write it).
    """

    def __init__(self, signal_number: int, message: str = "") -> None:
        super().__init__(message)
        self.signal_number = signal_number


@contextlib.contextmanager
def stop_requests() -> Iterator[List[int]]:
    """While in the block, SIGINT and SIGTERM are only recorded (in the list yielded), for the loop to
    stop at a step boundary; the previous handlers come back after it.

    A second Ctrl-C raises KeyboardInterrupt at once, without saving, as a user who presses it
    twice expects. Every SIGTERM is only recorded: a scheduler may send it to every process of a
    job and torchrun sends it again to its workers, and none may end a worker before it has saved
    (schedulers and torchrun send SIGKILL after a grace period, 30 s for torchrun). Handlers can
    only be set in the main thread; elsewhere signals keep theirs and the list stays empty.
    """
    received: List[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def request(number: int, frame: Any) -> None:
        if number == signal.SIGINT and number in received:
            raise KeyboardInterrupt
        received.append(number)

    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    for number in STOP_SIGNALS:
        signal.signal(number, request)
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)


def prepare_output_dir(directory: Path) -> None:
    """Fail before any work if ``directory`` cannot be written; clear temporaries of killed writes."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        raise OutputError(
            f"cannot write to the output directory {directory}: {err.strerror or err}; choose one you can write to"
        ) from err
    for name in (CHECKPOINT_NAME, OPTIONS_NAME, WEIGHTS_NAME):
        remove_stale_temporaries(directory / name)


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    """Write ``state`` (plus the format version) to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        try:
            torch.save({"format": FORMAT_VERSION, **state}, f)
        except RuntimeError as err:  # torch's writer wraps the OSError of a full disk
            if isinstance(err.__context__, OSError):
                raise err.__context__ from err
            raise


def load_checkpoint(path: Path) -> Dict[str, Any]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a damaged or foreign file
        raise ValueError(f"cannot read checkpoint {path}: {err}") from err
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path} is not a spacy-elmo checkpoint (format {FORMAT_VERSION})")
    return state


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators: what :func:`rng_state` saves."""
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> Dict[str, Any]:
    """Python, NumPy and torch RNG states as tensors and plain containers."""
    # The legacy tuple, which get_state() gives for the global MT19937 generator (numpy's stub says a dict).
    name, keys, pos, has_gauss, cached = cast(Tuple[str, numpy.ndarray, int, int, float], numpy.random.get_state())
    return {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(numpy.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: Dict[str, Any], hardware: Hardware = MACHINE) -> None:
    """Restore what :func:`rng_state` saved; of the GPUs' states, those of the GPUs ``hardware`` has now, by index.

    A run may resume on another machine, with fewer GPUs or none: a process draws only on its own
    GPU, ``LOCAL_RANK`` (see :mod:`.distributed`), which the resumed run, of the same number of
    processes, has again; states of GPUs it does not see are of no use to it.
    (``torch.cuda.set_rng_state_all`` raises IndexError for them.)
    """
    random.setstate(_tuples(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    numpy.random.set_state((name, keys.numpy().astype(numpy.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    for index, gpu_state in enumerate(state["cuda"][: hardware.cuda.device_count()]):
        hardware.cuda.set_rng_state(gpu_state, index)


def _tuples(value: Any) -> Any:
    """random.setstate wants tuples where a round trip may have produced lists."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
