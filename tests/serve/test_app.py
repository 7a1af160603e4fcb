"""The application's startup as a Ray Serve replica runs it (``start_when_ready``): it ends only
once the pipeline is warm, and fails, rather than serving 503s, when the pipeline fails to load."""

import asyncio
import threading

import pytest

from spacy_elmo.serve.app import create_app
from spacy_elmo.serve.worker import BatchRun, Worker

TIMEOUT = 10


def run_startup(worker: Worker) -> str:
    """Run the application's startup (then its shutdown); the worker's state when startup ended."""

    async def lifespan() -> str:
        app = create_app(worker, shutdown_timeout=TIMEOUT, start_when_ready=True)
        async with app.router.lifespan_context(app):
            return worker.state

    return asyncio.run(lifespan())


def test_startup_ends_once_the_pipeline_is_warm() -> None:
    release = threading.Event()

    def load() -> BatchRun:
        assert release.wait(TIMEOUT)
        return lambda texts, vectors: list(texts)

    threading.Timer(0.2, release.set).start()  # startup must wait for it
    assert run_startup(Worker(load, warm_up_texts=("warm-up",))) == "ready"


def test_startup_fails_with_the_pipelines_error_when_it_does_not_load() -> None:
    def load() -> BatchRun:
        raise OSError("no such pipeline")

    with pytest.raises(RuntimeError, match="the pipeline failed to load: no such pipeline"):
        run_startup(Worker(load))
