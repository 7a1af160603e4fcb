"""The registry (issue 37): every published model by name, its fields, alternate URLs, the German
model's md5 and sha1, entries whose URL is to be confirmed, and `spacy-elmo models --lang/--json`."""

import hashlib
import json

import pytest
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.published import resolve as resolution
from spacy_elmo.published.download import DownloadError
from spacy_elmo.published.languages import LANGUAGE_NAMES, same_language
from spacy_elmo.published.registry import (
    BUILTIN,
    MANYLANGS,
    models_for_language,
    registered_models,
)
from spacy_elmo.published.resolve import UnconfirmedError

from .helpers import tiny_entry, write_registry

ALLENNLP = ("small", "medium", "original", "original-5.5b", "pubmed", "pt-wikipedia", "pt-brwac")


def table(output: str) -> dict:
    return {line.split()[0]: line.split()[1:] for line in output.splitlines()[1:]}


def test_every_published_model_has_an_entry():
    assert len(BUILTIN) >= 60
    assert len({model.language for model in BUILTIN.values()}) >= 45
    downloadable = {model.language for model in BUILTIN.values() if model.downloadable or model.bundled}
    assert len(downloadable) >= 45
    for name, model in BUILTIN.items():
        assert model.language in LANGUAGE_NAMES, name
        assert model.license and model.citation and model.training_text, name
        assert model.downloadable or model.bundled or (model.page and model.note), name


def test_elmoformanylangs_44_languages_and_simplified_chinese():
    manylangs = {m.archive_url: m for m in BUILTIN.values() if m.format == MANYLANGS}
    assert len(manylangs) == 45
    ids = {f"http://vectors.nlpl.eu/repository/11/{i}.zip" for i in range(136, 180)}
    assert ids <= set(manylangs)
    by_id = {int(url.rsplit("/", 1)[1][:-4]): m.language for url, m in manylangs.items() if url in ids}
    # The README's table, where its order is not the ids' (Dutch 164 sits after Bokmål 165).
    assert (by_id[136], by_id[140], by_id[153], by_id[164], by_id[165], by_id[166], by_id[179]) == (
        "ar",
        "cu",
        "grc",
        "nl",
        "nb",
        "nn",
        "zh",
    )
    assert len(set(by_id.values())) == 44
    simplified = BUILTIN["manylangs-zh-simplified"]
    assert simplified.archive_url == "http://39.96.43.154/zhs.model.tar.bz2" and "Gigaword" in simplified.training_text
    assert all(m.width == 1024 and "Che" in m.citation for m in manylangs.values())


def test_norelmo_embeddia_and_tamil():
    norelmo = [m for m in BUILTIN.values() if m.name.startswith("norelmo")]
    assert sorted(m.archive_url.rsplit("/", 1)[1] for m in norelmo) == ["210.zip", "211.zip", "217.zip", "218.zip"]
    assert all(m.language == "no" and m.license.startswith("CC BY 4.0") and "inferred" in m.note for m in norelmo)
    embeddia = {m.language: m for m in BUILTIN.values() if m.name.startswith("embeddia-")}
    assert sorted(embeddia) == ["et", "fi", "hr", "lt", "lv", "sl", "sv"]
    assert embeddia["sl"].archive_url.endswith("/11356/1277/slovenian-elmo.tar.gz")
    assert all(m.unconfirmed and "to be confirmed" in m.note for lang, m in embeddia.items() if lang != "sl")
    assert BUILTIN["ta"].weights_url == "https://schweter.eu/cloud/ta-elmo/weights.hdf5"


