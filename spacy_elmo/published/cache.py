"""The download cache: a biLM's two files fetched once, checked, and trusted only while unchanged.

Layout, under ``SPACY_ELMO_CACHE``, else the user's cache directory as :mod:`platformdirs` gives
it (:func:`cache_root`: ``$XDG_CACHE_HOME/spacy-elmo`` or ``~/.cache/spacy-elmo`` on Linux,
``~/Library/Caches/spacy-elmo`` on macOS, ``%LOCALAPPDATA%\\spacy-elmo\\Cache`` on Windows):
``NAME/`` for a registry name, ``urls/HOST/PATH/`` for a URL, each holding ``options.json``,
``weights.hdf5`` and ``source.json`` (the URLs, and the size, sha256 and modification time of
each file recorded when it was kept). So a person can tell what is there,
and can place the two files by hand on a machine without network (they are checked and recorded
at first use).

A file is kept only once it passed every check: the byte size and sha256 the registry gives, and
loading as ELMo weights that match the options. Files are moved into place only then, so a
reader never sees a partial file. One process downloads while the others wait on a lock per
biLM (``n_process`` workers, torchrun ranks, Ray actors), then use its result. ``SPACY_ELMO_OFFLINE=1``
forbids downloads altogether.

A file is hashed once: as it downloads (:func:`.download.download` hashes the bytes as they
arrive), or when files placed by hand are first recorded. A cached biLM is then used without any
network request and without reading its files to check them: a file whose byte size and
modification time (``st_mtime_ns``) are those recorded is trusted as the file that was checked.
One whose size or time differ is hashed again: the same bytes (a copy, a ``touch``) are recorded
anew and used; other bytes are an error that names the file and the fix.
``spacy-elmo download NAME --verify`` hashes both files whatever their size and time say. The
recorded time is settled a few seconds in the past, on a whole even second (see
:func:`_settled`), so that a later write shows even where file times are coarse (within a clock
tick, FAT's 2 s) and a copy that keeps times to the second (``tar``, ``cp -p``) still matches.

An archive entry (:class:`ArchiveSource`: a zip, tar.gz or tar.bz2 holding the model, in the
standard layout or ELMoForManyLangs', maybe in a subdirectory) is cached the same way:
``NAME/model/`` holds the extracted tree, ``source.json`` the archive's URL, size and sha256, where
the model is in the tree and its format, and each extracted file's size, sha256 and modification
time, trusted and checked as above. The archive downloads into ``NAME/.archive.part``, continued
after a dropped connection like any file; it is extracted safely (:mod:`.archive`) into a hidden
temporary ``NAME/.extract-*`` directory, the model is found in it (:func:`.layout.find_model_directory`)
and loaded, and only then is the directory renamed to ``NAME/model`` and the archive deleted. A
killed extraction leaves only the temporary directory, which the next download removes; readers
never see it.

Where a registry entry names alternate URLs (AllenNLP's second host name), each file is fetched
from the first URL that serves it. The registry's md5 and sha1 sums, where a publisher gives them,
are checked with the size and sha256 before a file is kept.

This package sits below :mod:`spacy_elmo.bilm` (``BiLM.from_pretrained`` uses it), so the check
that files load as ELMo weights is passed in by the caller: ``check=BiLM.from_files``, and for
an archive a check of the model directory and its format.
"""

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import platformdirs
from filelock import FileLock, Timeout

from ..fileio import OPTIONS_NAME, WEIGHTS_NAME, atomic_path
from .archive import extract
from .download import DownloadError, download
from .layout import find_model_directory

CACHE_ENV = "SPACY_ELMO_CACHE"
APP_NAME = "spacy-elmo"  # the cache's directory name under the user's cache directory
OFFLINE_ENV = "SPACY_ELMO_OFFLINE"
RECORD_NAME = "source.json"
_HASH_CHUNK = 1 << 22
# How far in the past a recorded file's modification time is set (see :func:`_settled`).
SETTLE_SECONDS = 10

# Loads an (options, weights) pair, or raises ValueError saying why it is not a usable biLM.
Check = Callable[[Path, Path], object]
# Loads the model directory of an extracted archive, given its format (.layout.STANDARD or MANYLANGS).
CheckModel = Callable[[Path, str], object]

