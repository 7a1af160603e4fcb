import pytest

from spacy_elmo import BiLM

from .helpers import FIXTURE_DIR, random_bilm


@pytest.fixture(autouse=True)
def auto_is_fp32_on_the_cpu(monkeypatch):
    """``precision = "auto"`` resolves to fp32 on the CPU in every test, without timing runs: the
    suite stays deterministic on any CPU (tests/bilm/test_autotune.py unsets it to test the measuring)."""
    monkeypatch.setenv("SPACY_ELMO_PRECISION", "fp32")


@pytest.fixture
def bilm() -> BiLM:
    return random_bilm()


@pytest.fixture(scope="session")
def fixture_dir():
    return FIXTURE_DIR
