"""``spacy-elmo embed``: plan the shards, check the output, run an engine, assemble, summarise."""

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Literal, Optional

import torch
from tqdm import tqdm

from ..fileio import PathLike, remove_stale_temporaries
from .device import local_device, worker_device, worker_precision
from .engine import Summary, load_bilm, sentence_source
from .hdf5 import assemble, finished_manifest, parts_directory
from .local import embed_locally
from .manifest import Manifest, open_output, shard_name
from .settings import EmbedSettings, model_identity

Format = Literal["hdf5", "parquet"]
Engine = Literal["local", "ray"]
HDF5_SUFFIXES = (".hdf5", ".h5")


def output_format(output: Path, chosen: Optional[str]) -> Format:
    """``chosen``, else hdf5 for a path ending in .hdf5 / .h5, else parquet."""
    if chosen is None:
        return "hdf5" if output.suffix.lower() in HDF5_SUFFIXES else "parquet"
    if chosen not in ("hdf5", "parquet"):
        raise ValueError(f"--format must be hdf5 or parquet, got {chosen!r}")
    return chosen  # type: ignore[return-value]


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
    output = Path(output)
    chosen = output_format(output, format)
    if engine not in ("local", "ray"):
        raise ValueError(f"--engine must be local or ray, got {engine!r}")
    if engine == "ray" and chosen != "parquet":
        raise ValueError("--engine ray writes Parquet only: give a directory OUTPUT or --format parquet")
    if engine == "local" and gpus_per_worker:
        raise ValueError("--gpus-per-worker is for --engine ray; the local engine's device is --device")
    source = sentence_source(input_path, settings)
    if engine == "local":
        bilm = load_bilm(options_file, weight_file, settings, local_device(device, prefer_gpu))
    else:  # the driver's biLM only names the model; the workers run theirs where Ray puts them
        workers_on = worker_device(device, gpus_per_worker)
        bilm = load_bilm(options_file, weight_file, settings)

        def cpu_auto() -> str:  # what the local engine computes with on this CPU: inference's auto for this biLM
            return bilm.resolved_precision_for(training=False).precision

        workers_settings = dataclasses.replace(
            settings, precision=worker_precision(settings.precision, workers_on, torch.cuda.device_count(), cpu_auto)
        )
        bilm.precision = workers_settings.precision  # so that the manifest records the workers' products
    specs = source.plan(settings.shard_size)
    if not specs:  # an empty output and exit 0 would pass for success
        files = "" if len(source.files) == 1 else f" ({len(source.files)} files)"
        raise ValueError(
            f"{input_path}{files} has no text: there is no sentence to embed. "
            "Give a file with a sentence per line (or .jsonl / .spacy files)"
        )
    fresh = Manifest(
        model_identity(bilm), settings.to_dict(), source.description(), len(specs), sum(s.count for s in specs)
    )
    if chosen == "hdf5":
        done = finished_manifest(output)
        if done is not None:
            done.check_resumable(fresh, output)
            return Summary(0, done.total_shards, 0, 0, time.perf_counter() - start)
    directory = parts_directory(output) if chosen == "hdf5" else output
    manifest = open_output(directory, fresh)
    todo = [spec for spec in specs if spec.shard not in manifest.shards]
    for spec in todo:
        remove_stale_temporaries(directory / shard_name(spec.shard))
    with tqdm(
        total=sum(spec.count for spec in todo), unit="sent", disable=not progress, smoothing=0.1, dynamic_ncols=True
    ) as bar:
        counts = [0, 0]

        def advance(sentences: int, tokens: int) -> None:
            counts[0] += sentences
            counts[1] += tokens
            bar.update(sentences)
            bar.set_postfix_str(f"{counts[1] / max(bar.format_dict['elapsed'], 1e-9):,.0f} tokens/s", refresh=False)

        if engine == "local":
            if threads is not None:
                torch.set_num_threads(threads)
            embed_locally(bilm, source, settings, directory, manifest, todo, advance)
        else:
            from .ray_engine import embed_on_ray

            embed_on_ray(
                options_file,
                weight_file,
                input_path,
                workers_settings,
                directory,
                manifest,
                todo,
                advance,
                workers=workers,
                address=ray_address,
                threads=threads,
                device=workers_on,
                gpus_per_worker=gpus_per_worker,
            )
    if chosen == "hdf5":
        assemble(directory, manifest, output)
        shutil.rmtree(directory)
    return Summary(len(todo), len(specs) - len(todo), counts[0], counts[1], time.perf_counter() - start)
