"""An ELMoForManyLangs model directory as the component's ``pretrained`` (issue 37): it runs, and a
pipeline holding it is saved, loaded, copied and sent to worker processes, needing nothing outside."""

import copy
import shutil

import numpy
import pytest
import spacy

from spacy_elmo.bilm.formats.manylangs import is_manylangs
from spacy_elmo.layers import get_bilm

from ..bilm.helpers import network, write_random_model
from ..helpers import assert_float32_close, elmo_config, write_bilm_files

TEXTS = ["中文的模型很好", "любовь Москва", "Donaudampfschiffahrtsgesellschaft the 😀", "", "x y z the"]


def test_a_chinese_pipeline_runs_on_an_elmoformanylangs_directory(tmp_path) -> None:
    directory = write_random_model(tmp_path / "zhs.model")
    nlp = spacy.blank("zh")
    nlp.add_pipe("elmo", config={"model": {"pretrained": str(directory)}})
    nlp.initialize()
    doc = nlp("中文的模型很好")
    width = 2 * network("full")["encoder"]["projection_dim"]
    assert doc.tensor.shape == (len(doc), width)
    assert get_bilm(nlp.get_pipe("elmo").model).n_output_layers == 3


def manylangs_pipeline(tmp_path, name: str = "full", **config):
    """A zh pipeline on a random model in ``tmp_path / "model"`` (which the tests delete), every layer stored."""
    directory = write_random_model(tmp_path / "model", name)
    nlp = spacy.blank("zh")
    nlp.add_pipe("elmo", config={"model": {"pretrained": str(directory), **config}, "store_layers": True})
    nlp.initialize()
    return nlp


def layers_of(nlp, texts=TEXTS):
    return [doc._.elmo_layers for doc in nlp.pipe(texts)]


def assert_same_layers(actual, expected) -> None:
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected):
        assert a.shape == b.shape
        if b.size:
            assert_float32_close(a, b)


@pytest.mark.parametrize("name", ["full", "plain"])
def test_disk_round_trip_is_self_contained(tmp_path, name) -> None:
    """nlp.to_disk writes the model's own directory into elmo/bilm/; spacy.load needs nothing else."""
    nlp = manylangs_pipeline(tmp_path, name)
    expected = layers_of(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(tmp_path / "model")
    saved = tmp_path / "pipeline" / "elmo" / "bilm"
    assert {"config.json", "char.dic", "token_embedder.pkl", "encoder.pkl"} <= {p.name for p in saved.iterdir()}
    assert not (saved / "options.json").exists()
    loaded = spacy.load(tmp_path / "pipeline")
    assert is_manylangs(get_bilm(loaded.get_pipe("elmo").model))
    assert_same_layers(layers_of(loaded), expected)


def test_saving_over_a_standard_pipeline_replaces_its_files(tmp_path, bilm_files) -> None:
    standard = spacy.blank("zh")
    standard.add_pipe("elmo", config=elmo_config(bilm_files))
    standard.initialize()
    standard.to_disk(tmp_path / "pipeline")
    nlp = manylangs_pipeline(tmp_path)
    expected = layers_of(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    assert not (tmp_path / "pipeline" / "elmo" / "bilm" / "weights.hdf5").exists()
    assert_same_layers(layers_of(spacy.load(tmp_path / "pipeline")), expected)
    standard.to_disk(tmp_path / "pipeline")  # and back
    assert not (tmp_path / "pipeline" / "elmo" / "bilm" / "encoder.pkl").exists()
    assert not is_manylangs(get_bilm(spacy.load(tmp_path / "pipeline").get_pipe("elmo").model))


def test_bytes_round_trip(tmp_path) -> None:
    nlp = manylangs_pipeline(tmp_path)
    expected = layers_of(nlp)
    data = nlp.to_bytes()
    shutil.rmtree(tmp_path / "model")
    fresh = spacy.blank("zh")  # the same config, never initialized: the directory it names is gone
    fresh.add_pipe("elmo", config={"model": {"pretrained": str(tmp_path / "model")}, "store_layers": True})
    fresh.from_bytes(data)
    assert_same_layers(layers_of(fresh), expected)
    other = spacy.blank("zh")  # a pipe of a standard biLM takes it from its bytes too
    other.add_pipe("elmo", config={**elmo_config(write_bilm_files(tmp_path / "standard")), "store_layers": True})
    other.get_pipe("elmo").from_bytes(nlp.get_pipe("elmo").to_bytes())
    assert_same_layers(layers_of(other), expected)


def test_copies_give_the_same_layers(tmp_path) -> None:
    nlp = manylangs_pipeline(tmp_path)
    expected = layers_of(nlp)
    shutil.rmtree(tmp_path / "model")
    assert_same_layers(layers_of(copy.deepcopy(nlp)), expected)
    model = nlp.get_pipe("elmo").model
    copied = model.copy()
    assert get_bilm(copied) is not get_bilm(model) and is_manylangs(get_bilm(copied))
    docs = [nlp.make_doc(text) for text in TEXTS]
    for a, b in zip(copied.predict(docs), model.predict(docs)):
        numpy.testing.assert_array_equal(a, b)
    # thinc's own serialization of the layer goes through the shim's bilm_to_bytes
    restored = model.copy().from_bytes(model.to_bytes())
    for a, b in zip(restored.predict(docs), model.predict(docs)):
        numpy.testing.assert_array_equal(a, b)


@pytest.mark.slow  # starts worker processes
def test_n_process_2_gives_the_same_layers(tmp_path) -> None:
    nlp = manylangs_pipeline(tmp_path)
    texts = TEXTS * 3
    expected = [doc.tensor for doc in nlp.pipe(texts)]
    shutil.rmtree(tmp_path / "model")
    docs = list(nlp.pipe(texts, n_process=2, batch_size=2))
    assert [doc.text for doc in docs] == texts
    for doc, tensor in zip(docs, expected):
        numpy.testing.assert_allclose(doc.tensor, tensor, atol=1e-5)
