"""Safe extraction of a downloaded archive (zip, tar, tar.gz, tar.bz2, tar.xz) into a new directory.

What a published archive may hold is regular files and directories, under relative paths. So
every member is refused that could write elsewhere or be something else:

- a path that is absolute (``/x``, ``C:\\x``), or that climbs out (``../x``, ``a/../../x``);
- a symbolic or hard link, a device, a FIFO (tar), or a zip entry whose Unix mode says so;
- a member larger than :data:`MAX_MEMBER_BYTES`, or members that together exceed
  :data:`MAX_TOTAL_BYTES` (counted as written, whatever the headers claim), or more than
  :data:`MAX_MEMBERS` of them (the defaults of :class:`Extractor`'s limits);
- a name that comes twice, an encrypted zip member.

Files are written with ordinary permissions (no mode, owner or time from the archive), and
created exclusively (``O_EXCL | O_NOFOLLOW``), so even a path check that missed something could not
follow a link or overwrite a file. The type of archive is read from its first bytes, not from its
URL. Each file's sha256 is computed as it is written, for the cache's record. The caller extracts
into a temporary directory and moves it into place only once the model in it loaded (see
:mod:`.cache`).
"""

import hashlib
import os
import re
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Dict, List, Optional

MAX_MEMBER_BYTES = 8 << 30  # 8 GiB: the largest published ELMo file is 374 MB
MAX_TOTAL_BYTES = 16 << 30
MAX_MEMBERS = 10_000
_CHUNK = 1 << 20

# Recorded per extracted file, by its path relative to the target (POSIX separators).
Extracted = Dict[str, Dict[str, object]]


class ArchiveError(ValueError):
    """An archive that is unreadable, or holds what must not be extracted: the message names the member."""


