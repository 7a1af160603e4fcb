"""Checkpoints: everything a run needs to continue exactly where it stopped.

One file, ``OUTPUT_DIR/checkpoint.pt``, replaced atomically (written to a temporary file in the
same directory, flushed to disk, then ``os.replace``), so a kill at any moment leaves either
the previous checkpoint or the new one. It holds only tensors and plain containers and is read
with ``torch.load(weights_only=True)``: loading a checkpoint never runs pickled code.
"""

import os
import random
import tempfile
from pathlib import Path
from typing import Any, Dict

import numpy
import torch

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    """Write ``state`` (plus the format version) to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT_VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
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
