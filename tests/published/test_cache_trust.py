"""A cached biLM loads at file speed: hashed once, then trusted while its size and time are those recorded.

The hash function and the weight reader are wrapped to count what each load reads; the local
server of conftest.py serves the tiny biLM.
"""

import hashlib
import json
import os
from pathlib import Path
from typing import List, Tuple

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.bilm.formats import files as bilm_files_module
from spacy_elmo.cli import app
from spacy_elmo.published import records as records_module
from spacy_elmo.published.cache import CacheIntegrityError

WEIGHTS = "/tiny/weights.hdf5"


class Reads:
    """Which files were hashed, and which weight files read, with or without the value check."""

    def __init__(self, monkeypatch) -> None:
        self.hashed: List[str] = []
        self.loaded: List[Tuple[str, bool]] = []
        sha256_of, read_weights = records_module.sha256_of, bilm_files_module.read_weights

        def counting_sha256_of(path: Path) -> str:
            self.hashed.append(Path(path).name)
            return sha256_of(path)

        def counting_read_weights(model, weight_file, check_values=True) -> None:
            self.loaded.append((Path(weight_file).name, check_values))
            read_weights(model, weight_file, check_values)

        monkeypatch.setattr(records_module, "sha256_of", counting_sha256_of)
        monkeypatch.setattr(bilm_files_module, "read_weights", counting_read_weights)

    def reset(self) -> None:
        self.hashed.clear()
        self.loaded.clear()


@pytest.fixture
def reads(monkeypatch) -> Reads:
    return Reads(monkeypatch)


def record(cache: Path) -> dict:
    return json.loads((cache / "tiny" / "source.json").read_text())


def assert_same_weights(a: BiLM, b: BiLM) -> None:
    assert a.state_dict().keys() == b.state_dict().keys()
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_a_first_download_reads_the_weights_once_and_records_their_hash(registry, host, cache, bilm_files, reads):
    bilm = BiLM.from_pretrained("tiny")
    assert reads.loaded == [(".weights.hdf5.part", True)]  # the load that checked the download is the one returned
    assert reads.hashed == []  # each file hashed as it arrived
    assert_same_weights(bilm, BiLM.from_files(*bilm_files))
    entry = record(cache)["files"]["weights.hdf5"]
    path = cache / "tiny" / "weights.hdf5"
    assert entry["sha256"] == hashlib.sha256(bilm_files[1].read_bytes()).hexdigest()
    assert (entry["bytes"], entry["mtime_ns"]) == (path.stat().st_size, path.stat().st_mtime_ns)


def test_a_warm_load_hashes_nothing_and_reads_the_weights_once(registry, host, cache, bilm_files, reads):
    BiLM.from_pretrained("tiny")
    reads.reset()
    bilm = BiLM.from_pretrained("tiny", cache_size=0)
    assert reads.hashed == [] and reads.loaded == [("weights.hdf5", False)]
    assert len(host.gets(WEIGHTS)) == 1 and bilm.runtime.token_cache.max_entries == 0
    assert_same_weights(bilm, BiLM.from_files(*bilm_files))


def test_a_resumed_download_records_the_hash_of_the_whole_file(registry, host, cache, bilm_files):
    host.faults[WEIGHTS] = "drop_once"
    BiLM.from_pretrained("tiny")
    assert record(cache)["files"]["weights.hdf5"]["sha256"] == hashlib.sha256(bilm_files[1].read_bytes()).hexdigest()


@pytest.mark.parametrize("name", ["weights.hdf5", "options.json"])
def test_a_file_with_a_new_time_and_the_same_bytes_is_hashed_once_and_recorded_anew(registry, host, cache, reads, name):
    BiLM.from_pretrained("tiny")
    path = cache / "tiny" / name
    os.utime(path)  # touched, or copied without its times: the same bytes
    reads.reset()
    BiLM.from_pretrained("tiny")
    assert reads.hashed == [name]
    assert record(cache)["files"][name]["mtime_ns"] == path.stat().st_mtime_ns
    reads.reset()
    BiLM.from_pretrained("tiny")
    assert reads.hashed == []


