from pathlib import Path
from typing import Dict, Tuple

import numpy
import pytest
import spacy
from spacy.language import Language

from ..helpers import random_bilm

TINY_SIZES = {
    "lstm_dim": 24,
    "projection_dim": 8,
    "n_layers": 2,
    "char_embedding_dim": 4,
    "filters": [[1, 4], [2, 8], [3, 8]],
    "n_highway": 2,
}
WIDTH = 2 * TINY_SIZES["projection_dim"]
N_LAYERS = TINY_SIZES["n_layers"] + 1


@pytest.fixture(scope="session")
def bilm_files(tmp_path_factory) -> Tuple[Path, Path]:
    """Standard files of the tiny random biLM of tests/helpers.py."""
    directory = tmp_path_factory.mktemp("bilm")
    options_file, weight_file = directory / "options.json", directory / "weights.hdf5"
    random_bilm().to_files(options_file, weight_file)
    return options_file, weight_file


def elmo_config(bilm_files: Tuple[Path, Path], **model: object) -> Dict[str, object]:
    options_file, weight_file = bilm_files
    return {"model": {"options_file": str(options_file), "weight_file": str(weight_file), **model}}


def listener_config(**overrides: object) -> Dict[str, object]:
    return {"@architectures": "spacy_elmo.ElmoListener.v2", "width": WIDTH, "n_layers": N_LAYERS, **overrides}


def mix_config(**settings: object) -> Dict[str, object]:
    """A listener's ``mix`` block: the scalar mix with ``settings``."""
    return {"@layers": "spacy_elmo.ScalarMix.v1", **settings}


@pytest.fixture
def nlp_elmo(bilm_files) -> Language:
    """A blank English pipeline with an initialized elmo pipe loaded from the tiny files."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "store_layers": True})
    nlp.initialize()
    return nlp


NAMES = {"Alice": "PERSON", "Bob": "PERSON", "Paris": "GPE", "London": "GPE"}


def make_examples(nlp: Language, n: int = 8):
    """Tiny NER + textcat data: '<name> went home . It was great|awful .'"""
    from spacy.training import Example

    examples = []
    for i in range(n):
        name = list(NAMES)[i % len(NAMES)]
        mood = "great" if i % 2 else "awful"
        doc = nlp.make_doc(f"{name} went home . It was {mood} .")
        examples.append(Example.from_dict(doc, {
            "entities": [(0, len(name), NAMES[name])],
            "cats": {"POS": float(i % 2), "NEG": float(1 - i % 2)},
        }))
    return examples


def build_ner_textcat(bilm_files, listener: Dict[str, object] = {}, **elmo_model: object) -> Language:
    """elmo + ner + textcat, both listening to elmo, initialized on :func:`make_examples`."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files, **elmo_model))
    nlp.add_pipe("ner", config={"model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "extra_state_tokens": False,
        "hidden_width": 16, "maxout_pieces": 2, "use_upper": True, "nO": None,
        "tok2vec": listener_config(**listener),
    }})
    nlp.add_pipe("textcat", config={"model": {
        "@architectures": "spacy.TextCatReduce.v1", "exclusive_classes": True, "use_reduce_first": False,
        "use_reduce_last": False, "use_reduce_max": False, "use_reduce_mean": True, "nO": None,
        "tok2vec": listener_config(**listener),
    }})
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    return nlp


def with_random_output_layers(nlp: Language, components=("ner", "textcat")) -> Language:
    """Give the heads' zero-initialized weights small random values.

    spaCy starts the output layers of ``ner`` and ``textcat`` at zero, so their first step sends
    no gradient back to the listeners (the elmo loss of that step is 0.0): a test of what a
    gradient does to the biLM needs nonzero heads.
    """
    rng = numpy.random.default_rng(0)
    for name in components:
        for node in nlp.get_pipe(name).model.walk():
            if node.has_param("W") and not node.ops.xp.any(node.get_param("W")):
                shape = node.get_param("W").shape
                node.set_param("W", node.ops.asarray(rng.normal(0.0, 0.1, shape).astype("float32")))
    return nlp


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread, and do not stall when other processes load the CPU."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
