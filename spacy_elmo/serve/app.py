"""The FastAPI application: ``POST /pipe``, ``GET /health`` (ready), ``GET /health/live``
(alive), ``GET /metrics`` (Prometheus), and OpenAPI's pages at ``/docs``.

Request handlers never touch the pipeline: ``POST /pipe`` checks the request's size, queues it
on the :class:`~.worker.Worker` with its deadline and awaits its future, so the event loop stays
free while the worker's thread runs batches. Every refusal says why in ``detail``: 413 for a
request over a limit (which one, and its flag), 422 for invalid JSON, wrong types or text that is
not valid Unicode, 503 with ``Retry-After`` for a full queue, a pipeline still loading or failed,
a shutdown, or a request still queued at its deadline (never run). Every response carries
``X-Request-ID`` (the client's, or a new one), which the access line and any warning name.
"""

import asyncio
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, List, Optional

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..batching import DeadlineExceeded, Interrupted, Overloaded, ShuttingDown
from .memory import resident_mib
from .metrics import ServiceMetrics
from .settings import DEFAULT_REQUEST_TIMEOUT, RequestLimits
from .worker import NotReady, Worker, WorkerFailed, logger

DEFAULT_REQUESTS = RequestLimits()
# The version of the HTTP interface (OpenAPI's info.version): a change that breaks a client raises it.
API_VERSION = "1.0"
# While the pipeline loads, or the server stops, a client may try again after this many seconds.
NOT_READY_RETRY_AFTER = 5
REQUEST_ID_HEADER = "X-Request-ID"
TIMEOUT_HEADER = "X-Request-Timeout"  # a client's own deadline, in seconds, shorter than the server's
DEADLINE_SOURCES = f"{TIMEOUT_HEADER} or --request-timeout"
MAX_REQUEST_ID = 128  # characters of a client's request id kept (printable ASCII); else a new one
access_logger = logging.getLogger("spacy_elmo.serve.access")


class PipeRequest(BaseModel):
    """Texts to run through the pipeline, in order."""

    model_config = ConfigDict(extra="forbid")
    texts: List[StrictStr] = Field(description="The texts, each made into one doc; may be empty.")
    vectors: StrictBool = Field(False, description="Also return each token's vector (rows of floats).")

    @field_validator("texts")
    @classmethod
    def texts_are_unicode(cls, texts: List[str]) -> List[str]:
        """JSON may spell an unpaired surrogate (``"\\ud800"``), which no text encoding can hold."""
        for i, text in enumerate(texts):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise ValueError(
                    f"texts[{i}] holds an unpaired surrogate at character {err.start}: not valid Unicode text"
                ) from None
        return texts


class Entity(BaseModel):
    start_char: int
    end_char: int
    label: str
    text: str


class DocResult(BaseModel):
    tokens: List[str] = Field(description="Each token's text.")
    ents: List[Entity] = Field(description="The named entities, with their character offsets in the text.")
    cats: Dict[str, float] = Field(description="The text categories' scores (empty without a textcat).")
    vectors: Optional[List[List[float]]] = Field(
        None, description="Only when asked: each token's vector, ELMo's where the pipeline has elmo."
    )


class PipeResponse(BaseModel):
    docs: List[DocResult] = Field(description="One per text, in the order of the request's texts.")


class Problem(BaseModel):
    detail: str


class Health(BaseModel):
    status: str = Field(description="loading, ready, stopping or failed: 200 only when ready.")
    reason: Optional[str] = Field(None, description="Why it failed, when it did.")
    queued: int = Field(description="Requests waiting for a batch.")
    batches: int = Field(description="Batches run since the start.")
    rss_mib: Optional[float] = Field(description="Resident memory now (Linux).")
    rss_at_rest_mib: Optional[float] = Field(description="Resident memory after the warm-up (Linux).")


def too_large(request: PipeRequest, limits: RequestLimits) -> Optional[str]:
    """Why ``request`` exceeds ``limits``, naming the limit's flag; None within them."""
    if len(request.texts) > limits.max_texts:
        return f"the request holds {len(request.texts)} texts, over --max-texts {limits.max_texts}: split it"
    for i, text in enumerate(request.texts):
        if len(text) > limits.max_text_chars:
            return f"texts[{i}] has {len(text)} characters, over --max-text-chars {limits.max_text_chars}"
    total = sum(len(text) for text in request.texts)
    if total > limits.max_request_chars:
        return f"the request's texts have {total} characters, over --max-request-chars {limits.max_request_chars}"
    return None


