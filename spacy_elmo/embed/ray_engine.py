"""The Ray engine: shards computed by a pool of biLM actors under Ray Data.

The driver plans the shards (:meth:`SentenceSource.plan`) and hands Ray Data a dataset with
one row per unfinished shard; ``map_batches`` runs them on ``workers`` actors, each of which
loads the biLM once and then reads, embeds and writes whole shards exactly as the local engine
(:func:`engine.embed_shard`). Why shards and not ``ray.data.read_text``: Ray's text reader does
not number lines, and the output needs each sentence's input index and whole shards to resume
by; reading by shard also spreads the reading over the workers. The input and OUTPUT must be
on storage every node sees.

Faults: a worker that dies is restarted by Ray and its shard retried. A shard's file is
replaced atomically and has the same content whoever writes it, and the driver lists each shard
in the manifest once, when its result arrives: the output is complete, with no index twice.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy
import torch

from ..fileio import PathLike, remove_stale_temporaries
from .engine import Progress, embed_shard, load_bilm, sentence_source
from .manifest import Manifest, shard_name
from .reader import ShardSpec
from .settings import EmbedSettings

SPEC_FIELDS = ("shard", "first_index", "count", "file_index", "offset")
ENTRY_FIELDS = ("file", "first_index", "sentences", "tokens")


class ShardEmbedder:
    """A Ray Data actor: one biLM, loaded once; each call embeds a batch of shards."""

    def __init__(
        self,
        options_file: Optional[str],
        weight_file: Optional[str],
        input_path: str,
        settings: Dict[str, Any],
        directory: str,
        threads: int,
    ) -> None:
        torch.set_num_threads(threads)
        self.settings = EmbedSettings.from_dict(settings)
        self.bilm = load_bilm(options_file, weight_file, self.settings)
        self.source = sentence_source(input_path, self.settings)
        self.directory = Path(directory)

    def __call__(self, batch: Dict[str, numpy.ndarray]) -> Dict[str, numpy.ndarray]:
        entries: List[Dict[str, Any]] = []
        for values in zip(*(batch[name] for name in SPEC_FIELDS)):
            spec = ShardSpec(*(int(v) for v in values))
            entries.append({"shard": spec.shard, **embed_shard(self.bilm, self.source, spec, self.settings, self.directory)})
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
) -> None:
    """Compute the shards ``todo`` on Ray; the manifest lists each shard as its result arrives.

    Joins the cluster at ``address``, else the Ray this process already runs, else starts a
    local one of ``workers`` CPUs (stopped at the end). ``threads``: torch threads per actor (1).
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
        ray.data.DataContext.get_current().enable_progress_bars = False  # ours counts sentences
        shards = ray.data.from_items([spec.to_dict() for spec in todo], override_num_blocks=len(todo))
        results = shards.map_batches(
            ShardEmbedder,
            fn_constructor_kwargs={
                "options_file": None if options_file is None else str(options_file),
                "weight_file": None if weight_file is None else str(weight_file),
                "input_path": str(Path(input_path).resolve()),
                "settings": settings.to_dict(),
                "directory": str(directory.resolve()),
                "threads": threads or 1,
            },
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=1,
        )  # Ray Data restarts dead actors and retries their tasks by default (max_restarts=-1)
        for row in results.iter_rows():
            shard = int(row["shard"])
            manifest.shards[shard] = {name: _plain(row[name]) for name in ENTRY_FIELDS}
            manifest.write(directory)
            if progress is not None:
                progress(int(row["sentences"]), int(row["tokens"]))
    finally:
        if started:
            ray.shutdown()
        for spec in todo:  # temporaries of attempts that died mid-shard
            remove_stale_temporaries(directory / shard_name(spec.shard))


def _plain(value: Any) -> Any:
    """A numpy scalar from Ray as the JSON-able Python value the local engine records."""
    return value.item() if isinstance(value, numpy.generic) else value
