"""The Ray engine: shards computed by a pool of biLM actors under Ray Data.

The driver plans the shards (:meth:`SentenceSource.plan`) and hands Ray Data a dataset with
one row per unfinished shard; ``map_batches`` runs them on ``workers`` actors, each of which
loads the biLM once and then reads, embeds and writes whole shards exactly as the local engine
(:func:`engine.embed_shard`). Why shards and not ``ray.data.read_text``: Ray's text reader does
not number lines, and the output needs each sentence's input index and whole shards to resume
by; reading by shard also spreads the reading over the workers. The input and OUTPUT must be
on storage every node sees.

GPUs: with ``gpus_per_worker`` > 0 each actor asks Ray for that share of a GPU (``num_gpus``)
and runs its biLM there; Ray makes that GPU the actor's only visible one, ``cuda:0`` inside it.
The precision of the products is decided once, by the driver (:func:`device.worker_precision`),
and handed to every actor as an explicit precision (``fp32``, ``bf16``, or on CPU workers ``int8``
where this machine's ``auto`` takes it): the manifest records one precision, so every actor must
compute in it whatever its hardware.

Faults: a worker that dies is restarted by Ray and its shard retried. A shard's file is
replaced atomically and has the same content whoever writes it, and the driver lists each shard
in the manifest once, when its result arrives: the output is complete, with no index twice.
"""

from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy
import torch

from ..fileio import PathLike, remove_stale_temporaries
from .device import resolve_device
from .engine import Progress, embed_shard, load_runtime, sentence_source
from .manifest import Manifest, shard_name
from .reader import ShardSpec
from .settings import EmbedSettings

SPEC_FIELDS = ("shard", "first_index", "count", "file_index", "offset")
ENTRY_FIELDS = ("file", "first_index", "sentences", "tokens")


class ShardEmbedder:
    """A Ray Data actor: one biLM, loaded once on ``device`` (``"cuda"``: the GPU Ray assigned it,
    or ``"cpu"``); each call embeds a batch of shards."""

    def __init__(
        self,
        options_file: Optional[str],
        weight_file: Optional[str],
        input_path: str,
        settings: Dict[str, Any],
        directory: str,
        threads: int,
        device: str,
    ) -> None:
        torch.set_num_threads(threads)
        self.settings = EmbedSettings.from_dict(settings)
        where = resolve_device(device, torch.cuda.device_count(), None, prefer_gpu=False)
        self.runtime = load_runtime(options_file, weight_file, self.settings, where)
        self.source = sentence_source(input_path, self.settings)
        self.directory = Path(directory)

    def __call__(self, batch: Dict[str, numpy.ndarray]) -> Dict[str, numpy.ndarray]:
        specs = [ShardSpec(*(int(v) for v in values)) for values in zip(*(batch[name] for name in SPEC_FIELDS))]
        entries = [
            {"shard": s.shard, **embed_shard(self.runtime, self.source, s, self.settings, self.directory)}
            for s in specs
        ]
        return {name: numpy.asarray([entry[name] for entry in entries]) for name in ("shard", *ENTRY_FIELDS)}


def embed_on_ray(
    options_file: Optional[PathLike],
    weight_file: Optional[PathLike],
    input_path: PathLike,
    settings: EmbedSettings,
    directory: Path,
    manifest: Manifest,
    todo: List[ShardSpec],
    progress: Optional[Progress] = None,
    *,
    workers: int = 2,
    address: Optional[str] = None,
    threads: Optional[int] = None,
    device: str = "cpu",
    gpus_per_worker: float = 0.0,
) -> None:
    """Compute the shards ``todo`` on Ray; the manifest lists each shard as its result arrives.

    Joins the cluster at ``address``, else the Ray this process already runs, else starts a
    local one of ``workers`` CPUs and this machine's GPUs (stopped at the end). ``threads``:
    torch threads per actor (1). ``device``: ``"cpu"``, or ``"cuda"`` with ``gpus_per_worker``
    > 0 (see :func:`device.worker_device`). ``settings.precision`` must be explicit, not ``auto``
    (:func:`device.worker_precision`), so that every actor computes the same products.
    """
    try:
        import ray
    except ImportError as err:
        raise ImportError("--engine ray needs Ray Data: pip install 'spacy-elmo[ray]'") from err
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if not todo:
        return
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False, log_to_driver=False)
    try:
        if started and not address:
            check_local_gpus(workers, gpus_per_worker, ray.cluster_resources().get("GPU", 0.0))
        ray.data.DataContext.get_current().enable_progress_bars = False  # ours counts sentences
        shards = ray.data.from_items([asdict(spec) for spec in todo], override_num_blocks=len(todo))
        results = shards.map_batches(
            ShardEmbedder,
            fn_constructor_kwargs={
                "options_file": None if options_file is None else str(options_file),
                "weight_file": None if weight_file is None else str(weight_file),
                "input_path": str(Path(input_path).resolve()),
                "settings": settings.to_dict(),
                "directory": str(directory.resolve()),
                "threads": threads or 1,
                "device": device,
            },
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=1,
            num_gpus=gpus_per_worker,
        )  # Ray Data restarts dead actors and retries their tasks by default (max_restarts=-1)
        for row in results.iter_rows():
            manifest.shards[int(row["shard"])] = {name: _plain(row[name]) for name in ENTRY_FIELDS}
            manifest.write(directory)
            if progress is not None:
                progress(int(row["sentences"]), int(row["tokens"]))
    finally:
        if started:
            ray.shutdown()
        for spec in todo:  # temporaries of attempts that died mid-shard
            remove_stale_temporaries(directory / shard_name(spec.shard))


def check_local_gpus(workers: int, gpus_per_worker: float, available: float) -> None:
    """Refuse a pool the local Ray cannot place: its missing actors would wait for GPUs forever.

    Only for a Ray this run started on this machine; a cluster may add GPU nodes on demand.
    """
    needed = workers * gpus_per_worker
    if needed > available:
        fix = (
            "drop --gpus-per-worker to run on CPUs"
            if available == 0
            else f"lower --workers to {int(available // gpus_per_worker)}, or share the GPUs: --gpus-per-worker "
            f"{available / workers:g}"
        )
        raise ValueError(
            f"--workers {workers} x --gpus-per-worker {gpus_per_worker:g} needs {needed:g} GPUs, and the Ray started "
            f"on this machine has {available:g}: {fix}"
        )


def _plain(value: Any) -> Any:
    """A numpy scalar from Ray as the JSON-able Python value the local engine records."""
    return value.item() if isinstance(value, numpy.generic) else value
