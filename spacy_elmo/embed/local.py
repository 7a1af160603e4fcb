"""The local engine: this process computes the shards one after another."""

from pathlib import Path
from typing import List, Optional

from ..bilm import BiLM
from .engine import Progress, embed_shard
from .manifest import Manifest
from .reader import SentenceSource, ShardSpec
from .settings import EmbedSettings


def embed_locally(
    bilm: BiLM,
    source: SentenceSource,
    settings: EmbedSettings,
    directory: Path,
    manifest: Manifest,
    todo: List[ShardSpec],
    progress: Optional[Progress] = None,
) -> None:
    """Compute the shards ``todo`` in order, listing each in the manifest once it is on disk."""
    for spec in todo:
        manifest.shards[spec.shard] = embed_shard(bilm, source, spec, settings, directory, progress)
        manifest.write(directory)
