"""The two kinds of a published biLM's download, as the cache keeps them (see :mod:`.cache`).

:class:`Source`: a biLM published as two files, ``options.json`` and ``weights.hdf5`` (bilm-tf's
and AllenNLP's layout), cached under those names; each file is fetched from the first of its URLs
that serves it, and checked against the registry's size and checksums where it gives them.

:class:`ArchiveSource`: a biLM published as one archive (zip, tar.gz, tar.bz2) holding a model
in the standard layout or ELMoForManyLangs', maybe in a subdirectory. It downloads into
``.archive.part``, is extracted safely (:mod:`.archive`) into a hidden temporary ``.extract-*``
directory, its model found there (:func:`.layout.find_model_directory`) and checked, and only
then is the directory renamed to ``model/`` and the archive deleted. A killed extraction leaves
only the temporary directory, which the next download removes.
"""

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from ..fileio import OPTIONS_NAME, WEIGHTS_NAME
from . import records
from .archive import Extractor
from .download import Downloader, DownloadError
from .layout import find_model_directory
from .records import Record

MODEL_DIRNAME = "model"  # an archive entry's extracted tree, under its cache directory
_EXTRACTING = ".extract-"  # prefix of the temporary directory an archive is extracted into
_REPLACED = ".replaced-"  # prefix of a previous tree moved aside by --force, removed right after

# Loads an (options, weights) pair, or raises ValueError saying why it is not a usable biLM.
Check = Callable[[Path, Path], object]
# Loads the model directory of an extracted archive, given its format (.layout.STANDARD or MANYLANGS).
CheckModel = Callable[[Path, str], object]


@dataclass(frozen=True)
class Source:
    """A biLM's two remote files and the cache directory that keeps them; the registry's sizes
    and checksums, where it gives them, an alternate URL of each file, and how they are fetched."""

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
    downloader: Downloader = Downloader()

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
        return self.present()

    def present(self) -> bool:
        return self.options_path.is_file() and self.weights_path.is_file()

    def complete(self, record: Record) -> bool:
        return {OPTIONS_NAME, WEIGHTS_NAME} <= set(record["files"])

    def wanted(self, record: Record) -> bool:
        weights = record["files"][WEIGHTS_NAME]
        return self.weights_sha256 in (None, weights["sha256"]) and self.weights_bytes in (None, weights["bytes"])

    def result(self, record: Record) -> Tuple[Path, Path]:
        return self.files

    def by_hand(self) -> str:
        return f"save {self.options_url} by hand as {self.options_path} and {self.weights_url} as {self.weights_path}"

    def adopt(self, check: Check) -> Tuple[Record, Dict[str, Optional[str]]]:
        weights_sha256 = records.sha256_of(self.weights_path)  # before the check, which may read it: the bytes checked
        self._check_files(*self.files, check, weights_sha256)
        return self._fields(), {OPTIONS_NAME: None, WEIGHTS_NAME: weights_sha256}

    def download(self, check: Check, progress: bool, fresh: bool) -> Tuple[Path, Path]:
        options_part, weights_part = (self.directory / f".{path.name}.part" for path in self.files)
        options_part.unlink(missing_ok=True)  # small: always fetched whole
        if fresh:
            weights_part.unlink(missing_ok=True)
        try:
            options_urls = _urls(self.options_url, self.alternate_options_url)
            weights_urls = _urls(self.weights_url, self.alternate_weights_url)
            options_sha256 = self.downloader.download_first(options_urls, options_part, None, False)
            weights_sha256 = self.downloader.download_first(weights_urls, weights_part, self.weights_bytes, progress)
        except DownloadError:
            options_part.unlink(missing_ok=True)
            raise
        try:
            self._check_files(options_part, weights_part, check, weights_sha256)
        except (ValueError, OSError) as err:
            options_part.unlink()
            weights_part.unlink()
            raise DownloadError(
                f"the files downloaded for {self.label!r} ({self.options_url}, {self.weights_url}) are not a "
                f"usable ELMo biLM, so nothing was cached: {err}"
            ) from err
        records.remove_record(self.directory)
        os.replace(options_part, self.options_path)
        os.replace(weights_part, self.weights_path)
        digests = {OPTIONS_NAME: options_sha256, WEIGHTS_NAME: weights_sha256}
        records.write_record(self.directory, self._fields(), digests)
        return self.files

    def _fields(self) -> Record:
        return {"name": self.label, "options_url": self.options_url, "weights_url": self.weights_url}

    def _check_files(self, options_file: Path, weight_file: Path, check: Check, weights_sha256: str) -> None:
        """Refuse weights of another size or checksum than the registry's, or that do not load
        with the options. ``weights_sha256``: the weights' digest (taken as they were written)."""
        size = weight_file.stat().st_size
        _check_pinned("the weights'", size, weights_sha256, self.weights_bytes, self.weights_sha256)
        for path, what, algorithm, expected in (
            (options_file, "options", "md5", self.options_md5),
            (weight_file, "weights", "md5", self.weights_md5),
            (weight_file, "weights", "sha1", self.weights_sha1),
        ):
            if expected is not None and (found := records.digest_of(path, algorithm)) != expected:
                raise ValueError(f"the {what}' {algorithm} is {found}, its publisher gives {expected}")
        check(options_file, weight_file)


