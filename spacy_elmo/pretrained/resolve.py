"""One way to name a biLM everywhere: a registry NAME, a URL, or a local DIRECTORY.

- NAME: an entry of :mod:`.registry` (``original-5.5b``, ``pubmed``, the bundled ``en`` ...):
  downloaded once into the cache (:mod:`.cache`), or read from the package for a bundled one.
- URL (``https://``, ``http://``): a directory on a web server holding ``options.json`` and
  ``weights.hdf5`` (a mirror, a private host), cached like a name. ``file://`` is a local path.
- DIRECTORY: ``options.json`` + ``weights.hdf5``, or one ``*options*.json`` and one
  ``*weights*.hdf5`` as AllenNLP names them; or an ELMoForManyLangs model (``config.json``,
  ``char.dic``, ``word.dic``, ``token_embedder.pkl``, ``encoder.pkl``: :func:`manylangs_directory`,
  loaded by ``BiLM.from_pretrained``). A registry name wins over a directory of the same
  name: write ``./small`` for the directory.

Separate ``options_file`` / ``weight_file`` may each be a path or a URL (:func:`resolve_files`).
``check`` loads a downloaded pair before it is kept (``BiLM.from_files``: see :mod:`.cache`);
:func:`load_pretrained` returns that load rather than reading the weights a second time.
"""

import hashlib
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, List, Optional, Tuple, TypeVar

from . import PRETRAINED, pretrained_files
from ..fileio import OPTIONS_NAME, WEIGHTS_NAME, standard_files
from .cache import Check, Source, cache_root, fetch
from .registry import PublishedModel, find_model, registered_models

REMOTE_SCHEMES = ("http", "https")

# An ELMoForManyLangs model's directory (HIT-SCIR's layout, read by spacy_elmo.bilm.manylangs): its
# config.json names the network config; char.dic, word.dic and the two PyTorch state dicts.
MANYLANGS_FILES = ("config.json", "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl")

Loaded = TypeVar("Loaded")
# Loads (options.json, weights.hdf5); the flag says whether to check the weights' values (NaN,
# infinities): False for a cached pair unchanged since its check.
Load = Callable[[Path, Path, bool], Loaded]


def load_pretrained(spec: str, load: "Load[Loaded]", progress: bool = True) -> Loaded:
    """``load(options, weights, check_values)`` of the biLM that ``spec`` (NAME, URL or DIRECTORY)
    names, its weights read once.

    When the files are downloaded (or placed by hand) now, the load that checks them before they
    are kept is the one returned. A cached biLM whose files are those checked then (their size
    and modification time as recorded, see :mod:`.cache`) is loaded with ``check_values=False``:
    its values passed the check when it was kept. A bundled biLM or a directory is checked at
    every load.
    """
    source = source_for(spec)
    if source is None:
        return load(*(pretrained_files(spec) if spec in PRETRAINED else directory_files(spec)), True)
    checked: List[Loaded] = []

    def check(options_file: Path, weight_file: Path) -> Loaded:
        checked.append(load(options_file, weight_file, True))
        return checked[-1]

    files = fetch(source, check, progress=progress)
    return checked[-1] if checked else load(*files, False)


def resolve_pretrained(spec: str, check: Check, progress: bool = True) -> Tuple[Path, Path]:
    """``(options.json, weights.hdf5)`` of the biLM that ``spec`` (NAME, URL or DIRECTORY) names,
    downloading it into the cache the first time."""
    source = source_for(spec)
    if source is not None:
        return fetch(source, check, progress=progress)
    if spec in PRETRAINED:
        return pretrained_files(spec)
    return directory_files(spec)


def resolve_files(options_file: str, weight_file: str, check: Check, progress: bool = True) -> Tuple[Path, Path]:
    """Local paths of an options file and a weight file, each given as a path or a URL.

    Local files (paths, ``file://``) are used where they are; when either is remote, both are
    cached together, so that the weights are checked against the options they come with.
    """
    if not (is_remote(options_file) or is_remote(weight_file)):
        return local_path(options_file), local_path(weight_file)
    options_url, weights_url = as_url(options_file), as_url(weight_file)
    directory = _url_directory(weights_url, suffix=".hdf5", extra=options_url)
    source = Source(weights_url, options_url, weights_url, directory, fix=f"delete {directory} and load it again")
    return fetch(source, check, progress=progress)


def download_pretrained(
    spec: str, check: Check, force: bool = False, progress: bool = True, verify: bool = False
) -> Tuple[Path, Path]:
    """Fetch NAME or URL into the cache ahead of use (``force``: again, whatever is cached;
    ``verify``: check a cached copy's sha256 against its record, reading both files)."""
    source = source_for(spec)
    if source is None:
        where = "ships inside the package" if spec in PRETRAINED else "is not a registry name or an http(s) URL"
        raise ValueError(f"nothing to download: {spec!r} {where}. `spacy-elmo models` lists the names")
    return fetch(source, check, force=force, progress=progress, verify=verify)