def test_a_changed_file_is_hashed_and_refused_naming_it_and_the_fix(registry, host, cache, reads):
    BiLM.from_pretrained("tiny")
    path = cache / "tiny" / "weights.hdf5"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1  # the same size, written now: another time
    path.write_bytes(bytes(data))
    reads.reset()
    with pytest.raises(
        CacheIntegrityError,
        match=rf"{path} changed after it was downloaded \(sha256 [0-9a-f]{{64}}; "
        r"recorded: sha256 .*spacy-elmo download tiny --force",
    ):
        BiLM.from_pretrained("tiny")
    assert reads.hashed == ["weights.hdf5"] and reads.loaded == []


def test_a_file_of_another_size_is_refused_without_hashing(registry, host, cache, reads):
    BiLM.from_pretrained("tiny")
    path = cache / "tiny" / "weights.hdf5"
    stat = path.stat()
    with open(path, "ab") as f:
        f.write(b"\0")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the recorded time
    reads.reset()
    with pytest.raises(
        CacheIntegrityError,
        match=rf"{path} changed after it was downloaded \({stat.st_size + 1} bytes; "
        rf"recorded: {stat.st_size} bytes\)",
    ):
        BiLM.from_pretrained("tiny")
    assert reads.hashed == []


def test_verify_hashes_both_files_and_finds_what_size_and_time_hide(registry, host, cache, reads):
    assert CliRunner().invoke(app, ["download", "tiny"]).exit_code == 0
    reads.reset()
    result = CliRunner().invoke(app, ["download", "tiny", "--verify"])
    assert result.exit_code == 0 and "(sha256 verified)" in result.output, result.output
    assert sorted(reads.hashed) == ["options.json", "weights.hdf5"]
    # Bytes changed behind the record's back: same size, the recorded time put back.
    path = cache / "tiny" / "weights.hdf5"
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert CliRunner().invoke(app, ["download", "tiny"]).exit_code == 0  # trusted, as every load trusts it
    result = CliRunner().invoke(app, ["download", "tiny", "--verify"])
    assert result.exit_code == 1 and f"{path} changed after it was downloaded" in result.output
    assert len(host.gets(WEIGHTS)) == 1


def test_a_record_without_times_from_an_earlier_version_is_hashed_once_and_completed(registry, host, cache, reads):
    BiLM.from_pretrained("tiny")
    old = record(cache)
    for entry in old["files"].values():
        del entry["mtime_ns"]
    (cache / "tiny" / "source.json").write_text(json.dumps(old))
    reads.reset()
    BiLM.from_pretrained("tiny")
    assert sorted(reads.hashed) == ["options.json", "weights.hdf5"]
    assert all("mtime_ns" in entry for entry in record(cache)["files"].values())


def test_recorded_times_are_settled_in_the_past_so_a_write_in_the_same_tick_shows(registry, host, cache):
    BiLM.from_pretrained("tiny")
    for entry in record(cache)["files"].values():
        assert entry["mtime_ns"] % 2_000_000_000 == 0
        assert (
            entry["mtime_ns"]
            <= (os.path.getmtime(cache / "tiny" / "source.json") - records_module.SETTLE_SECONDS) * 1e9
        )


def test_bad_settings_are_refused_before_anything_is_downloaded(registry, host, cache):
    with pytest.raises(ValueError, match="precision"):
        BiLM.from_pretrained("tiny", precision="fp64")
    assert not host.requests
    BiLM.from_pretrained("tiny")  # and a download is not discarded for them


def test_files_placed_by_hand_are_hashed_once_and_loaded_once(registry, host, cache, bilm_files, reads, monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    (cache / "tiny").mkdir(parents=True)
    for source in bilm_files:
        (cache / "tiny" / source.name).write_bytes(source.read_bytes())
    bilm = BiLM.from_pretrained("tiny")
    assert reads.loaded == [("weights.hdf5", True)] and sorted(reads.hashed) == ["options.json", "weights.hdf5"]
    assert_same_weights(bilm, BiLM.from_files(*bilm_files))
    reads.reset()
    BiLM.from_pretrained("tiny")
    assert reads.hashed == [] and reads.loaded == [("weights.hdf5", False)]