def test_corrections_from_the_publishers_pages():
    for name in ALLENNLP:
        model = BUILTIN[name]
        assert model.alternate_weights_url == model.weights_url.replace(
            "https://allennlp.s3.amazonaws.com/", "https://s3-us-west-2.amazonaws.com/allennlp/"
        )
        assert model.alternate_options_url.startswith("https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/")
    german = BUILTIN["de"]
    assert (german.options_md5, german.weights_md5, german.weights_sha1) == (
        "da99676f2fe2838ff2663a6d9bad97dd",
        "f3ab3a68caae6d42bac47c230b3a65bf",
        "9084adab3eefaed4f07da7331217fcb873417add",
    )
    assert "Japanese Wikipedia" in BUILTIN["ja"].training_text


def test_the_alternate_url_serves_when_the_first_does_not(registry, host, cache, bilm_files):
    write_registry(
        registry,
        tiny=tiny_entry(
            host,
            weights_url=f"{host.url}/gone/weights.hdf5",
            alternate_weights_url=f"{host.url}/tiny/weights.hdf5",
            options_url=f"{host.url}/gone/options.json",
            alternate_options_url=f"{host.url}/tiny/options.json",
        ),
    )
    BiLM.from_pretrained("tiny")
    assert [r.path for r in host.requests] == [
        "/gone/options.json",
        "/tiny/options.json",
        "/gone/weights.hdf5",
        "/tiny/weights.hdf5",
    ]
    del host.files["/tiny/weights.hdf5"]
    with pytest.raises(
        DownloadError, match="no URL of the file served it; .*/gone/weights.hdf5: .*404.*/tiny/weights.hdf5: .*404"
    ):
        resolution.download_pretrained("tiny", check=BiLM.from_files, force=True, progress=False)


def test_an_override_of_a_url_drops_the_alternate_it_had(registry, host, cache):
    write_registry(registry, small={"weights_url": f"{host.url}/mirror/w.hdf5"})
    small = registered_models()["small"]
    assert small.alternate_weights_url is None and small.alternate_options_url == BUILTIN["small"].alternate_options_url


@pytest.mark.parametrize("field", ["options_md5", "weights_md5", "weights_sha1"])
def test_published_md5_and_sha1_sums_are_checked(registry, host, cache, bilm_files, field):
    algorithm = field.rsplit("_", 1)[1]
    path = bilm_files[0] if field.startswith("options") else bilm_files[1]
    wrong = "0" * len(hashlib.new(algorithm).hexdigest())
    write_registry(registry, tiny=tiny_entry(host, **{field: wrong}))
    with pytest.raises(DownloadError, match=f"' {algorithm} is [0-9a-f]+, its publisher gives {wrong}"):
        resolution.resolve_pretrained("tiny", check=BiLM.from_files, progress=False)
    assert not (cache / "tiny" / "weights.hdf5").exists()
    write_registry(registry, tiny=tiny_entry(host, **{field: hashlib.new(algorithm, path.read_bytes()).hexdigest()}))
    resolution.resolve_pretrained("tiny", check=BiLM.from_files, progress=False)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"weights_md5": "abc"}, "tiny.weights_md5 = 'abc', expected 32 lowercase hex digits"),
        ({"weights_sha1": "A" * 40}, "expected 40 lowercase hex digits"),
        ({"format": "tfhub"}, "tiny.format = 'tfhub', expected 'standard' or 'elmoformanylangs'"),
    ],
)
def test_a_bad_checksum_or_format_in_a_registry_file_is_a_clear_error(registry, host, fields, message):
    write_registry(registry, tiny=tiny_entry(host, **fields))
    with pytest.raises(ValueError, match=message):
        registered_models()


def test_a_new_entry_needs_an_archive_or_two_files(registry, host):
    write_registry(registry, new={"language": "de"})
    with pytest.raises(ValueError, match="'new' needs an archive_url, or options_url and weights_url"):
        registered_models()
    write_registry(registry, new={"options_url": f"{host.url}/o.json"})
    with pytest.raises(ValueError, match="'new' needs both options_url and weights_url"):
        registered_models()