MODEL_DIRNAME = "model"  # an archive entry's extracted tree, under its cache directory
_EXTRACTING = ".extract-"  # prefix of the temporary directory an archive is extracted into
_REPLACED = ".replaced-"  # prefix of a previous tree moved aside by --force, removed right after


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
    alternate_options_url: Optional[str] = None
    alternate_weights_url: Optional[str] = None
    options_md5: Optional[str] = None
    weights_md5: Optional[str] = None
    weights_sha1: Optional[str] = None

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


@dataclass(frozen=True)
class ArchiveSource:
    """A biLM published as one archive (zip, tar.gz, tar.bz2), and the cache directory that keeps
    it extracted (see the module's docstring). ``label`` and ``fix`` as for :class:`Source`."""

    label: str
    url: str
    directory: Path
    fix: str
    archive_bytes: Optional[int] = None
    archive_sha256: Optional[str] = None

    @property
    def extracted(self) -> Path:
        return self.directory / MODEL_DIRNAME

    @property
    def part(self) -> Path:
        return self.directory / ".archive.part"

    def is_cached(self) -> bool:
        """Whether the extracted model is in the cache and recorded (unchecked: for listings, not for use)."""
        return self.extracted.is_dir() and _read_archive_record(self) is not None


def cache_root() -> Path:
    """Where downloaded biLMs are kept: ``SPACY_ELMO_CACHE``, else the user's cache directory for
    spacy-elmo as :func:`platformdirs.user_cache_dir` gives it for this system (on Linux
    ``$XDG_CACHE_HOME/spacy-elmo``, else ``~/.cache/spacy-elmo``)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def offline() -> bool:
    """Whether ``SPACY_ELMO_OFFLINE`` forbids network access."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def fetch(
    source: Source, check: Check, force: bool = False, progress: bool = True, verify: bool = False
) -> Tuple[Path, Path]:
    """``(options.json, weights.hdf5)`` of ``source`` in the cache, downloaded first if needed.

    New files are kept only if ``check`` loads them.

    ``force`` fetches the files again whatever the cache holds (replacing them only once the new
    ones passed every check). Without it, a cached biLM is returned with no network request and
    no lock, once its files' sizes and modification times match the record (``verify``: once
    their sha256 does, each file read in full).
    """
    if not force and _verified(source, verify):
        return source.files
    source.directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(source.directory / ".lock")):
        if not force:
            if _verified(source, verify):  # another process finished it while this one waited
                return source.files
            if source.is_cached() and not (source.directory / RECORD_NAME).exists():
                _adopt(source, check)
                return source.files
        if offline():
            raise OfflineError(_offline_message(source))
        _download(source, check, progress, fresh=force)
    return source.files


def fetch_archive(
    source: ArchiveSource, check: CheckModel, force: bool = False, progress: bool = True, verify: bool = False
) -> Tuple[Path, str]:
    """``(model directory, format)`` of the archive ``source`` extracted in the cache, downloaded
    and extracted first if needed; as :func:`fetch` for its arguments.

    A new extraction is kept only if ``check(model directory, format)`` loads it.
    """
    if not force:
        found = _archive_verified(source, verify)
        if found is not None:
            return found
    source.directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(source.directory / ".lock")):
        if not force:
            found = _archive_verified(source, verify)
            if found is not None:  # another process finished it while this one waited
                return found
            if source.extracted.is_dir() and not (source.directory / RECORD_NAME).exists():
                return _adopt_archive(source, check)
        if offline():
            raise OfflineError(_offline_archive_message(source))
        return _download_archive(source, check, progress, fresh=force)


def _archive_verified(source: ArchiveSource, verify: bool = False) -> Optional[Tuple[Path, str]]:
    """As :func:`_verified` for an archive's extracted files: ``(model directory, format)`` when
    they are cached, recorded and unchanged (and the archive the registry wants), else None."""
    record = _read_archive_record(source)
    if record is None or not source.extracted.is_dir():
        return None
    paths = {key: source.directory / key for key in record["files"]}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise CacheIntegrityError(
            f"{', '.join(missing[:3])} {'is' if len(missing) == 1 else 'are'} missing from the extracted archive "
            f"{source.extracted}; to fetch it again, {source.fix}"
        )
    moved = _unchanged(record["files"], paths, verify, source.fix)
    if moved:
        _rerecord(source.directory, lambda: _read_archive_record(source), record, moved, paths)
    archive = record.get("archive") or {}
    if source.archive_sha256 not in (None, archive.get("sha256")) or source.archive_bytes not in (None, archive.get("bytes")):
        return None
    return source.directory / record["model"], record["format"]


