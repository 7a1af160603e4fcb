"""A real ``spacy-elmo serve`` in a subprocess on 127.0.0.1, for tests/serve."""

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import numpy
import requests
import spacy

START_TIMEOUT = 60  # seconds for the server to load and warm up a tiny pipeline on a loaded machine
REQUEST_TIMEOUT = 30

# Texts every server test sends: plain, unpunctuated, doubled spaces, two sentences, made-up words.
TEXTS = [
    "Alice went to Paris .",
    "It was a great day",
    "Bob  stayed home . He read .",
    "The bank raised its rates , and the river bank flooded .",
    "zorblax quimfet glorptuna .",
]


# Ports below the kernel's ephemeral range and above Ray's worker ports (10002-19999): a port the
# kernel hands to a bind(0) (Ray's own processes take several while it starts) cannot land on ours
# between choosing it and the server binding it.
PORTS = range(20000, 32768)


def free_port() -> int:
    """A port in PORTS that is free now: first try at a random one, then onwards."""
    start = random.randrange(len(PORTS))
    for offset in range(len(PORTS)):
        port = PORTS[(start + offset) % len(PORTS)]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # taken
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


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


def start_server(pipeline: Path, log: Path, *flags: str, start_timeout: float = START_TIMEOUT) -> Server:
    """``python -m spacy_elmo serve PIPELINE`` on a free port, once ``/health`` answers 200."""
    port = free_port()
    env = {**os.environ, "SPACY_ELMO_PRECISION": "fp32", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "spacy_elmo", "serve", str(pipeline), "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen([*command, *flags], stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(process, f"http://127.0.0.1:{port}", log)
    try:
        wait_until_ready(server, start_timeout)
    except BaseException:
        stop(server)
        raise
    return server


def wait_until_ready(server: Server, timeout: float) -> None:
    """Return once ``/health`` answers 200; an AssertionError with the server's output if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.process.poll() is None:
        try:
            if requests.get(server.url + "/health", timeout=2).status_code == 200:
                return
        except (requests.ConnectionError, requests.Timeout):  # not listening yet, or starting
            pass
        time.sleep(0.1)
    raise AssertionError(f"the server did not become ready:\n{server.output()}")


def stop(server: Server) -> None:
    """End the server if a test left it running: SIGTERM (after which the command stops the Ray it
    started too), SIGKILL if it has not exited after a timeout."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(START_TIMEOUT)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(START_TIMEOUT)


def expected_docs(pipeline_dir: Path, texts: List[str]) -> List[Dict[str, Any]]:
    """What ``nlp.pipe`` gives in this process for ``texts``: the answers a server must match."""
    nlp = spacy.load(pipeline_dir)
    return [
        {
            "tokens": [t.text for t in doc],
            "ents": [[e.start_char, e.end_char, e.label_] for e in doc.ents],
            "cats": doc.cats,
            "vectors": doc._.elmo_vectors,
        }
        for doc in nlp.pipe(texts)
    ]


def assert_same_docs(docs: List[Dict[str, Any]], expected: List[Dict[str, Any]]) -> None:
    """A server's docs as :func:`expected_docs`: tokens and entities equal, scores and vectors within 1e-4."""
    assert [doc["tokens"] for doc in docs] == [e["tokens"] for e in expected]
    assert [[[x["start_char"], x["end_char"], x["label"]] for x in doc["ents"]] for doc in docs] == [
        e["ents"] for e in expected
    ]
    for doc, e in zip(docs, expected):
        assert doc["cats"].keys() == e["cats"].keys()
        assert all(abs(doc["cats"][label] - score) < 1e-4 for label, score in e["cats"].items())
        if "vectors" in doc:
            scale = max(1.0, float(numpy.abs(e["vectors"]).max(initial=0.0)))
            numpy.testing.assert_allclose(
                numpy.array(doc["vectors"]).reshape(e["vectors"].shape), e["vectors"], rtol=0, atol=1e-4 * scale
            )


def heavy_request(n_texts: int) -> Dict[str, Any]:
    """Texts that keep the tiny pipeline busy for a while (about 3 ms a text here)."""
    return {"texts": [" ".join(f"word{(i * 7 + j) % 50}" for i in range(60)) + " ." for j in range(n_texts)]}
