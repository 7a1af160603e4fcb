"""The published ELMo biLMs, by name: where their files are, and what a user needs to choose one.

An entry is downloaded (see :mod:`.cache`) in one of two ways:

- ``options_url`` + ``weights_url``: the two files of the bilm-tf / AllenNLP layout
  (``options.json`` + ``weights.hdf5``), loaded with :meth:`~spacy_elmo.bilm.BiLM.from_files`.
  ``alternate_options_url`` / ``alternate_weights_url`` name the same files elsewhere (AllenNLP
  publishes its bucket under two host names): tried when the first URL fails.
- ``archive_url``: a zip, tar.gz or tar.bz2 holding a model directory, in the standard layout or in
  ELMoForManyLangs' own (``format``), possibly in a subdirectory: extracted safely into the cache.

Sizes, widths and checksums are given only where a publisher states them (``weights_md5`` and
``weights_sha1``: the German model's authors publish those); no publisher documents a sha256,
so none is pinned here: the cache records one at the first download instead. ``en`` has no URL: it
ships inside the package. An entry whose URL could not be established from its publisher's pages
has none: ``page`` says where it is listed and ``note`` what is missing, and ``spacy-elmo
download`` says how to add the URL (:func:`unconfirmed_message`). ``note`` also says what else
is not established about an entry.

``SPACY_ELMO_MODELS=FILE.json`` adds entries or overrides fields of the built-in ones (an internal
mirror, a private model, a URL confirmed later), because published hosts move and some machines
reach only a mirror.
"""

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from . import PRETRAINED
from .languages import LANGUAGE_NAMES, language_name, same_language
from .layout import MANYLANGS, STANDARD
from .settings import MODELS_ENV, download_settings

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

FORMATS = (STANDARD, MANYLANGS)

_ALLENNLP = "https://allennlp.s3.amazonaws.com/models/elmo/"
# The same bucket under the host name AllenNLP's own pages use for small, medium, pubmed and the
# Portuguese models (and its older pages for all of them).
_ALLENNLP_ALTERNATE = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/"
_ALLENNLP_LICENSE = "not stated by AllenNLP (its code: Apache-2.0)"
_ALLENNLP_PAGE = "https://allennlp.org/elmo"
_PETERS = (
    "Peters, Neumann, Iyyer, Gardner, Clark, Lee, Zettlemoyer (2018): Deep contextualized word representations. "
    "NAACL-HLT 2018"
)
_ONE_BILLION = "1B Word Benchmark (~800 M tokens of news)"

_NLPL = "http://vectors.nlpl.eu/repository/"
_NLPL_CITATION = (
    "Fares, Kutuzov, Oepen, Velldal (2017): Word vectors, reuse, and replicability: Towards a community "
    "repository of large-text resources. NoDaLiDa 2017 (the NLPL repository, which hosts it)"
)
_MANYLANGS_CITATION = (
    "Che, Liu, Wang, Zheng, Liu (2018): Towards Better UD Parsing: Deep Contextualized Word Embeddings, "
    "Ensemble, and Treebank Concatenation. CoNLL 2018 Shared Task; and " + _NLPL_CITATION
)
_MANYLANGS_LICENSE = "not stated by HIT-SCIR for the models (its code: MIT)"
_MANYLANGS_PAGE = "https://github.com/HIT-SCIR/ELMoForManyLangs"
_MANYLANGS_TEXT = "20 M words sampled from the CoNLL 2018 shared task's raw text (Wikipedia dump + Common Crawl)"
# The tables below are laid out by hand, a model or a row of languages to a line.
# fmt: off
# ELMoForManyLangs' README table: NLPL repository id (http://vectors.nlpl.eu/repository/11/ID.zip)
# -> the language it names (elmoformanylangs 0.0.4.post2's long description, the README's copy).
_MANYLANGS_IDS: Dict[int, str] = {
    136: "ar", 137: "bg", 138: "ca", 139: "cs", 140: "cu", 141: "da", 142: "de", 143: "el", 144: "en",
    145: "es", 146: "et", 147: "eu", 148: "fa", 149: "fi", 150: "fr", 151: "ga", 152: "gl", 153: "grc",
    154: "he", 155: "hi", 156: "hr", 157: "hu", 158: "id", 159: "it", 160: "ja", 161: "ko", 162: "la",
    163: "lv", 164: "nl", 165: "nb", 166: "nn", 167: "pl", 168: "pt", 169: "ro", 170: "ru", 171: "sk",
    172: "sl", 173: "sv", 174: "tr", 175: "ug", 176: "uk", 177: "ur", 178: "vi", 179: "zh",
}

