"""The FastAPI application: ``GET /health``, ``POST /pipe``, and OpenAPI's pages at ``/docs``.

Request handlers never touch the pipeline: ``POST /pipe`` checks the request's size, queues it
on the :class:`~.worker.Worker` and awaits its future, so the event loop stays free while the
worker's thread runs batches. Every refusal says why in ``detail``: 413 for a request over a
limit (which one, and its flag), 422 for invalid JSON, wrong types or text that is not valid
Unicode, 503 with ``Retry-After`` for a full queue, a pipeline still loading, or a shutdown.
"""

import asyncio
import json
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, List, Optional

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .memory import resident_mib
from .settings import RequestLimits
from .worker import NotReady, Overloaded, ShuttingDown, Worker, logger

DEFAULT_REQUESTS = RequestLimits()
# The version of the HTTP interface (OpenAPI's info.version): a change that breaks a client raises it.
API_VERSION = "1.0"
# While the pipeline loads, or the server stops, a client may try again after this many seconds.
NOT_READY_RETRY_AFTER = 5


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


async def invalid_request(request: Request, error: RequestValidationError) -> Response:
    """422: where and what, without echoing the input (FastAPI's own handler does, and fails on a
    text that no encoding holds, or repeats a large body)."""
    detail = [{"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"]} for e in error.errors()]
    return Response(json_body({"detail": detail}), status_code=422, media_type="application/json")


class BodyLimit:
    """Reads a POST's body up to ``max_bytes`` before the application parses it: a larger one is
    a 413 without reading the rest (FastAPI would read and parse any size)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

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
                detail = f"the request body is over {self.max_bytes} bytes, the most read (see --max-request-chars)"
                await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
                return
        await self.app(scope, _replay(bytes(body), receive), send)


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
) -> FastAPI:
    """The application; it starts ``worker`` at startup, and at shutdown waits for it to drain.

    With ``start_when_ready`` its startup ends only once the pipeline is loaded and warm, and fails
    if it fails to load: for a host that routes requests to an application as soon as it has
    started (a Ray Serve replica), where the single server instead answers 503 while it loads.
    """

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
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    # starlette types a handler's error as any Exception; this one gets its own class only
    app.add_exception_handler(RequestValidationError, invalid_request)  # type: ignore[arg-type]
    _add_routes(app, worker, limits)
    return app


def _add_routes(app: FastAPI, worker: Worker, limits: RequestLimits) -> None:
    @app.get("/health", response_model=Health, responses={503: {"model": Health}})
    async def health() -> JSONResponse:
        """200 once the pipeline is loaded and warmed up; 503 before, after a failure, and while stopping."""
        report = Health(
            status=worker.state,
            queued=worker.queued,
            batches=worker.batches_run,
            rss_mib=resident_mib(),
            rss_at_rest_mib=worker.rest_mib,
        )
        return JSONResponse(report.model_dump(), status_code=200 if worker.ready else 503)

    refusals: Dict[int | str, Dict[str, Any]] = {413: {"model": Problem}, 503: {"model": Problem}}

    @app.post("/pipe", response_model=PipeResponse, responses=refusals)
    async def pipe(request: PipeRequest) -> Response:
        """Run the texts through the pipeline; the docs come back in the order given."""
        reason = too_large(request, limits)
        if reason is not None:
            raise HTTPException(413, reason)
        if not request.texts:
            return Response(json_body({"docs": []}), media_type="application/json")
        try:
            future = worker.submit(request.texts, request.vectors)
        except Overloaded as err:
            raise HTTPException(503, str(err), headers={"Retry-After": str(err.retry_after)}) from None
        except (NotReady, ShuttingDown) as err:
            raise HTTPException(503, str(err), headers={"Retry-After": str(NOT_READY_RETRY_AFTER)}) from None
        try:
            docs = await asyncio.wrap_future(future)
        except Exception as err:
            raise HTTPException(500, f"the pipeline failed on this request: {type(err).__name__}: {err}") from err
        body = await run_in_threadpool(json_body, {"docs": docs})
        return Response(body, media_type="application/json")
