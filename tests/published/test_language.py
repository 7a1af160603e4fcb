"""No silent English biLM under another language (issue 37): the default is the biLM bundled for
the pipeline's language, an error where none is; a named biLM of another language warns once."""

import functools
import warnings

import pytest
import spacy

from spacy_elmo.layers import get_bilm
from spacy_elmo.layers.language import language_warning, no_bundled_biLM

from .helpers import tiny_entry, write_registry


def no_warning_from(action) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        action()


def test_a_german_pipeline_without_a_named_biLM_is_an_error_that_lists_the_german_ones():
    with pytest.raises(ValueError, match=r"no biLM is bundled for German \('de'\) pipelines") as error:
        spacy.blank("de").add_pipe("elmo")
    for text in ("manylangs-de", "spacy-elmo models --lang de", "'pretrained': NAME", "pretrained = 'en'"):
        assert text in str(error.value), text


def test_a_language_with_nothing_published_is_told_how_to_get_a_biLM():
    message = no_bundled_biLM("tlh")
    assert "none is published" in message and "spacy-elmo pretrain" in message


@pytest.mark.parametrize("lang", ["en", "xx"])
def test_english_and_multi_language_pipelines_get_the_bundled_english_biLM(lang):
    nlp = spacy.blank(lang)
    no_warning_from(lambda: nlp.add_pipe("elmo"))
    assert nlp.config["components"]["elmo"]["model"]["pretrained"] == "default"
    no_warning_from(nlp.initialize)
    assert get_bilm(nlp.get_pipe("elmo").model).output_dim == 256  # the bundled en
    nlp("The bank raised its rates .")


def test_the_english_biLM_named_in_a_german_pipeline_warns_once():
    nlp = spacy.blank("de")
    with pytest.warns(UserWarning, match=r"German \('de'\) pipeline uses the biLM 'en', which is English") as record:
        nlp.add_pipe("elmo", config={"model": {"pretrained": "en"}})
    assert len(record) == 1 and "manylangs-de" in str(record[0].message)
    no_warning_from(nlp.initialize)
    no_warning_from(lambda: nlp("Hallo Welt ."))


def test_no_warning_for_a_biLM_of_unknown_language(bilm_files):
    for model in (
        {"options_file": str(bilm_files[0]), "weight_file": str(bilm_files[1])},
        {"pretrained": str(bilm_files[0].parent)},
    ):
        nlp = spacy.blank("de")
        no_warning_from(functools.partial(nlp.add_pipe, "elmo", config={"model": model}))
        no_warning_from(nlp.initialize)


def test_a_registry_entry_of_the_pipelines_language_does_not_warn_and_another_does(registry, host, cache):
    write_registry(registry, tiny=tiny_entry(host, language="nb"))
    no_warning_from(lambda: spacy.blank("nb").add_pipe("elmo", config={"model": {"pretrained": "tiny"}}))
    write_registry(registry, tiny=tiny_entry(host, language="no"))  # Norwegian fits Bokmål
    no_warning_from(lambda: spacy.blank("nb").add_pipe("elmo", config={"model": {"pretrained": "tiny"}}))
    with pytest.warns(
        UserWarning, match=r"'yo' pipeline uses the biLM 'tiny', which is Norwegian \('no'\).*none is published"
    ):
        spacy.blank("yo").add_pipe("elmo", config={"model": {"pretrained": "tiny"}})


def test_the_warning_lists_the_models_published_for_the_pipelines_language():
    message = language_warning("de", "en", "en")
    assert "the biLMs published for it are de, manylangs-de (`spacy-elmo models --lang de`)" in message
