"""How fast a published biLM loads, against h5py reading its weight file.

Random weights at a published size (``--size original``: ``ElmoOptions(**ORIGINAL_SIZES)``, a
374 MB weight file) are written to a temporary directory and served on 127.0.0.1 under a registry
name given through ``SPACY_ELMO_MODELS``, with a fresh ``SPACY_ELMO_CACHE``: nothing leaves the
machine. Printed, each in seconds, after the harness's machine line:

- the HTTP transfer of the weight file alone (read and discarded), for scale;
- the cold ``BiLM.from_pretrained(NAME)``: download, checks, record and load;
- then, in interleaved rounds on the cached files after one untimed run each (min, median and max of
  each): h5py reading every dataset of the cached weight file into a new array, each dropped at once
  (its memory reused by the next) or all kept (374 MB of new memory, as a loaded model holds); the
  warm ``BiLM.from_pretrained(NAME)``; ``BiLM.from_files`` of the cached files, which also checks
  every value for NaN (how a saved pipeline's biLM loads); and what a warm load cost before the
  cache trusted size and time and before loads skipped the random initial values (sha256 of both
  files, then a biLM made with its random values and the file read over them);
- the ratio of the warm load to each h5py read (the target: at most 1.5).

``--pipeline`` then saves ``spacy.blank("en")`` with the elmo component of the cached files
(``precision = "fp32"``, ``nlp.initialize()``, ``nlp.to_disk``) and times ``spacy.load`` of it in
interleaved rounds against h5py reading the weight file saved in it (dropped, kept), and
``spacy.load`` of the blank pipeline alone, for scale; the ratios are raw, nothing subtracted.

Every load's weights are compared with the files'. The page cache holds the file in every warm
round (as it does for a process that loads a model it loaded before).

    python benchmarks/load_speed.py [--size original] [--threads 1] [--rounds 7] [--pipeline]

Figures measured with it, before and after the loading changes they decided, are in
project/docs/lab-notebook.md ("Loading a published biLM").
"""

import contextlib
import functools
import hashlib
import json
import os
import tempfile
import threading
import time
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import h5py
import spacy
import torch
import typer

from harness import Timing, interleaved, machine, timed
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.formats.files import read_weights
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.layers import get_bilm

SIZES = {"original": ElmoOptions(**ORIGINAL_SIZES), "small": ElmoOptions()}
NAME = "load-speed"
H5PY = "h5py, every dataset"
H5PY_KEPT = "h5py, every dataset, arrays kept"
WARM = "BiLM.from_pretrained, warm"
SPACY_LOAD = "spacy.load of the saved pipeline"

app = typer.Typer(add_completion=False)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def served(directory: Path) -> Iterator[str]:
    """``directory`` over HTTP on 127.0.0.1; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def h5py_read_all(weight_file: Path, keep: bool = False) -> List[object]:
    """Every dataset of the file into a new array, as h5py alone reads it; ``keep``: all kept."""
    kept: List[object] = []

    def read(name: str, item: object) -> None:  # visititems stops at the first value returned
        if isinstance(item, h5py.Dataset):
            array = item[...]
            if keep:
                kept.append(array)

    with h5py.File(weight_file, "r") as f:
        f.visititems(read)
    return kept


def previous_warm_load(options_file: Path, weight_file: Path) -> BiLM:
    """What a warm load did before: hash both files against the record, then make a biLM (drawing
    its random initial values) and read the file over them."""
    for path in (options_file, weight_file):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    model = BiLM(ElmoOptions.from_file(options_file))
    read_weights(model, weight_file)
    return model


def saved_pipelines(root: Path, options_file: Path, weight_file: Path) -> Tuple[Path, Path]:
    """``spacy.blank("en")`` with the elmo component of these files (fp32), saved with ``nlp.to_disk``;
    and the blank pipeline alone, saved, for scale."""
    nlp = spacy.blank("en")
    model = {"options_file": str(options_file), "weight_file": str(weight_file), "precision": "fp32"}
    nlp.add_pipe("elmo", config={"model": model})
    nlp.initialize()
    nlp.to_disk(root / "pipeline")
    spacy.blank("en").to_disk(root / "blank")
    return root / "pipeline", root / "blank"


def time_pipeline(root: Path, options_file: Path, weight_file: Path, source: BiLM, rounds: int) -> Dict[str, Timing]:
    """``spacy.load`` of a saved pipeline holding the biLM, in interleaved rounds with h5py reading
    the weight file saved in it and with ``spacy.load`` of the blank pipeline alone."""
    pipeline_dir, blank_dir = saved_pipelines(root, options_file, weight_file)
    loaded = get_bilm(spacy.load(pipeline_dir).get_pipe("elmo").model)
    assert same_weights(loaded, source), "the saved pipeline's biLM differs from the served one"
    del loaded
    saved_weights = pipeline_dir / "elmo" / "bilm" / "weights.hdf5"
    runs: Dict[str, Callable[[], object]] = {
        H5PY: lambda: h5py_read_all(saved_weights),
        H5PY_KEPT: lambda: h5py_read_all(saved_weights, keep=True),
        SPACY_LOAD: lambda: spacy.load(pipeline_dir),
        "spacy.load of the blank pipeline alone (no elmo), for scale": lambda: spacy.load(blank_dir),
    }
    return interleaved(runs, rounds)


def report(times: Dict[str, Timing], load: str, baselines: Tuple[str, ...]) -> None:
    """The table of ``times``, then ``load``'s ratio to each baseline."""
    print(f"| {len(times[load].seconds)} interleaved rounds | min s | median s | max s |\n|---|---|---|---|")
    for label, timing in times.items():
        print(f"| {label} | {timing.fastest:.3f} | {timing.median:.3f} | {timing.slowest:.3f} |")
    for label in baselines:
        print(
            f"{load} / {label}: {times[load].median / times[label].median:.2f}x (medians), "
            f"{times[load].fastest / times[label].fastest:.2f}x (minima); target: at most 1.5x"
        )


