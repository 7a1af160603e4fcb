"""Run the service: logging, the worker, uvicorn, and a clean exit on SIGTERM or SIGINT.

uvicorn answers SIGTERM gracefully: it stops accepting connections, waits for the requests in
flight (at most ``shutdown_timeout`` seconds), then runs the application's shutdown, where the
worker drains its queue. It then raises the signal again for the handler it found, so the handler
installed here makes that second delivery a no-op and the process ends with status 0.
"""

import json
import logging
import signal
import sys
from contextlib import contextmanager
from dataclasses import asdict
from typing import Callable, Iterator, Optional, Tuple

import uvicorn
from fastapi import FastAPI

from .app import create_app
from .metrics import ServiceMetrics
from .pipeline import PipelineRun, PipelineSource, check_gpu, describe_pipeline, load_pipeline, use_gpu
from .settings import ServeSettings
from .worker import BatchRun, Worker, logger

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class PipelineFailed(RuntimeError):
    """The pipeline did not load or warm up, or its worker failed: the service stopped."""


class JsonLines(logging.Formatter):
    """One JSON object per log line (``--log-format json``): time, level, logger, message, and
    the request's id where the line is about one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record), "level": record.levelname, "logger": record.name}
        entry["message"] = record.getMessage()
        if getattr(record, "request_id", None):
            entry["request_id"] = record.request_id  # type: ignore[attr-defined]
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=True)


def configure_logging(settings: ServeSettings) -> None:
    """The root logger at ``--log-level``, on stderr, in ``--log-format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if settings.log_format == "json" else logging.Formatter(LOG_FORMAT))
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler], force=True)


def build_service(
    source: PipelineSource,
    settings: ServeSettings,
    start_when_ready: bool = False,
    on_failure: Optional[Callable[[BaseException], None]] = None,
    metrics: Optional[ServiceMetrics] = None,
) -> Tuple[Worker, FastAPI]:
    """The worker that will load ``source``'s pipeline, and the application that serves it, with
    their ``metrics`` (this server's, or one Ray Serve replica's)."""
    metrics = ServiceMetrics() if metrics is None else metrics

    def load() -> BatchRun:
        use_gpu(settings.gpu_id)
        nlp = load_pipeline(source)
        metrics.pipeline.info(describe_pipeline(source, nlp))
        return PipelineRun(nlp, metrics.tokens_ran)

    worker = Worker(load, settings.batches, on_failure=on_failure, freeze_heap=True, observe=metrics.batch_ran)
    app = create_app(
        worker, settings.requests, settings.shutdown_timeout, start_when_ready, settings.request_timeout, metrics
    )
    return worker, app


def serve(source: PipelineSource, settings: ServeSettings) -> None:
    """Serve ``source``'s pipeline until SIGTERM or SIGINT; :class:`PipelineFailed` if it never
    loads, or if its worker fails (unless ``exit_on_failure`` is off: it then answers 503)."""
    settings.check()
    check_gpu(settings.gpu_id)
    configure_logging(settings)
    logger.info("serving the %s %r with %s", source.kind, source.spec, asdict(settings))

    def stop(error: BaseException) -> None:
        if settings.exit_on_failure or not worker.loaded:  # a failed load always stops
            server.should_exit = True  # uvicorn's main loop checks it every tenth of a second

    worker, app = build_service(source, settings, on_failure=stop)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,  # uvicorn's loggers go to the root logger configured above
        log_level=settings.log_level,
        access_log=False,  # the application's own access lines name each request's id
        timeout_graceful_shutdown=max(1, round(settings.shutdown_timeout)),
    )
    server = uvicorn.Server(config)  # before the worker starts (at the application's startup)
    with signals_after_shutdown_ignored():
        server.run()
    if worker.failure is not None:
        what = "failed while serving" if worker.loaded else "failed to load"
        raise PipelineFailed(f"the pipeline {source.spec!r} {what}: {worker.failure}") from worker.failure


@contextmanager
def signals_after_shutdown_ignored() -> Iterator[None]:
    """SIGTERM and SIGINT do nothing but what uvicorn does while it serves (it installs its own
    handlers, then restores these and raises the signal again)."""
    previous = {sig: signal.signal(sig, lambda number, frame: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