def _download_archive(source: ArchiveSource, check: CheckModel, progress: bool, fresh: bool) -> Tuple[Path, str]:
    """Fetch the archive (continuing a partial one unless ``fresh``), extract it into a temporary
    directory, find and check the model there, then move the tree into place and record it."""
    _remove_leftovers(source.directory)
    if fresh:
        source.part.unlink(missing_ok=True)
    archive_sha256 = download_first((source.url,), source.part, source.archive_bytes, progress)
    tmp = Path(tempfile.mkdtemp(dir=source.directory, prefix=_EXTRACTING))
    try:
        size = source.part.stat().st_size
        if source.archive_bytes is not None and size != source.archive_bytes:
            raise ValueError(f"the archive has {size} bytes, the registry expects {source.archive_bytes}")
        if source.archive_sha256 not in (None, archive_sha256):
            raise ValueError(f"the archive's sha256 is {archive_sha256}, the registry expects {source.archive_sha256}")
        try:
            written = extract(source.part, tmp, source.url)
        except ValueError:
            raise
        except OSError as err:  # writing failed (a full disk, a quota): the archive is fine, keep it
            shutil.rmtree(tmp, ignore_errors=True)
            raise DownloadError(
                f"the archive of {source.label!r} ({source.url}) could not be extracted into {source.directory}: "
                f"{err}. The downloaded archive is kept in {source.part}: run the same command again once fixed"
            ) from err
        model_dir, kind = find_model_directory(tmp, source.url)
        check(model_dir, kind)
    except DownloadError:
        raise
    except (ValueError, OSError) as err:
        shutil.rmtree(tmp, ignore_errors=True)
        source.part.unlink(missing_ok=True)
        raise DownloadError(
            f"the archive downloaded for {source.label!r} ({source.url}) is not a usable ELMo biLM, so nothing "
            f"was cached: {err}"
        ) from err
    except BaseException:  # interrupted: the partial archive stays for the next run, the extraction goes
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (source.directory / RECORD_NAME).unlink(missing_ok=True)  # a stale record would call the new files altered
    replaced = None
    if source.extracted.exists():
        replaced = Path(tempfile.mkdtemp(dir=source.directory, prefix=_REPLACED)) / MODEL_DIRNAME
        os.replace(source.extracted, replaced)
    os.replace(tmp, source.extracted)
    relative_model = (Path(MODEL_DIRNAME) / model_dir.relative_to(tmp)).as_posix()
    files = {f"{MODEL_DIRNAME}/{name}": entry for name, entry in written.items()}
    _write_archive_record(source, relative_model, kind, files, {"bytes": size, "sha256": archive_sha256})
    source.part.unlink(missing_ok=True)
    if replaced is not None:
        shutil.rmtree(replaced.parent, ignore_errors=True)
    return source.directory / relative_model, kind


