"""Resuming: finished shards survive a failure, a rerun completes them to the same bytes, and a
run never mixes into output of another model, other settings or other files."""

import json

import pytest

from spacy_elmo.embed import EmbedSettings, OutputError, parquet, run_embed

SETTINGS = EmbedSettings(whitespace=True, shard_size=2)


def files_of(directory):
    """Every file under ``directory`` by relative path, with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def fail_on_shard(monkeypatch, shard_file: str):
    """The disk is full when a given shard's first chunk is written."""
    original = parquet.ShardWriter.write

    def write(self, sentences, outputs):
        if sentences[0].index == int(shard_file) * SETTINGS.shard_size:
            raise OSError(28, "No space left on device")
        original(self, sentences, outputs)

    monkeypatch.setattr(parquet.ShardWriter, "write", write)


@pytest.mark.parametrize("name", ["out", "out.hdf5"])
def test_full_disk_mid_run_keeps_finished_shards_and_the_rerun_gives_the_same_bytes(
    bilm_files, corpus, tmp_path, monkeypatch, name
):
    run_embed(corpus, tmp_path / "whole" / name, SETTINGS, *bilm_files, progress=False)
    with monkeypatch.context() as patch:
        fail_on_shard(patch, "2")
        with pytest.raises(OSError, match="No space left"):
            run_embed(corpus, tmp_path / "resumed" / name, SETTINGS, *bilm_files, progress=False)
    parts = tmp_path / "resumed" / (name + ".parts" if name.endswith(".hdf5") else name)
    manifest = json.loads((parts / "manifest.json").read_text())
    assert [s["shard"] for s in manifest["shards"]] == [0, 1] and not manifest["complete"]
    assert sorted(p.name for p in parts.iterdir()) == ["manifest.json", "shard-000000.parquet", "shard-000001.parquet"]
    summary = run_embed(corpus, tmp_path / "resumed" / name, SETTINGS, *bilm_files, progress=False)
    assert (summary.shards_done, summary.shards_skipped) == (2, 2)
    assert files_of(tmp_path / "resumed") == files_of(tmp_path / "whole")


def test_rerun_of_a_finished_output_does_nothing(bilm_files, corpus, tmp_path):
    for name in ("out", "out.hdf5"):
        run_embed(corpus, tmp_path / name, SETTINGS, *bilm_files, progress=False)
        before = files_of(tmp_path)
        summary = run_embed(corpus, tmp_path / name, SETTINGS, *bilm_files, progress=False)
        assert (summary.shards_done, summary.sentences) == (0, 0)
        assert files_of(tmp_path) == before


@pytest.mark.parametrize("name", ["out", "out.hdf5"])
def test_another_model_or_settings_on_resume_is_an_error(bilm_files, other_bilm_files, corpus, tmp_path, name):
    run_embed(corpus, tmp_path / name, SETTINGS, *bilm_files, progress=False)
    with pytest.raises(OutputError, match="another model .*fingerprint.*same model and options"):
        run_embed(corpus, tmp_path / name, SETTINGS, *other_bilm_files, progress=False)
    with pytest.raises(OutputError, match='another settings .*state: "zero" -> "warm"'):
        run_embed(
            corpus,
            tmp_path / name,
            EmbedSettings(state="warm", whitespace=True, shard_size=2),
            *bilm_files,
            progress=False,
        )
    corpus.write_text("Other text .\n", encoding="utf8")
    with pytest.raises(OutputError, match="another input"):
        run_embed(corpus, tmp_path / name, SETTINGS, *bilm_files, progress=False)


def test_an_output_path_with_other_content_is_refused(bilm_files, corpus, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="holds other files"):
        run_embed(corpus, tmp_path / "taken", SETTINGS, *bilm_files, progress=False)
    (tmp_path / "taken.hdf5").write_text("not hdf5")
    with pytest.raises(OutputError, match="not an output of spacy-elmo embed"):
        run_embed(corpus, tmp_path / "taken.hdf5", SETTINGS, *bilm_files, progress=False)
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine" and (
        tmp_path / "taken.hdf5"
    ).read_text() == "not hdf5"
