import pytest
import spacy
from spacy.language import Language

from ..helpers import elmo_config


@pytest.fixture
def nlp_elmo(bilm_files) -> Language:
    """A blank English pipeline with an initialized elmo pipe loaded from the tiny files."""
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "store_layers": True})
    nlp.initialize()
    return nlp