def archive_kind(path: Path) -> str:
    """``"zip"`` or ``"tar"`` (any compression tarfile reads), from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(512)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")) or head[257:262] == b"ustar":
        return "tar"
    raise ArchiveError(f"{path} is not a zip, tar, tar.gz, tar.bz2 or tar.xz archive (it starts with {head[:8]!r})")


@dataclass(frozen=True)
class Extractor:
    """Safe extraction, within its limits (the module's constants by default). :meth:`write`
    writes one member (a test's may fail)."""

    max_member_bytes: int = MAX_MEMBER_BYTES
    max_total_bytes: int = MAX_TOTAL_BYTES
    max_members: int = MAX_MEMBERS

    def extract(self, archive: Path, target: Path, label: str) -> Extracted:
        """Extract ``archive`` into the empty directory ``target``; returns ``{relative path: {"bytes",
        "sha256"}}`` of every file written. ``label`` names the archive in messages (its URL).

        Raises :class:`ArchiveError`; what was written before the error stays in ``target``, which
        the caller removes.
        """
        kind = archive_kind(archive)
        written: Extracted = {}
        try:
            if kind == "zip":
                self._extract_zip(archive, target, label, written)
            else:
                self._extract_tar(archive, target, label, written)
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as err:
            raise ArchiveError(f"{label} is not a readable {kind} archive: {err}") from err
        return written

    def _extract_zip(self, archive: Path, target: Path, label: str, written: Extracted) -> None:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            self._check_count(len(infos), label)
            plan = []
            total = 0
            for info in infos:  # every member checked before anything is written
                name = info.filename.replace("\\", "/")
                relative = safe_relative(name, label)
                mode = info.external_attr >> 16
                kind = stat.S_IFMT(mode)
                if kind == stat.S_IFLNK:
                    raise ArchiveError(
                        f"{label}: the member {name!r} is a symbolic link; an archive of a model holds files only"
                    )
                if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                    raise ArchiveError(
                        f"{label}: the member {name!r} is a special file (mode {oct(mode)}), not a regular file"
                    )
                if info.flag_bits & 0x1:
                    raise ArchiveError(f"{label}: the member {name!r} is encrypted")
                is_dir = info.is_dir() or kind == stat.S_IFDIR
                if not is_dir:
                    self._check_size(name, info.file_size, label)
                    total += info.file_size
                    self._check_total(total, label)
                plan.append((info, relative, is_dir))
            budget = [0]
            for info, relative, is_dir in plan:
                if relative is None:
                    if not is_dir:
                        raise ArchiveError(f"{label}: a file member has the empty name {info.filename!r}")
                    continue
                if is_dir:
                    _make_directory(target, relative, label)
                    continue
                with zf.open(info) as source:
                    written[relative.as_posix()] = self.write(
                        source, target, relative, info.filename, info.file_size, budget, label
                    )

    def _extract_tar(self, archive: Path, target: Path, label: str, written: Extracted) -> None:
        budget = [0]
        count = 0
        with tarfile.open(archive, mode="r|*") as tf:  # one pass over the stream, whatever the compression
            for member in tf:
                count += 1
                self._check_count(count, label)
                name = member.name
                relative = safe_relative(name, label)
                if member.issym() or member.islnk():
                    raise ArchiveError(
                        f"{label}: the member {name!r} is a {'symbolic' if member.issym() else 'hard'} link "
                        f"(to {member.linkname!r}); an archive of a model holds files only"
                    )
                if member.isdir():
                    if relative is not None:
                        _make_directory(target, relative, label)
                    continue
                if not member.isreg():
                    raise ArchiveError(f"{label}: the member {name!r} is a device or FIFO, not a regular file")
                if relative is None:
                    raise ArchiveError(f"{label}: a file member has the empty name {name!r}")
                self._check_size(name, member.size, label)
                source = tf.extractfile(member)
                assert source is not None  # a regular file
                with source:
                    written[relative.as_posix()] = self.write(
                        source, target, relative, name, member.size, budget, label
                    )

    def write(
        self,
        source: IO[bytes],
        target: Path,
        relative: PurePosixPath,
        name: str,
        declared: int,
        budget: List[int],
        label: str,
    ) -> Dict[str, object]:
        """Write one member: its size and sha256. ``budget``: the bytes the archive's members wrote
        so far, counted against :attr:`max_total_bytes` as written, whatever the headers claim."""
        path = target.joinpath(*relative.parts)
        _inside(target, path, name, label)
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError as err:
            raise ArchiveError(f"{label}: the member {name!r} comes twice (or clashes with a directory)") from err
        digest = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out:
            for block in iter(lambda: source.read(_CHUNK), b""):
                size += len(block)
                if size > max(declared, 0) or size > self.max_member_bytes:
                    raise ArchiveError(
                        f"{label}: the member {name!r} holds more bytes than its header says ({declared})"
                    )
                budget[0] += len(block)
                self._check_total(budget[0], label)
                out.write(block)
                digest.update(block)
        return {"bytes": size, "sha256": digest.hexdigest()}

    def _check_size(self, name: str, size: int, label: str) -> None:
        if size > self.max_member_bytes:
            raise ArchiveError(
                f"{label}: the member {name!r} has {size} bytes, more than the {self.max_member_bytes} bytes "
                "allowed per file"
            )

    def _check_total(self, total: int, label: str) -> None:
        if total > self.max_total_bytes:
            raise ArchiveError(
                f"{label}: its members hold more than {self.max_total_bytes} bytes in all, more than an ELMo "
                "model; it was not extracted"
            )

    def _check_count(self, count: int, label: str) -> None:
        if count > self.max_members:
            raise ArchiveError(
                f"{label}: it has more than {self.max_members} members, more than an ELMo model; it was not extracted"
            )


def safe_relative(name: str, label: str) -> Optional[PurePosixPath]:
    """The member's path relative to the target, or None for the archive's root (``./``).

    Refuses absolute paths, drive letters, ``..`` components and NUL characters.
    """
    if "\x00" in name:
        raise ArchiveError(f"{label}: the member {name!r} has a NUL character in its name")
    unified = name.replace("\\", "/")
    if unified.startswith("/") or re.match(r"^[A-Za-z]:", unified):
        raise ArchiveError(
            f"{label}: the member {name!r} has an absolute path; an archive of a model holds relative paths"
        )
    parts = [part for part in unified.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"{label}: the member {name!r} points outside the archive's directory ('..')")
    return PurePosixPath(*parts) if parts else None


def _make_directory(target: Path, relative: PurePosixPath, label: str) -> None:
    path = target.joinpath(*relative.parts)
    _inside(target, path, relative.as_posix(), label)
    if path.exists() and not path.is_dir():
        raise ArchiveError(
            f"{label}: the directory member {relative.as_posix()!r} clashes with a file of the same name"
        )
    path.mkdir(parents=True, exist_ok=True)


def _inside(target: Path, path: Path, name: str, label: str) -> None:
    """Belt and braces: the resolved path is under the target (no link can be in between: none is made)."""
    root = os.path.realpath(target)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise ArchiveError(f"{label}: the member {name!r} would be written outside the archive's directory")
