"""`--engine ray` on a local 2-worker Ray: the local engine's values, every sentence once."""

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


def read(directory):
    table = pq.read_table(sorted(directory.glob("shard-*.parquet")))
    tokens = table["tokens"].to_pylist()
    return table["index"].to_pylist(), tokens, arrays_of(table["layers"], [len(t) for t in tokens], (3, 16))


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
