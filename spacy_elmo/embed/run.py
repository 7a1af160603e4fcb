"""``spacy-elmo embed``: plan the shards, check the output, run an engine, assemble, summarise.

What differs between runs is decided once, up front: the output's format (an :class:`Output`:
Parquet shards in a directory, or one HDF5 file assembled from them) and the engine (an
:class:`Embedder`: this process, or Ray workers). :func:`run_embed` then runs the same steps for all.
"""

import dataclasses
import shutil
import time
from pathlib import Path
from typing import List, Literal, Optional, Protocol, Tuple

import torch
from tqdm import tqdm

from ..bilm.runtime import BiLMRuntime
from ..fileio import PathLike, remove_stale_temporaries
from .device import resolve_device, thinc_gpu, worker_device, worker_precision
from .engine import Progress, Summary, embed_shard, load_runtime, sentence_source
from .hdf5 import assemble, finished_manifest, parts_directory
from .manifest import Manifest, open_output, shard_name
from .reader import SentenceSource, ShardSpec
from .settings import EmbedSettings, model_identity

Format = Literal["hdf5", "parquet"]
Engine = Literal["local", "ray"]
HDF5_SUFFIXES = (".hdf5", ".h5")
BiLMFiles = Tuple[Optional[PathLike], Optional[PathLike]]  # (options file, weight file), or neither


class Output(Protocol):
    """Where a run's shards go (``directory``) and what becomes of them once all are written."""

    @property
    def directory(self) -> Path:
        """Where the run writes its shards and their manifest."""

    def finished(self, fresh: Manifest) -> Optional[Manifest]:
        """The manifest of an output already complete for the run ``fresh`` describes, else None."""

    def finish(self, manifest: Manifest) -> None:
        """Make the output of the shards written in ``directory``."""


@dataclasses.dataclass
class ParquetOutput:
    """A directory of Parquet shards and their manifest: the shards are the output."""

    directory: Path

    def finished(self, fresh: Manifest) -> Optional[Manifest]:
        return None  # a complete directory resumes with nothing to do

    def finish(self, manifest: Manifest) -> None:
        pass


@dataclasses.dataclass
class Hdf5Output:
    """One HDF5 file, assembled from Parquet shards written beside it (:func:`hdf5.parts_directory`)."""

    path: Path

    @property
    def directory(self) -> Path:
        return parts_directory(self.path)

    def finished(self, fresh: Manifest) -> Optional[Manifest]:
        """The assembled file's manifest, refused if another run wrote it (:meth:`Manifest.check_resumable`)."""
        done = finished_manifest(self.path)
        if done is not None:
            done.check_resumable(fresh, self.path)
        return done

    def finish(self, manifest: Manifest) -> None:
        assemble(self.directory, manifest, self.path)
        shutil.rmtree(self.directory)


def output_of(path: Path, chosen: Optional[str]) -> Tuple[Format, Output]:
    """The format of ``path`` (``chosen``, else hdf5 for a path ending in .hdf5 / .h5, else parquet)
    and the output that writes it."""
    if chosen not in (None, "hdf5", "parquet"):
        raise ValueError(f"--format must be hdf5 or parquet, got {chosen!r}")
    kind = chosen or ("hdf5" if path.suffix.lower() in HDF5_SUFFIXES else "parquet")
    return kind, Hdf5Output(path) if kind == "hdf5" else ParquetOutput(path)  # type: ignore[return-value]


def check_engine(engine: str, format: Format, gpus_per_worker: float) -> None:
    """Refuse an engine that does not exist, or options it cannot honour, before any work."""
    if engine not in ("local", "ray"):
        raise ValueError(f"--engine must be local or ray, got {engine!r}")
    if engine == "ray" and format != "parquet":
        raise ValueError("--engine ray writes Parquet only: give a directory OUTPUT or --format parquet")
    if engine == "local" and gpus_per_worker:
        raise ValueError("--gpus-per-worker is for --engine ray; the local engine's device is --device")


class Embedder(Protocol):
    """An engine, its runtime loaded: ``runtime`` names the model (and its products) in the manifest."""

    runtime: BiLMRuntime

    def embed(
        self, source: SentenceSource, directory: Path, manifest: Manifest, todo: List[ShardSpec], advance: Progress
    ) -> None:
        """Compute the shards ``todo`` into ``directory``, listing each in ``manifest`` once written."""


@dataclasses.dataclass
class LocalEmbedder:
    """This process computes the shards one after another, with ``threads`` torch threads (None: as set)."""

    runtime: BiLMRuntime
    settings: EmbedSettings
    threads: Optional[int]

    @classmethod
    def start(
        cls, files: BiLMFiles, settings: EmbedSettings, device: str, prefer_gpu: bool, threads: Optional[int]
    ) -> "LocalEmbedder":
        """The biLM of ``files`` on the local device (:func:`device.resolve_device` on this machine)."""
        where = resolve_device(device, torch.cuda.device_count(), thinc_gpu(), prefer_gpu)
        return cls(load_runtime(*files, settings, where), settings, threads)

    def embed(
        self, source: SentenceSource, directory: Path, manifest: Manifest, todo: List[ShardSpec], advance: Progress
    ) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        for spec in todo:  # in order, each listed in the manifest once it is on disk
            manifest.shards[spec.shard] = embed_shard(self.runtime, source, spec, self.settings, directory, advance)
            manifest.write(directory)


