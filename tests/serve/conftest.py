"""The pipeline every test of tests/serve serves."""

from pathlib import Path

import pytest

from ..helpers import build_ner_textcat


@pytest.fixture(scope="module")
def pipeline_dir(bilm_files, tmp_path_factory) -> Path:
    """elmo + ner + textcat on the tiny biLM, saved as a service would load it."""
    directory = tmp_path_factory.mktemp("pipeline") / "pipeline"
    build_ner_textcat(bilm_files).to_disk(directory)
    return directory
