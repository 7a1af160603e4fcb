"""The download cache: a biLM's two files fetched once, checked, and trusted only while unchanged.

Layout, under ``SPACY_ELMO_CACHE`` (default ``$XDG_CACHE_HOME/spacy-elmo``, else
``~/.cache/spacy-elmo``): ``NAME/`` for a registry name, ``urls/HOST/PATH/`` for a URL, each
holding ``options.json``, ``weights.hdf5`` and ``source.json`` (the URLs, and the size and sha256
of each file recorded when it was kept). So a person can tell what is there, and can place the
two files by hand on a machine without network (they are checked and recorded at first use).

A file is kept only once it passed every check: the byte size and sha256 the registry gives, and
loading as ELMo weights that match the options. Files are moved into place only then, so a
reader never sees a partial file. One process downloads while the others wait on a lock per
biLM (``n_process`` workers, torchrun ranks, Ray actors), then use its result. A cached biLM is
used without any network request, after its files are checked against the record; a file that
changed since is an error that names the file and the fix. ``SPACY_ELMO_OFFLINE=1`` forbids
downloads altogether.

This package sits below :mod:`spacy_elmo.bilm` (``BiLM.from_pretrained`` uses it), so the check
that files load as ELMo weights is passed in by the caller: ``check=BiLM.from_files``.
"""

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from filelock import FileLock

from ..fileio import atomic_path
from .download import DownloadError, download

CACHE_ENV = "SPACY_ELMO_CACHE"
OFFLINE_ENV = "SPACY_ELMO_OFFLINE"
OPTIONS_NAME = "options.json"
WEIGHTS_NAME = "weights.hdf5"
RECORD_NAME = "source.json"
_HASH_CHUNK = 1 << 22

# Loads an (options, weights) pair, or raises ValueError saying why it is not a usable biLM.
Check = Callable[[Path, Path], object]


class CacheIntegrityError(ValueError):
    """A cached file is not what was downloaded (edited, truncated, replaced)."""


class OfflineError(DownloadError):
    """A biLM must be downloaded, but ``SPACY_ELMO_OFFLINE`` forbids the network."""


@dataclass(frozen=True)
class Source:
    """A biLM's two remote files and the cache directory that keeps them.

    ``label`` is how the user named the biLM (messages); ``fix`` says how to fetch it anew
    ("run `spacy-elmo download NAME --force`").
    """

    label: str
    options_url: str
    weights_url: str
    directory: Path
    fix: str
    weights_bytes: Optional[int] = None
    weights_sha256: Optional[str] = None

    @property
    def options_path(self) -> Path:
        return self.directory / OPTIONS_NAME

    @property
    def weights_path(self) -> Path:
        return self.directory / WEIGHTS_NAME

    @property
    def files(self) -> Tuple[Path, Path]:
        return self.options_path, self.weights_path

    def is_cached(self) -> bool:
        """Whether both files are in the cache (unchecked: for listings, not for use)."""
        return self.options_path.is_file() and self.weights_path.is_file()


def cache_root() -> Path:
    """Where downloaded biLMs are kept: ``SPACY_ELMO_CACHE``, else the user's cache directory."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spacy-elmo"


def offline() -> bool:
    """Whether ``SPACY_ELMO_OFFLINE`` forbids network access."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def fetch(source: Source, check: Check, force: bool = False, progress: bool = True) -> Tuple[Path, Path]:
    """``(options.json, weights.hdf5)`` of ``source`` in the cache, downloaded first if needed.

    New files are kept only if ``check`` loads them.

    ``force`` fetches the files again whatever the cache holds (replacing them only once the new
    ones passed every check). Without it, a cached biLM is returned after checking its files,
    with no network request and no lock.
    """
    if not force and _verified(source):
        return source.files
    source.directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(source.directory / ".lock")):
        if not force:
            if _verified(source):  # another process finished it while this one waited
                return source.files
            if source.is_cached() and not (source.directory / RECORD_NAME).exists():
                _adopt(source, check)
                return source.files
        if offline():
            raise OfflineError(_offline_message(source))
        _download(source, check, progress, fresh=force)
    return source.files


