import pytest

from spacy_elmo import BiLM

from .helpers import FIXTURE_DIR, random_bilm


@pytest.fixture
def bilm() -> BiLM:
    return random_bilm()


@pytest.fixture(scope="session")
def fixture_dir():
    return FIXTURE_DIR
