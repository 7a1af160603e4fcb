"""The network config of an ELMoForManyLangs model: the sizes its ``config.json`` names, read and written.

``config.json`` (training settings) names the network config by ``config_path``, looked for where
the reference looks (:func:`read_network`). A clip value of 0 (no clipping in the reference) is
infinite in :class:`.ElmoOptions`.
"""

import copy
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, Optional

from ....fileio import OPTIONS_NAME, WEIGHTS_NAME
from ....published.layout import MANYLANGS_FILES
from ...errors import ElmoFileError
from ...model.options import ElmoOptions
from .layout import CONFIG_NAME, NETWORK_NAME, WARM_NAME

# The network config that elmoformanylangs 0.0.4.post2 ships in elmoformanylangs/configs/ (MIT
# License, (c) HIT-SCIR) under both names. The published models' config.json names it by an
# absolute path on their authors' machine, and their archives do not include it.
PACKAGE_NETWORK: Dict[str, Any] = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
PACKAGE_CONFIGS: Dict[str, Dict[str, Any]] = {
    "cnn_50_100_512_4096_sample.json": PACKAGE_NETWORK,
    "cnn_0_100_512_4096_sample.json": PACKAGE_NETWORK,
}


class ManyLangsNetwork:
    """The sizes of an ELMoForManyLangs model, from its network config.

    ``options`` holds what our biLM's options can say (the LSTM stack, the char CNN); a clip
    value of 0 (no clipping in the reference) is infinite here. ``word_dim`` is the width of the
    word embedding (0: none).
    """

    def __init__(
        self, options: ElmoOptions, word_dim: int, config: Optional[Dict[str, Any]] = None, name: Optional[str] = None
    ) -> None:
        self.options = options
        self.word_dim = word_dim
        # The network config as read (JSON), and its file name: written back as they were.
        self.config = config
        self.name = name

    def to_dict(self) -> Dict[str, Any]:
        """The network config in the reference's format: the one read where it says these sizes
        (every other key kept, as read), else one made from them (a clip of infinity is 0, no clipping)."""
        if self.config is not None:
            read = ManyLangsNetwork.from_dict(copy.deepcopy(self.config), "network config")
            if read.options == self.options and read.word_dim == self.word_dim:
                return copy.deepcopy(self.config)
        options = self.options
        config = copy.deepcopy(self.config) if isinstance(self.config, dict) else {}
        config.setdefault("classifier", copy.deepcopy(PACKAGE_NETWORK["classifier"]))
        config.setdefault("dropout", PACKAGE_NETWORK["dropout"])
        config["encoder"] = {
            **_read_section(config, "encoder"),
            "name": "elmo",
            "projection_dim": options.projection_dim,
            "cell_clip": _clip_value(options.cell_clip),
            "proj_clip": _clip_value(options.proj_clip),
            "dim": options.lstm_dim,
            "n_layers": options.n_layers,
        }
        config["token_embedder"] = {
            **_read_section(config, "token_embedder"),
            "name": "cnn",
            "activation": options.activation,
            "filters": [[width, count] for width, count in options.filters],
            "n_highway": options.n_highway,
            "word_dim": self.word_dim,
            "char_dim": options.char_embedding_dim,
            "max_characters_per_token": options.max_characters_per_token,
        }
        return config

    def file_name(self) -> str:
        """The name to write the network config under: its own, unless that is no plain ``.json``
        name or is the name of another file of a model directory (then :data:`NETWORK_NAME`)."""
        name = self.name or ""
        taken = {*MANYLANGS_FILES, OPTIONS_NAME, WEIGHTS_NAME, WARM_NAME}
        plain = name == os.path.basename(name) and "\\" not in name and name.endswith(".json")
        return name if plain and name not in taken and not name.startswith(".") else NETWORK_NAME

    @classmethod
    def from_dict(cls, config: Any, source: str) -> "ManyLangsNetwork":
        """The sizes that ``config`` (a network config as read from JSON, named ``source`` in errors)
        says; an :class:`ElmoFileError` naming the key that is missing or wrong, or the sizes not supported."""
        if not isinstance(config, dict):
            raise ElmoFileError(f"{source}: expected a JSON object, got {type(config).__name__}")
        encoder = _section(config, "encoder", source)
        embedder = _section(config, "token_embedder", source)
        if str(_key(encoder, "name", source, "encoder")).lower() != "elmo":
            raise ElmoFileError(f"{source}: encoder.name {encoder['name']!r} is not supported, only 'elmo'")
        if str(_key(embedder, "name", source, "token_embedder")).lower() != "cnn":
            raise ElmoFileError(f"{source}: token_embedder.name {embedder['name']!r} is not supported, only 'cnn'")
        try:
            char_dim = int(_key(embedder, "char_dim", source, "token_embedder"))
            word_dim = int(_key(embedder, "word_dim", source, "token_embedder"))
            if char_dim <= 0:
                raise ValueError(f"char_dim {char_dim}: models without the char CNN are not supported")
            if word_dim < 0:
                raise ValueError(f"word_dim must be 0 or more, got {word_dim}")
            options = ElmoOptions(
                lstm_dim=int(_key(encoder, "dim", source, "encoder")),
                projection_dim=int(_key(encoder, "projection_dim", source, "encoder")),
                n_layers=int(_key(encoder, "n_layers", source, "encoder")),
                cell_clip=_clip(_key(encoder, "cell_clip", source, "encoder")),
                proj_clip=_clip(_key(encoder, "proj_clip", source, "encoder")),
                use_skip_connections=True,  # the reference adds them after every layer but the first, always
                char_embedding_dim=char_dim,
                filters=tuple((int(w), int(n)) for w, n in _key(embedder, "filters", source, "token_embedder")),
                n_highway=int(_key(embedder, "n_highway", source, "token_embedder")),
                activation=str(_key(embedder, "activation", source, "token_embedder")),
                max_characters_per_token=int(_key(embedder, "max_characters_per_token", source, "token_embedder")),
            )
        except (TypeError, ValueError) as err:
            raise ElmoFileError(f"{source}: {err}") from err
        return cls(options, word_dim, config)