def _adopt_archive(source: ArchiveSource, check: CheckModel) -> Tuple[Path, str]:
    """Check and record an extracted tree put in the cache by hand (or whose record was lost)."""
    try:
        model_dir, kind = find_model_directory(source.extracted, str(source.extracted))
        check(model_dir, kind)
    except (ValueError, OSError) as err:
        raise CacheIntegrityError(
            f"the files in {source.extracted} are not the biLM {source.label!r}: {err}. Replace them with the "
            f"contents of {source.url}, or {source.fix}"
        ) from err
    files = {
        path.relative_to(source.directory).as_posix(): {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
        for path in sorted(source.extracted.rglob("*"))
        if path.is_file()
    }
    relative_model = model_dir.relative_to(source.directory).as_posix()
    _write_archive_record(source, relative_model, kind, files, None)
    return model_dir, kind


def _write_archive_record(
    source: ArchiveSource, model: str, kind: str, files: Dict[str, Dict], archive: Optional[Dict]
) -> None:
    """Record the extracted files (size, sha256 as written, settled modification time), where the
    model is and its format, and the archive they came from."""
    recorded = {}
    for key, entry in files.items():
        size, mtime_ns = _settled(source.directory / key)
        recorded[key] = {"bytes": size, "sha256": entry["sha256"], "mtime_ns": mtime_ns}
    record = {"name": source.label, "archive_url": source.url, "archive": archive, "model": model, "format": kind,
              "files": recorded}
    _save_record(source.directory, record)


def _read_archive_record(source: ArchiveSource) -> Optional[Dict]:
    """The record of an extracted archive, or None when there is none (or it is unreadable)."""
    try:
        record = json.loads((source.directory / RECORD_NAME).read_text(encoding="utf8"))
        complete = (
            isinstance(record["model"], str) and isinstance(record["format"], str) and record["files"]
            and all(set(entry) >= {"bytes", "sha256"} for entry in record["files"].values())
            and all(".." not in Path(key).parts and not Path(key).is_absolute() for key in [*record["files"], record["model"]])
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return record if complete else None


def _remove_leftovers(directory: Path) -> None:
    """Remove what killed extractions and replacements left (under the lock: none is in progress)."""
    for leftover in directory.iterdir():
        if leftover.is_dir() and leftover.name.startswith((_EXTRACTING, _REPLACED)):
            shutil.rmtree(leftover, ignore_errors=True)


def _offline_archive_message(source: ArchiveSource) -> str:
    return (
        f"{OFFLINE_ENV} forbids downloads, and the biLM {source.label!r} is not in the cache. Fetch it once on "
        f"a machine with network (`spacy-elmo download`, or a first load) and copy {source.directory} here, "
        f"or extract {source.url} by hand into {source.extracted}"
    )


def _verified(source: Source, verify: bool = False) -> bool:
    """True if both files are cached, recorded and unchanged; False if not (or not the wanted ones).

    A file whose size and modification time are the recorded ones is unchanged without being
    read, unless ``verify``; another is hashed, and recorded anew if its bytes are the same.
    Raises :class:`CacheIntegrityError` for a file whose bytes changed after it was recorded.
    """
    record = _read_record(source)
    if record is None or not source.is_cached():
        return False
    moved = _unchanged(record["files"], {path.name: path for path in source.files}, verify, source.fix)
    if moved:
        _rerecord(source.directory, lambda: _read_record(source), record, moved, {p.name: p for p in source.files})
    weights = record["files"][WEIGHTS_NAME]
    return source.weights_sha256 in (None, weights["sha256"]) and source.weights_bytes in (None, weights["bytes"])


def _unchanged(recorded_files: Dict[str, Dict], paths: Dict[str, Path], verify: bool, fix: str) -> List[str]:
    """Check each of ``paths`` against its record (see :func:`_verified`); returns the keys of the
    files whose bytes are the recorded ones under another size or time on record."""
    moved = []
    for key, path in paths.items():
        recorded = recorded_files[key]
        stat = path.stat()
        if not verify and (stat.st_size, stat.st_mtime_ns) == (recorded["bytes"], recorded.get("mtime_ns")):
            continue
        if stat.st_size != recorded["bytes"]:
            raise CacheIntegrityError(
                f"{path} changed after it was downloaded ({stat.st_size} bytes; recorded: {recorded['bytes']} bytes); "
                f"to fetch it again, {fix}"
            )
        digest = sha256_of(path)
        if digest != recorded["sha256"]:
            raise CacheIntegrityError(
                f"{path} changed after it was downloaded (sha256 {digest}; recorded: sha256 {recorded['sha256']}, "
                f"{recorded['bytes']} bytes); to fetch it again, {fix}"
            )
        if stat.st_mtime_ns != recorded.get("mtime_ns"):
            moved.append(key)
    return moved


def _rerecord(
    directory: Path, read: Callable[[], Optional[Dict]], record: Dict, keys: List[str], paths: Dict[str, Path]
) -> None:
    """Record the new times of files whose bytes were found unchanged, so that the next use
    need not hash them: under the lock, and only if no other process replaced the record
    meanwhile (``read`` reads it again). Where the cache cannot be written (a read-only image),
    each use hashes them."""
    try:
        with FileLock(str(directory / ".lock"), timeout=0):
            if read() != record:
                return
            for key in keys:
                record["files"][key]["mtime_ns"] = _settled(paths[key])[1]
            _save_record(directory, record)
    except (OSError, Timeout):
        pass


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
        options_sha256 = download_first(_urls(source.options_url, source.alternate_options_url), options_part, None, False)
        weights_sha256 = download_first(
            _urls(source.weights_url, source.alternate_weights_url), weights_part, source.weights_bytes, progress
        )
    except DownloadError:
        options_part.unlink(missing_ok=True)
        raise
    try:
        _check_files(source, options_part, weights_part, check, weights_sha256)
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
    _write_record(source, {OPTIONS_NAME: options_sha256, WEIGHTS_NAME: weights_sha256})


def _adopt(source: Source, check: Check) -> None:
    """Check and record files that were put in the cache by hand (or whose record was lost)."""
    weights_sha256 = sha256_of(source.weights_path)  # before the check, which may read it: the bytes checked
    try:
        _check_files(source, *source.files, check, weights_sha256)
    except (ValueError, OSError) as err:
        raise CacheIntegrityError(
            f"the files in {source.directory} are not the biLM {source.label!r}: {err}. Replace them with "
            f"{source.options_url} and {source.weights_url}, or {source.fix}"
        ) from err
    _write_record(source, {WEIGHTS_NAME: weights_sha256})


def _check_files(
    source: Source, options_file: Path, weight_file: Path, check: Check, weights_sha256: Optional[str] = None
) -> None:
    """Refuse weights of another size or sha256 than the registry's, or that do not load with the
    options. ``weights_sha256``: the weights' digest where it is known already (taken as they
    were written)."""
    size = weight_file.stat().st_size
    if source.weights_bytes is not None and size != source.weights_bytes:
        raise ValueError(f"the weights have {size} bytes, the registry expects {source.weights_bytes}")
    if source.weights_sha256 is None:
        digest = None
    else:
        digest = weights_sha256 or sha256_of(weight_file)
    if digest != source.weights_sha256:
        raise ValueError(f"the weights' sha256 is {digest}, the registry expects {source.weights_sha256}")
    for path, what, algorithm, expected in (
        (options_file, "options", "md5", source.options_md5),
        (weight_file, "weights", "md5", source.weights_md5),
        (weight_file, "weights", "sha1", source.weights_sha1),
    ):
        if expected is not None:
            found = digest_of(path, algorithm)
            if found != expected:
                raise ValueError(f"the {what}' {algorithm} is {found}, its publisher gives {expected}")
    check(options_file, weight_file)


def _read_record(source: Source) -> Optional[Dict]:
    """The record of the cached files, or None when there is none (or it is unreadable)."""
    try:
        record = json.loads((source.directory / RECORD_NAME).read_text(encoding="utf8"))
        complete = all(set(record["files"][name]) >= {"bytes", "sha256"} for name in (OPTIONS_NAME, WEIGHTS_NAME))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if complete else None


def _write_record(source: Source, digests: Dict[str, str]) -> None:
    """Record both files: their size, settled modification time, and sha256 (from ``digests``
    where known, taken as the bytes were written; else read now)."""
    files = {}
    for path in source.files:
        size, mtime_ns = _settled(path)
        files[path.name] = {"bytes": size, "sha256": digests.get(path.name) or sha256_of(path), "mtime_ns": mtime_ns}
    record = {"name": source.label, "options_url": source.options_url, "weights_url": source.weights_url, "files": files}
    _save_record(source.directory, record)


def _save_record(directory: Path, record: Dict) -> None:
    with atomic_path(directory / RECORD_NAME) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")


def _settled(path: Path) -> Tuple[int, int]:
    """``(size, st_mtime_ns)`` of ``path``, its modification time first set back to a whole even
    second at least :data:`SETTLE_SECONDS` in the past when it is more recent or finer than that.

    A write after the record then always gives another time: file times advance by clock ticks
    (a few milliseconds on Linux, 2 s on FAT), so a write in the same tick as the download's last
    one would keep its time. Whole even seconds survive copies that keep times coarsely. Where
    the time cannot be set, it is recorded as it is.
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


def _offline_message(source: Source) -> str:
    return (
        f"{OFFLINE_ENV} forbids downloads, and the biLM {source.label!r} is not in the cache. Fetch it once on "
        f"a machine with network (`spacy-elmo download`, or a first load) and copy {source.directory} here, "
        f"or put the files there by hand: {source.options_url} as {source.options_path} and "
        f"{source.weights_url} as {source.weights_path}"
    )


def sha256_of(path: Path) -> str:
    return digest_of(path, "sha256")


def digest_of(path: Path, algorithm: str) -> str:
    """The hex digest of the file at ``path`` (``sha256``, ``md5``, ``sha1``)."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _urls(first: str, alternate: Optional[str]) -> Tuple[str, ...]:
    return (first,) if alternate is None or alternate == first else (first, alternate)


def download_first(urls: Sequence[str], part: Path, expected_bytes: Optional[int], progress: bool) -> str:
    """:func:`.download.download` from the first of ``urls`` that serves the file (the same file
    under other names: a partial file is continued from the next one); the sha256 of the file."""
    failures: List[str] = []
    for url in urls:
        try:
            return download(url, part, expected_bytes, progress)
        except DownloadError as err:
            if len(urls) == 1:
                raise
            failures.append(f"{url}: {err}")
    raise DownloadError(f"no URL of the file served it; {'; '.join(failures)}")

