"""``spacy-elmo serve PIPELINE --ray-replicas 2`` as an operator runs it: the command starts a
local one-node Ray (its proxy on 127.0.0.1 only) and deploys 2 replicas of the application;
called concurrently, each answer equals what ``nlp.pipe`` gives in-process and both replicas
serve; the limits and health are the single server's; SIGTERM lets the requests in flight finish
and the command exit 0."""

import importlib.util
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from spacy_elmo.serve.settings import REPLICA_HEADER

from .helpers import TEXTS, Server, assert_same_docs, expected_docs, heavy_request, start_server, stop

# Ray Serve runs in the command under test, never in this process: the check imports nothing of Ray.
if importlib.util.find_spec("ray") is None or importlib.util.find_spec("fastapi") is None:
    pytest.skip('Ray Serve is not installed: pip install ".[ray-serve]"', allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

START_TIMEOUT = 150  # seconds: Ray, Serve's controller and proxy, then 2 replicas, on a loaded machine
READY_LOG = "2 replicas ready"


@pytest.fixture(scope="module")
def service(pipeline_dir: Path, tmp_path_factory) -> Iterator[Server]:
    """The command with 2 replicas of one torch thread each, once both are ready."""
    log = tmp_path_factory.mktemp("log") / "serve-ray.log"
    running = start_server(
        pipeline_dir,
        log,
        "--ray-replicas",
        "2",
        "--ray-threads",
        "1",
        "--shutdown-timeout",
        "30",
        start_timeout=START_TIMEOUT,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while READY_LOG not in running.output() and time.monotonic() < deadline and running.process.poll() is None:
            time.sleep(0.2)
        assert READY_LOG in running.output(), running.output()
        yield running
    finally:
        stop(running)


def post(service: Server, texts: List[str], vectors: bool = False) -> requests.Response:
    return service.post({"texts": texts, "vectors": vectors})


def test_both_replicas_answer_concurrent_callers_as_nlp_pipe_does(service: Server, pipeline_dir: Path) -> None:
    requests_sent = [[TEXTS[(i + j) % len(TEXTS)] for j in range(1 + i % 4)] for i in range(32)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda texts: post(service, texts, vectors=True), requests_sent))
    assert [a.status_code for a in answers] == [200] * len(answers), service.output()
    expected = dict(zip(TEXTS, expected_docs(pipeline_dir, TEXTS)))
    for texts, answer in zip(requests_sent, answers):
        assert_same_docs(answer.json()["docs"], [expected[text] for text in texts])
    replicas = {answer.headers[REPLICA_HEADER] for answer in answers}
    assert len(replicas) == 2, replicas


def texts_by_replica(service: Server) -> Dict[str, float]:
    """``spacy_elmo_texts_total`` of each replica, as one replica's ``GET /metrics`` gives them."""
    found = {}
    for family in text_string_to_metric_families(requests.get(service.url + "/metrics", timeout=30).text):
        found.update({s.labels["replica"]: s.value for s in family.samples if s.name == "spacy_elmo_texts_total"})
    return found


def test_metrics_on_any_replica_hold_every_replicas_series(service: Server) -> None:
    """Run after the concurrent callers above, which both replicas served; the other replica's
    count is as fresh as its last hand-over (ray_deployment.PUSH_SECONDS, a few seconds)."""
    deadline = time.monotonic() + 30
    while not (len(found := texts_by_replica(service)) == 2 and all(found.values())) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(found) == 2 and all(texts > 0 for texts in found.values()), found


def test_health_and_the_limits_are_the_single_servers(service: Server) -> None:
    health = service.health()
    assert health["status"] == "ready" and health["rss_at_rest_mib"] > 0, health
    too_many = post(service, ["a"] * 129)
    assert too_many.status_code == 413 and "--max-texts 128" in too_many.json()["detail"]
    assert service.post({"texts": [1]}).status_code == 422
    log = service.output()
    assert "elmo: precision 'auto' runs fp32" in log and "the pipeline on 1 torch threads" in log, log


def test_sigterm_lets_the_requests_in_flight_finish_and_exits_0(service: Server) -> None:
    """The last test of the module: 16 requests of 120 texts (seconds of work for the two
    replicas) are in flight when the command gets SIGTERM."""
    with ThreadPoolExecutor(16) as pool:
        pending = [pool.submit(post, service, heavy_request(120)["texts"]) for _ in range(16)]
        time.sleep(0.5)  # the requests reach the replicas, which take them all (max_ongoing_requests)
        status = service.terminate()
        answers = [future.result() for future in pending]
    assert [a.status_code for a in answers] == [200] * 16, service.output()
    assert all(len(a.json()["docs"]) == 120 for a in answers)
    assert status == 0, service.output()
    assert "drained its queue" in service.output()
