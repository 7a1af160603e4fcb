"""Names, URLs and the cache against a local server: what users of other ELMo tools ran into."""

import dataclasses
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.published import resolve as resolution
from spacy_elmo.published.cache import CacheIntegrityError, OfflineError, fetch
from spacy_elmo.published.download import ATTEMPTS, RETRIES, Downloader, DownloadError

from .helpers import tiny_entry, write_registry

WEIGHTS = "/tiny/weights.hdf5"
OPTIONS = "/tiny/options.json"
FAST = Downloader(backoff_seconds=0.01)  # the retries of the defaults, with short waits


def resolve_pretrained(spec, **kwargs):
    return resolution.resolve_pretrained(spec, check=BiLM.from_files, **kwargs)


def resolve_files(options_file, weight_file, **kwargs):
    return resolution.resolve_files(options_file, weight_file, check=BiLM.from_files, **kwargs)


def download_pretrained(spec, **kwargs):
    return resolution.download_pretrained(spec, check=BiLM.from_files, **kwargs)


def fetch_with(downloader, spec="tiny"):
    """``resolve_pretrained(spec)`` (a name of two files), the files fetched by ``downloader``."""
    source = dataclasses.replace(resolution.source_for(spec), downloader=downloader)
    return fetch(source, BiLM.from_files, progress=False)


def assert_same_weights(a: BiLM, b: BiLM) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


def assert_nothing_cached(cache) -> None:
    assert not [p.name for p in (cache / "tiny").glob("*") if p.name in ("options.json", "weights.hdf5", "source.json")]


def test_a_name_downloads_once_and_loads_as_the_files_it_names(registry, host, cache, bilm_files):
    bilm = BiLM.from_pretrained("tiny")
    assert_same_weights(bilm, BiLM.from_files(*bilm_files))
    assert (cache / "tiny" / "weights.hdf5").read_bytes() == bilm_files[1].read_bytes()
    record = json.loads((cache / "tiny" / "source.json").read_text())
    assert record["weights_url"] == f"{host.url}{WEIGHTS}" and len(record["files"]["weights.hdf5"]["sha256"]) == 64
    assert len(host.gets(WEIGHTS)) == 1


@pytest.mark.parametrize("offline", ["1", ""])
def test_a_cached_biLM_loads_with_no_request(registry, host, cache, monkeypatch, offline):
    resolve_pretrained("tiny", progress=False)
    before = len(host.requests)
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", offline)
    assert resolve_pretrained("tiny") == (cache / "tiny" / "options.json", cache / "tiny" / "weights.hdf5")
    assert len(host.requests) == before


def test_a_dropped_connection_resumes_with_a_range_request(registry, host, cache, bilm_files):
    host.faults[WEIGHTS] = "drop_once"
    size = len(host.files[WEIGHTS])
    resolve_pretrained("tiny", progress=False)
    assert [r.range for r in host.gets(WEIGHTS)] == [None, f"bytes={size // 2}-"]
    assert host.sent[WEIGHTS] == size  # each byte sent once: the transfer continued, it did not restart
    assert (cache / "tiny" / "weights.hdf5").read_bytes() == bilm_files[1].read_bytes()


@pytest.mark.parametrize("fault", ["unavailable_twice", "stall_twice"])
def test_5xx_answers_and_timeouts_are_retried(registry, host, cache, bilm_files, fault):
    host.faults[WEIGHTS] = fault
    fetch_with(Downloader(timeout_seconds=0.3, backoff_seconds=0.01))
    assert len(host.gets(WEIGHTS)) == 3
    assert (cache / "tiny" / "weights.hdf5").read_bytes() == bilm_files[1].read_bytes()


def test_a_refused_connection_fails_at_once_naming_the_url(cache, tmp_path):
    """A stopped server (nothing listens on the port) is not asked again and again: with the real
    backoff, the error comes in well under a second (it took about 19 s of retries with urllib)."""
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/tiny/weights.hdf5"
    start = time.monotonic()
    with pytest.raises(
        DownloadError, match=rf"downloading {url} failed \(the connection was refused: .*nothing listens"
    ):
        Downloader().download(url, tmp_path / "weights.part", progress=False)
    assert time.monotonic() - start < 2.0
    assert not (tmp_path / "weights.part").exists()


