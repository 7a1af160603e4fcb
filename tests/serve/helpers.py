"""A real ``spacy-elmo serve`` in a subprocess on 127.0.0.1, for tests/serve."""

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

import requests

START_TIMEOUT = 60  # seconds for the server to load and warm up a tiny pipeline on a loaded machine
REQUEST_TIMEOUT = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    log: Path

    def post(self, body: Any, **kwargs: Any) -> requests.Response:
        return requests.post(self.url + "/pipe", json=body, timeout=REQUEST_TIMEOUT, **kwargs)

    def health(self) -> Dict[str, Any]:
        return requests.get(self.url + "/health", timeout=REQUEST_TIMEOUT).json()

    def output(self) -> str:
        return self.log.read_text(encoding="utf8", errors="replace")

    def terminate(self) -> int:
        """SIGTERM, then the exit status (killed after a timeout: a hang fails the test, not the run)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


def start_server(pipeline: Path, log: Path, *flags: str) -> Server:
    """``python -m spacy_elmo serve PIPELINE`` on a free port, once ``/health`` answers 200."""
    port = free_port()
    env = {**os.environ, "SPACY_ELMO_PRECISION": "fp32", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "spacy_elmo", "serve", str(pipeline), "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen([*command, *flags], stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if requests.get(server.url + "/health", timeout=2).status_code == 200:
                return server
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the server did not become ready:\n{server.output()}")


def stop(server: Server) -> None:
    """Kill the server if a test left it running."""
    if server.process.poll() is None:
        server.process.kill()
        server.process.wait(START_TIMEOUT)
