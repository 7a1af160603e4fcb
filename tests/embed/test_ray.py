"""`--engine ray` on a local 2-worker Ray: the local engine's values, every sentence once."""

import sys

import pyarrow.parquet as pq
import pytest

from spacy_elmo.embed import EmbedSettings, run_embed
from spacy_elmo.embed.parquet import arrays_of

ray = pytest.importorskip("ray")

SETTINGS = EmbedSettings(whitespace=True, shard_size=2)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow  # starts a local Ray
def test_more_gpu_workers_than_the_local_ray_has_gpus_are_refused_not_left_waiting(bilm_files, corpus, tmp_path):
    """The Ray a run starts here has this machine's GPUs; actors asking for more would wait forever."""
    if ray.is_initialized():
        pytest.skip("needs a Ray that the run starts itself")
    settings = EmbedSettings(whitespace=True, shard_size=2, precision="fp32")
    with pytest.raises(ValueError, match="--workers 64 x --gpus-per-worker 1 needs 64 GPUs"):
        run_embed(
            corpus,
            tmp_path / "ray",
            settings,
            *bilm_files,
            engine="ray",
            workers=64,
            gpus_per_worker=1.0,
            progress=False,
        )
    assert not ray.is_initialized()


def read(directory):
    table = pq.read_table(sorted(directory.glob("shard-*.parquet")))
    tokens = table["tokens"].to_pylist()
    return table["index"].to_pylist(), tokens, arrays_of(table["layers"], [len(t) for t in tokens], (3, 16))


@pytest.mark.slow  # embeds on the workers of a local Ray cluster
def test_ray_equals_the_local_engine_and_writes_every_sentence_once(bilm_files, corpus, tmp_path, local_ray):
    run_embed(corpus, tmp_path / "local", SETTINGS, *bilm_files, progress=False)
    summary = run_embed(corpus, tmp_path / "ray", SETTINGS, *bilm_files, engine="ray", workers=2, progress=False)
    assert summary.shards_done == 4
    local, on_ray = read(tmp_path / "local"), read(tmp_path / "ray")
    assert on_ray[0] == list(range(len(local[0])))
    assert on_ray[1] == local[1]
    for a, b in zip(on_ray[2], local[2]):
        assert a.shape == b.shape and abs(a - b).max(initial=0.0) <= 1e-5
    assert (tmp_path / "ray" / "manifest.json").read_bytes() == (tmp_path / "local" / "manifest.json").read_bytes()


def actor_processes(name: str):
    """Process ids whose title (Ray names its actor processes ray::<class>) mentions ``name``."""
    from pathlib import Path

    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and name in (proc / "cmdline").read_bytes().decode("utf8", "replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="finds the actors through /proc")
def test_a_killed_worker_is_replaced_and_the_output_has_every_index_once(bilm_files, tmp_path, local_ray):
    """SIGKILL one biLM actor mid-run: Ray restarts it and retries its shard."""
    import json
    import os
    import signal
    import threading
    import time

    corpus = tmp_path / "in.txt"
    corpus.write_text("".join(f"sentence number {i} of the corpus .\n" for i in range(60)), encoding="utf8")
    output = tmp_path / "ray"
    killed = []
    finished = threading.Event()

    def kill_one_actor_mid_run() -> None:
        while not finished.is_set() and not killed:
            manifest = output / "manifest.json"
            done = len(json.loads(manifest.read_text())["shards"]) if manifest.is_file() else 0
            actors = actor_processes("ShardEmbedder")
            if done >= 3 and actors:
                os.kill(actors[0], signal.SIGKILL)
                killed.append(done)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_actor_mid_run)
    killer.start()
    settings = EmbedSettings(whitespace=True, shard_size=1)
    try:
        run_embed(corpus, output, settings, *bilm_files, engine="ray", workers=2, progress=False)
    finally:
        finished.set()
        killer.join()
    assert killed and killed[0] < 60, "the run ended before a worker could be killed"
    index, tokens, _ = read(output)
    assert index == list(range(60))
    assert tokens[7] == ["sentence", "number", "7", "of", "the", "corpus", "."]
    assert sorted(p.name for p in output.iterdir() if p.name.startswith(".")) == []
