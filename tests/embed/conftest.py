from pathlib import Path
from typing import List, Tuple

import pytest

from ..helpers import random_bilm
from ..pipeline.conftest import one_torch_thread  # noqa: F401  (shared autouse fixture: one torch thread per module)

SENTENCES = [
    "The bank raised its rates .",
    "",
    "I sat by the river bank .",
    "Hello",
    "The bank raised its rates .",
    "A much longer sentence , with a comma , a few more words and a full stop at the end .",
    "Short one .",
]


@pytest.fixture(scope="session")
def bilm_files(tmp_path_factory) -> Tuple[Path, Path]:
    """Standard files of the tiny random biLM of tests/helpers.py."""
    directory = tmp_path_factory.mktemp("bilm")
    random_bilm().to_files(directory / "options.json", directory / "weights.hdf5")
    return directory / "options.json", directory / "weights.hdf5"


@pytest.fixture(scope="session")
def other_bilm_files(tmp_path_factory) -> Tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("other_bilm")
    random_bilm(seed=1).to_files(directory / "options.json", directory / "weights.hdf5")
    return directory / "options.json", directory / "weights.hdf5"


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("\n".join(SENTENCES) + "\n", encoding="utf8")
    return path


def whitespace_tokens(lines: List[str]) -> List[List[str]]:
    return [line.split() for line in lines]
