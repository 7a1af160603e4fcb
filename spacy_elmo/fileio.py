"""File helpers shared by the biLM, the component and training; no spaCy or torch here.

Atomic file replacement: a reader (or a run killed mid-write) sees the old file or the new one.

The data goes to a hidden temporary file beside the target, is flushed to disk, then
``os.replace``\\ d onto the target. A write that fails (full disk, quota) leaves the target as it
was and removes the temporary file; a process killed mid-write can only leave a stray
``.<name>.*.tmp`` behind, which :func:`remove_stale_temporaries` clears.
"""

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, Path]


def _default_file_mode() -> int:
    """0o666 minus the umask: what ``open(path, "w")`` would give (mkstemp gives 0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _default_file_mode()


def _temporary_prefix(target: Path) -> str:
    return f".{target.name}."


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target`` to write to; moved onto ``target`` when the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=_temporary_prefix(target), suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _FILE_MODE)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale_temporaries(target: Path) -> None:
    """Delete the temporary files that writes of ``target`` killed mid-way left behind."""
    for stale in target.parent.glob(f"{_temporary_prefix(target)}*.tmp"):
        stale.unlink(missing_ok=True)
