"""File helpers shared by the biLM, the component, training and embedding; no spaCy or torch here.

Reading text: :func:`text_lines`, the one reader of the text and JSONL inputs of ``pretrain``
and ``embed``, so that both resume at a byte offset and both explain undecodable input the same way.

Atomic file replacement: a reader (or a run killed mid-write) sees the old file or the new one.

The data goes to a hidden temporary file beside the target, is flushed to disk, then
``os.replace``\\ d onto the target. A write that fails (full disk, quota) leaves the target as it
was and removes the temporary file; a process killed mid-write can only leave a stray
``.<name>.*.tmp`` behind, which :func:`remove_stale_temporaries` clears.
"""

import contextlib
import os
import shlex
import tempfile
from pathlib import Path
from typing import Iterator, Tuple, Union

PathLike = Union[str, Path]


class OutputError(ValueError):
    """An output (of ``pretrain`` or ``embed``) cannot be written or cannot take this run; the
    message says what survived and what to do. One class for both commands."""


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


def text_lines(path: Path, offset: int) -> Iterator[Tuple[str, int]]:
    """Decoded, stripped lines of a UTF-8 file from byte ``offset`` on, each with the byte offset after it.

    Raises ValueError naming the file, line and byte of the first undecodable line, and how to convert it.
    """
    with path.open("rb") as f:
        f.seek(offset)
        while True:
            raw = f.readline()
            if not raw:
                return
            try:
                line = raw.decode("utf8")
            except UnicodeDecodeError as err:
                raise _not_utf8_error(path, f.tell() - len(raw), err) from err
            yield line.strip(), f.tell()


def _not_utf8_error(path: Path, line_start: int, err: UnicodeDecodeError) -> ValueError:
    """The error for the line of ``path`` starting at byte ``line_start`` that ``err`` failed to decode.

    It gives the line number (what an editor shows; the byte offset alone finds nothing) and a
    conversion that keeps the file's name, so a corpus directory and the format chosen by the
    file's extension stay as they were.
    """
    line = 1 + _newlines_before(path, line_start)
    bad = err.object[err.start : err.end]
    name, converted = shlex.quote(str(path)), shlex.quote(f"{path}.utf8")
    return ValueError(
        f"{path} is not UTF-8 text: line {line} (byte {line_start + err.start} of the file) holds {bad!r}, "
        f"{err.reason}. Convert the file to UTF-8, e.g. from Latin-1: "
        f"iconv -f LATIN1 -t UTF-8 {name} > {converted} && mv {converted} {name}"
    )


def _newlines_before(path: Path, end: int) -> int:
    """How many line breaks the first ``end`` bytes of ``path`` hold (read in chunks: the file may be large)."""
    count = 0
    with path.open("rb") as f:
        while end > 0:
            chunk = f.read(min(end, 1 << 20))
            if not chunk:
                break
            count += chunk.count(b"\n")
            end -= len(chunk)
    return count


# A biLM's files in a directory of its own (an export, a download, a saved component): the names
# bilm-tf's and AllenNLP's published directories use.
OPTIONS_NAME = "options.json"
WEIGHTS_NAME = "weights.hdf5"


def standard_files(directory: PathLike) -> Tuple[Path, Path]:
    """``(options file, weight file)`` of the biLM in ``directory``, under the standard names."""
    return Path(directory) / OPTIONS_NAME, Path(directory) / WEIGHTS_NAME
