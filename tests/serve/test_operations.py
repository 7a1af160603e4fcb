"""What an operator watches and sets: ``/metrics`` in Prometheus' text format moving with traffic,
``X-Request-ID`` on every answer and in the access log, deadlines (a request still queued at its
deadline is answered 503 and never run), a failed worker seen by ``/health`` and ``/health/live``
and ending the process, and requests of clients that left never run (the real server)."""

import logging
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence

import pytest
import requests
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from spacy_elmo.serve.app import create_app
from spacy_elmo.serve.metrics import ServiceMetrics, joined_expositions
from spacy_elmo.serve.settings import BatchLimits
from spacy_elmo.serve.worker import Worker

from .helpers import Server, free_port, heavy_request, start_server, stop, wait_until_ready

TIMEOUT = 10


class HeldRun:
    """A batch run that records each batch's texts and holds the batch holding "hold" until released."""

    def __init__(self) -> None:
        self.batches: List[List[str]] = []
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, texts: Sequence[str], vectors: Sequence[bool]) -> List[Any]:
        self.batches.append(list(texts))
        if "hold" in texts:
            self.holding.set()
            assert self.release.wait(TIMEOUT)
        return [{"tokens": text.split(), "ents": [], "cats": {}} for text in texts]


@pytest.fixture
def held() -> HeldRun:
    return HeldRun()


@pytest.fixture
def client(held: HeldRun) -> Iterator[TestClient]:
    metrics = ServiceMetrics()
    worker = Worker(lambda: held, BatchLimits(max_batch_texts=1), warm_up_texts=(), observe=metrics.batch_ran)
    app = create_app(worker, metrics=metrics, start_when_ready=True)
    with TestClient(app) as running:
        yield running
    held.release.set()


