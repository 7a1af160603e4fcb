"""``spacy-elmo serve``: a pipeline over HTTP (the ``serve`` extra: FastAPI and uvicorn).

Every option also comes from a ``SPACY_ELMO_SERVE_*`` environment variable (a container's usual
settings); the flag wins. FastAPI and uvicorn are imported only when the command runs, so the
rest of the command line works without the extra.
"""

import typer

from ..serve.settings import ENV_PREFIX, BatchLimits, RequestLimits, ServeSettings
from .app import app, reported

MISSING_EXTRA = (
    'spacy-elmo serve needs FastAPI and uvicorn: pip install ".[serve]" from a clone of spacy-elmo '
    '(or pip install "spacy-elmo[serve]")'
)
EXTRA_MODULES = ("fastapi", "uvicorn", "starlette", "pydantic")
_REQUESTS, _BATCHES, _SETTINGS = RequestLimits(), BatchLimits(), ServeSettings()


def _env(name: str) -> str:
    return ENV_PREFIX + name.upper()


@app.command()
def serve(
    pipeline: str = typer.Argument(
        ...,
        envvar=_env("pipeline"),
        metavar="PIPELINE",
        help="A pipeline directory, an installed pipeline package, or a published biLM's name (spacy-elmo "
        "models) for a blank pipeline with elmo on it",
    ),
    host: str = typer.Option(_SETTINGS.host, envvar=_env("host"), help="The address to listen on"),
    port: int = typer.Option(_SETTINGS.port, envvar=_env("port"), help="The port to listen on"),
    max_texts: int = typer.Option(_REQUESTS.max_texts, envvar=_env("max_texts"), help="Texts per request"),
    max_text_chars: int = typer.Option(
        _REQUESTS.max_text_chars, envvar=_env("max_text_chars"), help="Characters per text"
    ),
    max_request_chars: int = typer.Option(
        _REQUESTS.max_request_chars, envvar=_env("max_request_chars"), help="Characters per request"
    ),
    max_batch_texts: int = typer.Option(
        _BATCHES.max_batch_texts, envvar=_env("max_batch_texts"), help="Texts per batch of queued requests"
    ),
    max_batch_chars: int = typer.Option(
        _BATCHES.max_batch_chars, envvar=_env("max_batch_chars"), help="Characters per batch of queued requests"
    ),
    queue_size: int = typer.Option(
        _BATCHES.queue_size, envvar=_env("queue_size"), help="Requests that may wait; more get 503"
    ),
    shutdown_timeout: float = typer.Option(
        _SETTINGS.shutdown_timeout,
        envvar=_env("shutdown_timeout"),
        help="Seconds that requests in flight get to finish after SIGTERM",
    ),
    log_level: str = typer.Option(_SETTINGS.log_level, envvar=_env("log_level"), help="debug, info, warning"),
) -> None:
    """Serve a spaCy pipeline over HTTP: POST {"texts": [...], "vectors": false} to /pipe for each
    text's tokens, entities, categories and (if asked) vectors; GET /health is 200 once the
    pipeline is loaded and warmed up; OpenAPI's pages are at /docs.

    One thread owns the pipeline and runs the queued requests in batches, each inside one
    nlp.memory_zone(). A request over a limit gets 413, a full queue 503 with Retry-After. SIGTERM
    lets the requests in flight finish, then exits (docs/serving.md).
    """
    settings = ServeSettings(
        host=host,
        port=port,
        requests=RequestLimits(max_texts, max_text_chars, max_request_chars),
        batches=BatchLimits(max_batch_texts, max_batch_chars, queue_size),
        shutdown_timeout=shutdown_timeout,
        log_level=log_level,
    )
    try:
        from ..serve.server import PipelineFailed
        from ..serve.server import serve as run_server
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] not in EXTRA_MODULES:
            raise
        typer.secho(f"Error: {MISSING_EXTRA} ({err})", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    from ..serve.pipeline import find_source

    with reported(ValueError, PipelineFailed):
        settings.check()
        run_server(find_source(pipeline), settings)
