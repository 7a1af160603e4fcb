"""What ``spacy-elmo serve`` takes: request limits, batching, the queue, the address, Ray Serve's replicas.

Plain values, so the command line's help shows them without FastAPI or uvicorn installed; the
command's flags and ``SPACY_ELMO_SERVE_*`` variables set them (docs/serving.md lists them).
"""

from dataclasses import asdict, dataclass

from ..batching import BatchPolicy

ENV_PREFIX = "SPACY_ELMO_SERVE_"

# A JSON string may spell one character in up to 12 bytes (a surrogate pair, "\ud83d\ude00"):
# a body over this many bytes per allowed character, plus the list's own syntax, is refused unread.
BODY_BYTES_PER_CHAR = 12
BODY_BYTES_PER_TEXT = 8
BODY_BYTES_OVERHEAD = 4096


# Seconds a request may wait in the queue before it is answered 503 and not run (--request-timeout).
DEFAULT_REQUEST_TIMEOUT = 30.0
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class RequestLimits:
    """What one ``POST /pipe`` may hold; more is a 413 that says which limit and its flag."""

    max_texts: int = 128
    max_text_chars: int = 100_000
    max_request_chars: int = 1_000_000

    @property
    def max_body_bytes(self) -> int:
        """The largest body read: the request's characters at JSON's widest spelling, and its syntax."""
        return BODY_BYTES_PER_CHAR * self.max_request_chars + BODY_BYTES_PER_TEXT * self.max_texts + BODY_BYTES_OVERHEAD


@dataclass(frozen=True)
class BatchLimits:
    """How queued requests form the worker's batches, and how many may wait.

    A batch takes whole requests, in arrival order, while it holds at most ``max_batch_texts``
    texts and ``max_batch_chars`` characters, its texts counted as long as its longest
    (characters stand for tokens, which are not known before the tokenizer runs); a request
    larger than either runs alone. At most ``queue_size`` requests wait beside the running batch;
    one more is refused with 503 and ``Retry-After``.
    """

    max_batch_texts: int = 64
    max_batch_chars: int = 100_000
    queue_size: int = 32

    def policy(self) -> BatchPolicy:
        """The worker's :class:`~spacy_elmo.batching.BatchPolicy`."""
        return BatchPolicy(
            max_batch_size=self.max_batch_texts, max_batch_tokens=self.max_batch_chars, max_queued=self.queue_size
        )


# The response header that names the Ray Serve replica that answered (spacy_elmo.serve.ray_deployment).
REPLICA_HEADER = "X-Replica"


@dataclass(frozen=True)
class RaySettings:
    """Whether and how ``spacy-elmo serve`` runs on Ray Serve (the ``ray-serve`` extra).

    ``replicas`` 0 serves from this process alone; N > 0 deploys N replicas, each a process with
    its own pipeline and worker, asking Ray for ``threads`` CPUs and running torch on as many
    threads. ``address`` is the Ray cluster to join (``ray://...`` or ``HOST:PORT``); empty, Ray's
    own ``RAY_ADDRESS``, else a Ray started on this machine for the service.
    """

    replicas: int = 0
    threads: int = 1
    address: str = ""

    def check(self) -> None:
        """A ValueError naming the flag that cannot work."""
        if self.replicas < 0:
            raise ValueError(f"--ray-replicas must be 0 (no Ray) or more, got {self.replicas}")
        if self.threads < 1:
            raise ValueError(f"--ray-threads must be at least 1 (torch threads per replica), got {self.threads}")

    def check_fits(self, available: float) -> None:
        """Refuse replicas that the Ray started on this machine cannot place: they would wait for
        CPUs forever (a cluster may add nodes on demand, so only there). ``available``: its CPUs."""
        needed = self.replicas * self.threads
        if needed > available:
            raise ValueError(
                f"--ray-replicas {self.replicas} x --ray-threads {self.threads} needs {needed} CPUs, and "
                f"the Ray started on this machine has {available:g}: lower --ray-replicas to "
                f"{max(1, int(available // self.threads))}, or --ray-threads"
            )


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``spacy-elmo serve`` is given beside its pipeline. ``gpu_id`` -1 serves from
    the CPU, N from GPU N (spaCy's ``--gpu-id``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    requests: RequestLimits = RequestLimits()
    batches: BatchLimits = BatchLimits()
    shutdown_timeout: float = 30.0
    log_level: str = "info"
    gpu_id: int = -1
    ray: RaySettings = RaySettings()
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    log_format: str = "text"
    exit_on_failure: bool = True

    def check(self) -> None:
        """A ValueError naming the setting that cannot work, before anything loads."""
        for name, value in {**asdict(self.requests), **asdict(self.batches)}.items():
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be 0 to 65535, got {self.port}")
        if self.shutdown_timeout <= 0:
            raise ValueError(f"--shutdown-timeout must be positive (seconds), got {self.shutdown_timeout}")
        if not self.request_timeout > 0:
            raise ValueError(f"--request-timeout must be positive (seconds), got {self.request_timeout}")
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}")
        if self.gpu_id < -1:
            raise ValueError(f"--gpu-id must be -1 (the CPU) or a GPU's index, got {self.gpu_id}")
        if self.gpu_id >= 0 and self.ray.replicas:
            raise ValueError(
                "--gpu-id puts this process's pipeline on a GPU, and --ray-replicas serves from replicas "
                "that Ray places on CPUs: leave one of them out"
            )
        self.ray.check()