_NORELMO_CITATION = (
    "Kutuzov, Barnes, Velldal, Øvrelid, Oepen (2021): Large-Scale Contextualised Language Modelling for "
    "Norwegian. NoDaLiDa 2021"
)
_NORELMO_PAGE = "https://wiki.nlpl.eu/Vectors/norlm/norelmo"
_NORELMO_NOTE = (
    "the /repository/20/ path is inferred, not read on the NorELMo page: the NLPL repository serves every "
    "id from 180 to 220 seen in public code (180, 182, 212, 213, 214, 220) there; confirm it on "
    "http://vectors.nlpl.eu/repository/"
)

_EMBEDDIA_PAGE = "http://hdl.handle.net/11356/1277"
_EMBEDDIA_CITATION = (
    "Ulčar, Robnik-Šikonja (2020): High Quality ELMo Embeddings for Seven Less-Resourced Languages. "
    "LREC 2020 (arXiv:1911.10049)"
)
_EMBEDDIA_LICENSE = "not stated here: see the CLARIN.SI page, http://hdl.handle.net/11356/1277"
_EMBEDDIA_UNCONFIRMED = (
    "the archive's URL on CLARIN.SI is to be confirmed: the handle page lists one archive per language "
    "(only the Slovenian one, slovenian-elmo.tar.gz, is confirmed here)"
)


