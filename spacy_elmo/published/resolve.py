"""One way to name a biLM everywhere: a registry NAME, a URL, or a local DIRECTORY.

- NAME: an entry of :mod:`.registry` (``original-5.5b``, ``pubmed``, ``manylangs-de``, the bundled
  ``en`` ...): downloaded once into the cache (:mod:`.cache`), two files or an archive extracted
  there, or read from the package for a bundled one. An entry whose URL is not established is a
  clear error saying how to add it (:func:`.registry.unconfirmed_message`).
- URL (``https://``, ``http://``): a directory on a web server holding ``options.json`` and
  ``weights.hdf5`` (a mirror, a private host), or an archive (``.zip``, ``.tar.gz``, ``.tgz``,
  ``.tar.bz2``) holding a model, cached like a name. ``file://`` is a local path.
- DIRECTORY: ``options.json`` + ``weights.hdf5``, or one ``*options*.json`` and one
  ``*weights*.hdf5`` (or only one ``*.hdf5``) as AllenNLP and the NLPL repository name them; or an
  ELMoForManyLangs model (``config.json``, ``char.dic``, ``word.dic``, ``token_embedder.pkl``,
  ``encoder.pkl``: :func:`manylangs_directory`, loaded by ``BiLM.from_pretrained``). A registry
  name wins over a directory of the same name: write ``./small`` for the directory.

Separate ``options_file`` / ``weight_file`` may each be a path or a URL (:func:`resolve_files`).
``check`` loads a downloaded pair before it is kept (``BiLM.from_files``: see :mod:`.cache`);
:func:`load_pretrained` returns that load rather than reading the weights a second time. An
archive's model is checked the same way when it is in the standard layout, and with
``check_directory`` / ``load_directory`` (an ELMoForManyLangs directory's loader, which this
package, below :mod:`spacy_elmo.bilm`, cannot import) when it is in ELMoForManyLangs' layout.
"""

import contextlib
import hashlib
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple, TypeVar, Union

from ..fileio import OPTIONS_NAME, WEIGHTS_NAME, standard_files
from . import PRETRAINED, pretrained_files
from .cache import OfflineError, cache_root, fetch
from .download import DownloadError
from .layout import STANDARD, is_manylangs_directory, standard_pair
from .registry import PublishedModel, find_model, registered_models, unconfirmed_message
from .sources import ArchiveSource, Check, Source

REMOTE_SCHEMES = ("http", "https")
# What a URL of an archive ends with (anything else is a directory of two files).
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".tar")

Loaded = TypeVar("Loaded")
# Loads (options.json, weights.hdf5); the flag says whether to check the weights' values (NaN,
# infinities): False for a cached pair unchanged since its check.
Load = Callable[[Path, Path, bool], Loaded]
# Loads an ELMoForManyLangs model directory, with the same flag.
LoadDirectory = Callable[[Path, bool], Loaded]
# Checks an ELMoForManyLangs model directory (loads it, or raises ValueError).
CheckDirectory = Callable[[Path], object]


class UnconfirmedError(ValueError):
    """A registry entry whose download URL is not established: the message says how to add it."""


def load_pretrained(
    spec: str, load: "Load[Loaded]", progress: bool = True, load_directory: "Optional[LoadDirectory[Loaded]]" = None
) -> Loaded:
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
    if isinstance(source, ArchiveSource):

        def check_model(directory: Path, kind: str) -> Loaded:
            checked.append(_load_model_directory(directory, kind, load, load_directory, True))
            return checked[-1]

        with _noted(spec):
            directory, kind = fetch(source, check_model, progress=progress)
        return checked[-1] if checked else _load_model_directory(directory, kind, load, load_directory, False)

    def check(options_file: Path, weight_file: Path) -> Loaded:
        checked.append(load(options_file, weight_file, True))
        return checked[-1]

    with _noted(spec):
        files = fetch(source, check, progress=progress)
    return checked[-1] if checked else load(*files, False)


def resolve_pretrained(
    spec: str, check: Check, progress: bool = True, check_directory: Optional[CheckDirectory] = None
) -> Tuple[Path, Path]:
    """``(options.json, weights.hdf5)`` of the biLM that ``spec`` (NAME, URL or DIRECTORY) names,
    downloading it into the cache the first time. An archive holding an ELMoForManyLangs model
    (which has no such files) is an error, once cached where ``check_directory`` is given."""
    source = source_for(spec)
    if isinstance(source, ArchiveSource):
        with _noted(spec):
            directory, kind = fetch(source, _model_check(check, check_directory), progress=progress)
        if kind != STANDARD:
            raise ValueError(_no_standard_files(spec, directory))
        pair = standard_pair(directory)
        assert pair is not None  # found so at extraction
        return pair
    if source is not None:
        with _noted(spec):
            return fetch(source, check, progress=progress)
    return pretrained_files(spec) if spec in PRETRAINED else directory_files(spec)


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
    spec: str,
    check: Check,
    force: bool = False,
    progress: bool = True,
    verify: bool = False,
    check_directory: Optional[CheckDirectory] = None,
) -> Tuple[Path, ...]:
    """Fetch NAME or URL into the cache ahead of use (``force``: again, whatever is cached;
    ``verify``: check a cached copy's sha256 against its record, reading every file). Returns
    ``(options.json, weights.hdf5)``, or ``(model directory,)`` for an archive."""
    source = source_for(spec)
    if source is None:
        where = "ships inside the package" if spec in PRETRAINED else "is not a registry name or an http(s) URL"
        raise ValueError(f"nothing to download: {spec!r} {where}. `spacy-elmo models` lists the names")
    with _noted(spec):
        if isinstance(source, ArchiveSource):
            check_model = _model_check(check, check_directory)
            return (fetch(source, check_model, force=force, progress=progress, verify=verify)[0],)
        return fetch(source, check, force=force, progress=progress, verify=verify)


