"""One file from a URL into a partial file, robust to what public hosts and networks do.

A connection that drops mid-file is continued with an HTTP ``Range`` request from the bytes
already written (a 374 MB file is not restarted); timeouts, refused connections and 5xx answers
are retried with exponential backoff, and any attempt that adds bytes resets the count. What
cannot be an ELMo file stops the transfer at once and leaves nothing behind: a 4xx answer, an
HTML page (a login, error or "moved" page served with status 200), or a size that contradicts
the one expected. Only :mod:`urllib` of the standard library is used: no client to configure.

The file's sha256 is computed from the bytes as they arrive, so that the cache records it
without reading the file again (on a resumed transfer, the bytes kept from before are hashed
first, once).
"""

import hashlib
import http.client
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NoReturn, Optional

from tqdm import tqdm

CHUNK_BYTES = 1 << 20
TIMEOUT_SECONDS = 30.0
ATTEMPTS = 5  # consecutive attempts that add no byte before giving up
BACKOFF_SECONDS = 1.0  # first wait; doubled after every fruitless attempt
MAX_BACKOFF_SECONDS = 30.0
USER_AGENT = "spacy-elmo"
_HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<?xml")


class DownloadError(ValueError):
    """A file could not be fetched, or what came is not the file: the message says what to do."""


class _Retry(Exception):
    """A failure worth another attempt (dropped connection, timeout, 5xx)."""


class _Digest:
    """The sha256 of the first :attr:`length` bytes of a file being written, extended as bytes are appended."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.length = 0

    def update(self, block: bytes) -> None:
        self.hash.update(block)
        self.length += len(block)

    def at(self, part: Path, offset: int) -> None:
        """Make this the digest of the first ``offset`` bytes of ``part`` (read only when it is not already)."""
        if self.length == offset:
            return
        self.hash, self.length = hashlib.sha256(), 0
        with open(part, "rb") as f:
            while self.length < offset:
                block = f.read(min(CHUNK_BYTES, offset - self.length))
                if not block:
                    break
                self.update(block)


def download(url: str, part: Path, expected_bytes: Optional[int] = None, progress: bool = True) -> str:
    """Fetch ``url`` into ``part``, continuing from the bytes ``part`` already holds; returns the
    sha256 (hex) of the whole file, computed as it was written.

    Raises :class:`DownloadError`; ``part`` is deleted when its content is wrong and kept when
    the network gave up mid-file, so that the next call continues where this one stopped.
    """
    digest = _Digest()
    failures = 0
    with tqdm(total=expected_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=url.rsplit("/", 1)[-1],
              disable=not progress, miniters=1) as bar:
        while True:
            before = _size(part)
            bar.reset(total=bar.total)
            bar.update(before)
            try:
                _attempt(url, part, before, expected_bytes, bar, digest)
                digest.at(part, _size(part))  # a no-op unless the bytes written and hashed disagree
                return digest.hash.hexdigest()
            except _Retry as err:
                failures = 0 if _size(part) > before else failures + 1
                if failures >= ATTEMPTS:
                    raise DownloadError(
                        f"downloading {url} failed {ATTEMPTS} times in a row ({err}); {_size(part)} bytes are kept "
                        f"in {part}: run the same command again to continue from there"
                    ) from err
                time.sleep(min(BACKOFF_SECONDS * 2 ** (failures - 1), MAX_BACKOFF_SECONDS) if failures else 0)
            except DownloadError:
                part.unlink(missing_ok=True)
                raise


def _attempt(url: str, part: Path, offset: int, expected_bytes: Optional[int], bar: tqdm, digest: _Digest) -> None:
    """One request: append the rest of the file to ``part`` (all of it if the host ignores Range)."""
    headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={offset}-"} if offset else {})}
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_SECONDS)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset and err.headers.get("Content-Range", "").strip() == f"bytes */{offset}":
            err.close()  # the part file already holds the whole file (an earlier run stopped after the transfer)
            return
        _raise_for_status(url, err, offset, part)
    except urllib.error.URLError as err:
        if isinstance(err.reason, ssl.SSLCertVerificationError):  # the same answer however often asked
            raise DownloadError(f"{url}: the host's TLS certificate does not verify ({err.reason})") from err
        raise _Retry(f"{type(err).__name__}: {err}") from err
    except (OSError, http.client.HTTPException) as err:
        raise _Retry(f"{type(err).__name__}: {err}") from err
    with response:
        if offset and response.status != 206:  # the host sends the whole file again
            offset = 0
            bar.reset(total=bar.total)
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else None
        _check_answer(url, response.headers.get("Content-Type", ""), total, expected_bytes)
        bar.total = total if total is not None else bar.total
        _copy_body(url, response, part, offset, bar, digest)
    if total is not None and _size(part) < total:
        raise _Retry(f"the connection closed after {_size(part)} of {total} bytes")


def _raise_for_status(url: str, err: urllib.error.HTTPError, offset: int, part: Path) -> NoReturn:
    """Retry what a server may get over (5xx, 408, 429), stop on the rest with what to do."""
    err.close()
    if err.code >= 500 or err.code in (408, 429):
        raise _Retry(f"HTTP {err.code} {err.reason}") from err
    if err.code == 416 and offset:  # the kept bytes are not a prefix of this file: start again
        part.unlink(missing_ok=True)
        raise _Retry("HTTP 416: the partial file does not fit the file on the server") from err
    raise DownloadError(
        f"{url} answered HTTP {err.code} {err.reason}: the file is not there. If the host moved it, point "
        "SPACY_ELMO_MODELS at a registry file with its new URL or a mirror (docs/models.md)"
    ) from err


def _check_answer(url: str, content_type: str, total: Optional[int], expected_bytes: Optional[int]) -> None:
    """Refuse, before any byte is kept, an HTML page or a file of another size than expected."""
    if content_type.lower().startswith(("text/html", "application/xhtml")):
        raise DownloadError(_html_message(url, f"Content-Type {content_type}"))
    if expected_bytes is not None and total is not None and total != expected_bytes:
        raise DownloadError(
            f"{url} serves {total} bytes, but the registry expects {expected_bytes}: a different or truncated "
            "file. Check the URL, or fix weights_bytes in the SPACY_ELMO_MODELS registry file"
        )


def _copy_body(url: str, response: http.client.HTTPResponse, part: Path, offset: int, bar: tqdm, digest: _Digest) -> None:
    """Append the body to ``part`` (from ``offset``), hashing it into ``digest``; an interrupted
    read is a retry, not an error."""
    digest.at(part, offset)
    with open(part, "r+b" if offset else "wb") as f:
        f.seek(offset)
        f.truncate()
        first = offset == 0
        while True:
            try:
                chunk = response.read(CHUNK_BYTES)
            except (OSError, http.client.HTTPException) as err:
                raise _Retry(f"{type(err).__name__} while reading: {err}") from err
            if not chunk:
                return
            if first and chunk.lstrip()[:16].lower().startswith(_HTML_STARTS):
                raise DownloadError(_html_message(url, "its body is markup"))
            first = False
            f.write(chunk)
            digest.update(chunk)
            bar.update(len(chunk))


def _html_message(url: str, evidence: str) -> str:
    return (
        f"{url} returned an HTML page ({evidence}), not an ELMo file: the URL leads to a web page, a login "
        "or an error page. Nothing was cached; check the URL or point SPACY_ELMO_MODELS at a mirror"
    )


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