def source_for(spec: str) -> Optional[Source]:
    """Where NAME or URL is downloaded from and cached; None for a bundled biLM or a directory."""
    model = find_model(spec)
    if model is not None and not model.bundled:
        return named_source(model)
    if model is None and is_remote(spec):
        if re.search(r"\.(json|hdf5|h5)$", urllib.parse.urlsplit(spec).path):
            raise ValueError(
                f"pretrained = {spec!r} names one file; a URL there is a directory holding options.json and "
                "weights.hdf5. For two files elsewhere, set options_file and weight_file to their URLs"
            )
        base = spec.rstrip("/")
        directory = _url_directory(base)
        return Source(spec, f"{base}/{OPTIONS_NAME}", f"{base}/{WEIGHTS_NAME}", directory, f"run `spacy-elmo download {spec} --force`")
    return None


def named_source(model: PublishedModel) -> Source:
    """The download of a registry entry, cached under its name."""
    assert model.options_url is not None and model.weights_url is not None
    return Source(
        model.name, model.options_url, model.weights_url, cache_root() / model.name,
        f"run `spacy-elmo download {model.name} --force`", model.weights_bytes, model.weights_sha256,
    )


def is_manylangs_directory(directory: Path) -> bool:
    """Whether ``directory`` holds an ELMoForManyLangs model: two of its files at least (one
    ``config.json`` is any tool's); the load then names each one that is missing."""
    return sum((directory / name).is_file() for name in MANYLANGS_FILES) >= 2


def manylangs_directory(spec: str) -> Optional[Path]:
    """The local directory ``spec`` names (a path or a ``file://`` URL) when it holds an
    ELMoForManyLangs model and no standard pair, else None. A registry name is never a directory."""
    if find_model(spec) is not None or spec in PRETRAINED or is_remote(spec):
        return None
    directory = local_path(spec)
    if not directory.is_dir() or all(path.is_file() for path in standard_files(directory)):
        return None
    return directory if is_manylangs_directory(directory) else None


def directory_files(spec: str) -> Tuple[Path, Path]:
    """The two files of a local directory (``spec`` may be a ``file://`` URL)."""
    directory = local_path(spec)
    if not directory.is_dir():
        names = ", ".join(registered_models())
        raise ValueError(
            f"elmo: no biLM {spec!r}: it is not a registered name ({names}), an http(s):// or file:// URL, or "
            "a directory holding options.json and weights.hdf5. `spacy-elmo models` lists the names"
        )
    standard = standard_files(directory)
    if all(path.is_file() for path in standard):
        return standard
    options, weights = sorted(directory.glob("*options*.json")), sorted(directory.glob("*weights*.hdf5"))
    if len(options) == 1 and len(weights) == 1:
        return options[0], weights[0]
    if is_manylangs_directory(directory):
        raise ValueError(
            f"elmo: {directory} holds an ELMoForManyLangs model, which has no options.json + weights.hdf5: "
            "load it by its directory (BiLM.from_pretrained, or pretrained = the directory in the config)"
        )
    raise ValueError(
        f"elmo: {directory} holds no options.json + weights.hdf5 (found {[p.name for p in options + weights]}): "
        "rename them so, or give options_file and weight_file"
    )


def is_remote(spec: str) -> bool:
    return urllib.parse.urlsplit(spec).scheme in REMOTE_SCHEMES


def local_path(spec: str) -> Path:
    """A path, or the path of a ``file://`` URL."""
    parts = urllib.parse.urlsplit(spec)
    if parts.scheme == "file":
        return Path(urllib.request.url2pathname(parts.path))
    return Path(spec).expanduser()


def as_url(spec: str) -> str:
    """``spec`` as a URL: local paths become ``file://`` URLs (copied into the cache beside a remote file)."""
    return spec if urllib.parse.urlsplit(spec).scheme in (*REMOTE_SCHEMES, "file") else local_path(spec).resolve().as_uri()


def _url_directory(url: str, suffix: str = "", extra: str = "") -> Path:
    """``CACHE/urls/HOST/PATH`` for ``url``: readable, and distinct for distinct URLs (``extra`` too)."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path[: -len(suffix)] if suffix and parts.path.endswith(suffix) else parts.path
    segments = [re.sub(r"[^A-Za-z0-9._-]", "_", s) for s in path.split("/") if s not in ("", ".", "..")]
    leaf = "-".join(filter(None, [segments.pop() if segments else "root", _short_hash(parts.query, extra)]))
    host = re.sub(r"[^A-Za-z0-9._-]", "_", parts.netloc)
    return cache_root().joinpath("urls", host, *segments, leaf)


def _short_hash(*texts: str) -> str:
    """8 hex digits that tell apart URLs whose readable part is the same; empty when there is nothing to tell."""
    text = "\n".join(texts)
    return hashlib.sha256(text.encode("utf8")).hexdigest()[:8] if text.strip() else ""