@contextlib.contextmanager
def _noted(spec: str) -> Iterator[None]:
    """A download error of a registry entry that has a ``note`` (what is not established about
    it, e.g. an inferred URL) ends with that note."""
    try:
        yield
    except OfflineError:
        raise
    except DownloadError as err:
        model = find_model(spec)
        if model is None or not model.note:
            raise
        raise DownloadError(f"{str(err).rstrip('.')}. Note on {spec!r}: {model.note}") from err


def _model_check(check: Check, check_directory: Optional[CheckDirectory]) -> Callable[[Path, str], object]:
    """The check of an archive's model directory: ``check`` of its pair, or ``check_directory``."""

    def check_model(directory: Path, kind: str) -> object:
        if kind == STANDARD:
            pair = standard_pair(directory)
            assert pair is not None
            return check(*pair)
        if check_directory is None:
            raise ValueError(_no_standard_files(str(directory), directory))
        return check_directory(directory)

    return check_model


def _load_model_directory(
    directory: Path,
    kind: str,
    load: "Load[Loaded]",
    load_directory: "Optional[LoadDirectory[Loaded]]",
    check_values: bool,
) -> Loaded:
    if kind == STANDARD:
        pair = standard_pair(directory)
        if pair is None:
            raise ValueError(f"elmo: {directory} no longer holds options.json + weights.hdf5")
        return load(*pair, check_values)
    if load_directory is None:
        raise ValueError(_no_standard_files(str(directory), directory))
    return load_directory(directory, check_values)


def _no_standard_files(spec: str, directory: Path) -> str:
    return (
        f"elmo: {spec} is an ELMoForManyLangs model ({directory}), which has no options.json + weights.hdf5: "
        "load it with BiLM.from_pretrained or pretrained = NAME in the elmo component; commands that need "
        "the two standard files (pretrain --init-from-model, embed --model) cannot use it"
    )


def source_for(spec: str) -> Optional[Union[Source, ArchiveSource]]:
    """Where NAME or URL is downloaded from and cached; None for a bundled biLM or a directory.

    Raises :class:`UnconfirmedError` for a registry entry whose URL is not established.
    """
    model = find_model(spec)
    if model is not None and model.unconfirmed:
        raise UnconfirmedError(f"elmo: {unconfirmed_message(model)}")
    if model is not None and not model.bundled:
        return named_source(model)
    if model is None and is_remote(spec):
        path, fix = urllib.parse.urlsplit(spec).path, f"run `spacy-elmo download {spec} --force`"
        if path.lower().endswith(ARCHIVE_SUFFIXES):
            return ArchiveSource(spec, spec, _url_directory(spec), fix)
        if re.search(r"\.(json|hdf5|h5)$", path):
            raise ValueError(
                f"pretrained = {spec!r} names one file; a URL there is a directory holding options.json and "
                "weights.hdf5, or an archive (.zip, .tar.gz, .tar.bz2). For two files elsewhere, set options_file "
                "and weight_file to their URLs"
            )
        base = spec.rstrip("/")
        return Source(spec, f"{base}/{OPTIONS_NAME}", f"{base}/{WEIGHTS_NAME}", _url_directory(base), fix)
    return None


def named_source(model: PublishedModel) -> Union[Source, ArchiveSource]:
    """The download of a registry entry (an archive, or two files), cached under its name."""
    fix = f"run `spacy-elmo download {model.name} --force`"
    if model.archive_url is not None:
        return ArchiveSource(
            model.name, model.archive_url, cache_root() / model.name, fix, model.archive_bytes, model.archive_sha256
        )
    assert model.options_url is not None and model.weights_url is not None, model.name
    return Source(
        model.name, model.options_url, model.weights_url, cache_root() / model.name, fix, model.weights_bytes,
        model.weights_sha256, model.alternate_options_url, model.alternate_weights_url, model.options_md5,
        model.weights_md5, model.weights_sha1,
    )  # fmt: skip


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
    if (pair := standard_pair(directory)) is not None:
        return pair
    options, weights = sorted(directory.glob("*options*.json")), sorted(directory.glob("*.hdf5"))
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
    return (
        spec if urllib.parse.urlsplit(spec).scheme in (*REMOTE_SCHEMES, "file") else local_path(spec).resolve().as_uri()
    )


def _url_directory(url: str, suffix: str = "", extra: str = "") -> Path:
    """``CACHE/urls/HOST/PATH`` for ``url``: readable, and distinct for distinct URLs (``extra`` too)."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path[: -len(suffix)] if suffix and parts.path.endswith(suffix) else parts.path
    segments = [re.sub(r"[^A-Za-z0-9._-]", "_", s) for s in path.split("/") if s not in ("", ".", "..")]
    text = f"{parts.query}\n{extra}"  # 8 hex digits of it tell apart URLs whose readable part is the same
    digest = hashlib.sha256(text.encode("utf8")).hexdigest()[:8] if text.strip() else ""
    leaf = "-".join(filter(None, [segments.pop() if segments else "root", digest]))
    host = re.sub(r"[^A-Za-z0-9._-]", "_", parts.netloc)
    return cache_root().joinpath("urls", host, *segments, leaf)
