"""The work of one shard, the same for every engine: read, run the biLM, write Parquet atomically.

A shard is read in chunks of about :data:`CHUNK_TOKENS` tokens; each chunk runs through the biLM
(length-sorted batches of ``batch_tokens`` padded tokens in the ``zero`` and ``warm`` states;
consecutive rows in ``carry``, as AllenNLP) and is appended to the shard's temporary file. So
memory holds one chunk's layers, whatever the size of the corpus or of a shard. A shard's bytes
depend only on its sentences and the settings: ``carry`` states restart at each shard, so that
any shard can be (re)computed alone, after an interruption or on another Ray worker, to the
same bytes (given the same number of torch threads).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import numpy
import torch

from ..bilm import BiLM
from ..bilm.runtime import BiLMRuntime, BiLMSettings, token_groups
from ..fileio import PathLike, atomic_path
from ..published import pretrained_files
from .manifest import shard_name
from .parquet import ShardWriter
from .reader import Sentence, SentenceSource, ShardSpec
from .settings import EmbedSettings

CHUNK_TOKENS = 16_384  # tokens of one chunk (one Parquet table); a longer sentence is a chunk alone

Progress = Callable[[int, int], None]  # (sentences, tokens) just finished


def load_runtime(
    options_file: Optional[PathLike],
    weight_file: Optional[PathLike],
    settings: EmbedSettings,
    device: torch.device = torch.device("cpu"),
) -> BiLMRuntime:
    """The runtime of a run's ``settings``, its biLM (the given files, or the bundled `en`) on ``device``.

    Moved before anything reads :attr:`.BiLMRuntime.resolved_precision`: ``precision = "auto"`` resolves on
    the biLM's device. Its outputs come back to the host as float32, one copy per batch
    (:meth:`.BiLMRuntime.embed_sentences`), so the writers never see device arrays.
    """
    if (options_file is None) != (weight_file is None):
        raise ValueError("give both --options-file and --weight-file, or neither (for the bundled biLM)")
    if options_file is None or weight_file is None:  # both, by the check above
        options_file, weight_file = pretrained_files("en")
    bilm = BiLM.from_files(options_file, weight_file).to(device)
    settings.check_model(bilm)
    asked = BiLMSettings(state=settings.state, max_batch_tokens=settings.batch_tokens, precision=settings.precision)
    runtime = BiLMRuntime(bilm, asked).eval()
    if device.type == "cpu":  # its low-precision copies made now, their float32 sources moved to disk
        runtime.prepare_inference()
    return runtime


def sentence_source(input_path: PathLike, settings: EmbedSettings) -> SentenceSource:
    """The input read as ``settings`` say: the same sentences in every engine and process."""
    return SentenceSource(input_path, settings.lang, settings.whitespace, settings.gold_tokens)


def chunks(sentences: Iterable[Sentence], budget: int = CHUNK_TOKENS) -> Iterator[List[Sentence]]:
    """Consecutive sentences in groups of at most ``budget`` tokens (boundaries counted), or one."""
    return token_groups(sentences, lambda sentence: len(sentence.tokens) + 2, budget)


def embed_chunk(runtime: BiLMRuntime, sentences: List[List[str]]) -> List[numpy.ndarray]:
    """Layers of each sentence, (n_layers + 1, n_tokens, width) float32, in the given order."""
    if runtime.state_mode != "carry":
        return runtime.embed_sentences(sentences)
    outputs: List[numpy.ndarray] = []
    for group in chunks((Sentence(i, "", s) for i, s in enumerate(sentences)), runtime.max_batch_tokens):
        outputs.extend(runtime.embed_sentences([s.tokens for s in group]))  # one batch, rows carried on
    return outputs


def embed_shard(
    runtime: BiLMRuntime,
    source: SentenceSource,
    spec: ShardSpec,
    settings: EmbedSettings,
    directory: Path,
    progress: Optional[Progress] = None,
) -> Dict[str, Any]:
    """Write shard ``spec`` into ``directory`` atomically; returns its manifest entry.

    The biLM starts the shard with no carried state and an empty token cache: which tokens
    an earlier shard left cached changes how the char CNN batches, and so the last bits.
    """
    runtime.reset_states()
    runtime.token_cache.clear()
    sentences = tokens = 0
    with atomic_path(directory / shard_name(spec.shard)) as tmp:
        writer = ShardWriter(tmp, settings.output_ndim)
        try:
            for chunk in chunks(source.read(spec)):
                with torch.no_grad():
                    layers = embed_chunk(runtime, [s.tokens for s in chunk])
                writer.write(chunk, [settings.select(a) for a in layers])
                chunk_tokens = sum(len(s.tokens) for s in chunk)
                sentences, tokens = sentences + len(chunk), tokens + chunk_tokens
                if progress is not None:
                    progress(len(chunk), chunk_tokens)
        finally:
            writer.close()
    return {"file": shard_name(spec.shard), "first_index": spec.first_index, "sentences": sentences, "tokens": tokens}


@dataclass
class Summary:
    """What a run did: shards computed now and found finished, sentences and tokens computed now."""

    shards_done: int
    shards_skipped: int
    sentences: int
    tokens: int
    seconds: float

    def __str__(self) -> str:
        rate = self.seconds if self.seconds > 0 else float("inf")
        return (
            f"{self.shards_done} shards written, {self.shards_skipped} already done; "
            f"{self.sentences:,} sentences, {self.tokens:,} tokens in {self.seconds:.1f} s "
            f"({self.sentences / rate:,.1f} sentences/s, {self.tokens / rate:,.0f} tokens/s)"
        )
