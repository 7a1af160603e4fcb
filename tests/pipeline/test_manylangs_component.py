"""An ELMoForManyLangs model directory as the component's ``pretrained`` (issue 37)."""

import pytest
import spacy

from spacy_elmo.layers import get_bilm

from ..bilm.helpers import network, write_random_model


def test_a_chinese_pipeline_runs_on_an_elmoformanylangs_directory(tmp_path) -> None:
    directory = write_random_model(tmp_path / "zhs.model")
    nlp = spacy.blank("zh")
    nlp.add_pipe("elmo", config={"model": {"pretrained": str(directory)}})
    nlp.initialize()
    doc = nlp("中文的模型很好")
    width = 2 * network("full")["encoder"]["projection_dim"]
    assert doc.tensor.shape == (len(doc), width)
    assert get_bilm(nlp.get_pipe("elmo").model).n_output_layers == 3


def test_saving_it_says_why_it_cannot(tmp_path) -> None:
    """The standard layout that nlp.to_disk writes has no room for a character vocabulary and a word embedding."""
    nlp = spacy.blank("zh")
    nlp.add_pipe("elmo", config={"model": {"pretrained": str(write_random_model(tmp_path / "m"))}})
    nlp.initialize()
    with pytest.raises(ValueError, match="ELMoForManyLangs"):
        nlp.to_disk(tmp_path / "pipeline")
