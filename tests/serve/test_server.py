"""``spacy-elmo serve`` as an operator runs it: the real server in a subprocess on 127.0.0.1, called
concurrently; each answer equals what ``nlp.pipe`` gives in-process; bad input gets a 4xx that says
why and no text gets a 500; a full queue answers 503 with Retry-After; SIGTERM lets the requests in
flight finish and the process exit 0."""

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, List

import pytest
import requests

from .helpers import TEXTS, Server, assert_same_docs, expected_docs, heavy_request, start_server, stop

pytestmark = pytest.mark.slow

ODD_TEXTS = [
    "",
    " ",
    "\n\t \u3000",
    "x" * 1999,  # one giant token
    "\U0001f642\U0001f44d\U0001f3fd e\u0301 a\u200bb \u202eRTL\u202c \x00 nul",
    "\u4e2d\u6587 \u30c6\u30ad\u30b9\u30c8 \ufeff \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "..." * 300,
    "word " * 390,
]
LIMITS = ["--max-texts", "16", "--max-text-chars", "2000", "--max-request-chars", "5000"]


@pytest.fixture(scope="module")
def server(pipeline_dir: Path, tmp_path_factory) -> Iterator[Server]:
    running = start_server(pipeline_dir, tmp_path_factory.mktemp("log") / "serve.log", *LIMITS)
    yield running
    stop(running)


def test_concurrent_callers_each_get_their_own_docs_as_nlp_pipe_gives_them(server: Server, pipeline_dir) -> None:
    requests_sent = [[TEXTS[(i + j) % len(TEXTS)] for j in range(1 + i % 4)] for i in range(32)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda texts: server.post({"texts": texts, "vectors": True}), requests_sent))
    assert [a.status_code for a in answers] == [200] * len(answers), server.output()
    expected = dict(zip(TEXTS, expected_docs(pipeline_dir, TEXTS)))
    for texts, answer in zip(requests_sent, answers):
        assert_same_docs(answer.json()["docs"], [expected[text] for text in texts])
    without = server.post({"texts": TEXTS[:2]}).json()["docs"]
    assert all("vectors" not in doc for doc in without)
    log = server.output()
    assert (
        "loaded the pipeline directory" in log and "elmo: precision 'auto' runs fp32" in log and "warm-up took" in log
    )
    assert "objects out of the garbage collector's passes" in log


def test_any_text_gets_a_200_with_the_docs_nlp_pipe_gives(server: Server, pipeline_dir) -> None:
    answer = server.post({"texts": ODD_TEXTS, "vectors": True})
    assert answer.status_code == 200, answer.text
    assert_same_docs(answer.json()["docs"], expected_docs(pipeline_dir, ODD_TEXTS))
    assert server.post({"texts": []}).json() == {"docs": []}


@pytest.mark.parametrize(
    "body,where",
    [
        ('{"texts": ["a", ', "json_invalid"),
        ('{"texts": "abc"}', "list_type"),
        ('{"texts": [1]}', "string_type"),
        ('{"texts": ["a"], "vectors": "yes"}', "bool_type"),
        ('{"text": ["a"]}', "missing"),
        ("[1, 2]", "model_attributes_type"),
        ('{"texts": ["a\\ud800b"]}', "unpaired surrogate"),
    ],
)
def test_invalid_json_or_types_get_a_422_that_says_where(server: Server, body: str, where: str) -> None:
    answer = requests.post(
        server.url + "/pipe", data=body.encode(), timeout=30, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 422 and where in answer.text, answer.text
    assert answer.json()["detail"][0]["loc"][0] == "body"


@pytest.mark.parametrize(
    "texts,flag",
    [
        (["a"] * 17, "--max-texts 16"),
        (["a" * 2001], "--max-text-chars 2000"),
        (["a" * 2000] * 3, "--max-request-chars 5000"),
        (["a" * 70_000], "request body is over"),  # refused unread
    ],
)
def test_a_request_over_a_limit_gets_a_413_naming_it(server: Server, texts: List[str], flag: str) -> None:
    answer = server.post({"texts": texts})
    assert answer.status_code == 413 and flag in answer.json()["detail"], answer.text


def test_a_full_queue_answers_503_with_retry_after(pipeline_dir: Path, tmp_path: Path) -> None:
    server = start_server(pipeline_dir, tmp_path / "serve.log", "--queue-size", "1", "--max-batch-texts", "1")
    try:
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda _: server.post(heavy_request(30)), range(12)))
        codes = [a.status_code for a in answers]
        assert set(codes) == {200, 503} and codes.count(200) >= 2, codes
        refused = [a for a in answers if a.status_code == 503]
        assert all(int(a.headers["Retry-After"]) >= 1 and "queue is full" in a.json()["detail"] for a in refused)
        assert server.post({"texts": ["after"]}).status_code == 200  # the queue empties again
    finally:
        stop(server)


def test_sigterm_lets_the_requests_in_flight_finish_and_exits_0(pipeline_dir: Path, tmp_path: Path) -> None:
    server = start_server(pipeline_dir, tmp_path / "serve.log", "--max-batch-texts", "1")
    try:
        with ThreadPoolExecutor(4) as pool:
            pending = [pool.submit(server.post, heavy_request(100)) for _ in range(4)]
            deadline = time.monotonic() + 30
            while server.health()["queued"] < 3 and time.monotonic() < deadline:  # one runs, three wait
                time.sleep(0.01)
            assert server.health()["queued"] == 3, server.output()
            status = server.terminate()
            answers = [future.result() for future in pending]
        assert [a.status_code for a in answers] == [200] * 4, server.output()
        assert all(len(a.json()["docs"]) == 100 for a in answers)
        assert status == 0, server.output()
        assert "drained its queue" in server.output()
    finally:
        stop(server)


def test_openapi_describes_the_endpoints(server: Server) -> None:
    schema = requests.get(server.url + "/openapi.json", timeout=30).json()
    assert {"/pipe", "/health"} <= set(schema["paths"])
    assert {"PipeRequest", "PipeResponse", "DocResult"} <= set(schema["components"]["schemas"])
    assert requests.get(server.url + "/docs", timeout=30).status_code == 200
