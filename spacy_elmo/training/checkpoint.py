"""Checkpoints: everything a run needs to continue exactly where it stopped.

One file, ``OUTPUT_DIR/checkpoint.pt``, replaced atomically (see :mod:`spacy_elmo.fileio`),
so a kill or a full disk at any moment leaves either the previous checkpoint or the new one. It holds only tensors and plain containers and is read
with ``torch.load(weights_only=True)``: loading a checkpoint never runs pickled code.
"""

import random
import tempfile
from pathlib import Path
from typing import Any, Dict

import numpy
import torch

from ..fileio import atomic_path, remove_stale_temporaries

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


class OutputError(RuntimeError):
    """A file of the run could not be written (full disk, permissions); the message says what survived."""


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
    for name in (CHECKPOINT_NAME, "options.json", "weights.hdf5"):
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


def rng_state() -> Dict[str, Any]:
    """Python, NumPy and torch RNG states as tensors and plain containers."""
    name, keys, pos, has_gauss, cached = numpy.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(numpy.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: Dict[str, Any]) -> None:
    random.setstate(_tuples(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    numpy.random.set_state((name, keys.numpy().astype(numpy.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuples(value: Any) -> Any:
    """random.setstate wants tuples where a round trip may have produced lists."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
