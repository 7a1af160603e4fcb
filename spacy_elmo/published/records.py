"""The record of a cache directory (``source.json``): what was checked, and when it is trusted.

Each file of a cached biLM is recorded once it passed every check: its byte size, its sha256 and
its modification time (``st_mtime_ns``). A file is hashed once: as it downloads
(:meth:`.download.Downloader.download` hashes the bytes as they arrive), or when files placed by hand are
first recorded. Later, a file whose size and modification time are those recorded is trusted as
the file that was checked, without being read. One whose size or time differ is hashed again: the
same bytes (a copy, a ``touch``) are recorded anew and used; other bytes are an error that names
the file and the fix. ``verify`` hashes every file whatever its size and time say.

The recorded time is settled a few seconds in the past, on a whole even second: :func:`settled` says why.
"""

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from filelock import FileLock, Timeout

from ..fileio import atomic_path

RECORD_NAME = "source.json"
LOCK_NAME = ".lock"  # the lock of a cache directory: one process downloads or records at a time
# How far in the past a recorded file's modification time is set (see :func:`settled`).
SETTLE_SECONDS = 10
_HASH_CHUNK = 1 << 22

Record = Dict[str, Any]


class CacheIntegrityError(ValueError):
    """A cached file is not what was downloaded (edited, truncated, replaced)."""


def read_record(directory: Path) -> Optional[Record]:
    """The record of ``directory``, or None when there is none, or it is unreadable or incomplete:
    no files, a file without its size or sha256, or one outside the directory."""
    try:
        record = json.loads((directory / RECORD_NAME).read_text(encoding="utf8"))
        files = record["files"]
        complete = bool(files) and all(
            set(entry) >= {"bytes", "sha256"} and is_inside(key) for key, entry in files.items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return record if complete else None


def is_inside(relative: str) -> bool:
    """Whether the relative path ``relative`` of a record stays inside its directory."""
    path = Path(relative)
    return ".." not in path.parts and not path.is_absolute()


def write_record(directory: Path, fields: Mapping[str, Any], digests: Mapping[str, Optional[str]]) -> None:
    """Record ``fields`` and the files ``digests`` names (paths relative to ``directory``): their
    size, settled modification time, and sha256 (the digest given, taken as the bytes were
    written; else read now)."""
    files = {}
    for key, digest in digests.items():
        path = directory / key
        size, mtime_ns = settled(path)
        files[key] = {"bytes": size, "sha256": digest or sha256_of(path), "mtime_ns": mtime_ns}
    _save(directory, {**fields, "files": files})


def check_unchanged(record: Record, directory: Path, verify: bool, fix: str) -> None:
    """Check each recorded file against the record (see the module docstring); ``fix`` ends the
    error's message (how to fetch it again). Raises :class:`CacheIntegrityError` for a file whose
    bytes changed; records anew the time of one whose bytes are the recorded ones."""
    paths = {key: directory / key for key in record["files"]}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise CacheIntegrityError(
            f"{', '.join(missing[:3])} {'is' if len(missing) == 1 else 'are'} missing from {directory}; "
            f"to fetch it again, {fix}"
        )
    moved = [key for key, path in paths.items() if _moved(path, record["files"][key], verify, fix)]
    if moved:
        _rerecord(directory, record, moved)


def _moved(path: Path, recorded: Dict[str, Any], verify: bool, fix: str) -> bool:
    """Whether ``path`` holds its recorded bytes under another time; False when it is trusted as
    it is. Raises :class:`CacheIntegrityError` for other bytes."""
    stat = path.stat()
    if not verify and (stat.st_size, stat.st_mtime_ns) == (recorded["bytes"], recorded.get("mtime_ns")):
        return False
    if stat.st_size != recorded["bytes"]:
        raise CacheIntegrityError(
            f"{path} changed after it was downloaded ({stat.st_size} bytes; recorded: {recorded['bytes']} bytes); "
            f"to fetch it again, {fix}"
        )
    if (digest := sha256_of(path)) != recorded["sha256"]:
        raise CacheIntegrityError(
            f"{path} changed after it was downloaded (sha256 {digest}; recorded: sha256 {recorded['sha256']}, "
            f"{recorded['bytes']} bytes); to fetch it again, {fix}"
        )
    return stat.st_mtime_ns != recorded.get("mtime_ns")


def _rerecord(directory: Path, record: Record, keys: List[str]) -> None:
    """Record the new times of files whose bytes were found unchanged, so that the next use
    need not hash them: under the lock, and only if no other process replaced the record
    meanwhile. Where the cache cannot be written (a read-only image), each use hashes them."""
    try:
        with FileLock(str(directory / LOCK_NAME), timeout=0):
            if read_record(directory) != record:
                return
            for key in keys:
                record["files"][key]["mtime_ns"] = settled(directory / key)[1]
            _save(directory, record)
    except (OSError, Timeout):
        pass


def remove_record(directory: Path) -> None:
    """Forget what ``directory`` held: a stale record would call new files altered."""
    (directory / RECORD_NAME).unlink(missing_ok=True)


def _save(directory: Path, record: Record) -> None:
    with atomic_path(directory / RECORD_NAME) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")


def settled(path: Path) -> Tuple[int, int]:
    """``(size, st_mtime_ns)`` of ``path``, its modification time first set back to a whole even
    second at least :data:`SETTLE_SECONDS` in the past when it is more recent or finer than that.

    A write after the record then always gives another time: file times advance by clock ticks
    (a few milliseconds on Linux, 2 s on FAT), so a write in the same tick as the download's last
    one would keep its time. Whole even seconds survive copies that keep times coarsely (``tar``,
    ``cp -p``). Where the time cannot be set, it is recorded as it is.
    """
    stat = path.stat()
    settled_s = (time.time_ns() // 1_000_000_000 - SETTLE_SECONDS) // 2 * 2
    if stat.st_mtime_ns % 2_000_000_000 or stat.st_mtime_ns > settled_s * 1_000_000_000:
        target = min(stat.st_mtime_ns // 2_000_000_000 * 2, settled_s) * 1_000_000_000
        try:
            os.utime(path, ns=(stat.st_atime_ns, target))
            stat = path.stat()
        except OSError:
            pass
    return stat.st_size, stat.st_mtime_ns


def sha256_of(path: Path) -> str:
    return digest_of(path, "sha256")


def digest_of(path: Path, algorithm: str) -> str:
    """The hex digest of the file at ``path`` (``sha256``, ``md5``, ``sha1``)."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()
