"""The download cache: a biLM fetched once, checked, and trusted only while unchanged.

Layout, under ``SPACY_ELMO_CACHE``, else the user's cache directory as :mod:`platformdirs` gives
it (:func:`cache_root`: ``$XDG_CACHE_HOME/spacy-elmo`` or ``~/.cache/spacy-elmo`` on Linux,
``~/Library/Caches/spacy-elmo`` on macOS, ``%LOCALAPPDATA%\\spacy-elmo\\Cache`` on Windows):
``NAME/`` for a registry name, ``urls/HOST/PATH/`` for a URL, each holding the biLM's two files
or its extracted archive (:mod:`.sources`) and ``source.json``, the record of where they came from
and of each file's size, sha256 and modification time (:mod:`.records`). So a person can tell
what is there, and can place the files by hand on a machine without network (they are checked
and recorded at first use).

Both kinds of source go through one flow, :func:`fetch`: a cached, recorded and unchanged biLM
is used with no network request and no lock; else, under a lock per biLM (one process downloads
while the others wait: ``n_process`` workers, torchrun ranks, Ray actors), files placed by hand
are checked and recorded, or the biLM is downloaded. A download is kept only once it passed every
check (the registry's size and checksums, and loading as ELMo weights that match the options),
and moved into place only then, so a reader never sees a partial file. ``SPACY_ELMO_OFFLINE=1``
forbids downloads altogether; a host that cannot be reached is an error that says how to do
without it.

This package sits below :mod:`spacy_elmo.bilm` (``BiLM.from_pretrained`` uses it), so the check
that files load as ELMo weights is passed in by the caller: ``check=BiLM.from_files``, and for
an archive a check of the model directory and its format.
"""

from pathlib import Path
from typing import Any, Callable, Dict, Optional, Protocol, Tuple, TypeVar

import platformdirs
from filelock import FileLock

from . import records
from .download import DownloadError, HostUnreachable
from .records import LOCK_NAME, CacheIntegrityError, Record
from .settings import OFFLINE_ENV, download_settings

APP_NAME = "spacy-elmo"  # the cache's directory name under the user's cache directory
# What a fetch gives: (options.json, weights.hdf5), or (model directory, format) for an archive;
# covariant in the protocol, which only returns it.
Fetched = TypeVar("Fetched")
Fetched_co = TypeVar("Fetched_co", covariant=True)

__all__ = ["CacheIntegrityError", "CachedSource", "OfflineError", "cache_root", "fetch"]


class OfflineError(DownloadError):
    """A biLM must be downloaded, but ``SPACY_ELMO_OFFLINE`` forbids the network."""


class CachedSource(Protocol[Fetched_co]):
    """What :func:`fetch` needs of a biLM's source: where it is cached (``directory``), how the
    user named it (``label``, for messages), how to fetch it anew (``fix``: "run `spacy-elmo
    download NAME --force`"), and the steps that differ between two files and an archive."""

    @property
    def label(self) -> str: ...

    @property
    def directory(self) -> Path: ...

    @property
    def fix(self) -> str: ...

    def present(self) -> bool:
        """Whether the biLM's files are in the cache (unchecked, maybe unrecorded)."""

    def complete(self, record: Record) -> bool:
        """Whether ``record`` (a readable one, see :func:`.records.read_record`) is of this kind."""

    def wanted(self, record: Record) -> bool:
        """Whether the recorded download is the one the registry pins (size, sha256), if it pins one."""

    def result(self, record: Record) -> Fetched_co:
        """What :func:`fetch` returns for the biLM that ``record`` describes."""

    def by_hand(self) -> str:
        """How to place the biLM in the cache by hand: which URL goes to which path."""

    def adopt(self, check: Callable[..., object]) -> Tuple[Record, Dict[str, Optional[str]]]:
        """Check files placed by hand: the record's fields and the files' digests where known.
        Raises ValueError (or OSError) saying why they are not the biLM."""

    def download(self, check: Callable[..., object], progress: bool, fresh: bool) -> Fetched_co:
        """Download, check, move into place and record (continuing partial files unless ``fresh``)."""


def cache_root() -> Path:
    """Where downloaded biLMs are kept: ``SPACY_ELMO_CACHE``, else the user's cache directory as
    :func:`platformdirs.user_cache_dir` gives it (the module docstring lists it per system)."""
    return download_settings().cache_dir or Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def fetch(
    source: CachedSource[Fetched],
    check: Callable[..., object],
    force: bool = False,
    progress: bool = True,
    verify: bool = False,
) -> Fetched:
    """The cached files of ``source``, downloaded first if need be: ``(options.json,
    weights.hdf5)``, or ``(model directory, format)`` for an archive. New files are kept only if
    ``check`` loads them: ``check(options, weights)``, or ``check(model directory, format)``.

    ``force`` fetches the files again whatever the cache holds (replacing them only once the new
    ones passed every check). Without it, a cached biLM is returned with no network request and
    no lock, once its files' sizes and modification times match the record (``verify``: once
    their sha256 does, each file read in full).
    """
    if not force and (found := _verified(source, verify)) is not None:
        return found
    source.directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(source.directory / LOCK_NAME)):
        if not force:
            if (found := _verified(source, verify)) is not None:  # another process finished it while this one waited
                return found
            if source.present() and not (source.directory / records.RECORD_NAME).exists():
                return _adopt(source, check)
        if download_settings().offline:
            raise OfflineError(
                f"{OFFLINE_ENV} forbids downloads, and the biLM {source.label!r} is not in the cache. Fetch it once "
                f"on a machine with network (`spacy-elmo download`, or a first load) and copy {source.directory} "
                f"here, or {source.by_hand()}"
            )
        try:
            return source.download(check, progress, fresh=force)
        except HostUnreachable as err:
            raise DownloadError(_unreachable_message(source, err)) from err


def _verified(source: CachedSource[Fetched], verify: bool) -> Optional[Fetched]:
    """What :func:`fetch` returns when the biLM is cached, recorded and unchanged (see
    :mod:`.records`), and the one the registry wants; else None."""
    record = records.read_record(source.directory)
    if record is None or not source.complete(record) or not source.present():
        return None
    records.check_unchanged(record, source.directory, verify, source.fix)
    return source.result(record) if source.wanted(record) else None


def _adopt(source: CachedSource[Fetched], check: Callable[..., object]) -> Fetched:
    """Check and record files that were put in the cache by hand (or whose record was lost)."""
    try:
        fields, digests = source.adopt(check)
    except (ValueError, OSError) as err:
        raise CacheIntegrityError(
            f"the files in {source.directory} are not the biLM {source.label!r}: {err}. To replace them, "
            f"{source.by_hand()}; or {source.fix}"
        ) from err
    records.write_record(source.directory, fields, digests)
    return source.result(fields)


def _unreachable_message(source: CachedSource[Any], err: HostUnreachable) -> str:
    """Three short lines: what failed, and what to do: retry, place the files by hand, or say
    that this machine has no network."""
    hosts = " or ".join(err.hosts) or "the host"
    return (
        f"cannot reach {hosts} to download the biLM {source.label!r} ({err.reason}).\n"
        f"Retry once the network is up, or {source.by_hand()}.\n"
        f"Without network, set {OFFLINE_ENV}=1: loads then never wait on a host."
    )