@dataclasses.dataclass
class RayEmbedder:
    """Ray workers compute the shards, each with its own biLM, where Ray puts them (``device``).

    ``settings`` are the workers': their precision decided once, here (:func:`device.worker_precision`).
    """

    runtime: BiLMRuntime
    files: BiLMFiles
    input_path: PathLike
    settings: EmbedSettings
    device: str
    workers: int
    address: Optional[str]
    threads: Optional[int]
    gpus_per_worker: float

    @classmethod
    def start(
        cls,
        files: BiLMFiles,
        input_path: PathLike,
        settings: EmbedSettings,
        device: str,
        gpus_per_worker: float,
        workers: int,
        address: Optional[str],
        threads: Optional[int],
    ) -> "RayEmbedder":
        """The driver's runtime, which only names the model; the workers run theirs where Ray puts them."""
        workers_on = worker_device(device, gpus_per_worker)
        runtime = load_runtime(*files, settings)

        def cpu_auto() -> str:  # what the local engine computes with on this CPU: inference's auto for this biLM
            return runtime.resolved_precision_for(training=False).precision

        precision = worker_precision(settings.precision, workers_on, torch.cuda.device_count(), cpu_auto)
        workers_settings = dataclasses.replace(settings, precision=precision)
        runtime.precision = workers_settings.precision  # so that the manifest records the workers' products
        return cls(runtime, files, input_path, workers_settings, workers_on, workers, address, threads, gpus_per_worker)

    def embed(
        self, source: SentenceSource, directory: Path, manifest: Manifest, todo: List[ShardSpec], advance: Progress
    ) -> None:
        from .ray_engine import embed_on_ray

        embed_on_ray(
            *self.files,
            self.input_path,
            self.settings,
            directory,
            manifest,
            todo,
            advance,
            workers=self.workers,
            address=self.address,
            threads=self.threads,
            device=self.device,
            gpus_per_worker=self.gpus_per_worker,
        )


def run_embed(
    input_path: PathLike,
    output: PathLike,
    settings: EmbedSettings,
    options_file: Optional[PathLike] = None,
    weight_file: Optional[PathLike] = None,
    *,
    format: Optional[str] = None,
    engine: Engine = "local",
    workers: int = 2,
    ray_address: Optional[str] = None,
    threads: Optional[int] = None,
    device: str = "auto",
    prefer_gpu: bool = False,
    gpus_per_worker: float = 0.0,
    progress: bool = True,
) -> Summary:
    """Embed every sentence of ``input_path`` into ``output``; resumes a run stopped there.

    ``device``: where the local engine runs the biLM, ``auto``, ``cpu``, ``cuda`` or ``cuda:N``
    (:func:`device.resolve_device`): ``auto`` is thinc's GPU after ``spacy.require_gpu()``, else
    ``cuda:0`` if ``prefer_gpu`` (the command line) and torch sees one, else the CPU. On Ray,
    the workers' device: a GPU each with ``gpus_per_worker`` > 0 (:func:`device.worker_device`).
    The device is not part of the output's identity; the products' precision it resolves to is.

    Raises :class:`OutputError` for an output that holds something else or another run's work,
    ``ValueError`` / ``OSError`` for input that cannot be read or holds no sentence.
    """
    start = time.perf_counter()
    chosen, out = output_of(Path(output), format)
    check_engine(engine, chosen, gpus_per_worker)
    source = sentence_source(input_path, settings)
    files = (options_file, weight_file)
    embedder: Embedder
    if engine == "local":
        embedder = LocalEmbedder.start(files, settings, device, prefer_gpu, threads)
    else:
        embedder = RayEmbedder.start(
            files, input_path, settings, device, gpus_per_worker, workers, ray_address, threads
        )
    specs = planned_shards(source, settings, input_path)
    fresh = Manifest(
        model_identity(embedder.runtime),
        settings.to_dict(),
        source.description(),
        len(specs),
        sum(s.count for s in specs),
    )
    if (done := out.finished(fresh)) is not None:
        return Summary(0, done.total_shards, 0, 0, time.perf_counter() - start)
    manifest = open_output(out.directory, fresh)
    todo = [spec for spec in specs if spec.shard not in manifest.shards]
    for spec in todo:
        remove_stale_temporaries(out.directory / shard_name(spec.shard))
    sentences, tokens = embed_with_progress(embedder, source, out.directory, manifest, todo, progress)
    out.finish(manifest)
    return Summary(len(todo), len(specs) - len(todo), sentences, tokens, time.perf_counter() - start)


def planned_shards(source: SentenceSource, settings: EmbedSettings, input_path: PathLike) -> List[ShardSpec]:
    """The shards of ``source``; none is an error (an empty output and exit 0 would pass for success)."""
    specs = source.plan(settings.shard_size)
    if not specs:
        files = "" if len(source.files) == 1 else f" ({len(source.files)} files)"
        raise ValueError(
            f"{input_path}{files} has no text: there is no sentence to embed. "
            "Give a file with a sentence per line (or .jsonl / .spacy files)"
        )
    return specs


def embed_with_progress(
    embedder: Embedder, source: SentenceSource, directory: Path, manifest: Manifest, todo: List[ShardSpec], shown: bool
) -> Tuple[int, int]:
    """Run ``embedder`` on the shards ``todo`` under a progress bar (``shown``); the sentences and tokens embedded."""
    with tqdm(
        total=sum(spec.count for spec in todo), unit="sent", disable=not shown, smoothing=0.1, dynamic_ncols=True
    ) as bar:
        counts = [0, 0]

        def advance(sentences: int, tokens: int) -> None:
            counts[0] += sentences
            counts[1] += tokens
            bar.update(sentences)
            bar.set_postfix_str(f"{counts[1] / max(bar.format_dict['elapsed'], 1e-9):,.0f} tokens/s", refresh=False)

        embedder.embed(source, directory, manifest, todo, advance)
    return counts[0], counts[1]
