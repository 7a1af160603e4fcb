import pytest
import spacy
from spacy.language import Language

from ..helpers import elmo_config


@pytest.fixture(scope="module")
def nlp_elmo(bilm_files) -> Language:
    """A blank English pipeline with the tiny random biLM, every layer stored on the doc.

    Module-scoped: hypothesis runs many examples through one pipeline (the pipe holds no state
    between docs in the default "zero" state mode). One torch thread, fixed: the default "auto"
    follows the machine's load, and another thread count changes the last bits.
    """
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "store_layers": True, "threads": 1})
    nlp.initialize()
    return nlp
