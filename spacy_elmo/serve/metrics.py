"""What ``GET /metrics`` exposes, in Prometheus' text format (``prometheus-client``).

One :class:`ServiceMetrics` per application, each in a registry of its own (two applications in
one process, as the tests build them, count apart): requests by route and status and their
seconds, refusals by reason, the queue's depth and each request's wait in it, each batch's texts,
tokens and seconds, the texts and tokens served, resident memory, and what is served (the
pipeline, its components, each ``elmo``'s precision as it runs). Ray Serve's replicas each
have their own, which any replica's ``GET /metrics`` answers together, each series labelled with
its replica (:func:`joined_expositions`, :mod:`.ray_deployment`).
"""

from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from .memory import resident_mib

PREFIX = "spacy_elmo"
# Seconds: from a lone request's few milliseconds to a full queue's wait.
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TEXTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKENS = (16, 64, 256, 1024, 4096, 16384, 65536)
REFUSALS = ("too_large", "invalid", "queue_full", "not_ready", "shutting_down", "deadline", "failed")


class ServiceMetrics:
    """The service's metrics; :meth:`exposition` is the body of ``GET /metrics``: this process's,
    or with ``gather`` what it makes of them (a Ray Serve replica's: every replica's)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, gather: Optional[Callable[[bytes], bytes]] = None) -> None:
        self.gather = gather
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            f"{PREFIX}_requests", "Requests answered, by route and status", ["route", "status"], registry=r
        )
        self.request_seconds = Histogram(
            f"{PREFIX}_request_seconds",
            "Seconds from a request's arrival to its answer",
            ["route"],
            buckets=SECONDS,
            registry=r,
        )
        self.refusals = Counter(f"{PREFIX}_refusals", "Requests refused, by reason", ["reason"], registry=r)
        for reason in REFUSALS:
            self.refusals.labels(reason)
        self.queue_depth = Gauge(f"{PREFIX}_queue_depth", "Requests waiting for a batch", registry=r)
        self.queue_wait = Histogram(
            f"{PREFIX}_queue_wait_seconds", "Seconds a request waited before its batch ran", buckets=SECONDS, registry=r
        )
        self.batch_texts = Histogram(f"{PREFIX}_batch_texts", "Texts per batch", buckets=TEXTS, registry=r)
        self.batch_tokens = Histogram(f"{PREFIX}_batch_tokens", "Tokens per batch", buckets=TOKENS, registry=r)
        self.batch_seconds = Histogram(f"{PREFIX}_batch_seconds", "Seconds a batch ran", buckets=SECONDS, registry=r)
        self.texts = Counter(f"{PREFIX}_texts", "Texts run through the pipeline", registry=r)
        self.tokens = Counter(f"{PREFIX}_tokens", "Tokens of the texts run through the pipeline", registry=r)
        memory = Gauge(f"{PREFIX}_resident_memory_bytes", "Resident memory of the process (Linux)", registry=r)
        memory.set_function(lambda: (resident_mib() or 0.0) * 2**20)
        self.pipeline = Info(f"{PREFIX}_pipeline", "The pipeline served", registry=r)

    def batch_ran(self, waits: Sequence[float], texts: int, seconds: float) -> None:
        """A batch of ``len(waits)`` requests (each waited ``waits[i]`` seconds) and ``texts`` texts ran."""
        for wait in waits:
            self.queue_wait.observe(wait)
        self.batch_texts.observe(texts)
        self.batch_seconds.observe(seconds)
        self.texts.inc(texts)

    def tokens_ran(self, tokens: int) -> None:
        """A batch's docs held ``tokens`` tokens."""
        self.batch_tokens.observe(tokens)
        self.tokens.inc(tokens)

    def own_exposition(self) -> bytes:
        """This process's metrics alone."""
        return generate_latest(self.registry)

    def exposition(self) -> bytes:
        own = self.own_exposition()
        return own if self.gather is None else self.gather(own)


class _Families:
    """A collector of metric families already made (parsed from other processes' expositions)."""

    def __init__(self, families: List[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def joined_expositions(bodies: Mapping[str, bytes], label: str = "replica") -> bytes:
    """Several processes' expositions (by their name) as one, each sample labelled ``label`` =
    its process: Prometheus then sums them, or tells them apart, as a query asks."""
    families: Dict[str, Metric] = {}
    for name, body in sorted(bodies.items()):
        for family in text_string_to_metric_families(body.decode()):
            joined = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            joined.samples += [sample._replace(labels={**sample.labels, label: name}) for sample in family.samples]
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Families(list(families.values())))
    return generate_latest(registry)
