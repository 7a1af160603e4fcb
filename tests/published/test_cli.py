"""`spacy-elmo models`, `download`, and the biLM named as everywhere else in `embed` and `pretrain`."""

import h5py
import pytest
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.published.registry import BUILTIN

from ..pretraining.helpers import write_corpus
from .helpers import write_registry

PUBLISHED = ["small", "medium", "original", "original-5.5b", "pubmed", "pt-wikipedia", "pt-brwac", "ja", "de", "eu"]


def table(output: str) -> dict:
    """``{name: [language, MB, width, cached]}`` of the `models` table (blank cells dropped)."""
    return {line.split()[0]: line.split()[1:] for line in output.splitlines()[1:]}


def test_models_lists_the_published_biLMs_and_what_is_cached(registry, host, cache):
    rows = table(CliRunner().invoke(app, ["models"]).output)
    assert set(PUBLISHED) <= set(rows) and rows["en"][-1] == "bundled"
    assert rows["original"] == ["en", "374", "1024", "no"]
    assert rows["tiny"] == ["en", "16", "no"]
    assert CliRunner().invoke(app, ["download", "tiny"]).exit_code == 0
    assert table(CliRunner().invoke(app, ["models"]).output)["tiny"][-1] == "yes"


def test_the_builtin_registry_names_no_unverified_checksum():
    assert all(model.weights_sha256 is None and model.archive_sha256 is None for model in BUILTIN.values())
    for (
        name,
        model,
    ) in BUILTIN.items():  # each entry: two files, an archive, or a page and a note saying what is missing
        assert (
            name == "en"
            or (model.options_url and model.weights_url)
            or model.archive_url
            or (model.page and model.note)
        )


def test_download_fetches_ahead_and_force_fetches_again(registry, host, cache):
    result = CliRunner().invoke(app, ["download", "tiny"])
    assert result.exit_code == 0 and str(cache / "tiny" / "weights.hdf5") in result.output
    assert CliRunner().invoke(app, ["download", "tiny"]).exit_code == 0
    assert len(host.gets("/tiny/weights.hdf5")) == 1
    assert CliRunner().invoke(app, ["download", "tiny", "--force"]).exit_code == 0
    assert len(host.gets("/tiny/weights.hdf5")) == 2


def test_download_errors_say_what_is_wrong(registry, host, cache):
    del host.files["/tiny/weights.hdf5"]
    result = CliRunner().invoke(app, ["download", "tiny"])
    assert result.exit_code == 1 and "HTTP 404" in result.output
    result = CliRunner().invoke(app, ["download", "en"])
    assert result.exit_code == 1 and "'en' ships inside the package" in result.output


def test_a_bad_registry_file_is_a_clear_error(registry, host, cache):
    write_registry(registry, tiny={"options_url": "x", "weights_url": "y", "sha": "z"})
    result = CliRunner().invoke(app, ["download", "tiny"])
    assert result.exit_code == 1 and "unknown fields sha; the fields are: options_url" in result.output
    write_registry(registry, tiny={"options_url": "x", "weights_url": "y", "weights_bytes": "12"})
    assert "tiny.weights_bytes = '12', expected int" in CliRunner().invoke(app, ["download", "tiny"]).output


def test_embed_takes_the_biLM_by_name(registry, host, cache, tmp_path, bilm_files):
    (tmp_path / "in.txt").write_text("The bank raised its rates .\nHello\n", encoding="utf8")
    result = CliRunner().invoke(
        app,
        [
            "embed",
            str(tmp_path / "in.txt"),
            str(tmp_path / "out.hdf5"),
            "--model",
            "tiny",
            "--whitespace",
            "--threads",
            "1",
            "--no-progress",
            "--precision",
            "fp32",
        ],
    )
    assert result.exit_code == 0, result.output
    expected = BiLM.from_files(*bilm_files).embed_sentences([["Hello"]])[0]
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert abs(f["1"][...] - expected).max() < 1e-5


@pytest.mark.slow  # a pretraining run
def test_pretrain_continues_from_a_biLM_named_as_everywhere_else(registry, host, cache, tmp_path, bilm_files):
    write_corpus(tmp_path / "train.txt", 20)
    result = CliRunner().invoke(
        app,
        [
            "pretrain",
            str(tmp_path / "train.txt"),
            str(tmp_path / "out"),
            "--preset",
            "tiny",
            "--max-steps",
            "1",
            "--init-from-model",
            "tiny",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        BiLM.from_files(tmp_path / "out" / "options.json", tmp_path / "out" / "weights.hdf5").options
        == BiLM.from_files(*bilm_files).options
    )
    assert len(host.gets("/tiny/weights.hdf5")) == 1


def test_an_override_keeps_the_fields_it_does_not_set(registry, host, cache):
    write_registry(
        registry,
        original={"options_url": f"{host.url}/tiny/options.json", "weights_url": f"{host.url}/tiny/weights.hdf5"},
    )
    assert table(CliRunner().invoke(app, ["models"]).output)["original"] == ["en", "374", "1024", "no"]
    result = CliRunner().invoke(app, ["download", "original"])  # the mirror serves another file than the registry's
    assert result.exit_code == 1 and "but the registry expects 374434792" in result.output
    assert not (cache / "original" / "weights.hdf5").exists()
