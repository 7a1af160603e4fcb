"""``spacy-elmo embed``: plan the shards, check the output, run an engine, assemble, summarise."""

import shutil
import time
from pathlib import Path
from typing import Literal, Optional

from tqdm import tqdm

from ..fileio import PathLike, remove_stale_temporaries
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
    progress: bool = True,
) -> Summary:
    """Embed every sentence of ``input_path`` into ``output``; resumes a run stopped there.

    Raises :class:`OutputError` for an output that holds something else or another run's work,
    ``ValueError`` / ``OSError`` for input that cannot be read.
    """
    start = time.perf_counter()
    output = Path(output)
    chosen = output_format(output, format)
    if engine not in ("local", "ray"):
        raise ValueError(f"--engine must be local or ray, got {engine!r}")
    if engine == "ray" and chosen != "parquet":
        raise ValueError("--engine ray writes Parquet only: give a directory OUTPUT or --format parquet")
    source = sentence_source(input_path, settings)
    bilm = load_bilm(options_file, weight_file, settings)
    specs = source.plan(settings.shard_size)
    fresh = Manifest(model_identity(bilm), settings.to_dict(), source.description(), len(specs), sum(s.count for s in specs))
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
                import torch

                torch.set_num_threads(threads)
            embed_locally(bilm, source, settings, directory, manifest, todo, advance)
        else:
            from .ray_engine import embed_on_ray

            embed_on_ray(
                options_file, weight_file, input_path, settings, directory, manifest, todo, advance,
                workers=workers, address=ray_address, threads=threads,
            )
    if chosen == "hdf5":
        assemble(directory, manifest, output)
        shutil.rmtree(directory)
    return Summary(len(todo), len(specs) - len(todo), counts[0], counts[1], time.perf_counter() - start)

