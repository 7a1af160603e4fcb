"""Run the service: logging, the worker, uvicorn, and a clean exit on SIGTERM or SIGINT.

uvicorn answers SIGTERM gracefully: it stops accepting connections, waits for the requests in
flight (at most ``shutdown_timeout`` seconds), then runs the application's shutdown, where the
worker drains its queue. It then raises the signal again for the handler it found, so the handler
installed here makes that second delivery a no-op and the process ends with status 0.
"""

import logging
import signal
from contextlib import contextmanager
from dataclasses import asdict
from typing import Iterator

import uvicorn

from .app import create_app
from .pipeline import PipelineRun, PipelineSource, check_gpu, load_pipeline, use_gpu
from .settings import ServeSettings
from .worker import BatchRun, Worker, logger

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class PipelineFailed(RuntimeError):
    """The pipeline did not load or warm up: the service stopped without serving."""


def serve(source: PipelineSource, settings: ServeSettings) -> None:
    """Serve ``source``'s pipeline until SIGTERM or SIGINT; :class:`PipelineFailed` if it never loads."""
    settings.check()
    check_gpu(settings.gpu_id)
    logging.basicConfig(level=settings.log_level.upper(), format=LOG_FORMAT)
    logger.info("serving the %s %r with %s", source.kind, source.spec, asdict(settings))

    def load() -> BatchRun:
        use_gpu(settings.gpu_id)
        return PipelineRun(load_pipeline(source))

    def stop(error: BaseException) -> None:
        server.should_exit = True  # uvicorn's main loop checks it every tenth of a second

    worker = Worker(load, settings.batches, on_failure=stop, freeze_heap=True)
    app = create_app(worker, settings.requests, settings.shutdown_timeout)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,  # uvicorn's loggers go to the root logger configured above
        log_level=settings.log_level,
        timeout_graceful_shutdown=max(1, round(settings.shutdown_timeout)),
    )
    server = uvicorn.Server(config)  # before the worker starts (at the application's startup)
    with signals_after_shutdown_ignored():
        server.run()
    if worker.failure is not None:
        raise PipelineFailed(f"the pipeline {source.spec!r} failed to load: {worker.failure}") from worker.failure


@contextmanager
def signals_after_shutdown_ignored() -> Iterator[None]:
    """SIGTERM and SIGINT do nothing but what uvicorn does while it serves (it installs its own
    handlers, then restores these and raises the signal again)."""
    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda number, frame: None) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
