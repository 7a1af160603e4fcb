"""The files of an ELMoForManyLangs model directory, by name, and which of them a directory holds."""

import json
import os
from pathlib import Path
from typing import List

from ....fileio import OPTIONS_NAME, WEIGHTS_NAME
from ....published.layout import MANYLANGS_FILES

CONFIG_NAME, CHARS_NAME, WORDS_NAME, TOKEN_EMBEDDER_NAME, ENCODER_NAME = MANYLANGS_FILES

# What spacy-elmo adds to a directory it writes: the warm start (tensors "hidden" and "memory"), and
# the name of the network config when the model's own name cannot be used.
WARM_NAME = "spacy_elmo_warm_state.pkl"
NETWORK_NAME = "network.json"


def model_files(directory: Path) -> List[Path]:
    """The files of the model in ``directory`` that :func:`.directory.write_manylangs` writes, those
    present: the network config that ``config.json`` names where it is beside it, and the files of
    :data:`MANYLANGS_FILES` and :data:`WARM_NAME`. What :func:`spacy_elmo.bilm.formats.serialize.bilm_to_directory`
    removes where it writes a standard biLM over an ELMoForManyLangs one."""
    names = [*MANYLANGS_FILES, WARM_NAME]
    try:
        config = json.loads((directory / CONFIG_NAME).read_bytes().decode("utf-8"))
        config_path = config.get("config_path") if isinstance(config, dict) else None
    except (OSError, ValueError):
        config_path = None
    network_config = os.path.basename(config_path) if isinstance(config_path, str) and config_path else None
    if network_config is not None and network_config not in (OPTIONS_NAME, WEIGHTS_NAME):
        names.append(network_config)
    return [directory / name for name in names if (directory / name).is_file()]
