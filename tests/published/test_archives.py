"""Archive entries (issue 37): zip, tar.gz and tar.bz2 models downloaded from the local host,
resumed, extracted safely, checked, recorded, and loaded by name; malicious archives refused."""

import dataclasses
import json
import os
import tarfile
import warnings
from pathlib import Path

import numpy
import pytest
import spacy
import torch
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.published import archive as archives
from spacy_elmo.published import resolve as resolution
from spacy_elmo.published import sources
from spacy_elmo.published.cache import CacheIntegrityError, OfflineError, fetch
from spacy_elmo.published.download import Downloader, DownloadError
from spacy_elmo.published.layout import standard_pair

from ..bilm.helpers import write_random_model
from .helpers import (
    archive_entry,
    directory_members,
    serve,
    tar_bytes,
    tiny_entry,
    write_registry,
    zip_bytes,
    zip_with_symlink,
)

SENTENCES = [["The", "bank", "raised", "its", "rates", "."], ["中文", "的", "模型"]]


@pytest.fixture
def standard_members(bilm_files):
    """The tiny biLM as CLARIN.SI lays it out: a subdirectory, the weights under another name."""
    return [
        ("slovenian/options.json", bilm_files[0].read_bytes()),
        ("slovenian/slovenian-elmo-weights.hdf5", bilm_files[1].read_bytes()),
        ("README.txt", b"not a model\n"),
    ]


@pytest.fixture
def manylangs_dir(tmp_path_factory) -> Path:
    return write_random_model(tmp_path_factory.mktemp("manylangs") / "zhs.model")


def register(registry, host, **entries) -> None:
    write_registry(registry, tiny=tiny_entry(host), **entries)


def fetch_with(spec, **pieces):
    """``BiLM.from_pretrained(spec)``'s download of an archive in the standard layout, with ``pieces``
    of its source (``downloader``, ``extractor``) in place of the defaults."""
    source = dataclasses.replace(resolution.source_for(spec), **pieces)
    return fetch(source, lambda directory, kind: BiLM.from_files(*standard_pair(directory)), progress=False)


def assert_same_weights(a: BiLM, b: BiLM) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


def assert_nothing_cached(cache: Path, name: str) -> None:
    """Nothing of the entry but its lock file: no tree, no record, no archive, no temporary directory."""
    left = sorted(p.name for p in (cache / name).iterdir()) if (cache / name).exists() else []
    assert left in ([], [".lock"]), left


def test_a_zip_of_the_standard_layout_in_a_subdirectory_loads_by_name(
    registry, host, cache, bilm_files, standard_members
):
    serve(host, "/sl.zip", zip_bytes(standard_members))
    register(registry, host, sl=archive_entry(host, "/sl.zip", language="sl"))
    bilm = BiLM.from_pretrained("sl")
    assert_same_weights(bilm, BiLM.from_files(*bilm_files))
    model_dir = cache / "sl" / "model" / "slovenian"
    assert (model_dir / "slovenian-elmo-weights.hdf5").read_bytes() == bilm_files[1].read_bytes()
    record = json.loads((cache / "sl" / "source.json").read_text())
    assert record["model"] == "model/slovenian" and record["format"] == "standard"
    assert record["archive"]["bytes"] == len(host.files["/sl.zip"]) and len(record["archive"]["sha256"]) == 64
    assert set(record["files"]) == {
        "model/slovenian/options.json",
        "model/slovenian/slovenian-elmo-weights.hdf5",
        "model/README.txt",
    }
    assert not (cache / "sl" / ".archive.part").exists()  # the archive is not kept once extracted
    # Cached: no request, no extraction, the same files.
    requests = len(host.requests)
    assert_same_weights(BiLM.from_pretrained("sl"), bilm)
    assert len(host.requests) == requests
    assert resolution.resolve_pretrained("sl", check=BiLM.from_files) == (
        model_dir / "options.json",
        model_dir / "slovenian-elmo-weights.hdf5",
    )


def test_a_tar_gz_at_the_top_level_loads_by_name(registry, host, cache, bilm_files):
    serve(
        host,
        "/m.tar.gz",
        tar_bytes([("options.json", bilm_files[0].read_bytes()), ("model.hdf5", bilm_files[1].read_bytes())]),
    )
    register(registry, host, norsk=archive_entry(host, "/m.tar.gz", language="no"))
    assert_same_weights(BiLM.from_pretrained("norsk"), BiLM.from_files(*bilm_files))
    assert json.loads((cache / "norsk" / "source.json").read_text())["model"] == "model"