def samples(text: str) -> Dict[str, float]:
    """Every sample of a Prometheus exposition, by name and labels: ``name{a="1",b="2"}`` -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def test_metrics_parse_as_prometheus_text_and_move_with_traffic(client: TestClient) -> None:
    before = samples(client.get("/metrics").text)
    assert before["spacy_elmo_texts_total"] == 0 and before["spacy_elmo_queue_depth"] == 0
    for texts in (["one two", "three"], ["four"]):
        assert client.post("/pipe", json={"texts": texts}).status_code == 200
    assert client.post("/pipe", json={"texts": ["x" * 200_000]}).status_code == 413
    assert client.post("/pipe", json={"texts": "not a list"}).status_code == 422
    after = samples(client.get("/metrics").text)
    assert after['spacy_elmo_requests_total{route="/pipe",status="200"}'] == 2
    assert after['spacy_elmo_requests_total{route="/pipe",status="413"}'] == 1
    assert after['spacy_elmo_refusals_total{reason="too_large"}'] == 1
    assert after['spacy_elmo_refusals_total{reason="invalid"}'] == 1
    assert after["spacy_elmo_texts_total"] == 3
    # a batch of one text at most, but a request larger than that runs whole, alone
    assert after["spacy_elmo_batch_texts_count"] == 2 and after["spacy_elmo_batch_texts_sum"] == 3
    assert after["spacy_elmo_queue_wait_seconds_count"] == 2
    assert after['spacy_elmo_request_seconds_count{route="/pipe"}'] == 4
    assert after["spacy_elmo_resident_memory_bytes"] > 0


def test_replicas_metrics_join_into_one_exposition_labelled_by_replica() -> None:
    first, second = ServiceMetrics(), ServiceMetrics()
    first.requests.labels("/pipe", "200").inc(3)
    second.requests.labels("/pipe", "200").inc()
    second.batch_ran([0.01, 0.02], 5, 0.1)
    joined = samples(joined_expositions({"a": first.own_exposition(), "b": second.own_exposition()}).decode())
    assert joined['spacy_elmo_requests_total{replica="a",route="/pipe",status="200"}'] == 3
    assert joined['spacy_elmo_requests_total{replica="b",route="/pipe",status="200"}'] == 1
    assert joined['spacy_elmo_texts_total{replica="b"}'] == 5 and joined['spacy_elmo_texts_total{replica="a"}'] == 0
    assert joined['spacy_elmo_queue_wait_seconds_count{replica="b"}'] == 2
    assert joined['spacy_elmo_resident_memory_bytes{replica="a"}'] > 0
    gathered = ServiceMetrics(gather=lambda own: joined_expositions({"self": own}))
    assert 'spacy_elmo_texts_total{replica="self"}' in samples(gathered.exposition().decode())


def test_a_request_id_round_trips_and_names_the_access_line(client: TestClient, caplog) -> None:
    caplog.set_level(logging.INFO, logger="spacy_elmo.serve.access")
    answer = client.post("/pipe", json={"texts": ["hello"]}, headers={"X-Request-ID": "client-42"})
    assert answer.headers["X-Request-ID"] == "client-42"
    (line,) = [r for r in caplog.records if r.name == "spacy_elmo.serve.access" and "/pipe" in r.getMessage()]
    assert line.request_id == "client-42" and "client-42" in line.getMessage() and " 200 " in line.getMessage()
    made = client.get("/health").headers["X-Request-ID"]
    unusable = client.get("/health", headers={"X-Request-ID": "has space"}).headers["X-Request-ID"]
    assert len(made) == 32 and made != unusable and " " not in unusable


def test_a_request_still_queued_at_its_deadline_gets_503_and_is_never_run(client: TestClient, held: HeldRun) -> None:
    with ThreadPoolExecutor(2) as pool:
        holding = pool.submit(client.post, "/pipe", json={"texts": ["hold"]})
        assert held.holding.wait(TIMEOUT)
        late = client.post("/pipe", json={"texts": ["late"]}, headers={"X-Request-Timeout": "0.2"})
        held.release.set()
        assert holding.result(TIMEOUT).status_code == 200
    assert late.status_code == 503 and "deadline" in late.json()["detail"] and late.headers["Retry-After"]
    assert client.post("/pipe", json={"texts": ["after"]}).status_code == 200
    assert held.batches == [["hold"], ["after"]]  # "late" never ran
    assert samples(client.get("/metrics").text)['spacy_elmo_refusals_total{reason="deadline"}'] == 1
    bad = client.post("/pipe", json={"texts": ["x"]}, headers={"X-Request-Timeout": "soon"})
    assert bad.status_code == 400 and "X-Request-Timeout" in bad.json()["detail"]


def test_a_failed_worker_turns_both_health_routes_to_503_with_the_reason() -> None:
    kill = threading.Event()

    def after_batch() -> None:
        if kill.is_set():
            raise OSError("the allocator is gone")

    worker = Worker(lambda: HeldRun(), warm_up_texts=(), after_batch=after_batch)
    with TestClient(create_app(worker, start_when_ready=True)) as client:
        assert client.get("/health/live").status_code == 200 and client.get("/health").status_code == 200
        kill.set()  # the next batch's aftermath kills the thread
        answer = client.post("/pipe", json={"texts": ["one"]})
        assert answer.status_code == 200
        for _ in range(100):
            if worker.failure is not None:
                break
            time.sleep(0.01)
        for route in ("/health", "/health/live"):
            report = client.get(route)
            assert report.status_code == 503 and report.json()["status"] == "failed", route
            assert "OSError: the allocator is gone" in report.json()["reason"]
        refused = client.post("/pipe", json={"texts": ["two"]})
        assert refused.status_code == 503 and "failed" in refused.json()["detail"]


DYING_SERVER = textwrap.dedent(
    """
    import sys
    import spacy
    from spacy.language import Language
    from spacy_elmo.cli import app

    class Fatal(BaseException):
        "Not an error of a request: the worker's thread ends on it."

    @Language.component("dies_on_die")
    def dies_on_die(doc):
        if doc.text == "die":
            raise Fatal("the worker's thread is gone")
        return doc

    nlp = spacy.blank("xx")
    nlp.add_pipe("dies_on_die")
    nlp.to_disk(sys.argv[1])
    app(["serve", sys.argv[1], "--host", "127.0.0.1", "--port", sys.argv[2], *sys.argv[3:]])
    """
)


def dying_server(tmp_path: Path, *flags: str) -> Server:
    port = free_port()
    log = tmp_path / "serve.log"
    (tmp_path / "dying.py").write_text(DYING_SERVER)
    command = [sys.executable, str(tmp_path / "dying.py"), str(tmp_path / "pipeline"), str(port), *flags]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = Server(process, f"http://127.0.0.1:{port}", log)
    wait_until_ready(server, 60)
    return server


@pytest.mark.slow
def test_a_worker_killed_outside_a_request_error_ends_the_process_non_zero(tmp_path: Path) -> None:
    server = dying_server(tmp_path)
    try:
        answer = server.post({"texts": ["die"]})
        assert answer.status_code == 503 and "interrupted" in answer.json()["detail"]
        assert server.process.wait(30) == 1, server.output()
        assert "failed while serving" in server.output() and "Fatal" in server.output()
    finally:
        stop(server)


@pytest.mark.slow
def test_told_to_keep_serving_a_failed_worker_answers_503_until_restarted(tmp_path: Path) -> None:
    server = dying_server(tmp_path, "--keep-serving-on-failure")
    try:
        assert server.post({"texts": ["die"]}).status_code == 503
        live = requests.get(server.url + "/health/live", timeout=10)
        assert live.status_code == 503 and "Fatal" in live.json()["reason"]
        assert server.post({"texts": ["fine"]}).status_code == 503 and server.process.poll() is None
    finally:
        stop(server)


@pytest.mark.slow
def test_requests_of_clients_that_left_are_not_run(pipeline_dir: Path, tmp_path: Path) -> None:
    """One heavy request runs; 4 clients that give up after 0.3 s queue behind it and leave: their
    texts never run (the texts served count only the heavy request's and the last one's)."""
    server = start_server(pipeline_dir, tmp_path / "serve.log", "--max-batch-texts", "1", "--max-texts", "600")
    try:
        heavy = heavy_request(600)  # about 2 s
        with ThreadPoolExecutor(5) as pool:
            running = pool.submit(server.post, heavy)
            time.sleep(0.2)  # it runs
            leaving = [
                pool.submit(requests.post, server.url + "/pipe", json={"texts": ["left"]}, timeout=0.3)
                for _ in range(4)
            ]
            for future in leaving:
                with pytest.raises(requests.exceptions.Timeout):
                    future.result()
            assert running.result().status_code == 200
        assert server.post({"texts": ["last"]}).status_code == 200
        found = samples(requests.get(server.url + "/metrics", timeout=10).text)
        assert found["spacy_elmo_texts_total"] == len(heavy["texts"]) + 1, server.output()
        assert found['spacy_elmo_requests_total{route="/pipe",status="499"}'] == 4
    finally:
        stop(server)