def read_network(directory: Path) -> ManyLangsNetwork:
    """The network config that ``config.json`` names, looked for where the reference looks:
    its ``config_path`` from the model directory, then that file's name in the model directory,
    then the configs the ``elmoformanylangs`` package ships (:data:`PACKAGE_CONFIGS`)."""
    config_file = directory / CONFIG_NAME
    config = read_json(config_file)
    config_path = config.get("config_path") if isinstance(config, dict) else None
    if not isinstance(config_path, str) or not config_path:
        raise ElmoFileError(f'{config_file}: no "config_path" naming the network config')
    name = os.path.basename(config_path)
    tried = [directory / config_path, directory / name]
    network: Optional[ManyLangsNetwork] = None
    for path in tried:
        if path.is_file():
            network = ManyLangsNetwork.from_dict(read_json(path), f"ELMoForManyLangs network config {path}")
            break
    if network is None and name in PACKAGE_CONFIGS:
        network = ManyLangsNetwork.from_dict(copy.deepcopy(PACKAGE_CONFIGS[name]), f"elmoformanylangs/configs/{name}")
    if network is not None:
        network.name = name
        return network
    raise ElmoFileError(
        f"{config_file} names the network config {config_path!r}, which is neither at {tried[0]}, nor at "
        f"{tried[1]}, nor one that elmoformanylangs ships ({', '.join(PACKAGE_CONFIGS)}): put it beside config.json"
    )


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; an :class:`ElmoFileError` naming the file where it is missing or not JSON."""
    if not path.is_file():
        raise ElmoFileError(f"ELMoForManyLangs model file {path} does not exist")
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ElmoFileError(f"ELMoForManyLangs model file {path} is not readable JSON: {err}") from err


def _section(config: Dict[str, Any], name: str, source: str) -> Dict[str, Any]:
    section = config.get(name)
    if not isinstance(section, dict):
        raise ElmoFileError(f'{source}: missing the "{name}" section')
    return section


def _read_section(config: Dict[str, Any], name: str) -> Dict[str, Any]:
    """The section ``name`` of a config as read, where it is a JSON object (its keys to keep), else an empty one."""
    section = config.get(name)
    return section if isinstance(section, dict) else {}


def _key(section: Dict[str, Any], key: str, source: str, name: str) -> Any:
    if key not in section:
        raise ElmoFileError(f"{source}: missing {name}.{key}")
    return section[key]


def _clip(value: Any) -> float:
    """A clip value: the reference clips only where it is truthy (not 0, not null)."""
    return float(value) if value else math.inf


def _clip_value(clip: float) -> float:
    """The inverse of :func:`_clip`: infinity (no clipping) is 0."""
    return 0 if math.isinf(clip) else clip
