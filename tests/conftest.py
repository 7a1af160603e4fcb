"""Fixtures of the whole suite (the CPU tests and their GPU twins in tests/gpu): the tiny biLM's
files, one torch thread, a deterministic ``auto``, a training corpus, the process-wide CUDA settings;
with ``SPACY_ELMO_TEST_CPU=avx2`` (``make test-avx2``), the CPU seen as an AVX2-only one.

Tests make multi-language pipelines (``spacy.blank("xx")``) unless English tokenization matters:
an English tokenizer adds spaCy's 6,735 exceptions each time one is made.

torch, spaCy and the package are imported in the fixtures that use them: pytest-xdist's controller
(``make test-fast``) loads this file too but runs no test, and its start delays every worker's."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, Tuple

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from spacy_elmo import BiLM

# Hypothesis' examples per property: the whole suite's, and the edit loop's (make test-fast passes
# --hypothesis-profile=edit); a test that names its own count keeps it.
settings.register_profile("suite", max_examples=150)
settings.register_profile("edit", max_examples=30)
settings.load_profile("suite")


def pytest_configure(config: pytest.Config) -> None:
    """``SPACY_ELMO_TEST_CPU=avx2``: the whole run sees an AVX2-only CPU (see :func:`see_an_avx2_cpu`)."""
    kind = os.environ.get("SPACY_ELMO_TEST_CPU", "")
    if kind not in ("", "avx2"):
        raise pytest.UsageError(f"SPACY_ELMO_TEST_CPU={kind}: the CPU kind simulated is avx2, or none when unset")
    if kind == "avx2":
        from .helpers import see_an_avx2_cpu

        directory = tempfile.TemporaryDirectory(prefix="spacy-elmo-avx2-")
        config.add_cleanup(directory.cleanup)
        try:
            see_an_avx2_cpu(dict(os.environ), Path(directory.name))
        except RuntimeError as error:
            raise pytest.UsageError(str(error)) from None


@pytest.fixture(autouse=True)
def auto_is_fp32_on_the_cpu(monkeypatch):
    """``precision = "auto"`` on the CPU resolves to fp32 in every test, for inference and training,
    without timing runs (tests/bilm/precision/test_autotune.py unsets it to test the measuring)."""
    monkeypatch.setenv("SPACY_ELMO_PRECISION", "fp32")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread, and do not stall when other processes load the CPU."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def bilm() -> BiLM:
    from .helpers import random_bilm

    return random_bilm()


@pytest.fixture(scope="session")
def bilm_files(tmp_path_factory) -> Tuple[Path, Path]:
    """Standard files (options.json, weights.hdf5) of the tiny random biLM of tests/helpers.py."""
    from .helpers import write_bilm_files

    return write_bilm_files(tmp_path_factory.mktemp("bilm"))


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    from .helpers import FIXTURE_DIR

    return FIXTURE_DIR


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Tiny NER + textcat training data: train.spacy and dev.spacy of :func:`~tests.helpers.make_examples`.

    tests/embed overrides it with its own ``corpus`` (a text file of sentences)."""
    from .helpers import write_examples_corpus

    return write_examples_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture
def count_biLM_sentences(monkeypatch) -> List[List[str]]:
    """How many sentences the biLM computes from now on: each of them, in order."""
    from .helpers import record_bilm_sentences

    return record_bilm_sentences(monkeypatch)


@pytest.fixture
def tf32_allowed() -> Iterator[None]:
    """CUDA's float32 products allowed to run in TF32 (cuDNN's default for convolutions), restored after.

    The settings are plain process-wide values, also in a torch built without CUDA.
    """
    import torch

    from .helpers import cuda_fp32_precision

    matmul, conv = cuda_fp32_precision()
    torch.backends.cuda.matmul.fp32_precision = torch.backends.cudnn.conv.fp32_precision = "tf32"
    yield
    torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = matmul, conv
