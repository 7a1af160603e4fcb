"""One file from a URL into a partial file, robust to what public hosts and networks do.

The transport is :mod:`requests`, one :class:`requests.Session` per file whose adapter retries
with urllib3's :class:`~urllib3.util.Retry`: a read timeout, a connection closed before the
answer and a 5xx (or 408, 429) answer are tried again, up to :data:`RETRIES` times with
exponential backoff (:data:`BACKOFF_SECONDS`, doubled each time, at most
:data:`MAX_BACKOFF_SECONDS`; a ``Retry-After`` header is honoured up to that bound); a connect
timeout or an unreachable network :data:`CONNECT_RETRIES` times. A **refused** connection (the
host is up, nothing listens on the port: a stopped server, a wrong port) is not retried: it
fails at once with an error naming the URL. A TLS certificate that does not verify is not
retried either.

A connection that drops mid-file is continued with an HTTP ``Range`` request from the bytes
already written (a large weight file is not restarted); that loop is this module's own: an attempt
that adds bytes resets its count, :data:`ATTEMPTS` attempts in a row that add none give up,
keeping the bytes for the next run. What cannot be an ELMo file stops the transfer at once and
leaves nothing behind: a 4xx answer, an HTML page (a login, error or "moved" page served with
status 200), or a size that contradicts the one expected. Bytes are kept as the host sends them
(``Accept-Encoding: identity``, nothing decoded), so that a ``Range`` continues the same bytes.
A host that cannot be reached at all is a :class:`HostUnreachable`, for the cache to say what to do instead.
"""

import hashlib
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, NoReturn, Optional, Sequence, Tuple

import requests
import urllib3
from requests.adapters import HTTPAdapter
from tqdm import tqdm
from urllib3.util.retry import Retry

CHUNK_BYTES = 1 << 20
TIMEOUT_SECONDS = 30.0  # waiting for an answer, or for the next bytes of one
CONNECT_TIMEOUT_SECONDS = 10.0  # opening a connection (at most TIMEOUT_SECONDS)
RETRIES = 4  # of one request: read timeouts, connections closed before the answer, 5xx answers
CONNECT_RETRIES = 2  # of one request: connect timeouts, unreachable networks (never a refused connection)
ATTEMPTS = 5  # consecutive requests that add no byte to the file before giving up
BACKOFF_SECONDS = 1.0  # the wait before a second retry; doubled after each (the first is at once)
MAX_BACKOFF_SECONDS = 30.0
RETRY_STATUSES = (408, 429, 500, 502, 503, 504)
USER_AGENT = "spacy-elmo"
_HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<?xml")


class DownloadError(ValueError):
    """A file could not be fetched, or what came is not the file: the message says what to do."""


class HostUnreachable(DownloadError):
    """No connection to the host could be made: the network, not the file. ``hosts``: the hosts
    tried; ``reason``: why, in a few words (``Temporary failure in name resolution``)."""

    def __init__(self, message: str, hosts: Tuple[str, ...] = (), reason: str = "") -> None:
        super().__init__(message)
        self.hosts = hosts
        self.reason = reason


class _Retry(Exception):
    """A transfer cut short (dropped connection, timeout mid-body): continue it with a Range request."""


class _GaveUp(Exception):
    """The transport's own retries are spent (or the failure is not worth one): the bytes are kept."""


