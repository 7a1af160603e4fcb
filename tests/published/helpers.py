"""Registry files and archives for the tests of spacy_elmo.published
(tests/published/conftest.py serves what they name)."""

import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, Iterable, Tuple, Union

from ..helpers import WIDTH

# An archive's members: (name in the archive, bytes) for files.
Members = Iterable[Tuple[str, bytes]]


def tiny_entry(host, **fields: object) -> Dict[str, object]:
    """A registry entry for ``tiny`` on ``host`` (a ``FakeHost`` of conftest.py), with ``fields``."""
    return {
        "options_url": f"{host.url}/tiny/options.json",
        "weights_url": f"{host.url}/tiny/weights.hdf5",
        "width": WIDTH,
        "language": "en",
        **fields,
    }


def write_registry(path: Path, **entries: Dict[str, object]) -> None:
    path.write_text(json.dumps(entries), encoding="utf8")


def archive_entry(host, path: str, **fields: object) -> Dict[str, object]:
    """A registry entry naming the archive ``path`` on ``host``."""
    return {"archive_url": f"{host.url}{path}", **fields}


def directory_members(directory: Path, prefix: str = "") -> Members:
    """The files of ``directory`` as archive members under ``prefix`` (e.g. ``"model/"``)."""
    return [
        (prefix + p.relative_to(directory).as_posix(), p.read_bytes())
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    ]


def zip_bytes(members: Members) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return buffer.getvalue()


def tar_bytes(members: Members, compression: str = "gz", links: Iterable[Tuple[str, str, bytes]] = ()) -> bytes:
    """A tar archive (``compression``: gz, bz2, or "" for none) of ``members``; ``links``: (name,
    target, type) with type ``tarfile.SYMTYPE`` or ``LNKTYPE``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}" if compression else "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target, kind in links:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = target
            tf.addfile(info)
    return buffer.getvalue()


def zip_with_symlink(members: Members, link: str, target: str) -> bytes:
    """A zip whose member ``link`` is a Unix symbolic link to ``target``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members:
            zf.writestr(name, data)
        info = zipfile.ZipInfo(link)
        info.create_system = 3
        info.external_attr = 0o120777 << 16
        zf.writestr(info, target)
    return buffer.getvalue()


def serve(host, path: str, data: Union[bytes, Path]) -> str:
    """Serve ``data`` at ``path`` on ``host``; its URL."""
    host.files[path] = data if isinstance(data, bytes) else data.read_bytes()
    return f"{host.url}{path}"
