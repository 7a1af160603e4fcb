"""The published ELMo biLMs, by name: where their files are, and what a user needs to choose one.

Every entry is in the bilm-tf / AllenNLP layout (``options.json`` + ``weights.hdf5``), so it loads
with :meth:`~spacy_elmo.bilm.BiLM.from_files` once downloaded (see :mod:`.cache`). Sizes and
widths are given only where a publisher states them; no publisher documents a sha256, so none is
pinned here: the cache records one at the first download instead. ``en`` has no URL: it ships
inside the package.

``SPACY_ELMO_MODELS=FILE.json`` adds entries or overrides fields of the built-in ones (an internal
mirror, a private model), because published hosts move and some machines reach only a mirror.
"""

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

MODELS_ENV = "SPACY_ELMO_MODELS"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_ALLENNLP = "https://allennlp.s3.amazonaws.com/models/elmo/"
_ALLENNLP_LICENSE = "not stated by AllenNLP (its code: Apache-2.0)"
_ONE_BILLION = "1B Word Benchmark (~800 M tokens of news)"


@dataclass(frozen=True)
class PublishedModel:
    """One biLM: the URLs of its two files and what is known of it (None: not published).

    ``weights_bytes`` and ``weights_sha256`` are checked before a download is kept; ``width`` is
    the output width (2 x projection_dim); ``params_millions`` the parameter count.
    """

    name: str
    options_url: Optional[str] = None
    weights_url: Optional[str] = None
    weights_bytes: Optional[int] = None
    weights_sha256: Optional[str] = None
    width: Optional[int] = None
    params_millions: Optional[float] = None
    training_text: str = ""
    language: str = ""
    license: str = ""

    @property
    def bundled(self) -> bool:
        """Whether the files ship inside the package rather than being downloaded."""
        return self.options_url is None and self.weights_url is None

    @property
    def megabytes(self) -> Optional[float]:
        """Size of the weight file: exact where known, else 4 bytes per parameter."""
        if self.weights_bytes is not None:
            return self.weights_bytes / 1e6
        return None if self.params_millions is None else self.params_millions * 4


def _allennlp(name: str, path: str, options: str, weights: str, **fields: Any) -> PublishedModel:
    return PublishedModel(name, _ALLENNLP + path + options, _ALLENNLP + path + weights, **fields)


BUILTIN: Dict[str, PublishedModel] = {
    model.name: model
    for model in (
        PublishedModel(
            "en", width=256, params_millions=7.0, language="en", license="MIT (spacy-elmo)",
            training_text="3.95 M tokens: speeches, Brown corpus, Moby Dick, news, reviews, tweets (bundled)",
        ),
        _allennlp(
            "small", "2x1024_128_2048cnn_1xhighway/", "elmo_2x1024_128_2048cnn_1xhighway_options.json",
            "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5", width=256, params_millions=13.6,
            training_text=_ONE_BILLION, language="en", license=_ALLENNLP_LICENSE,
        ),
        _allennlp(
            "medium", "2x2048_256_2048cnn_1xhighway/", "elmo_2x2048_256_2048cnn_1xhighway_options.json",
            "elmo_2x2048_256_2048cnn_1xhighway_weights.hdf5", width=512, params_millions=28.0,
            training_text=_ONE_BILLION, language="en", license=_ALLENNLP_LICENSE,
        ),
        _allennlp(
            "original", "2x4096_512_2048cnn_2xhighway/", "elmo_2x4096_512_2048cnn_2xhighway_options.json",
            "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5", weights_bytes=374_434_792, width=1024,
            params_millions=93.6, training_text=_ONE_BILLION, language="en", license=_ALLENNLP_LICENSE,
        ),
        _allennlp(
            "original-5.5b", "2x4096_512_2048cnn_2xhighway_5.5B/",
            "elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.json",
            "elmo_2x4096_512_2048cnn_2xhighway_5.5B_weights.hdf5", width=1024, params_millions=93.6,
            training_text="Wikipedia 1.9 B + WMT 2008-2012 news 3.6 B tokens", language="en",
            license=_ALLENNLP_LICENSE,
        ),
        _allennlp(
            "pubmed", "contributed/pubmed/", "elmo_2x4096_512_2048cnn_2xhighway_options.json",
            "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5", weights_bytes=374_434_792,
            width=1024, params_millions=93.6, training_text="PubMed", language="en", license=_ALLENNLP_LICENSE,
        ),
        _allennlp(
            "pt-wikipedia", "contributed/pt/wikipedia/", "options.json", "elmo_pt_weights.hdf5",
            training_text="Portuguese Wikipedia", language="pt", license="not stated by its publisher",
        ),
        _allennlp(
            "pt-brwac", "contributed/pt/brwac/", "options.json", "elmo_pt_weights_dgx1.hdf5",
            training_text="brWaC (Brazilian Portuguese web corpus)", language="pt",
            license="not stated by its publisher",
        ),
        PublishedModel(
            "ja", "https://exawizardsallenlp.blob.core.windows.net/data/options.json",
            "https://exawizardsallenlp.blob.core.windows.net/data/weights.hdf5",
            training_text="Japanese text (ExaWizards)", language="ja", license="not stated by its publisher",
        ),
        PublishedModel(
            "de", "https://github.com/t-systems-on-site-services-gmbh/german-elmo-model/releases/download/files_1/options.json",
            "https://github.com/t-systems-on-site-services-gmbh/german-elmo-model/releases/download/files_1/weights.hdf5",
            training_text="German Wikipedia and comments, 963 M tokens", language="de",
            license="BSD-2-Clause (its repository)",
        ),
        PublishedModel(
            "eu", "https://schweter.eu/cloud/eu-elmo/options.json", "https://schweter.eu/cloud/eu-elmo/weights.hdf5",
            training_text="Basque: Wikipedia, OPUS, Leipzig, 72.7 M tokens", language="eu",
            license="not stated by its publisher",
        ),
    )
}