def test_a_tar_bz2_of_an_elmoformanylangs_model_loads_by_name_and_in_a_pipeline(registry, host, cache, manylangs_dir):
    serve(host, "/zhs.model.tar.bz2", tar_bytes(directory_members(manylangs_dir, "zhs.model/"), "bz2"))
    register(registry, host, zhs=archive_entry(host, "/zhs.model.tar.bz2", language="zh", format="elmoformanylangs"))
    bilm = BiLM.from_pretrained("zhs")
    expected = BiLM.from_pretrained(str(manylangs_dir)).embed_sentences(SENTENCES)
    for ours, theirs in zip(bilm.embed_sentences(SENTENCES), expected):
        numpy.testing.assert_array_equal(ours, theirs)
    record = json.loads((cache / "zhs" / "source.json").read_text())
    assert record["format"] == "elmoformanylangs" and record["model"] == "model/zhs.model"

    nlp = spacy.blank("zh")
    nlp.add_pipe("elmo", config={"model": {"pretrained": "zhs"}})
    requests = len(host.requests)
    nlp.initialize()
    doc = nlp("中文的模型")
    assert doc.tensor.shape[0] == len(doc) and len(host.requests) == requests  # from the cache


def test_spacy_elmo_download_fetches_an_archive_and_names_the_model_directory(registry, host, cache, manylangs_dir):
    serve(host, "/zhs.zip", zip_bytes(directory_members(manylangs_dir)))
    register(registry, host, zhs=archive_entry(host, "/zhs.zip"))
    result = CliRunner().invoke(app, ["download", "zhs"])
    assert result.exit_code == 0, result.output
    assert str(cache / "zhs" / "model") in result.output
    assert CliRunner().invoke(app, ["download", "zhs", "--verify"]).exit_code == 0
    assert len(host.gets("/zhs.zip")) == 1
    assert CliRunner().invoke(app, ["download", "zhs", "--force"]).exit_code == 0
    assert len(host.gets("/zhs.zip")) == 2 and not [
        p for p in (cache / "zhs").iterdir() if p.name.startswith(".replaced-")
    ]


def test_an_elmoformanylangs_archive_is_a_clear_error_where_two_files_are_needed(registry, host, cache, manylangs_dir):
    serve(host, "/zhs.zip", zip_bytes(directory_members(manylangs_dir)))
    register(registry, host, zhs=archive_entry(host, "/zhs.zip"))
    with pytest.raises(DownloadError, match="ELMoForManyLangs model.*no options.json \\+ weights.hdf5"):
        resolution.resolve_pretrained("zhs", check=BiLM.from_files)
    assert_nothing_cached(cache, "zhs")


def test_a_url_of_an_archive_works_as_pretrained(host, cache, bilm_files, standard_members):
    url = serve(host, "/models/sl.zip", zip_bytes(standard_members))
    assert_same_weights(BiLM.from_pretrained(url), BiLM.from_files(*bilm_files))
    port = host.url.rsplit(":", 1)[1]
    assert (cache / "urls" / f"127.0.0.1_{port}" / "models" / "sl.zip" / "model" / "slovenian").is_dir()


def test_a_dropped_connection_resumes_the_archive(registry, host, cache, bilm_files, standard_members):
    serve(host, "/sl.zip", zip_bytes(standard_members))
    register(registry, host, sl=archive_entry(host, "/sl.zip"))
    host.faults["/sl.zip"] = "drop_once"
    size = len(host.files["/sl.zip"])
    assert_same_weights(BiLM.from_pretrained("sl"), BiLM.from_files(*bilm_files))
    assert [r.range for r in host.gets("/sl.zip")] == [None, f"bytes={size // 2}-"]
    assert host.sent["/sl.zip"] == size  # each byte once: continued, not restarted


def test_an_archive_download_that_gives_up_continues_in_a_later_run(
    registry, host, cache, bilm_files, standard_members
):
    serve(host, "/sl.zip", zip_bytes(standard_members))
    register(registry, host, sl=archive_entry(host, "/sl.zip"))
    host.faults["/sl.zip"] = "drop_always"
    size = len(host.files["/sl.zip"])
    with pytest.raises(DownloadError, match="run the same command again"):
        fetch_with("sl", downloader=Downloader(backoff_seconds=0.01))
    assert (cache / "sl" / ".archive.part").stat().st_size == size // 2 and not (cache / "sl" / "model").exists()
    del host.faults["/sl.zip"]
    assert_same_weights(BiLM.from_pretrained("sl"), BiLM.from_files(*bilm_files))
    assert host.gets("/sl.zip")[-1].range == f"bytes={size // 2}-"


