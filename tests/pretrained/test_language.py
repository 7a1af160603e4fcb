"""No silent English biLM under another language (issue 37): one UserWarning naming both languages
and the models published for the pipeline's; none where the languages agree or are unknown."""

import warnings

import pytest
import spacy

from spacy_elmo.layers.bilm import PIPELINE_LANG_ATTR, language_warning

from .helpers import tiny_entry, write_registry

GERMAN = r"German \('de'\) pipeline uses the biLM 'en', which is English \('en'\)"


def elmo_pipeline(lang: str, **model) -> spacy.Language:
    nlp = spacy.blank(lang)
    nlp.add_pipe("elmo", config={"model": model} if model else {})
    return nlp


def no_warning_from(action) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        action()


def test_the_english_default_in_a_german_pipeline_warns_once():
    nlp = elmo_pipeline("de")
    nlp.initialize()
    with pytest.warns(UserWarning, match=GERMAN) as record:
        nlp("Die Bank erhöhte ihre Zinsen .")
    message = str(record[0].message)
    for text in ("manylangs-de", "spacy-elmo models --lang de", "'pretrained': NAME", "spacy.blank('xx')"):
        assert text in message, text
    no_warning_from(lambda: nlp("Noch ein Satz ."))  # once


def test_a_component_that_sets_the_pipeline_language_gets_the_warning_at_initialize():
    nlp = elmo_pipeline("de")
    nlp.get_pipe("elmo").model.attrs[PIPELINE_LANG_ATTR] = nlp.lang  # what the component may do
    with pytest.warns(UserWarning, match=GERMAN):
        nlp.initialize()
    no_warning_from(lambda: nlp("Hallo Welt ."))


@pytest.mark.parametrize("lang", ["en", "xx"])
def test_no_warning_where_the_languages_agree_or_the_pipeline_is_multilingual(lang):
    nlp = elmo_pipeline(lang)
    no_warning_from(nlp.initialize)
    no_warning_from(lambda: nlp("The bank raised its rates ."))


def test_no_warning_for_a_biLM_of_unknown_language(bilm_files):
    for model in ({"options_file": str(bilm_files[0]), "weight_file": str(bilm_files[1])},
                  {"pretrained": str(bilm_files[0].parent)}):
        nlp = elmo_pipeline("de", **model)
        nlp.initialize()
        no_warning_from(lambda: nlp("Hallo Welt ."))


def test_a_registry_entry_of_the_pipelines_language_does_not_warn_and_another_does(registry, host, cache):
    write_registry(registry, tiny=tiny_entry(host, language="nb"))
    nlp = elmo_pipeline("nb", pretrained="tiny")
    nlp.initialize()
    no_warning_from(lambda: nlp("Banken hevet rentene ."))
    write_registry(registry, tiny=tiny_entry(host, language="no"))  # Norwegian fits Bokmål
    nlp = elmo_pipeline("nb", pretrained="tiny")
    nlp.initialize()
    no_warning_from(lambda: nlp("Banken hevet rentene ."))
    nlp = elmo_pipeline("yo", pretrained="tiny")
    nlp.initialize()
    with pytest.warns(UserWarning, match=r"'yo' pipeline uses the biLM 'tiny', which is Norwegian \('no'\).*none is published"):
        nlp("Ẹ kú àárọ̀ .")


def test_a_saved_pipeline_is_not_checked_again(tmp_path):
    nlp = elmo_pipeline("de")
    nlp.initialize()
    with pytest.warns(UserWarning):
        nlp("Hallo .")
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    no_warning_from(lambda: loaded("Hallo Welt ."))


def test_the_warning_lists_a_few_models_and_counts_the_rest():
    message = language_warning("de", "en", "en")
    assert "the biLMs published for it are de, manylangs-de (`spacy-elmo models --lang de`)" in message
