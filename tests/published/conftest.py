"""A local stand-in for the hosts of the published biLMs: no test reaches the internet.

``host`` is a threaded HTTP server on 127.0.0.1 that honours ``Range`` and can misbehave on
demand (drop the connection, answer an HTML page, serve a short file, be slow); it records every
request. ``registry`` points the registry name ``tiny`` at it (serving the suite's ``bilm_files``)
and the cache at a fresh directory.
"""

import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import pytest

from .helpers import tiny_entry, write_registry

HTML = b"<!DOCTYPE html>\n<html><body>Sign in to continue</body></html>\n"


@dataclass
class Request:
    path: str
    range: Optional[str]


@dataclass
class FakeHost:
    """What the server serves, how it misbehaves per path, and what it was asked."""

    url: str = ""
    files: Dict[str, bytes] = field(default_factory=dict)
    faults: Dict[str, str] = field(default_factory=dict)
    requests: List[Request] = field(default_factory=list)
    sent: Dict[str, int] = field(default_factory=dict)  # body bytes sent per path
    lock: threading.Lock = field(default_factory=threading.Lock)

    def gets(self, path: str) -> List[Request]:
        return [r for r in self.requests if r.path == path]


class Handler(BaseHTTPRequestHandler):
    """GET with ``Range: bytes=N-``; faults: ``drop_once``, ``drop_always``, ``html``, ``html_body``, ``slow``,
    ``unavailable_twice`` and ``unavailable_always`` (503), ``stall_twice`` (silent for a second)."""

    server: "HostServer"

    def do_GET(self) -> None:  # the name BaseHTTPRequestHandler calls for a GET
        host = self.server.host
        fault = host.faults.get(self.path)
        with host.lock:
            host.requests.append(Request(self.path, self.headers.get("Range")))
            dropped_before = any(r.path == self.path for r in host.requests[:-1])
        if self.path not in host.files:
            self.send_error(404, "Not Found")
            return
        first_tries = len(host.gets(self.path)) <= 2
        if fault == "unavailable_always" or (fault == "unavailable_twice" and first_tries):
            self.send_error(503, "Service Unavailable")
            return
        if fault == "stall_twice" and first_tries:
            time.sleep(1.0)  # longer than the client's timeout in the test
        if fault == "html":
            self._send(200, HTML, {"Content-Type": "text/html; charset=utf-8"})
            return
        body = HTML if fault == "html_body" else host.files[self.path]
        start = int(self.headers["Range"][len("bytes=") :].rstrip("-")) if self.headers.get("Range") else 0
        if start and start >= len(body):  # as real hosts answer a range past the end
            self._send(416, b"", {"Content-Range": f"bytes */{len(body)}"})
            return
        headers = {"Content-Type": "application/octet-stream"}
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
        drop = fault == "drop_always" or (fault == "drop_once" and not dropped_before)
        self._send(206 if start else 200, body[start:], headers, cut=max(0, len(body) // 2 - start) if drop else None)

    def _send(self, status: int, body: bytes, headers: Dict[str, str], cut: Optional[int] = None) -> None:
        """Send ``body``; with ``cut``, announce all of it but close the connection after ``cut`` bytes."""
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        sent = body[:cut] if cut is not None else body
        slow = self.server.host.faults.get(self.path) == "slow"
        for i in range(0, len(sent), 4096):
            chunk = sent[i : i + 4096]
            self._count(len(chunk))  # before the client can have read it: a test may look as soon as it has
            try:
                self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting: what the fault tests
                self._count(-len(chunk))
                return
            if slow:
                time.sleep(0.05)

    def _count(self, n_bytes: int) -> None:
        with self.server.host.lock:
            self.server.host.sent[self.path] = self.server.host.sent.get(self.path, 0) + n_bytes

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest shows the requests through ``FakeHost.requests`` when a test fails."""


class HostServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: FakeHost):
        super().__init__(("127.0.0.1", 0), Handler)
        self.host = host


@dataclass
class Network:
    """What tests may reach: this machine only; names in ``unresolvable`` fail as with no network."""

    guarded: bool = False
    unresolvable: Set[str] = field(default_factory=set)


NETWORK = Network()


def _guard(event: str, args: Tuple[Any, ...]) -> None:
    """An audit hook (the runtime's own way to refuse a socket call: whatever library makes it)."""
    if not NETWORK.guarded or event not in ("socket.getaddrinfo", "socket.connect"):
        return
    host = args[0] if event == "socket.getaddrinfo" else args[1][0] if isinstance(args[1], tuple) else None
    host = host.decode() if isinstance(host, bytes) else host
    if host in NETWORK.unresolvable:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    if host not in (None, "127.0.0.1", "localhost", "::1"):
        raise AssertionError(f"a test tried to reach {host!r}")


sys.addaudithook(_guard)  # for good (a hook cannot be removed): it guards only while ``network`` is on


@pytest.fixture(autouse=True)
def network() -> Iterator[Network]:
    """Refuse any connection but to this machine, so that a wrong URL fails here, not on a real host."""
    NETWORK.guarded = True
    yield NETWORK
    NETWORK.guarded = False
    NETWORK.unresolvable.clear()


@pytest.fixture
def host(bilm_files) -> Iterator[FakeHost]:
    """The server, serving the tiny biLM at /tiny/options.json and /tiny/weights.hdf5."""
    fake = FakeHost(
        files={"/tiny/options.json": bilm_files[0].read_bytes(), "/tiny/weights.hdf5": bilm_files[1].read_bytes()}
    )
    server = HostServer(fake)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(directory))
    monkeypatch.delenv("SPACY_ELMO_OFFLINE", raising=False)
    return directory


@pytest.fixture
def registry(host, cache, tmp_path, monkeypatch) -> Path:
    """A registry file naming ``tiny`` on the local host; returns its path (tests may rewrite it)."""
    path = tmp_path / "models.json"
    write_registry(path, tiny=tiny_entry(host))
    monkeypatch.setenv("SPACY_ELMO_MODELS", str(path))
    return path