def test_an_interrupted_extraction_leaves_nothing_half_made(registry, host, cache, bilm_files, standard_members):
    serve(host, "/sl.zip", zip_bytes(standard_members))
    register(registry, host, sl=archive_entry(host, "/sl.zip"))
    calls = []

    class Interrupted(archives.Extractor):
        def write(self, *args):
            calls.append(args)
            if len(calls) == 2:  # one file written, the process stopped during the second
                raise KeyboardInterrupt
            return super().write(*args)

    with pytest.raises(KeyboardInterrupt):
        fetch_with("sl", extractor=Interrupted())
    entry = cache / "sl"
    assert sorted(p.name for p in entry.iterdir()) == [".archive.part", ".lock"]  # the whole archive, kept
    # A run killed outright (SIGKILL) leaves its temporary directory: never read, removed by the next download.
    (entry / ".extract-killed" / "slovenian").mkdir(parents=True)
    (entry / ".extract-killed" / "slovenian" / "options.json").write_bytes(b"{")
    assert_same_weights(BiLM.from_pretrained("sl"), BiLM.from_files(*bilm_files))
    assert sorted(p.name for p in entry.iterdir()) == [".lock", "model", "source.json"]
    assert host.gets("/sl.zip")[-1].range == f"bytes={len(host.files['/sl.zip'])}-"  # complete: not fetched again


def malicious(bilm_files, kind):
    """An archive holding a loadable model and one member that must not be extracted."""
    good = [("m/options.json", bilm_files[0].read_bytes()), ("m/weights.hdf5", bilm_files[1].read_bytes())]
    if kind == "traversal-zip":
        return zip_bytes(good + [("../x", b"escaped")]), r"'\.\./x' points outside the archive's directory"
    if kind == "traversal-tar":
        return tar_bytes(good + [("m/../../x", b"escaped")]), r"'m/\.\./\.\./x' points outside"
    if kind == "absolute-zip":
        return zip_bytes(good + [("/tmp/x", b"escaped")]), r"'/tmp/x' has an absolute path"
    if kind == "absolute-tar":
        return tar_bytes(good + [("/tmp/x", b"escaped")], "bz2"), r"'/tmp/x' has an absolute path"
    if kind == "symlink-tar":
        return tar_bytes(good, links=[("m/link", "/etc/passwd", tarfile.SYMTYPE)]), r"'m/link' is a symbolic link"
    if kind == "hardlink-tar":
        return tar_bytes(good, links=[("m/link", "m/options.json", tarfile.LNKTYPE)]), r"'m/link' is a hard link"
    if kind == "symlink-zip":
        return zip_with_symlink(good, "m/link", "/etc/passwd"), r"'m/link' is a symbolic link"
    if kind == "duplicate-zip":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile's "Duplicate name": what the test makes
            return zip_bytes(good + [("m/options.json", b"{}")]), r"'m/options.json' comes twice"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "traversal-zip",
        "traversal-tar",
        "absolute-zip",
        "absolute-tar",
        "symlink-tar",
        "hardlink-tar",
        "symlink-zip",
        "duplicate-zip",
    ],
)
def test_a_malicious_archive_is_refused_and_nothing_is_cached(registry, host, cache, bilm_files, tmp_path, kind):
    data, message = malicious(bilm_files, kind)
    serve(host, "/bad.archive", data)
    register(registry, host, bad=archive_entry(host, "/bad.archive"))
    with pytest.raises(DownloadError, match=f"not a usable ELMo biLM, so nothing was cached: .*{message}"):
        BiLM.from_pretrained("bad")
    assert_nothing_cached(cache, "bad")
    assert not (cache.parent / "x").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "limit, message",
    [
        ("max_member_bytes", "more than the 1000 bytes allowed per file"),
        ("max_total_bytes", "more than 1000 bytes in all"),
    ],
)
def test_an_oversize_archive_is_refused(registry, host, cache, bilm_files, limit, message):
    big = [("m/options.json", bilm_files[0].read_bytes()), ("m/weights.hdf5", bilm_files[1].read_bytes())]
    serve(host, "/big.tar.gz", tar_bytes(big))
    register(registry, host, big=archive_entry(host, "/big.tar.gz"))
    with pytest.raises(DownloadError, match=message):
        fetch_with("big", extractor=archives.Extractor(**{limit: 1000}))
    assert_nothing_cached(cache, "big")


@pytest.mark.parametrize(
    "members, message",
    [
        ([("README", b"hello")], r"holds no ELMo model.*it holds: README"),
        ("two", r"holds several ELMo models.*a \(standard\), b \(standard\)"),
    ],
)
def test_an_archive_without_exactly_one_model_is_refused(registry, host, cache, bilm_files, members, message):
    if members == "two":
        members = [(f"{d}/{p.name}", p.read_bytes()) for d in "ab" for p in bilm_files]
    serve(host, "/x.zip", zip_bytes(members))
    register(registry, host, x=archive_entry(host, "/x.zip"))
    with pytest.raises(DownloadError, match=message):
        BiLM.from_pretrained("x")
    assert_nothing_cached(cache, "x")