@dataclass(frozen=True)
class PublishedModel:
    """One biLM: the URLs of its files and what is known of it (None / "": not published).

    ``weights_bytes``, ``weights_sha256``, ``options_md5``, ``weights_md5``, ``weights_sha1``,
    ``archive_bytes`` and ``archive_sha256`` are checked before a download is kept; ``width`` is
    the output width (2 x projection_dim); ``params_millions`` the parameter count; ``format``
    the layout of an archive's model (``standard`` or ``elmoformanylangs``; found on extraction
    whatever it says).
    """

    name: str
    options_url: Optional[str] = None
    weights_url: Optional[str] = None
    archive_url: Optional[str] = None
    alternate_options_url: Optional[str] = None
    alternate_weights_url: Optional[str] = None
    weights_bytes: Optional[int] = None
    weights_sha256: Optional[str] = None
    options_md5: Optional[str] = None
    weights_md5: Optional[str] = None
    weights_sha1: Optional[str] = None
    archive_bytes: Optional[int] = None
    archive_sha256: Optional[str] = None
    width: Optional[int] = None
    params_millions: Optional[float] = None
    training_text: str = ""
    language: str = ""
    license: str = ""
    citation: str = ""
    format: str = STANDARD
    page: str = ""
    note: str = ""

    @property
    def downloadable(self) -> bool:
        """Whether the registry knows where to download it: an archive, or both files."""
        return self.archive_url is not None or (self.options_url is not None and self.weights_url is not None)

    @property
    def bundled(self) -> bool:
        """Whether the files ship inside the package rather than being downloaded."""
        return self.name in PRETRAINED and not self.downloadable

    @property
    def unconfirmed(self) -> bool:
        """Published, but its URL is not established: ``spacy-elmo download`` says how to add it."""
        return not self.bundled and not self.downloadable

    @property
    def url(self) -> Optional[str]:
        """The URL that identifies its download: the archive, else the weights."""
        return self.archive_url or self.weights_url

    @property
    def megabytes(self) -> Optional[float]:
        """Size of the weight file: exact where known, else 4 bytes per parameter."""
        if self.weights_bytes is not None:
            return self.weights_bytes / 1e6
        return None if self.params_millions is None else self.params_millions * 4

    def to_json(self) -> Dict[str, Any]:
        """Every field but the name, as JSON values."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.name != "name"}


def _allennlp(name: str, path: str, options: str, weights: str, **fields: Any) -> PublishedModel:
    return PublishedModel(
        name, _ALLENNLP + path + options, _ALLENNLP + path + weights,
        alternate_options_url=_ALLENNLP_ALTERNATE + path + options,
        alternate_weights_url=_ALLENNLP_ALTERNATE + path + weights,
        page=_ALLENNLP_PAGE, **fields,
    )


def _manylangs(nlpl_id: int, language: str) -> PublishedModel:
    return PublishedModel(
        f"manylangs-{language}", archive_url=f"{_NLPL}11/{nlpl_id}.zip", width=1024, language=language,
        training_text=f"{LANGUAGE_NAMES[language]}: {_MANYLANGS_TEXT}", license=_MANYLANGS_LICENSE,
        citation=_MANYLANGS_CITATION, format=MANYLANGS, page=_MANYLANGS_PAGE,
    )


def _norelmo(name: str, nlpl_id: int, training_text: str) -> PublishedModel:
    return PublishedModel(
        name, archive_url=f"{_NLPL}20/{nlpl_id}.zip", language="no", training_text=training_text,
        license="CC BY 4.0 (NorLM: Kutuzov et al. 2021)", citation=_NORELMO_CITATION, page=_NORELMO_PAGE,
        note=f"NLPL repository id {nlpl_id}; {_NORELMO_NOTE}",
    )


def _embeddia(language: str, archive_url: Optional[str] = None) -> PublishedModel:
    return PublishedModel(
        f"embeddia-{language}", archive_url=archive_url, width=1024, language=language,
        training_text=f"{LANGUAGE_NAMES[language]} (EMBEDDIA: Ulčar and Robnik-Šikonja 2020)",
        license=_EMBEDDIA_LICENSE, citation=_EMBEDDIA_CITATION, page=_EMBEDDIA_PAGE,
        note="" if archive_url else _EMBEDDIA_UNCONFIRMED,
    )


_GERMAN = "https://github.com/t-systems-on-site-services-gmbh/german-elmo-model/releases/download/files_1/"

BUILTIN: Dict[str, PublishedModel] = {
    model.name: model
    for model in (
        PublishedModel(
            "en", width=256, params_millions=7.0, language="en", license="MIT (spacy-elmo)",
            training_text="3.95 M tokens: speeches, Brown corpus, Moby Dick, news, reviews, tweets (bundled)",
            citation="spacy-elmo's bundled biLM (spacy_elmo/published/en/README.md)",
        ),
        _allennlp(
            "small", "2x1024_128_2048cnn_1xhighway/", "elmo_2x1024_128_2048cnn_1xhighway_options.json",
            "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5", width=256, params_millions=13.6,
            training_text=_ONE_BILLION, language="en", license=_ALLENNLP_LICENSE, citation=_PETERS,
        ),
        _allennlp(
            "medium", "2x2048_256_2048cnn_1xhighway/", "elmo_2x2048_256_2048cnn_1xhighway_options.json",
            "elmo_2x2048_256_2048cnn_1xhighway_weights.hdf5", width=512, params_millions=28.0,
            training_text=_ONE_BILLION, language="en", license=_ALLENNLP_LICENSE, citation=_PETERS,
        ),
        _allennlp(
            "original", "2x4096_512_2048cnn_2xhighway/", "elmo_2x4096_512_2048cnn_2xhighway_options.json",
            "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5", weights_bytes=374_434_792, width=1024,
            params_millions=93.6, training_text=_ONE_BILLION, language="en", license=_ALLENNLP_LICENSE,
            citation=_PETERS,
        ),
        _allennlp(
            "original-5.5b", "2x4096_512_2048cnn_2xhighway_5.5B/",
            "elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.json",
            "elmo_2x4096_512_2048cnn_2xhighway_5.5B_weights.hdf5", width=1024, params_millions=93.6,
            training_text="Wikipedia 1.9 B + WMT 2008-2012 news 3.6 B tokens", language="en",
            license=_ALLENNLP_LICENSE, citation=_PETERS,
        ),
        _allennlp(
            "pubmed", "contributed/pubmed/", "elmo_2x4096_512_2048cnn_2xhighway_options.json",
            "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5", weights_bytes=374_434_792,
            width=1024, params_millions=93.6, training_text="PubMed", language="en", license=_ALLENNLP_LICENSE,
            citation=f"not stated by its contributor; the architecture: {_PETERS}",
        ),
        _allennlp(
            "pt-wikipedia", "contributed/pt/wikipedia/", "options.json", "elmo_pt_weights.hdf5",
            training_text="Portuguese Wikipedia", language="pt", license="not stated by its publisher",
            citation=f"not stated by its contributor; the architecture: {_PETERS}",
        ),
        _allennlp(
            "pt-brwac", "contributed/pt/brwac/", "options.json", "elmo_pt_weights_dgx1.hdf5",
            training_text="brWaC (Brazilian Portuguese web corpus)", language="pt",
            license="not stated by its publisher",
            citation=f"not stated by its contributor; the architecture: {_PETERS}",
        ),
        PublishedModel(
            "ja", "https://exawizardsallenlp.blob.core.windows.net/data/options.json",
            "https://exawizardsallenlp.blob.core.windows.net/data/weights.hdf5",
            training_text="Japanese Wikipedia (ExaWizards)", language="ja", license="not stated by its publisher",
            citation="not stated by its publisher (ExaWizards)", page=_ALLENNLP_PAGE,
        ),
        PublishedModel(
            "de", _GERMAN + "options.json", _GERMAN + "weights.hdf5",
            options_md5="da99676f2fe2838ff2663a6d9bad97dd", weights_md5="f3ab3a68caae6d42bac47c230b3a65bf",
            weights_sha1="9084adab3eefaed4f07da7331217fcb873417add",
            training_text="German Wikipedia and comments, 963 M tokens", language="de",
            license="BSD-2-Clause (its repository)",
            citation="T-Systems on site services GmbH: German ELMo Model, "
            "https://github.com/t-systems-on-site-services-gmbh/german-elmo-model",
            page="https://github.com/t-systems-on-site-services-gmbh/german-elmo-model",
        ),
        PublishedModel(
            "eu", "https://schweter.eu/cloud/eu-elmo/options.json", "https://schweter.eu/cloud/eu-elmo/weights.hdf5",
            training_text="Basque: Wikipedia, OPUS, Leipzig, 72.7 M tokens", language="eu",
            license="not stated by its publisher", citation="not stated by its publisher (Stefan Schweter)",
        ),
        PublishedModel(
            "ta", "https://schweter.eu/cloud/ta-elmo/options.json", "https://schweter.eu/cloud/ta-elmo/weights.hdf5",
            training_text="Tamil (its corpus is not stated in the sources read here)", language="ta",
            license="not stated by its publisher", citation="not stated by its publisher (Stefan Schweter)",
        ),
        *(_manylangs(nlpl_id, language) for nlpl_id, language in _MANYLANGS_IDS.items()),
        PublishedModel(
            "manylangs-zh-simplified", archive_url="http://39.96.43.154/zhs.model.tar.bz2", width=1024,
            language="zh", license=_MANYLANGS_LICENSE, format=MANYLANGS, page=_MANYLANGS_PAGE,
            training_text="Simplified Chinese: the Xinhua portion of Chinese Gigaword v5 (manylangs-zh is "
            "Traditional Chinese, from Wikipedia)",
            citation=_MANYLANGS_CITATION.split("; and ")[0],
        ),
        _norelmo("norelmo-wiki-lemmas", 210, "lemmatized Norwegian Wikipedia (September 2020), about 160 M words"),
        _norelmo("norelmo-wiki", 211, "tokenized Norwegian Wikipedia (September 2020), about 160 M words"),
        _norelmo("norelmo30", 217, "NorBERT's corpus (Wikipedia + Norsk Aviskorpus), 30 000-word target vocabulary"),
        _norelmo("norelmo100", 218, "NorBERT's corpus (Wikipedia + Norsk Aviskorpus), 100 000-word target vocabulary"),
        *(_embeddia(language) for language in ("hr", "et", "fi", "lv", "lt")),
        _embeddia("sl", "https://www.clarin.si/repository/xmlui/bitstream/handle/11356/1277/slovenian-elmo.tar.gz"),
        _embeddia("sv"),
    )
}
# fmt: on

# The type of each field an override may set: numbers for sizes, text for the rest.
_NUMBER_FIELDS = ("weights_bytes", "width", "archive_bytes")
_FIELDS = {
    field.name: (int,) if field.name in _NUMBER_FIELDS else (int, float) if field.name == "params_millions" else (str,)
    for field in dataclasses.fields(PublishedModel)
    if field.name != "name"
}
# Checksum fields and the lowercase hex digits each takes.
_DIGEST_LENGTHS = {"weights_sha256": 64, "archive_sha256": 64, "options_md5": 32, "weights_md5": 32, "weights_sha1": 40}
# A URL an override replaces drops the alternate of the URL it replaced (an alternate of a mirror
# is for the override to give).
_ALTERNATES = {"options_url": "alternate_options_url", "weights_url": "alternate_weights_url"}


def registered_models() -> Dict[str, PublishedModel]:
    """The built-in entries, updated by the file that ``SPACY_ELMO_MODELS`` names (read at each call)."""
    path, models = download_settings().models_file, dict(BUILTIN)
    if path is None:
        return models
    for name, fields in _read_overrides(path).items():
        base = models.get(name, PublishedModel(name))
        dropped: Dict[str, Any] = {
            alternate: None
            for url, alternate in _ALTERNATES.items()
            if url in fields and fields[url] != getattr(base, url) and alternate not in fields
        }
        models[name] = model = dataclasses.replace(base, **dropped, **fields)
        if (model.options_url is None) != (model.weights_url is None) and model.archive_url is None:
            raise ValueError(f"{MODELS_ENV}={path}: the entry {name!r} needs both options_url and weights_url")
        if name not in BUILTIN and not model.downloadable:
            raise ValueError(
                f"{MODELS_ENV}={path}: the entry {name!r} needs an archive_url, or options_url and weights_url"
            )
    return models


def find_model(name: str) -> Optional[PublishedModel]:
    """The registry entry called ``name``, or None."""
    return registered_models().get(name)


def models_for_language(language: str, models: Optional[Dict[str, PublishedModel]] = None) -> Dict[str, PublishedModel]:
    """The entries whose biLM fits a pipeline of ``language`` (see :func:`same_language`)."""
    models = registered_models() if models is None else models
    return {name: model for name, model in models.items() if model.language and same_language(language, model.language)}


def unconfirmed_message(model: PublishedModel) -> str:
    """What to do about an entry whose URL the registry does not know."""
    example = json.dumps({model.name: {"archive_url": "https://..."}})
    where = f" It is listed at {model.page}." if model.page else ""
    return (
        f"the registry knows {model.name!r} ({language_name(model.language)}; {model.citation or 'no citation'}) "
        f"but not the URL of its files: {model.note or 'not published'}.{where} Once you have the URL, add it "
        f"with a registry file: {MODELS_ENV}=FILE.json holding {example} (or options_url and weights_url for "
        "the two standard files); docs/models.md, 'Mirrors and private models'"
    )


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
        if unknown := sorted(set(fields) - set(_FIELDS)):
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
    digits = _DIGEST_LENGTHS.get(field)
    wrong_digest = digits is not None and value is not None and not re.fullmatch(f"[0-9a-f]{{{digits}}}", str(value))
    wrong_format = field == "format" and value not in FORMATS
    if wrong_type or wrong_digest or wrong_format:
        if digits is not None:
            expected = f"{digits} lowercase hex digits"
        elif field == "format":
            expected = " or ".join(repr(f) for f in FORMATS)
        else:
            expected = " or ".join(t.__name__ for t in _FIELDS[field])
        raise ValueError(f"{MODELS_ENV}={path}: {name}.{field} = {value!r}, expected {expected}")
