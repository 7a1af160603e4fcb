"""`pretrained = NAME` in a pipeline: no other step; a saved pipeline never goes back to the network."""

import shutil

import numpy
import pytest
import spacy

from spacy_elmo import BiLM

TEXT = "The bank raised its rates ."


def test_add_pipe_with_a_name_needs_no_other_step(registry, host, cache, bilm_files):
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"model": {"pretrained": "tiny"}})
    assert not host.requests  # building the pipeline resolves nothing: initialize does
    nlp.initialize()
    doc = nlp(TEXT)
    expected = BiLM.from_files(*bilm_files).embed_sentences([[t.text for t in doc]])[0].mean(axis=0)
    numpy.testing.assert_allclose(doc.tensor, expected, atol=1e-5)


def test_a_saved_pipeline_loads_with_the_server_stopped_and_the_cache_gone(
    registry, host, cache, tmp_path, monkeypatch
):
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"model": {"pretrained": "tiny"}})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(cache)
    requests = len(host.requests)
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    monkeypatch.delenv("SPACY_ELMO_MODELS")  # a name the loading machine does not know either

    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").model.attrs["pretrained"] == "tiny"  # kept for provenance
    numpy.testing.assert_allclose(loaded(TEXT).tensor, nlp(TEXT).tensor, atol=1e-6)
    assert len(host.requests) == requests and not cache.exists()


def test_options_and_weight_urls_in_the_config_work_like_paths(host, cache, bilm_files):
    nlp = spacy.blank("xx")
    model = {"options_file": f"{host.url}/tiny/options.json", "weight_file": f"{host.url}/tiny/weights.hdf5"}
    nlp.add_pipe("elmo", config={"model": model})
    nlp.initialize()
    assert nlp(TEXT).tensor.shape == (6, 16)
    assert [r.path for r in host.requests] == ["/tiny/options.json", "/tiny/weights.hdf5"]


def test_an_unknown_name_is_an_error_at_initialize_listing_the_names(cache):
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"model": {"pretrained": "xx"}})
    with pytest.raises(ValueError, match=r"no biLM 'xx'.*registered name \(en, small"):
        nlp.initialize()
