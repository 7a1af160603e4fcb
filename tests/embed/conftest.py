from pathlib import Path
from typing import Tuple

import pytest

from ..helpers import write_bilm_files
from .helpers import SENTENCES


@pytest.fixture(scope="session")
def other_bilm_files(tmp_path_factory) -> Tuple[Path, Path]:
    """Standard files of another tiny random biLM: the sizes of ``bilm_files``, other weights."""
    return write_bilm_files(tmp_path_factory.mktemp("other_bilm"), seed=1)


@pytest.fixture
def corpus(tmp_path) -> Path:
    """The embed tests' input: :data:`~tests.embed.helpers.SENTENCES`, one a line."""
    path = tmp_path / "in.txt"
    path.write_text("\n".join(SENTENCES) + "\n", encoding="utf8")
    return path