def test_what_is_not_an_archive_or_not_the_registrys_is_refused(registry, host, cache, standard_members):
    serve(host, "/x.zip", b"\x00" * 600)
    register(registry, host, x=archive_entry(host, "/x.zip"))
    with pytest.raises(DownloadError, match="is not a zip, tar, tar.gz, tar.bz2 or tar.xz archive"):
        BiLM.from_pretrained("x")
    assert_nothing_cached(cache, "x")
    serve(host, "/x.zip", zip_bytes(standard_members))
    register(registry, host, x=archive_entry(host, "/x.zip", archive_sha256="0" * 64))
    with pytest.raises(DownloadError, match="the archive's sha256 is [0-9a-f]{64}, the registry expects 0{64}"):
        BiLM.from_pretrained("x")
    assert_nothing_cached(cache, "x")


def test_an_extracted_file_altered_later_is_an_error_naming_it(registry, host, cache, standard_members):
    serve(host, "/sl.zip", zip_bytes(standard_members))
    register(registry, host, sl=archive_entry(host, "/sl.zip"))
    BiLM.from_pretrained("sl")
    path = cache / "sl" / "model" / "slovenian" / "options.json"
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(
        CacheIntegrityError, match=rf"{path} changed after it was downloaded.*spacy-elmo download sl --force"
    ):
        BiLM.from_pretrained("sl")


def test_offline_an_archive_extracted_by_hand_is_checked_and_recorded(registry, host, cache, monkeypatch, bilm_files):
    register(registry, host, sl=archive_entry(host, "/sl.zip"))
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    with pytest.raises(OfflineError, match=f"extract {host.url}/sl.zip by hand into {cache / 'sl' / 'model'}"):
        BiLM.from_pretrained("sl")
    (cache / "sl" / "model" / "sl").mkdir(parents=True)
    for path in bilm_files:
        (cache / "sl" / "model" / "sl" / path.name).write_bytes(path.read_bytes())
    assert_same_weights(BiLM.from_pretrained("sl"), BiLM.from_files(*bilm_files))
    assert json.loads((cache / "sl" / "source.json").read_text())["model"] == "model/sl" and not host.requests


def test_the_extraction_writes_plain_files_only(tmp_path, bilm_files):
    """What the extractor itself guarantees, without the cache: modes, no links, relative paths."""
    archive = tmp_path / "a.tar"
    archive.write_bytes(tar_bytes([("./m/options.json", b"{}"), ("m/sub/w.hdf5", b"x" * 10)], ""))
    written = archives.Extractor().extract(archive, tmp_path / "out", "a.tar")
    assert sorted(written) == ["m/options.json", "m/sub/w.hdf5"] and written["m/sub/w.hdf5"]["bytes"] == 10
    assert oct((tmp_path / "out" / "m" / "options.json").stat().st_mode & 0o7777) == oct(0o644 & ~_umask())
    for name in ["..", "a/../../b", "/abs", "C:\\\\x", "a\\\\..\\\\..\\\\b", "x\x00y"]:
        with pytest.raises(archives.ArchiveError):
            archives.safe_relative(name, "test")
    assert archives.safe_relative("./", "test") is None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_manylangs_check_is_required_for_such_an_archive(registry, host, cache, manylangs_dir, monkeypatch):
    """Without a loader of ELMoForManyLangs directories (the published package cannot import one),
    such an archive is refused rather than kept unchecked."""
    serve(host, "/zhs.zip", zip_bytes(directory_members(manylangs_dir)))
    register(registry, host, zhs=archive_entry(host, "/zhs.zip"))
    with pytest.raises(DownloadError, match="ELMoForManyLangs model"):
        resolution.download_pretrained("zhs", check=BiLM.from_files, progress=False)
    assert_nothing_cached(cache, "zhs")
    assert sources.MODEL_DIRNAME == "model"


def test_a_full_disk_during_extraction_keeps_the_archive_for_the_next_run(
    registry, host, cache, bilm_files, standard_members
):
    serve(host, "/sl.zip", zip_bytes(standard_members))
    register(registry, host, sl=archive_entry(host, "/sl.zip"))

    class FullDisk(archives.Extractor):
        def write(self, *args):
            raise OSError(28, "No space left on device")

    with pytest.raises(
        DownloadError, match="could not be extracted into .*No space left on device.*run the same command again"
    ):
        fetch_with("sl", extractor=FullDisk())
    assert sorted(p.name for p in (cache / "sl").iterdir()) == [".archive.part", ".lock"]
    assert_same_weights(BiLM.from_pretrained("sl"), BiLM.from_files(*bilm_files))
    assert host.sent["/sl.zip"] == len(host.files["/sl.zip"])  # the archive was sent once
