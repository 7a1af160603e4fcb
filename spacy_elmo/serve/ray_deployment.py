"""``spacy-elmo serve --ray-replicas N``: the same application as a Ray Serve deployment of N replicas.

Each replica is a Ray actor process with its own pipeline and its own :class:`~.worker.Worker`,
behind the application :func:`~.app.create_app` builds: a replica batches the requests it gets
as the single server does, with the same limits, refusals and memory zones. Ray Serve's HTTP
proxy listens on ``--host``/``--port`` and routes each request to a replica.

A replica asks Ray for ``threads`` CPUs and runs torch at as many threads, so that replicas
never oversubscribe the cores Ray gives them. It counts as started only once its pipeline is
warm (its application's startup waits for it), so Ray routes nothing to a replica that would
answer 503 while it loads; after that Ray's health check fails, and Ray replaces the replica,
whenever its worker is not ready (as ``GET /health`` answers 503). Every response names the
replica that served it in :data:`REPLICA_HEADER`.

``GET /metrics``, whichever replica Ray routes it to, answers every replica's metrics, each
series labelled with its replica: each replica hands its own to one :class:`Expositions` actor,
made by the process that deployed them, every :data:`PUSH_SECONDS` and before it answers.
"""

import signal
import threading
import time
from dataclasses import asdict
from typing import Dict, Tuple

import ray
import torch
from fastapi import FastAPI
from ray import serve
from ray.serve import Application
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .metrics import ServiceMetrics, joined_expositions
from .pipeline import PipelineSource
from .server import PipelineFailed, build_service, configure_logging
from .settings import REPLICA_HEADER, ServeSettings
from .worker import logger

APP_NAME = "spacy-elmo"
DEPLOYMENT_NAME = "pipeline"
# How often the process that deployed the service looks for SIGTERM or SIGINT, in seconds.
SIGNAL_POLL_SECONDS = 0.5
# How often a replica hands its metrics to the others; one silent for STALE_PUSHES times as long
# (gone: Ray replaced it, or it stopped) leaves the joined metrics.
PUSH_SECONDS = 5.0
STALE_PUSHES = 3


class Expositions:
    """Each replica's latest metrics (Prometheus' text), by replica id, and when they came: a Ray
    actor (:func:`application` makes it) that needs no CPU of its own."""

    def __init__(self) -> None:
        self.bodies: Dict[str, Tuple[float, bytes]] = {}

    def put(self, replica: str, body: bytes) -> Dict[str, bytes]:
        """Keep ``replica``'s metrics; every live replica's, this one's included."""
        now = time.monotonic()
        self.bodies[replica] = (now, body)
        stale = now - STALE_PUSHES * PUSH_SECONDS
        self.bodies = {name: (at, kept) for name, (at, kept) in self.bodies.items() if at >= stale}
        return {name: kept for name, (_, kept) in self.bodies.items()}


class ReplicaHeader:
    """Adds :data:`REPLICA_HEADER` (this replica's id) to every HTTP response: which replica served a request."""

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app, self.replica = app, replica

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_named(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append(REPLICA_HEADER, self.replica)
            await send(message)

        await self.app(scope, receive, send_named)


@serve.ingress()
class PipelineReplica:
    """One replica: its own pipeline, worker and application, built in the replica's process."""

    def __init__(self, source: PipelineSource, settings: ServeSettings, expositions: "ray.actor.ActorHandle") -> None:
        configure_logging(settings)
        # Ray's threads run beside the worker, so elmo's threads = "auto" keeps torch's count as set here
        torch.set_num_threads(settings.ray.threads)
        replica = serve.get_replica_context().replica_id.unique_id
        metrics = ServiceMetrics(gather=lambda own: joined_expositions(ray.get(expositions.put.remote(replica, own))))
        self.worker, self.http_app = build_service(source, settings, start_when_ready=True, metrics=metrics)
        self.http_app.add_middleware(ReplicaHeader, replica=replica)
        threading.Thread(target=push_metrics, args=(metrics, expositions, replica), daemon=True).start()
        logger.info("replica %s: the pipeline on %d torch threads", replica, settings.ray.threads)

    def __serve_build_asgi_app__(self) -> FastAPI:
        """Ray Serve's hook: the application this replica serves."""
        return self.http_app

    def check_health(self) -> None:
        """Ray Serve's periodic health check (every 10 s by default): healthy while ``GET /health`` is 200."""
        if not self.worker.ready:
            failure = f": {self.worker.failure}" if self.worker.failure is not None else ""
            raise RuntimeError(f"the pipeline's worker is {self.worker.state}{failure}")


def push_metrics(metrics: ServiceMetrics, expositions: "ray.actor.ActorHandle", replica: str) -> None:
    """Hand ``replica``'s own metrics to ``expositions`` every :data:`PUSH_SECONDS`, for as long as it lives."""
    while True:
        expositions.put.remote(replica, metrics.own_exposition())
        time.sleep(PUSH_SECONDS)


def application(source: PipelineSource, settings: ServeSettings) -> Application:
    """``settings.ray.replicas`` replicas of ``source``'s pipeline, for ``serve.run``.

    A replica takes as many requests at once as its worker can hold (a running batch and a full
    queue), so that its own queue, not Ray's proxy, refuses with 503 and ``Retry-After``.
    """
    batches = settings.batches
    deployment = serve.deployment(
        name=DEPLOYMENT_NAME,
        num_replicas=settings.ray.replicas,
        ray_actor_options={"num_cpus": settings.ray.threads},
        max_ongoing_requests=batches.queue_size + batches.max_batch_texts,
        graceful_shutdown_timeout_s=settings.shutdown_timeout,
    )(PipelineReplica)
    return deployment.bind(source, settings, ray.remote(num_cpus=0)(Expositions).remote())


def serve_on_ray(source: PipelineSource, settings: ServeSettings) -> None:
    """Deploy ``source``'s pipeline on Ray Serve and serve until SIGTERM or SIGINT, then remove the
    deployment (its replicas finish the requests they hold) and leave Ray.

    Joins the cluster at ``settings.ray.address`` (``auto``: the one running on this machine),
    else starts a Ray on this machine for the service, stopped at the end.
    """
    settings.check()
    configure_logging(settings)
    logger.info("serving the %s %r on Ray Serve with %s", source.kind, source.spec, asdict(settings))
    address = settings.ray.address or "local"
    ray.init(address=address, include_dashboard=False if address == "local" else None)
    try:
        if address == "local":
            settings.ray.check_fits(ray.cluster_resources().get("CPU", 0.0))
        serve.start(http_options={"host": settings.host, "port": settings.port})
        try:
            serve.run(application(source, settings), name=APP_NAME, route_prefix="/")
        except RuntimeError as err:  # Ray Serve's report that the replicas failed to start
            raise PipelineFailed(
                f"the deployment of {source.spec!r} on Ray Serve failed ({err}): the replicas' errors are in Ray's "
                "logs, logs/serve/replica_*.log of the session's folder (/tmp/ray/session_latest on its head node)"
            ) from err
        logger.info("%d replicas ready behind http://%s:%d", settings.ray.replicas, settings.host, settings.port)
        wait_for_stop_signal()
        logger.info("stopping: the replicas finish the requests they hold")
        serve.delete(APP_NAME)
    finally:
        ray.shutdown()


def wait_for_stop_signal() -> None:
    """Return once SIGTERM or SIGINT arrives (set after ``ray.init``, which installs its own)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stop.set())
    while not stop.wait(SIGNAL_POLL_SECONDS):
        pass