def test_an_unreachable_host_says_in_three_short_lines_how_to_do_without_it(registry, host, cache, network):
    """No network (host names do not resolve): retry, place the files by hand at the paths given, or
    SPACY_ELMO_OFFLINE=1. An entry with a second host (as AllenNLP's have) names both."""
    urls = {f"{kind}_url": f"https://first.example/tiny/{kind}" for kind in ("options", "weights")}
    second = {f"alternate_{kind}_url": f"https://second.example/tiny/{kind}" for kind in ("options", "weights")}
    write_registry(registry, tiny=tiny_entry(host, **urls, **second))
    network.unresolvable.update({"first.example", "second.example"})
    with pytest.raises(DownloadError) as error:
        fetch_with(FAST)
    what, by_hand, offline = str(error.value).splitlines()
    assert what == (
        "cannot reach first.example or second.example to download the biLM 'tiny' "
        "(Temporary failure in name resolution)."
    )
    paths = [str(cache / "tiny" / name) for name in ("options.json", "weights.hdf5")]
    places = [urls["options_url"], paths[0], urls["weights_url"], paths[1]]
    assert by_hand.startswith("Retry once the network is up") and all(place in by_hand for place in places)
    assert len(by_hand) - sum(map(len, places)) < 80  # short but for the URLs and paths it gives
    assert "SPACY_ELMO_OFFLINE=1" in offline and len(offline) <= 80
    assert_nothing_cached(cache)


def test_a_host_that_answers_503_twice_then_the_file_is_retried_by_the_transport(host, tmp_path, bilm_files):
    host.faults[WEIGHTS] = "unavailable_twice"
    part = tmp_path / "weights.part"
    digest = FAST.download(f"{host.url}{WEIGHTS}", part, progress=False)
    assert part.read_bytes() == bilm_files[1].read_bytes()
    import hashlib

    assert digest == hashlib.sha256(bilm_files[1].read_bytes()).hexdigest()
    assert [r.range for r in host.gets(WEIGHTS)] == [None, None, None]


def test_a_host_that_keeps_answering_503_gives_up_after_the_transports_retries(host, tmp_path):
    host.faults[WEIGHTS] = "unavailable_always"
    url = f"{host.url}{WEIGHTS}"
    with pytest.raises(
        DownloadError, match=rf"downloading {url} failed \(HTTP 503 Service Unavailable, {RETRIES + 1} times\)"
    ):
        FAST.download(url, tmp_path / "weights.part", progress=False)
    assert len(host.gets(WEIGHTS)) == RETRIES + 1  # the transport's retries only: no second loop around them


def test_a_dropped_connection_continues_with_a_range_request_on_the_same_session(host, tmp_path, bilm_files):
    host.faults[WEIGHTS] = "drop_once"
    size = len(host.files[WEIGHTS])
    part = tmp_path / "weights.part"
    Downloader().download(f"{host.url}{WEIGHTS}", part, progress=False)
    assert [r.range for r in host.gets(WEIGHTS)] == [None, f"bytes={size // 2}-"]
    assert part.read_bytes() == bilm_files[1].read_bytes() and host.sent[WEIGHTS] == size


def test_a_host_that_keeps_dropping_gives_up_keeps_the_bytes_and_a_later_run_continues(
    registry, host, cache, bilm_files
):
    host.faults[WEIGHTS] = "drop_always"
    size = len(host.files[WEIGHTS])
    with pytest.raises(DownloadError, match=f"failed {ATTEMPTS} times in a row.*run the same command again"):
        fetch_with(FAST)
    assert_nothing_cached(cache)
    assert (cache / "tiny" / ".weights.hdf5.part").stat().st_size == size // 2
    del host.faults[WEIGHTS]
    resolve_pretrained("tiny", progress=False)
    assert host.gets(WEIGHTS)[-1].range == f"bytes={size // 2}-"
    assert (cache / "tiny" / "weights.hdf5").read_bytes() == bilm_files[1].read_bytes()


@pytest.mark.parametrize(
    "fault, path, message",
    [
        ("missing", WEIGHTS, "HTTP 404 Not Found: the file is not there"),
        ("missing", OPTIONS, "HTTP 404 Not Found: the file is not there"),
        ("html", WEIGHTS, r"returned an HTML page \(Content-Type text/html"),
        ("html_body", WEIGHTS, r"returned an HTML page \(its body is markup\)"),
        ("html_body", OPTIONS, r"returned an HTML page \(its body is markup\)"),
    ],
)
def test_what_is_not_the_file_is_a_clear_error_and_nothing_is_cached(registry, host, cache, fault, path, message):
    if fault == "missing":
        del host.files[path]
    else:
        host.faults[path] = fault
    with pytest.raises(DownloadError, match=message):
        resolve_pretrained("tiny", progress=False)
    assert_nothing_cached(cache)
    assert not list((cache / "tiny").glob(".*.part"))