def _verified(source: Source) -> bool:
    """True if both files are cached, recorded and unchanged; False if not (or not the wanted ones).

    Raises :class:`CacheIntegrityError` for a file that changed after it was recorded.
    """
    record = _read_record(source)
    if record is None or not source.is_cached():
        return False
    for path in source.files:
        recorded = record["files"][path.name]
        size, digest = path.stat().st_size, sha256_of(path)
        if (size, digest) != (recorded["bytes"], recorded["sha256"]):
            raise CacheIntegrityError(
                f"{path} changed after it was downloaded ({size} bytes, sha256 {digest}; recorded: "
                f"{recorded['bytes']} bytes, sha256 {recorded['sha256']}); to fetch it again, {source.fix}"
            )
    weights = record["files"][WEIGHTS_NAME]
    return source.weights_sha256 in (None, weights["sha256"]) and source.weights_bytes in (None, weights["bytes"])


def _download(source: Source, check: Check, progress: bool, fresh: bool) -> None:
    """Fetch both files into partial files, check them, then move them into place and record them.

    The weights continue from a partial file left by an earlier attempt, unless ``fresh``. Files
    already cached stay until the new ones passed every check.
    """
    options_part = source.directory / f".{OPTIONS_NAME}.part"
    weights_part = source.directory / f".{WEIGHTS_NAME}.part"
    options_part.unlink(missing_ok=True)  # small: always fetched whole
    if fresh:
        weights_part.unlink(missing_ok=True)
    try:
        download(source.options_url, options_part, progress=False)
        download(source.weights_url, weights_part, source.weights_bytes, progress)
    except DownloadError:
        options_part.unlink(missing_ok=True)
        raise
    try:
        _check_files(source, options_part, weights_part, check)
    except (ValueError, OSError) as err:
        options_part.unlink()
        weights_part.unlink()
        raise DownloadError(
            f"the files downloaded for {source.label!r} ({source.options_url}, {source.weights_url}) are not a "
            f"usable ELMo biLM, so nothing was cached: {err}"
        ) from err
    (source.directory / RECORD_NAME).unlink(missing_ok=True)  # a stale record would call the new files altered
    os.replace(options_part, source.options_path)
    os.replace(weights_part, source.weights_path)
    _write_record(source)


def _adopt(source: Source, check: Check) -> None:
    """Check and record files that were put in the cache by hand (or whose record was lost)."""
    try:
        _check_files(source, *source.files, check)
    except (ValueError, OSError) as err:
        raise CacheIntegrityError(
            f"the files in {source.directory} are not the biLM {source.label!r}: {err}. Replace them with "
            f"{source.options_url} and {source.weights_url}, or {source.fix}"
        ) from err
    _write_record(source)


def _check_files(source: Source, options_file: Path, weight_file: Path, check: Check) -> None:
    """Refuse weights of another size or sha256 than the registry's, or that do not load with the options."""
    size = weight_file.stat().st_size
    if source.weights_bytes is not None and size != source.weights_bytes:
        raise ValueError(f"the weights have {size} bytes, the registry expects {source.weights_bytes}")
    digest = sha256_of(weight_file) if source.weights_sha256 is not None else None
    if digest != source.weights_sha256:
        raise ValueError(f"the weights' sha256 is {digest}, the registry expects {source.weights_sha256}")
    check(options_file, weight_file)


def _read_record(source: Source) -> Optional[Dict]:
    """The record of the cached files, or None when there is none (or it is unreadable)."""
    try:
        record = json.loads((source.directory / RECORD_NAME).read_text(encoding="utf8"))
        complete = all(set(record["files"][name]) >= {"bytes", "sha256"} for name in (OPTIONS_NAME, WEIGHTS_NAME))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if complete else None


def _write_record(source: Source) -> None:
    files = {path.name: {"bytes": path.stat().st_size, "sha256": sha256_of(path)} for path in source.files}
    record = {"name": source.label, "options_url": source.options_url, "weights_url": source.weights_url, "files": files}
    with atomic_path(source.directory / RECORD_NAME) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")


def _offline_message(source: Source) -> str:
    return (
        f"{OFFLINE_ENV} forbids downloads, and the biLM {source.label!r} is not in the cache. Fetch it once on "
        f"a machine with network (`spacy-elmo download`, or a first load) and copy {source.directory} here, "
        f"or put the files there by hand: {source.options_url} as {source.options_path} and "
        f"{source.weights_url} as {source.weights_path}"
    )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()
