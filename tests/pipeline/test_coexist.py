"""`elmo` beside spaCy's own `tok2vec`, added to a trained pipeline without `nlp.initialize()`.

The trained pipeline is made here: `spacy init config --pipeline tagger,ner` (a `tok2vec` whose
listeners read `doc.tensor` at prediction time), trained a few dozen steps on a handful of tagged
and NER-annotated sentences, saved once per module.
"""

from pathlib import Path
from typing import Dict, List, Tuple

import numpy
import pytest
import spacy
import srsly
from spacy.cli.init_config import init_config
from spacy.cli.train import train
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from spacy_elmo import BiLM, install_vector_hooks

from ..helpers import WIDTH, assert_float32_close, elmo_config

pytestmark = pytest.mark.slow  # trains a pipeline (about 3 s), and two tests run spacy train

# (text, tags, heads, deps, entities as (start token, end token, label)): the tags and the
# dependencies of the Universal Dependencies scheme, made up for these sentences.
VERB_OBJECT, COPULA = ([1, 1, 1, 1], "nsubj ROOT obj punct"), ([2, 2, 2, 2], "nsubj cop ROOT punct")
SENTENCES = [
    ("Alice went home .", "PROPN VERB NOUN PUNCT", *VERB_OBJECT, [(0, 1, "PERSON")]),
    ("Bob saw Paris .", "PROPN VERB PROPN PUNCT", *VERB_OBJECT, [(0, 1, "PERSON"), (2, 3, "GPE")]),
    ("London is big .", "PROPN AUX ADJ PUNCT", *COPULA, [(0, 1, "GPE")]),
    ("We like London .", "PRON VERB PROPN PUNCT", *VERB_OBJECT, [(2, 3, "GPE")]),
    ("Alice saw Bob .", "PROPN VERB PROPN PUNCT", *VERB_OBJECT, [(0, 1, "PERSON"), (2, 3, "PERSON")]),
    ("Paris is old .", "PROPN AUX ADJ PUNCT", *COPULA, [(0, 1, "GPE")]),
]
TEXTS = ["Alice saw Paris .", "We like Bob .", "London is old .", "Bob went home ."]


def annotated(nlp: Language) -> List[Example]:
    """:data:`SENTENCES` as examples with tags, dependencies and entities."""
    examples = []
    for text, tags, heads, deps, entities in SENTENCES:
        doc = nlp.make_doc(text)
        spans = [(doc[start:end].start_char, doc[start:end].end_char, label) for start, end, label in entities]
        annotations = {"tags": tags.split(), "heads": heads, "deps": deps.split(), "entities": spans}
        examples.append(Example.from_dict(doc, annotations))
    return examples


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tok2vec + tagger + ner pipeline of `spacy init config`, trained, on disk."""
    nlp = spacy.util.load_model_from_config(init_config(lang="en", pipeline=["tagger", "ner"]), auto_fill=True)
    examples = annotated(nlp)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(40):
        nlp.update(examples, sgd=optimizer)
    path = tmp_path_factory.mktemp("trained") / "pipeline"
    nlp.to_disk(path)
    return path


def predictions(docs: List[Doc]) -> List[Tuple[List[str], List[Tuple[int, int, str]]]]:
    return [([t.tag_ for t in doc], [(e.start, e.end, e.label_) for e in doc.ents]) for doc in docs]


def elmo_mix(bilm_files, docs: List[Doc]) -> List[numpy.ndarray]:
    """The biLM run alone on each doc as one sentence: the average of its layers, (n_tokens, width)."""
    layers = BiLM.from_files(*bilm_files).embed_sentences([[t.text for t in doc] for doc in docs])
    return [doc_layers.mean(axis=0) for doc_layers in layers]


def assert_vectors_are_elmo(doc: Doc, mix: numpy.ndarray) -> None:
    """token, span and doc vectors and similarities are those of ``mix``, (n_tokens, width)."""
    assert doc[0].vector.shape == (WIDTH,)
    assert_float32_close(numpy.stack([t.vector for t in doc]), mix)
    assert_float32_close(doc[1:3].vector, mix[1:3].mean(axis=0))
    assert_float32_close(doc.vector, mix.mean(axis=0))
    cosine = float(mix[0] @ mix[2] / numpy.linalg.norm(mix[0]) / numpy.linalg.norm(mix[2]))
    assert doc[0].similarity(doc[2]) == pytest.approx(cosine, rel=1e-5)


WHERE = {"first": {"first": True}, "middle": {"after": "tok2vec"}, "last": {"last": True}}  # add_pipe's arguments


@pytest.mark.parametrize("where", list(WHERE))
def test_elmo_added_to_a_trained_pipeline_changes_no_prediction(trained: Path, bilm_files, where: str) -> None:
    """Added anywhere, without nlp.initialize(): tags, entities and doc.tensor stay tok2vec's,
    while token.vector & co are ELMo's."""
    alone = list(spacy.load(trained).pipe(TEXTS))
    assert any(doc.ents for doc in alone) and any(t.tag_ for doc in alone for t in doc)  # something to keep
    nlp = spacy.load(trained)
    nlp.add_pipe("elmo", config=elmo_config(bilm_files), **WHERE[where])
    docs = list(nlp.pipe(TEXTS))
    assert predictions(docs) == predictions(alone)
    for doc, before, mix in zip(docs, alone, elmo_mix(bilm_files, docs)):
        numpy.testing.assert_array_equal(doc.tensor, before.tensor)  # what tok2vec's listeners read
        assert_vectors_are_elmo(doc, mix)