def test_a_short_file_is_refused_by_its_registry_size(registry, host, cache, bilm_files):
    size = len(host.files[WEIGHTS])
    host.files[WEIGHTS] = host.files[WEIGHTS][: size // 2]
    write_registry(registry, tiny=tiny_entry(host, weights_bytes=size))
    with pytest.raises(DownloadError, match=f"serves {size // 2} bytes, but the registry expects {size}"):
        resolve_pretrained("tiny", progress=False)
    assert_nothing_cached(cache)


def test_a_short_file_of_unknown_size_fails_to_open_and_is_not_cached(registry, host, cache):
    host.files[WEIGHTS] = host.files[WEIGHTS][: len(host.files[WEIGHTS]) // 2]
    with pytest.raises(DownloadError, match="not a usable ELMo biLM, so nothing was cached.*truncated"):
        resolve_pretrained("tiny", progress=False)
    assert_nothing_cached(cache)
    assert not list((cache / "tiny").glob(".*.part"))


def test_weights_that_do_not_fit_the_options_are_not_cached(registry, host, cache, bilm_files):
    from ..helpers import tiny_options, write_bilm_files

    _, weight_file = write_bilm_files(cache.parent / "other", options=tiny_options(projection_dim=6))
    host.files[WEIGHTS] = weight_file.read_bytes()
    with pytest.raises(DownloadError, match="not a usable ELMo biLM.*has shape"):
        resolve_pretrained("tiny", progress=False)
    assert_nothing_cached(cache)


def test_the_registry_sha256_is_checked_before_the_weights_are_kept(registry, host, cache, bilm_files):
    write_registry(registry, tiny=tiny_entry(host, weights_sha256="0" * 64))
    with pytest.raises(DownloadError, match="sha256 is [0-9a-f]{64}, the registry expects 0{64}"):
        resolve_pretrained("tiny", progress=False)
    assert_nothing_cached(cache)
    import hashlib

    write_registry(
        registry, tiny=tiny_entry(host, weights_sha256=hashlib.sha256(bilm_files[1].read_bytes()).hexdigest())
    )
    resolve_pretrained("tiny", progress=False)


@pytest.mark.parametrize("name", ["weights.hdf5", "options.json"])
def test_a_cached_file_altered_later_is_an_error_naming_it_and_the_fix(registry, host, cache, name):
    resolve_pretrained("tiny", progress=False)
    path = cache / "tiny" / name
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(
        CacheIntegrityError, match=rf"{path} changed after it was downloaded.*spacy-elmo download tiny --force"
    ):
        resolve_pretrained("tiny")
    download_pretrained("tiny", force=True, progress=False)
    assert resolve_pretrained("tiny")[0].parent == cache / "tiny"
    assert len(host.gets(WEIGHTS)) == 2


def test_offline_without_the_biLM_names_the_urls_and_where_the_files_go(registry, host, cache, monkeypatch, bilm_files):
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    with pytest.raises(OfflineError) as err:
        resolve_pretrained("tiny")
    for text in (
        f"{host.url}{OPTIONS}",
        f"{host.url}{WEIGHTS}",
        str(cache / "tiny" / "options.json"),
        str(cache / "tiny" / "weights.hdf5"),
    ):
        assert text in str(err.value)
    assert not host.requests
    # Placed there by hand, as the message says: checked, recorded and used, still offline.
    (cache / "tiny").mkdir(parents=True, exist_ok=True)
    for source in bilm_files:
        (cache / "tiny" / source.name).write_bytes(source.read_bytes())
    assert_same_weights(BiLM.from_pretrained("tiny"), BiLM.from_files(*bilm_files))
    assert (cache / "tiny" / "source.json").is_file() and not host.requests


def test_files_placed_by_hand_that_are_not_the_biLM_are_refused(registry, host, cache, monkeypatch, bilm_files):
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    (cache / "tiny").mkdir(parents=True)
    (cache / "tiny" / "options.json").write_bytes(bilm_files[0].read_bytes())
    (cache / "tiny" / "weights.hdf5").write_bytes(b"<html>not weights</html>")
    with pytest.raises(CacheIntegrityError, match=f"the files in {cache / 'tiny'} are not the biLM 'tiny'"):
        resolve_pretrained("tiny")


@pytest.mark.slow
def test_two_processes_asking_at_once_make_one_transfer(registry, host, cache, tmp_path):
    host.faults[WEIGHTS] = "slow"  # the transfer lasts about a second: the second process asks during it
    script = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from spacy_elmo import BiLM
        from spacy_elmo.published.resolve import resolve_pretrained
        barrier = Path(sys.argv[1])
        (barrier / sys.argv[2]).touch()
        while len(list(barrier.iterdir())) < 2:
            time.sleep(0.01)
        start = time.time()
        files = resolve_pretrained("tiny", check=BiLM.from_files, progress=False)
        print(start, time.time(), files[1])
        """
    )
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(barrier), str(i)], env=env, stdout=subprocess.PIPE, text=True
        )
        for i in range(2)
    ]
    outputs = [worker.communicate(timeout=120)[0].split() for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0]
    (start_a, end_a, path_a), (start_b, end_b, path_b) = outputs
    assert max(float(start_a), float(start_b)) < min(float(end_a), float(end_b))  # they did overlap
    assert path_a == path_b == str(cache / "tiny" / "weights.hdf5")
    assert len(host.gets(WEIGHTS)) == 1


def test_a_url_of_a_directory_is_cached_under_its_host_and_path(host, cache, bilm_files):
    options, weights = resolve_pretrained(f"{host.url}/tiny/", progress=False)
    port = host.url.rsplit(":", 1)[1]
    assert weights == cache / "urls" / f"127.0.0.1_{port}" / "tiny" / "weights.hdf5"
    assert_same_weights(BiLM.from_files(options, weights), BiLM.from_files(*bilm_files))


def test_a_url_of_one_file_as_pretrained_says_what_to_give(host, cache):
    with pytest.raises(ValueError, match="names one file.*set options_file and weight_file"):
        resolve_pretrained(f"{host.url}{WEIGHTS}")


def test_options_and_weight_urls_are_cached_together_and_file_urls_used_in_place(host, cache, bilm_files):
    options, weights = resolve_files(f"{host.url}{OPTIONS}", f"{host.url}{WEIGHTS}", progress=False)
    assert weights.read_bytes() == bilm_files[1].read_bytes() and cache in weights.parents
    assert resolve_files(bilm_files[0].as_uri(), bilm_files[1].as_uri()) == bilm_files
    assert resolve_files(str(bilm_files[0]), str(bilm_files[1])) == bilm_files


def test_a_directory_with_allennlps_file_names_is_found(tmp_path, bilm_files, cache):
    (tmp_path / "elmo_x_options.json").write_bytes(bilm_files[0].read_bytes())
    (tmp_path / "elmo_x_weights.hdf5").write_bytes(bilm_files[1].read_bytes())
    assert resolve_pretrained(str(tmp_path)) == (tmp_path / "elmo_x_options.json", tmp_path / "elmo_x_weights.hdf5")
    assert resolve_pretrained(tmp_path.as_uri())[1] == tmp_path / "elmo_x_weights.hdf5"


def test_an_unknown_name_lists_the_names(cache):
    with pytest.raises(ValueError, match=r"no biLM 'nope': it is not a registered name \(en, small, medium, original"):
        resolve_pretrained("nope")


def test_force_offline_is_refused_and_keeps_the_cached_biLM(registry, host, cache, monkeypatch):
    resolve_pretrained("tiny", progress=False)
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    with pytest.raises(OfflineError):
        download_pretrained("tiny", force=True)
    assert resolve_pretrained("tiny")[1] == cache / "tiny" / "weights.hdf5"


def test_the_cache_is_the_users_cache_directory_that_platformdirs_gives(monkeypatch, tmp_path):
    import platformdirs

    from spacy_elmo.published import cache as caching

    monkeypatch.delenv("SPACY_ELMO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "platform-cache"))  # where platformdirs looks on Linux
    assert caching.cache_root() == Path(platformdirs.user_cache_dir("spacy-elmo", appauthor=False))
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "mine"))  # the variable still wins
    assert caching.cache_root() == tmp_path / "mine"


def test_on_linux_the_cache_stays_where_it_was(monkeypatch, tmp_path):
    """``~/.cache/spacy-elmo``, or under ``XDG_CACHE_HOME``: caches made before platformdirs are still found."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux's cache directory")
    from spacy_elmo.published.cache import cache_root

    monkeypatch.delenv("SPACY_ELMO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "spacy-elmo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "spacy-elmo"