def json_body(content: Any) -> bytes:
    """JSON in ASCII: valid whatever the text holds."""
    return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


class BodyLimit:
    """Reads a POST's body up to ``max_bytes`` before the application parses it: a larger one is
    a 413 without reading the rest (FastAPI would read and parse any size)."""

    def __init__(self, app: ASGIApp, max_bytes: int, metrics: ServiceMetrics) -> None:
        self.app, self.max_bytes, self.metrics = app, max_bytes, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                self.metrics.refusals.labels("too_large").inc()
                detail = f"the request body is over {self.max_bytes} bytes, the most read (see --max-request-chars)"
                await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
                return
        await self.app(scope, _replay(bytes(body), receive), send)


class RequestIds:
    """Gives each HTTP request an id, the client's ``X-Request-ID`` (printable ASCII, at most
    :data:`MAX_REQUEST_ID` characters) or a new one, in ``scope["state"]``; sends it back as a
    header; logs one access line naming it (logger ``spacy_elmo.serve.access``); counts the
    request and its seconds by route and status."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, routes: List[str]) -> None:
        self.app, self.metrics, self.routes = app, metrics, set(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client_id = dict(scope["headers"]).get(REQUEST_ID_HEADER.lower().encode()) or b""
        usable = 0 < len(client_id) <= MAX_REQUEST_ID and all(0x21 <= byte <= 0x7E for byte in client_id)
        request_id = client_id.decode("ascii") if usable else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        began, status = time.perf_counter(), 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode("ascii"))]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - began
            route = scope["path"] if scope["path"] in self.routes else "other"
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.request_seconds.labels(route).observe(seconds)
            client = scope.get("client") or ("-", 0)
            args = (request_id, client[0], scope["method"], scope["path"], status, 1000 * seconds)
            access_logger.info('%s %s "%s %s" %d %.1f ms', *args, extra={"request_id": request_id})


def request_timeout(header: Optional[str], server_timeout: float) -> float:
    """Seconds a request may wait: the server's, or the client's ``X-Request-Timeout`` where shorter.
    A header that is not a positive number is a 400 that says so."""
    if header is None:
        return server_timeout
    try:
        asked = float(header)
    except ValueError:
        asked = float("nan")
    if not asked > 0:  # NaN too
        raise HTTPException(400, f"{TIMEOUT_HEADER} must be a positive number of seconds, got {header!r}")
    return min(asked, server_timeout)


async def client_left(request: Request) -> None:
    """Returns once the client has disconnected (the body was read: the next message is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` whole, then what the client sends next (a disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def create_app(
    worker: Worker,
    limits: RequestLimits = DEFAULT_REQUESTS,
    shutdown_timeout: float = 30.0,
    start_when_ready: bool = False,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT,
    metrics: Optional[ServiceMetrics] = None,
) -> FastAPI:
    """The application; it starts ``worker`` at startup, and at shutdown waits for it to drain.

    With ``start_when_ready`` its startup ends only once the pipeline is loaded and warm, and fails
    if it fails to load: for a host that routes requests to an application as soon as it has
    started (a Ray Serve replica), where the single server instead answers 503 while it loads.
    ``request_timeout_s``: how long a request may wait in the queue (a client may ask for less).
    ``metrics``: the worker's, where it was built with them (its batches are counted there).
    """
    metrics = ServiceMetrics() if metrics is None else metrics
    metrics.queue_depth.set_function(lambda: worker.batcher.queued)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        if start_when_ready and not await run_in_threadpool(worker.wait_loaded):
            raise RuntimeError(f"the pipeline failed to load: {worker.failure}") from worker.failure
        yield
        if not await run_in_threadpool(worker.close, shutdown_timeout):
            logger.warning("the pipeline's worker did not stop within %s s", shutdown_timeout)

    app = FastAPI(
        title="spacy-elmo serve",
        version=API_VERSION,
        description="A spaCy pipeline with ELMo over HTTP: POST texts to /pipe, poll /health.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, metrics=metrics)
    app.add_middleware(RequestIds, metrics=metrics, routes=["/pipe", "/health", "/health/live", "/metrics"])

    async def invalid(request: Request, error: RequestValidationError) -> Response:
        """422: where and what, without echoing the input (FastAPI's own handler does, and fails on a
        text that no encoding holds, or repeats a large body)."""
        metrics.refusals.labels("invalid").inc()
        detail = [{"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"]} for e in error.errors()]
        return Response(json_body({"detail": detail}), status_code=422, media_type="application/json")

    # starlette types a handler's error as any Exception; this one gets its own class only
    app.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
    _add_watch_routes(app, worker, metrics)
    _add_pipe_route(app, worker, limits, request_timeout_s, metrics)
    return app


def _add_watch_routes(app: FastAPI, worker: Worker, metrics: ServiceMetrics) -> None:
    """What probes and scrapers read: ``/health`` (ready), ``/health/live`` (alive), ``/metrics``."""

    def report() -> Health:
        return Health(
            status=worker.state,
            reason=None if worker.failure is None else f"{type(worker.failure).__name__}: {worker.failure}",
            queued=worker.batcher.queued,
            batches=worker.batcher.batches_run,
            rss_mib=resident_mib(),
            rss_at_rest_mib=worker.rest_mib,
        )

    @app.get("/health", response_model=Health, responses={503: {"model": Health}})
    async def health() -> JSONResponse:
        """Readiness: 200 once the pipeline is loaded and warmed up; 503 before, after a failure
        (``failed``, with the reason), and while stopping."""
        return JSONResponse(report().model_dump(), status_code=200 if worker.ready else 503)

    @app.get("/health/live", response_model=Health, responses={503: {"model": Health}})
    async def live() -> JSONResponse:
        """Liveness: 200 while the worker can serve (loading, ready or stopping); 503 once it failed."""
        return JSONResponse(report().model_dump(), status_code=200 if worker.alive else 503)

    @app.get("/metrics", response_class=Response)
    async def prometheus() -> Response:
        """The service's metrics in Prometheus' text format (on Ray Serve, every replica's)."""
        return Response(await run_in_threadpool(metrics.exposition), media_type=metrics.content_type)


def _add_pipe_route(
    app: FastAPI, worker: Worker, limits: RequestLimits, timeout_s: float, metrics: ServiceMetrics
) -> None:
    refusals: Dict[int | str, Dict[str, Any]] = {status: {"model": Problem} for status in (400, 413, 503)}

    def refuse(status: int, reason: str, detail: str, retry_after: int) -> HTTPException:
        metrics.refusals.labels(reason).inc()
        return HTTPException(status, detail, headers={"Retry-After": str(retry_after)})

    @app.post("/pipe", response_model=PipeResponse, responses=refusals)
    async def pipe(request: PipeRequest, raw: Request) -> Response:
        """Run the texts through the pipeline; the docs come back in the order given. A request
        still queued after ``X-Request-Timeout`` seconds (at most the server's --request-timeout)
        gets 503 and is never run."""
        reason = too_large(request, limits)
        if reason is not None:
            metrics.refusals.labels("too_large").inc()
            raise HTTPException(413, reason)
        if not request.texts:
            return Response(json_body({"docs": []}), media_type="application/json")
        timeout = request_timeout(raw.headers.get(TIMEOUT_HEADER), timeout_s)
        deadline, request_id = time.monotonic() + timeout, raw.state.request_id
        try:
            future = worker.submit(request.texts, request.vectors, deadline, request_id)
        except Overloaded as err:
            raise refuse(503, "queue_full", str(err), err.retry_after) from None
        except NotReady as err:
            raise refuse(503, "failed" if not worker.alive else "not_ready", str(err), NOT_READY_RETRY_AFTER) from None
        except ShuttingDown as err:
            raise refuse(503, "shutting_down", str(err), NOT_READY_RETRY_AFTER) from None
        answer: "asyncio.Future[Any]" = asyncio.wrap_future(future)
        leaving: "asyncio.Future[Any]" = asyncio.ensure_future(client_left(raw))
        try:
            done, _ = await asyncio.wait({answer, leaving}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
        if answer not in done:
            if future.cancel():  # still queued: never run
                if leaving in done:
                    return Response(status_code=499)  # nobody reads it: for the access line and metrics
                late = f"the request waited {timeout:g} s in the queue, its deadline ({DEADLINE_SOURCES}): not run"
                raise refuse(503, "deadline", late, NOT_READY_RETRY_AFTER)
        try:
            docs = await answer  # done, or running: its answer is near
        except DeadlineExceeded as err:
            raise refuse(503, "deadline", f"{err}: not run", NOT_READY_RETRY_AFTER) from None
        except (WorkerFailed, Interrupted) as err:  # the worker is gone: a supervisor restarts it
            raise refuse(503, "failed", str(err), NOT_READY_RETRY_AFTER) from None
        except Exception as err:  # the batcher logged it, naming the request
            raise HTTPException(500, f"the pipeline failed on this request: {type(err).__name__}: {err}") from err
        return Response(await run_in_threadpool(json_body, {"docs": docs}), media_type="application/json")