class _Retries(Retry):
    """urllib3's :class:`Retry`, except that a refused connection is final (nothing listens: asking
    again in a second will not change that), and waits are bounded by :data:`MAX_BACKOFF_SECONDS`
    (backoff and ``Retry-After`` alike, whatever the urllib3 version)."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
        if error is not None and _refused(error):
            raise urllib3.exceptions.MaxRetryError(_pool, url, error) from error
        return super().increment(method, url, response, error, _pool, _stacktrace)

    def get_backoff_time(self) -> float:
        return min(super().get_backoff_time(), MAX_BACKOFF_SECONDS)

    def get_retry_after(self, response) -> Optional[float]:
        seconds = super().get_retry_after(response)
        return None if seconds is None else min(seconds, MAX_BACKOFF_SECONDS)


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


@dataclass(frozen=True)
class Downloader:
    """How files are fetched: the waits of the module's docstring, its constants by default (a
    test passes shorter ones)."""

    timeout_seconds: float = TIMEOUT_SECONDS
    connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS
    backoff_seconds: float = BACKOFF_SECONDS

    def session(self) -> requests.Session:
        """A session whose requests retry as the module's docstring says."""
        retries = _Retries(
            total=RETRIES + CONNECT_RETRIES,
            connect=CONNECT_RETRIES,
            read=RETRIES,
            status=RETRIES,
            other=0,
            redirect=10,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=["GET", "HEAD"],
            backoff_factor=self.backoff_seconds,
            respect_retry_after_header=True,
            raise_on_status=False,  # the last answer is returned, and reported with its status
        )
        adapter = HTTPAdapter(max_retries=retries)
        client = requests.Session()
        client.mount("http://", adapter)
        client.mount("https://", adapter)
        client.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
        return client

    def download(self, url: str, part: Path, expected_bytes: Optional[int] = None, progress: bool = True) -> str:
        """Fetch ``url`` into ``part``, continuing from the bytes ``part`` already holds; returns the
        sha256 (hex) of the whole file, computed as it was written (the kept bytes hashed first, once),
        so that the cache records it without reading the file again.

        Raises :class:`DownloadError`; ``part`` is deleted when its content is wrong and kept when
        the network gave up mid-file, so that the next call continues where this one stopped.
        """
        digest, failures = _Digest(), 0
        timeout = (min(self.connect_timeout_seconds, self.timeout_seconds), self.timeout_seconds)
        bar = tqdm(
            total=expected_bytes,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=url.rsplit("/", 1)[-1],
            disable=not progress,
            miniters=1,
        )
        with self.session() as client, bar:
            while True:
                before = _size(part)
                bar.reset(total=bar.total)
                bar.update(before)
                try:
                    _attempt(client, url, part, before, expected_bytes, bar, digest, timeout)
                    digest.at(part, _size(part))  # a no-op unless the bytes written and hashed disagree
                    return digest.hash.hexdigest()
                except _Retry as err:
                    failures = 0 if _size(part) > before else failures + 1
                    if failures >= ATTEMPTS:
                        raise DownloadError(
                            f"downloading {url} failed {ATTEMPTS} times in a row ({err}); {_size(part)} bytes are "
                            f"kept in {part}: run the same command again to continue from there"
                        ) from err
                    time.sleep(min(self.backoff_seconds * 2 ** (failures - 1), MAX_BACKOFF_SECONDS) if failures else 0)
                except _GaveUp as err:
                    raise _gave_up(url, part, err) from err
                except DownloadError:
                    part.unlink(missing_ok=True)
                    raise

    def download_first(self, urls: Sequence[str], part: Path, expected_bytes: Optional[int], progress: bool) -> str:
        """:meth:`download` from the first of ``urls`` that serves the file (the same file under other
        names: a partial file is continued from the next one); the sha256 of the file. When no host
        could be reached, a :class:`HostUnreachable` naming them all."""
        failures: List[Tuple[str, DownloadError]] = []
        for url in urls:
            try:
                return self.download(url, part, expected_bytes, progress)
            except DownloadError as err:
                if len(urls) == 1:
                    raise
                failures.append((url, err))
        message = f"no URL of the file served it; {'; '.join(f'{url}: {err}' for url, err in failures)}"
        unreachable = [err for _, err in failures if isinstance(err, HostUnreachable)]
        if len(unreachable) == len(failures):
            hosts = tuple(dict.fromkeys(host for err in unreachable for host in err.hosts))
            raise HostUnreachable(message, hosts, unreachable[0].reason)
        raise DownloadError(message)


def _gave_up(url: str, part: Path, err: "_GaveUp") -> DownloadError:
    """The error of a download the transport gave up on: a :class:`HostUnreachable` where no
    connection was made."""
    kept = _size(part)
    where = (
        f"; {kept} bytes are kept in {part}: run the same command again to continue from there"
        if kept
        else ": run the same command again once the host is reachable"
    )
    message = f"downloading {url} failed ({err}){where}"
    reason = None if err.__cause__ is None else _unreachable_reason(err.__cause__)
    if reason is None:
        return DownloadError(message)
    parts = urllib.parse.urlsplit(url)
    return HostUnreachable(message, (parts.hostname or parts.netloc,), reason)


def _attempt(
    client: requests.Session,
    url: str,
    part: Path,
    offset: int,
    expected_bytes: Optional[int],
    bar: tqdm,
    digest: _Digest,
    timeout: Tuple[float, float],
) -> None:
    """One request (with the transport's retries): append the rest of the file to ``part`` (all of
    it if the host ignores Range)."""
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        response = client.get(url, headers=headers, timeout=timeout, stream=True)
    except requests.exceptions.SSLError as err:  # the same answer however often asked
        raise DownloadError(f"{url}: the host's TLS certificate does not verify ({_reason(err)})") from err
    except requests.exceptions.RequestException as err:
        raise _GaveUp(_describe(err, timeout[1])) from err
    with response:
        status = response.status_code
        if status == 416 and offset and response.headers.get("Content-Range", "").strip() == f"bytes */{offset}":
            return  # the part file already holds the whole file (an earlier run stopped after the transfer)
        if status >= 400:
            _raise_for_status(url, response, offset, part)
        if offset and status != 206:  # the host sends the whole file again
            offset = 0
            bar.reset(total=bar.total)
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else None
        _check_answer(url, response.headers.get("Content-Type", ""), total, expected_bytes)
        bar.total = total if total is not None else bar.total
        _copy_body(url, response, part, offset, bar, digest)
    if total is not None and _size(part) < total:
        raise _Retry(f"the connection closed after {_size(part)} of {total} bytes")