# The type of each field an override may set: numbers for sizes, text for the rest.
_FIELDS = {
    field.name: (int,) if field.name in ("weights_bytes", "width") else (int, float) if field.name == "params_millions" else (str,)
    for field in dataclasses.fields(PublishedModel)
    if field.name != "name"
}
SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")


def registered_models() -> Dict[str, PublishedModel]:
    """The built-in entries, updated by the file that ``SPACY_ELMO_MODELS`` names (read at each call)."""
    path = os.environ.get(MODELS_ENV)
    if not path:
        return dict(BUILTIN)
    models = dict(BUILTIN)
    for name, fields in _read_overrides(Path(path)).items():
        base = models.get(name, PublishedModel(name))
        models[name] = dataclasses.replace(base, **fields)
        if models[name].bundled and name not in BUILTIN:
            raise ValueError(f"{MODELS_ENV}={path}: the entry {name!r} needs options_url and weights_url")
    return models


def find_model(name: str) -> Optional[PublishedModel]:
    """The registry entry called ``name``, or None."""
    return registered_models().get(name)


def _read_overrides(path: Path) -> Dict[str, Dict[str, Any]]:
    """``{name: {field: value}}`` from a registry file, every name and field checked."""
    try:
        data = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{MODELS_ENV}={path} is not a readable JSON file: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f'{MODELS_ENV}={path}: expected {{"NAME": {{"options_url": ..., "weights_url": ...}}}}')
    for name, fields in data.items():
        if not NAME_PATTERN.fullmatch(name) or name == "urls":
            raise ValueError(f"{MODELS_ENV}={path}: {name!r} is not a valid name (letters, digits, '.', '_', '-')")
        if not isinstance(fields, dict):
            raise ValueError(f"{MODELS_ENV}={path}: the entry {name!r} must be an object of fields")
        unknown = sorted(set(fields) - set(_FIELDS))
        if unknown:
            raise ValueError(
                f"{MODELS_ENV}={path}: the entry {name!r} has unknown fields {', '.join(unknown)}; "
                f"the fields are: {', '.join(_FIELDS)}"
            )
        for field, value in fields.items():
            _check_field(path, name, field, value)
    return data


def _check_field(path: Path, name: str, field: str, value: Any) -> None:
    """Refuse a value of the wrong kind now, rather than as a puzzling failure at download."""
    wrong_type = value is not None and (isinstance(value, bool) or not isinstance(value, _FIELDS[field]))
    if wrong_type or (field == "weights_sha256" and value is not None and not SHA256_PATTERN.fullmatch(value)):
        expected = "64 lowercase hex digits" if field == "weights_sha256" else " or ".join(t.__name__ for t in _FIELDS[field])
        raise ValueError(f"{MODELS_ENV}={path}: {name}.{field} = {value!r}, expected {expected}")