def test_an_entry_to_be_confirmed_says_where_it_is_and_how_to_add_it(registry, host, cache):
    write_registry(registry, tiny=tiny_entry(host))
    result = CliRunner().invoke(app, ["download", "embeddia-hr"])
    assert result.exit_code == 1
    for text in (
        "not the URL of its files",
        "to be confirmed",
        "http://hdl.handle.net/11356/1277",
        'SPACY_ELMO_MODELS=FILE.json holding {"embeddia-hr": {"archive_url": "https://..."}}',
    ):
        assert text in " ".join(result.output.split()), text
    with pytest.raises(UnconfirmedError):
        BiLM.from_pretrained("embeddia-hr")
    assert table(CliRunner().invoke(app, ["models"]).output)["embeddia-hr"][-1] == "no-url"
    # Confirmed later: the registry file gives the URL, and the entry keeps its other fields.
    write_registry(registry, **{"embeddia-hr": tiny_entry(host)})
    model = registered_models()["embeddia-hr"]
    assert model.downloadable and model.citation == BUILTIN["embeddia-hr"].citation
    assert CliRunner().invoke(app, ["download", "embeddia-hr"]).exit_code == 0


def test_models_lang_filters_by_the_pipelines_language(registry, host, cache):
    rows = table(CliRunner().invoke(app, ["models", "--lang", "de"]).output)
    assert {"de", "manylangs-de"} <= set(rows) and {row[0] for row in rows.values()} == {"de"}
    rows = table(CliRunner().invoke(app, ["models", "--lang", "nb"]).output)
    assert {"manylangs-nb", "norelmo30", "norelmo100"} <= set(rows) and "manylangs-nn" not in rows
    assert set(table(CliRunner().invoke(app, ["models", "--lang", "zh"]).output)) == {
        "manylangs-zh",
        "manylangs-zh-simplified",
    }
    result = CliRunner().invoke(app, ["models", "--lang", "yo"])
    assert (
        result.exit_code == 0
        and "No published biLM for 'yo'" in result.output
        and "spacy-elmo pretrain" in result.output
    )


def test_models_json_prints_the_registry(registry, host, cache):
    listing = json.loads(CliRunner().invoke(app, ["models", "--json"]).output)
    assert len(listing) >= 61  # the built-in entries and tiny
    assert len({entry["language"] for entry in listing.values()}) >= 45
    assert listing["original"]["url"].endswith("elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5")
    assert listing["manylangs-de"]["url"] == "http://vectors.nlpl.eu/repository/11/142.zip"
    assert listing["embeddia-hr"]["url"] is None and listing["en"]["cached"] is True
    assert {"language", "url", "license", "cached", "citation", "format"} <= set(listing["tiny"])
    assert listing["tiny"]["cached"] is False
    assert CliRunner().invoke(app, ["download", "tiny"]).exit_code == 0
    assert json.loads(CliRunner().invoke(app, ["models", "--json", "--lang", "en"]).output)["tiny"]["cached"] is True


def test_language_matching():
    assert same_language("de", "de") and same_language("zh", "zh-hans") and same_language("nb", "no")
    assert same_language("nn", "no") and not same_language("nb", "nn") and not same_language("de", "en")
    assert set(models_for_language("nb", BUILTIN)) >= {"manylangs-nb", "norelmo-wiki"}


def test_docs_models_md_names_every_entry():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text(encoding="utf8")
    assert [name for name in BUILTIN if f"`{name}`" not in text] == []
    assert f"{len(BUILTIN)} entries in {len({m.language for m in BUILTIN.values()})} languages" in text


def test_a_download_error_repeats_what_is_not_established_about_the_entry(registry, host, cache):
    write_registry(registry, norelmo30={"archive_url": f"{host.url}/repository/20/217.zip"})
    with pytest.raises(
        DownloadError,
        match=r"HTTP 404.*Note on 'norelmo30': NLPL repository id 217; the /repository/20/ path is inferred",
    ):
        BiLM.from_pretrained("norelmo30")