def _raise_for_status(url: str, response: requests.Response, offset: int, part: Path) -> NoReturn:
    """Report what the transport's retries could not get over (5xx, 408, 429), stop on the rest
    with what to do."""
    status, reason = response.status_code, response.reason
    if status >= 500 or status in RETRY_STATUSES:
        raise _GaveUp(f"HTTP {status} {reason}, {RETRIES + 1} times")
    if status == 416 and offset:  # the kept bytes are not a prefix of this file: start again
        part.unlink(missing_ok=True)
        raise _Retry("HTTP 416: the partial file does not fit the file on the server")
    raise DownloadError(
        f"{url} answered HTTP {status} {reason}: the file is not there. If the host moved it, point "
        "SPACY_ELMO_MODELS at a registry file with its new URL or a mirror (docs/models.md)"
    )


def _check_answer(url: str, content_type: str, total: Optional[int], expected_bytes: Optional[int]) -> None:
    """Refuse, before any byte is kept, an HTML page or a file of another size than expected."""
    if content_type.lower().startswith(("text/html", "application/xhtml")):
        raise DownloadError(_html_message(url, f"Content-Type {content_type}"))
    if expected_bytes is not None and total is not None and total != expected_bytes:
        raise DownloadError(
            f"{url} serves {total} bytes, but the registry expects {expected_bytes}: a different or truncated "
            "file. Check the URL, or fix weights_bytes in the SPACY_ELMO_MODELS registry file"
        )


def _copy_body(url: str, response: requests.Response, part: Path, offset: int, bar: tqdm, digest: _Digest) -> None:
    """Append the body to ``part`` (from ``offset``), hashing it into ``digest``; an interrupted
    read is a retry, not an error."""
    digest.at(part, offset)
    chunks = response.raw.stream(CHUNK_BYTES, decode_content=False)
    with open(part, "r+b" if offset else "wb") as f:
        f.seek(offset)
        f.truncate()
        first = offset == 0
        while True:
            try:
                chunk = next(chunks, b"")
            except (urllib3.exceptions.HTTPError, requests.exceptions.RequestException, OSError) as err:
                raise _Retry(f"{type(err).__name__} while reading: {_reason(err)}") from err
            if not chunk:
                return
            if first and chunk.lstrip()[:16].lower().startswith(_HTML_STARTS):
                raise DownloadError(_html_message(url, "its body is markup"))
            first = False
            f.write(chunk)
            digest.update(chunk)
            bar.update(len(chunk))


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every exception behind it: urllib3's ``reason``, a wrapped first argument
    (requests'), ``__cause__`` and ``__context__``, depth first, each once."""
    seen, todo = set(), [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        nested = current.args[0] if current.args and isinstance(current.args[0], BaseException) else None
        reason = getattr(current, "reason", None)
        behind = [current.__context__, current.__cause__, nested, reason if isinstance(reason, BaseException) else None]
        todo.extend(e for e in behind if e is not None)


def _refused(error: BaseException) -> bool:
    """Whether ``error`` (an urllib3 or requests exception) comes from a refused connection."""
    return any(isinstance(e, ConnectionRefusedError) for e in _causes(error))


def _unreachable_reason(error: BaseException) -> Optional[str]:
    """Why no connection to the host could be made, in the system's words (``Temporary failure
    in name resolution``, ``Connection refused``, ``timed out``), or None when one was made.

    urllib3's :class:`~urllib3.exceptions.ConnectTimeoutError` covers every failure to connect
    (its ``NewConnectionError`` is one); the system's own error is the first ``OSError`` behind
    it that is not one of requests' (which are ``OSError`` too)."""
    causes = list(_causes(error))
    if not any(isinstance(e, (urllib3.exceptions.ConnectTimeoutError, ConnectionRefusedError)) for e in causes):
        return None
    system = [e for e in causes if isinstance(e, OSError) and not isinstance(e, requests.exceptions.RequestException)]
    return (system[0].strerror or str(system[0])) if system else _reason(error)


def _reason(error: BaseException) -> str:
    """The innermost reason urllib3 gives for ``error`` (its wrappers repeat the URL and pool)."""
    while True:
        inner = getattr(error, "reason", None)
        if not isinstance(inner, BaseException):
            inner = error.args[0] if error.args and isinstance(error.args[0], BaseException) else None
        if inner is None or inner is error:
            return str(error)
        error = inner


def _describe(error: requests.exceptions.RequestException, timeout_seconds: float) -> str:
    if _refused(error):
        return (
            "the connection was refused: the host is up, but nothing listens on that port: a stopped server, "
            "or a wrong port"
        )
    if isinstance(error, requests.exceptions.Timeout) or "timed out" in str(error).lower():
        return f"no answer within {timeout_seconds:g} s, {RETRIES + 1} times ({_reason(error)})"
    return f"{type(error).__name__}: {_reason(error)}"


def _html_message(url: str, evidence: str) -> str:
    return (
        f"{url} returned an HTML page ({evidence}), not an ELMo file: the URL leads to a web page, a login "
        "or an error page. Nothing was cached; check the URL or point SPACY_ELMO_MODELS at a mirror"
    )


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