@dataclass(frozen=True)
class ArchiveSource:
    """A biLM published as one archive (zip, tar.gz, tar.bz2), and the cache directory that keeps
    it extracted; the registry's size and sha256 of the archive, where it gives them; how it is
    fetched and extracted."""

    label: str
    url: str
    directory: Path
    fix: str
    archive_bytes: Optional[int] = None
    archive_sha256: Optional[str] = None
    downloader: Downloader = Downloader()
    extractor: Extractor = Extractor()

    @property
    def extracted(self) -> Path:
        return self.directory / MODEL_DIRNAME

    @property
    def part(self) -> Path:
        return self.directory / ".archive.part"

    def is_cached(self) -> bool:
        """Whether the extracted model is in the cache and recorded (unchecked: for listings, not for use)."""
        record = records.read_record(self.directory)
        return self.present() and record is not None and self.complete(record)

    def present(self) -> bool:
        return self.extracted.is_dir()

    def complete(self, record: Record) -> bool:
        model, kind = record.get("model"), record.get("format")
        return isinstance(model, str) and isinstance(kind, str) and records.is_inside(model)

    def wanted(self, record: Record) -> bool:
        got = record.get("archive") or {}
        return self.archive_sha256 in (None, got.get("sha256")) and self.archive_bytes in (None, got.get("bytes"))

    def result(self, record: Record) -> Tuple[Path, str]:
        return self.directory / record["model"], record["format"]

    def by_hand(self) -> str:
        return f"extract {self.url} by hand into {self.extracted}"

    def adopt(self, check: CheckModel) -> Tuple[Record, Dict[str, Optional[str]]]:
        model_dir, kind = find_model_directory(self.extracted, str(self.extracted))
        check(model_dir, kind)
        files = sorted(path for path in self.extracted.rglob("*") if path.is_file())
        digests: Dict[str, Optional[str]] = {path.relative_to(self.directory).as_posix(): None for path in files}
        return self._fields(model_dir.relative_to(self.directory).as_posix(), kind, None), digests

    def download(self, check: CheckModel, progress: bool, fresh: bool) -> Tuple[Path, str]:
        """Fetch the archive (continuing a partial one unless ``fresh``), extract it into a temporary
        directory, find and check the model there, then move the tree into place and record it."""
        _remove_leftovers(self.directory)
        if fresh:
            self.part.unlink(missing_ok=True)
        sha256 = self.downloader.download_first((self.url,), self.part, self.archive_bytes, progress)
        tmp = Path(tempfile.mkdtemp(dir=self.directory, prefix=_EXTRACTING))
        try:
            size = self.part.stat().st_size
            _check_pinned("the archive's", size, sha256, self.archive_bytes, self.archive_sha256)
            written = self._extract(tmp)
            model_dir, kind = find_model_directory(tmp, self.url)
            check(model_dir, kind)
        except DownloadError:
            raise
        except (ValueError, OSError) as err:
            shutil.rmtree(tmp, ignore_errors=True)
            self.part.unlink(missing_ok=True)
            raise DownloadError(
                f"the archive downloaded for {self.label!r} ({self.url}) is not a usable ELMo biLM, so nothing "
                f"was cached: {err}"
            ) from err
        except BaseException:  # interrupted: the partial archive stays for the next run, the extraction goes
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        model = (Path(MODEL_DIRNAME) / model_dir.relative_to(tmp)).as_posix()
        self._install(tmp)
        digests = {f"{MODEL_DIRNAME}/{name}": entry["sha256"] for name, entry in written.items()}
        records.write_record(self.directory, self._fields(model, kind, {"bytes": size, "sha256": sha256}), digests)
        self.part.unlink(missing_ok=True)
        return self.directory / model, kind

    def _extract(self, tmp: Path) -> Dict[str, Dict[str, Any]]:
        """Extract the archive into ``tmp``: its files' sizes and sha256. A failed write (a full
        disk, a quota) keeps the archive, which is fine, for the next run."""
        try:
            return self.extractor.extract(self.part, tmp, self.url)
        except ValueError:  # a bad archive, even one that is an OSError too (io.UnsupportedOperation)
            raise
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            raise DownloadError(
                f"the archive of {self.label!r} ({self.url}) could not be extracted into {self.directory}: "
                f"{err}. The downloaded archive is kept in {self.part}: run the same command again once fixed"
            ) from err

    def _install(self, tmp: Path) -> None:
        """Put the extracted tree ``tmp`` in place of the cached one, which goes."""
        records.remove_record(self.directory)
        replaced = None
        if self.extracted.exists():
            replaced = Path(tempfile.mkdtemp(dir=self.directory, prefix=_REPLACED))
            os.replace(self.extracted, replaced / MODEL_DIRNAME)
        os.replace(tmp, self.extracted)
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)

    def _fields(self, model: str, kind: str, archive: Optional[Dict[str, Any]]) -> Record:
        return {"name": self.label, "archive_url": self.url, "archive": archive, "model": model, "format": kind}


def _check_pinned(
    whose: str, size: int, sha256: str, expected_bytes: Optional[int], expected_sha256: Optional[str]
) -> None:
    """Refuse a download (``whose``: "the archive's") whose size or sha256 is not the one the
    registry gives, where it gives one."""
    if expected_bytes is not None and size != expected_bytes:
        raise ValueError(f"{whose} size is {size} bytes, the registry expects {expected_bytes}")
    if expected_sha256 not in (None, sha256):
        raise ValueError(f"{whose} sha256 is {sha256}, the registry expects {expected_sha256}")


def _remove_leftovers(directory: Path) -> None:
    """Remove what killed extractions and replacements left (under the lock: none is in progress)."""
    for leftover in directory.iterdir():
        if leftover.is_dir() and leftover.name.startswith((_EXTRACTING, _REPLACED)):
            shutil.rmtree(leftover, ignore_errors=True)


def _urls(first: str, alternate: Optional[str]) -> Tuple[str, ...]:
    return (first,) if alternate is None or alternate == first else (first, alternate)
