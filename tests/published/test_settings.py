"""The download settings as the environment sets them (spacy_elmo.published.settings)."""

from pathlib import Path

import pytest

from spacy_elmo.published.settings import DownloadSettings, download_settings


def test_unset_variables_give_the_defaults() -> None:
    assert download_settings({}) == DownloadSettings(cache_dir=None, offline=False, models_file=None)


def test_each_variable_sets_its_field() -> None:
    environ = {"SPACY_ELMO_CACHE": "~/elmo", "SPACY_ELMO_OFFLINE": "1", "SPACY_ELMO_MODELS": "mirror.json"}
    settings = download_settings(environ)
    assert settings == DownloadSettings(cache_dir=Path.home() / "elmo", offline=True, models_file=Path("mirror.json"))


@pytest.mark.parametrize(
    "value, offline",
    [("1", True), (" True ", True), ("yes", True), ("ON", True), ("0", False), ("", False), ("no", False)],
)
def test_offline_takes_the_usual_words_for_yes(value: str, offline: bool) -> None:
    assert download_settings({"SPACY_ELMO_OFFLINE": value}).offline is offline


def test_empty_paths_count_as_unset() -> None:
    assert download_settings({"SPACY_ELMO_CACHE": "", "SPACY_ELMO_MODELS": ""}) == DownloadSettings()
