"""``spacy-elmo serve``: a pipeline over HTTP (the ``serve`` extra: FastAPI and uvicorn), in this
process or as replicas on Ray Serve (``--ray-replicas``, the ``ray-serve`` extra).

Every option also comes from a ``SPACY_ELMO_SERVE_*`` environment variable (a container's usual
settings); the flag wins. FastAPI, uvicorn and Ray are imported only when the command runs, so
the rest of the command line works without the extras.
"""

import inspect
from typing import TYPE_CHECKING, Callable

import typer

from ..serve.settings import ENV_PREFIX, BatchLimits, RaySettings, RequestLimits, ServeSettings
from .app import app, reported

if TYPE_CHECKING:  # the pipeline's module imports spaCy: only the command's run needs it
    from ..serve.pipeline import PipelineSource

MISSING_EXTRA = (
    'spacy-elmo serve needs FastAPI and uvicorn: pip install ".[serve]" from a clone of spacy-elmo '
    '(or pip install "spacy-elmo[serve]")'
)
MISSING_RAY_SERVE = (
    'spacy-elmo serve --ray-replicas needs Ray Serve: pip install ".[ray-serve]" from a clone of spacy-elmo '
    '(or pip install "spacy-elmo[ray-serve]")'
)
EXTRA_MODULES = ("fastapi", "uvicorn", "starlette", "pydantic", "prometheus_client")
_REQUESTS, _BATCHES, _SETTINGS, _RAY = RequestLimits(), BatchLimits(), ServeSettings(), RaySettings()


def _from_environment(command: Callable[..., None]) -> Callable[..., None]:
    """Let each of ``command``'s parameters also come from its ``SPACY_ELMO_SERVE_*`` variable."""
    for name, parameter in inspect.signature(command).parameters.items():
        parameter.default.envvar = ENV_PREFIX + name.upper()
    return command


@app.command()
@_from_environment
def serve(
    pipeline: str = typer.Argument(
        ...,
        metavar="PIPELINE",
        help="A pipeline directory, an installed pipeline package, or a published biLM's name (spacy-elmo "
        "models) for a blank pipeline with elmo on it",
    ),
    host: str = typer.Option(_SETTINGS.host, help="The address to listen on"),
    port: int = typer.Option(_SETTINGS.port, help="The port to listen on"),
    max_texts: int = typer.Option(_REQUESTS.max_texts, help="Texts per request"),
    max_text_chars: int = typer.Option(_REQUESTS.max_text_chars, help="Characters per text"),
    max_request_chars: int = typer.Option(_REQUESTS.max_request_chars, help="Characters per request"),
    max_batch_texts: int = typer.Option(_BATCHES.max_batch_texts, help="Texts per batch of queued requests"),
    max_batch_chars: int = typer.Option(_BATCHES.max_batch_chars, help="Characters per batch of queued requests"),
    queue_size: int = typer.Option(_BATCHES.queue_size, help="Requests that may wait; more get 503"),
    shutdown_timeout: float = typer.Option(
        _SETTINGS.shutdown_timeout, help="Seconds that requests in flight get to finish after SIGTERM"
    ),
    log_level: str = typer.Option(_SETTINGS.log_level, help="debug, info, warning"),
    log_format: str = typer.Option(_SETTINGS.log_format, help="text, or json: one JSON object per line"),
    request_timeout: float = typer.Option(
        _SETTINGS.request_timeout,
        help="Seconds a request may wait in the queue; later it gets 503 and is not run (X-Request-Timeout: less)",
    ),
    exit_on_failure: bool = typer.Option(
        _SETTINGS.exit_on_failure,
        "--exit-on-failure/--keep-serving-on-failure",
        help="Exit non-zero when the pipeline's worker fails, so a supervisor restarts it; else answer 503",
    ),
    gpu_id: int = typer.Option(_SETTINGS.gpu_id, help="The GPU that runs the pipeline (needs CuPy); -1: the CPU"),
    ray_replicas: int = typer.Option(
        _RAY.replicas, help="Serve N replicas on Ray Serve, each with its own pipeline (0: this process alone)"
    ),
    ray_threads: int = typer.Option(_RAY.threads, help="Torch threads, and Ray CPUs, per replica"),
    ray_address: str = typer.Option(
        _RAY.address,
        help="The Ray cluster to deploy on (auto: the one running here); empty: a Ray started for the service",
    ),
) -> None:
    """Serve a spaCy pipeline over HTTP: POST {"texts": [...], "vectors": false} to /pipe for each
    text's tokens, entities, categories and (if asked) vectors; GET /health is 200 once the
    pipeline is loaded and warmed up, GET /health/live while its worker lives, GET /metrics gives
    Prometheus' metrics; OpenAPI's pages are at /docs.

    One thread owns the pipeline and runs the queued requests in batches, each inside one
    nlp.memory_zone(). A request over a limit gets 413, a full queue 503 with Retry-After. SIGTERM
    lets the requests in flight finish, then exits (docs/serving.md). With --ray-replicas N the
    same application runs as N replicas on Ray Serve, behind Ray's proxy at --host and --port.
    """
    settings = ServeSettings(
        host=host,
        port=port,
        requests=RequestLimits(max_texts, max_text_chars, max_request_chars),
        batches=BatchLimits(max_batch_texts, max_batch_chars, queue_size),
        shutdown_timeout=shutdown_timeout,
        log_level=log_level,
        gpu_id=gpu_id,
        ray=RaySettings(ray_replicas, ray_threads, ray_address),
        request_timeout=request_timeout,
        log_format=log_format,
        exit_on_failure=exit_on_failure,
    )
    with reported(ValueError):
        settings.check()
    run = _runner(on_ray=ray_replicas > 0)
    from ..serve.pipeline import find_source
    from ..serve.server import PipelineFailed

    with reported(ValueError, PipelineFailed):
        run(find_source(pipeline), settings)


def _runner(on_ray: bool) -> Callable[["PipelineSource", ServeSettings], None]:
    """The function that serves: uvicorn in this process, or a deployment on Ray Serve; exits
    with what to install where its extra is missing."""
    try:
        from ..serve.server import serve as run_server

        if not on_ray:
            return run_server
        from ..serve.ray_deployment import serve_on_ray
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]  # on Ray, any module but ours: Ray Serve needs many
        if top == "spacy_elmo" or not (on_ray or top in EXTRA_MODULES):
            raise
        typer.secho(f"Error: {MISSING_RAY_SERVE if on_ray else MISSING_EXTRA} ({err})", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    return serve_on_ray