def same_weights(a: BiLM, b: BiLM) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@app.command()
def main(
    size: str = typer.Option("original", help=f"Model size: {', '.join(SIZES)}"),
    threads: int = typer.Option(1, help="Torch threads"),
    rounds: int = typer.Option(7, help="Interleaved rounds of the warm loads"),
    pipeline: bool = typer.Option(
        False, "--pipeline", help="Also time spacy.load of a saved pipeline holding the biLM"
    ),
) -> None:
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        served_dir = root / "served"
        served_dir.mkdir()
        torch.manual_seed(0)
        source = BiLM(SIZES[size])
        source.to_files(served_dir / "options.json", served_dir / "weights.hdf5")
        size_bytes = (served_dir / "weights.hdf5").stat().st_size
        print(f"{machine()}; h5py {h5py.__version__}")
        print(f"size {size}: weights.hdf5 of {size_bytes / 1e6:.1f} MB, random values, served on 127.0.0.1")
        with served(served_dir) as url:
            registry = root / "models.json"
            registry.write_text(
                json.dumps(
                    {
                        NAME: {
                            "options_url": f"{url}/options.json",
                            "weights_url": f"{url}/weights.hdf5",
                            "weights_bytes": size_bytes,
                        }
                    }
                )
            )
            os.environ.update(SPACY_ELMO_MODELS=str(registry), SPACY_ELMO_CACHE=str(root / "cache"))
            os.environ.pop("SPACY_ELMO_OFFLINE", None)

            def transfer() -> None:
                with urllib.request.urlopen(f"{url}/weights.hdf5") as response:
                    while response.read(1 << 20):
                        pass

            transfer_s = timed(transfer)
            start = time.perf_counter()
            cold = BiLM.from_pretrained(NAME)
            cold_s = time.perf_counter() - start
            assert same_weights(cold, source), "the downloaded biLM differs from the served one"
            del cold
        # The server is gone: warm loads need none.
        options_file, weight_file = root / "cache" / NAME / "options.json", root / "cache" / NAME / "weights.hdf5"
        warm = BiLM.from_pretrained(NAME)
        assert same_weights(warm, source), "the cached biLM differs from the served one"
        del warm
        runs: Dict[str, Callable[[], object]] = {
            H5PY: lambda: h5py_read_all(weight_file),
            H5PY_KEPT: lambda: h5py_read_all(weight_file, keep=True),
            WARM: lambda: BiLM.from_pretrained(NAME),
            "BiLM.from_files (values checked, as for a saved pipeline)": lambda: BiLM.from_files(
                options_file, weight_file
            ),
            "before: sha256 + a biLM drawn, then read": lambda: previous_warm_load(options_file, weight_file),
        }
        times = interleaved(runs, rounds)
        pipeline_times: Optional[Dict[str, Timing]] = None
        if pipeline:
            pipeline_times = time_pipeline(root, options_file, weight_file, source, rounds)
        del source
    print(f"HTTP transfer of the weights alone: {transfer_s:.3f} s")
    print(f"cold BiLM.from_pretrained (download, checks, load): {cold_s:.3f} s")
    report(times, WARM, (H5PY, H5PY_KEPT))
    if pipeline_times is not None:
        print("\nA saved pipeline, spacy.blank('en') + elmo (fp32); h5py reads its elmo/bilm/weights.hdf5:")
        report(pipeline_times, SPACY_LOAD, (H5PY, H5PY_KEPT))


if __name__ == "__main__":
    app()
