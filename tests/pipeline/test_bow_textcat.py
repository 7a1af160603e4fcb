"""spacy_elmo.ElmoBOWTextCat.v1: spaCy's bag-of-words textcat plus a linear layer over pooled ELMo."""

import numpy
import pytest
import spacy
from spacy.training import Example
from thinc.api import Adam

from ..helpers import elmo_config, listener_config

BOW = {"@architectures": "spacy.TextCatBOW.v3", "exclusive_classes": True, "ngram_size": 1, "no_output_layer": False}


def _examples(nlp, n: int = 16):
    """The label is carried by one word, 'great' or 'awful', so the bag of words alone can learn it."""
    examples = []
    for i in range(n):
        mood = "great" if i % 2 else "awful"
        doc = nlp.make_doc(f"Day {i} went by . It was {mood} .")
        examples.append(Example.from_dict(doc, {"cats": {"POS": float(i % 2), "NEG": float(1 - i % 2)}}))
    return examples


def _pipeline(bilm_files, model, exclusive: bool = True):
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    nlp.add_pipe("textcat" if exclusive else "textcat_multilabel", config={"model": model})
    examples = _examples(nlp)
    nlp.initialize(lambda: examples)
    return nlp, examples


def _elmo_bow(exclusive: bool = True):
    return {
        "@architectures": "spacy_elmo.ElmoBOWTextCat.v1",
        "exclusive_classes": exclusive,
        "ngram_size": 1,
        "dropout": 0.0,
        "tok2vec": listener_config(),
    }


@pytest.mark.parametrize("exclusive", [True, False])
def test_it_learns_and_the_elmo_layer_takes_part(bilm_files, exclusive: bool) -> None:
    nlp, examples = _pipeline(bilm_files, _elmo_bow(exclusive), exclusive)
    name = "textcat" if exclusive else "textcat_multilabel"
    model = nlp.get_pipe(name).model
    elmo_linear = model.layers[0].layers[1].layers[-1]
    optimizer = Adam(0.01)
    losses = [nlp.update(examples, sgd=optimizer, losses={})[name] for _ in range(40)]
    assert losses[-1] < 0.3 * losses[0]
    assert numpy.abs(elmo_linear.get_param("W")).max() > 0
    cats = [doc.cats for doc in nlp.pipe(eg.reference.text for eg in examples)]
    if exclusive:
        assert [c["POS"] + c["NEG"] for c in cats] == pytest.approx([1.0] * len(cats))
    assert [c["POS"] > 0.5 for c in cats] == [eg.reference.cats["POS"] > 0.5 for eg in examples]


def test_scores_are_the_bag_of_words_plus_the_pooled_elmo_layer(bilm_files) -> None:
    nlp, examples = _pipeline(bilm_files, _elmo_bow())
    optimizer = Adam(0.01)
    for _ in range(5):
        nlp.update(examples, sgd=optimizer)
    docs = list(nlp.pipe(eg.reference.text for eg in examples))
    bow, elmo = nlp.get_pipe("textcat").model.layers[0].layers
    elmo_logits = elmo.predict(_with_features(nlp, docs))
    logits = bow.predict(docs) + elmo_logits
    expected = numpy.exp(logits) / numpy.exp(logits).sum(axis=1, keepdims=True)
    labels = nlp.get_pipe("textcat").labels
    numpy.testing.assert_allclose([[doc.cats[label] for label in labels] for doc in docs], expected, rtol=1e-5)
    assert numpy.abs(elmo_logits).max() > 1e-4  # the ELMo layer moved off its zero start


def test_an_empty_doc_gets_scores(bilm_files) -> None:
    nlp, _ = _pipeline(bilm_files, _elmo_bow())
    for doc in nlp.pipe(["", " ", "fine"]):
        assert set(doc.cats) == {"POS", "NEG"} and all(numpy.isfinite(list(doc.cats.values())))


def _with_features(nlp, docs):
    """``docs`` with ELMo features again: the pipeline's listener released them once it read them."""
    return list(nlp.get_pipe("elmo").pipe(docs))