@pytest.mark.filterwarnings("ignore:.*W109")  # Doc.to_bytes cannot save the hooks: install_vector_hooks restores them
def test_elmo_vectors_survive_serialized_docs_where_tok2vec_wrote_the_tensor(trained: Path, bilm_files) -> None:
    nlp = spacy.load(trained)
    nlp.add_pipe("elmo", config=elmo_config(bilm_files), first=True)
    docs = list(nlp.pipe(TEXTS))
    stored = DocBin(store_user_data=True, docs=docs).to_bytes()
    from_bytes = [Doc(nlp.vocab).from_bytes(doc.to_bytes()) for doc in docs]
    for restored in (from_bytes, list(DocBin().from_bytes(stored).get_docs(nlp.vocab))):
        for doc, mix in zip(restored, elmo_mix(bilm_files, docs)):
            install_vector_hooks(doc)
            assert_vectors_are_elmo(doc, mix)


def test_docs_without_elmo_vectors_get_no_hooks(trained: Path, bilm_files) -> None:
    nlp = spacy.load(trained)
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    stored = DocBin(docs=[nlp(TEXTS[0])]).to_bytes()  # without user data: no doc._.elmo_vectors
    (doc,) = DocBin().from_bytes(stored).get_docs(nlp.vocab)
    with pytest.raises(ValueError, match="store_user_data=True"):
        install_vector_hooks(doc)


def test_elmo_reads_its_biLM_on_first_use_and_a_saved_pipeline_holds_it(trained: Path, bilm_files, tmp_path) -> None:
    nlp = spacy.load(trained)
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    nlp.to_disk(tmp_path / "with_elmo")  # before any doc: the biLM is read for the save
    assert (tmp_path / "with_elmo" / "elmo" / "bilm" / "weights.hdf5").is_file()
    doc = spacy.load(tmp_path / "with_elmo")(TEXTS[0])
    assert_vectors_are_elmo(doc, elmo_mix(bilm_files, [doc])[0])


def corpus_with_everything(directory: Path) -> Dict[str, str]:
    """train.spacy and dev.spacy of :data:`SENTENCES`, as `spacy train` overrides."""
    nlp = spacy.blank("xx")
    references = [eg.reference for eg in annotated(nlp)]
    for name in ("train", "dev"):
        DocBin(docs=references).to_disk(directory / f"{name}.spacy")
    return {"paths.train": str(directory / "train.spacy"), "paths.dev": str(directory / "dev.spacy")}


@pytest.mark.parametrize("pipeline", [["elmo", "ner"], ["elmo", "tagger", "parser", "ner"]])
def test_init_config_with_elmo_trains_and_evaluates(pipeline: List[str], bilm_files, tmp_path: Path) -> None:
    """`init config` puts its own tok2vec first and the task components listen to it; elmo
    among them must leave them tok2vec's features, in training's evaluations and after."""
    config = init_config(lang="en", pipeline=pipeline)
    assert config["nlp"]["pipeline"] == ["tok2vec", *pipeline]
    config.to_disk(tmp_path / "config.cfg")
    overrides = {
        **corpus_with_everything(tmp_path),
        "components.elmo.model.options_file": str(bilm_files[0]),
        "components.elmo.model.weight_file": str(bilm_files[1]),
        "training.max_steps": 6,
        "training.eval_frequency": 3,
    }
    if "parser" in pipeline:  # six sentences have each dependency label fewer times than spaCy's 30
        overrides["components.parser.min_action_freq"] = 1
    train(tmp_path / "config.cfg", tmp_path / "out", overrides=overrides)
    scores = srsly.read_json(tmp_path / "out" / "model-last" / "meta.json")["performance"]
    assert scores["ents_f"] is not None and ("dep_uas" in scores) == ("parser" in pipeline)  # evaluated
    nlp = spacy.load(tmp_path / "out" / "model-last")
    doc = nlp(TEXTS[0])
    assert doc.tensor.shape == (len(doc), nlp.get_pipe("tok2vec").model.get_dim("nO"))
    assert_vectors_are_elmo(doc, elmo_mix(bilm_files, [doc])[0])
