"""The hyperparameters of a biLM, as stored in a standard ELMo ``options.json``.

The file layout is the one bilm-tf writes and AllenNLP reads. Keys that only training uses
(``dropout``, ``n_epochs``, ...) are accepted and kept, so that a file round-trips unchanged;
any other key is an error, because a key we do not understand may change the model.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Tuple, TypedDict, Union

from ..errors import ElmoFileError

LSTM_KEYS = {"dim", "projection_dim", "n_layers", "cell_clip", "proj_clip", "use_skip_connections"}
CHAR_CNN_KEYS = {"activation", "n_highway", "embedding", "filters", "n_characters", "max_characters_per_token"}
TRAINING_KEYS = {
    "bidirectional", "dropout", "all_clip_norm_val", "n_epochs", "n_train_tokens", "batch_size",
    "n_tokens_vocab", "unroll_steps", "n_negative_samples_batch", "share_embedding_softmax",
}  # fmt: skip
ACTIVATIONS = ("relu", "tanh")


class SizeOverrides(TypedDict):
    """Sizes that differ from :class:`ElmoOptions`' defaults, as keyword arguments it takes."""

    lstm_dim: int
    projection_dim: int
    n_layers: int
    n_highway: int


# The published 'Original' model's sizes where they differ from :class:`ElmoOptions`' defaults (the
# 'Small' model's): ``ElmoOptions(**ORIGINAL_SIZES)``, or the same keys in ``[components.elmo.model]``
# for a random biLM of that size, as benchmarks build one.
ORIGINAL_SIZES: SizeOverrides = {"lstm_dim": 4096, "projection_dim": 512, "n_layers": 2, "n_highway": 2}


@dataclass(frozen=True)
class ElmoOptions:
    """Sizes of a biLM. Defaults are those of the published 'Small' model."""

    lstm_dim: int = 1024
    projection_dim: int = 128
    n_layers: int = 2
    cell_clip: float = 3.0
    proj_clip: float = 3.0
    use_skip_connections: bool = True
    char_embedding_dim: int = 16
    filters: Tuple[Tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
    n_highway: int = 1
    activation: str = "relu"
    n_characters: int = 262
    max_characters_per_token: int = 50
    training: Dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("lstm_dim", "projection_dim", "n_layers", "char_embedding_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"ELMo option {name} must be at least 1, got {getattr(self, name)}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"ELMo option char_cnn.activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.n_characters not in (261, 262):
            raise ValueError(f"ELMo option char_cnn.n_characters must be 261 or 262, got {self.n_characters}")
        if self.max_characters_per_token < 3:
            raise ValueError("ELMo option char_cnn.max_characters_per_token must be at least 3")
        if not self.filters or any(w < 1 or n < 1 for w, n in self.filters):
            raise ValueError(f"ELMo option char_cnn.filters must be [width, count] pairs, got {self.filters}")
        widest = max(w for w, _ in self.filters)
        if widest > self.max_characters_per_token:
            raise ValueError(
                f"ELMo char_cnn filter width {widest} exceeds max_characters_per_token {self.max_characters_per_token}"
            )

    @property
    def n_filters(self) -> int:
        """Width of the char-CNN output: the sum of all filter counts."""
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every output layer: forward and backward halves, 2 x projection_dim."""
        return 2 * self.projection_dim

    @classmethod
    def from_dict(cls, data: Dict[str, Any], source: str = "options") -> "ElmoOptions":
        """Read the nested ``options.json`` structure, naming what is missing or unknown."""
        if not isinstance(data, dict):
            raise ElmoFileError(f"{source}: expected a JSON object, got {type(data).__name__}")
        _check_keys(data, {"lstm", "char_cnn"} | TRAINING_KEYS, source, "")
        lstm = _section(data, "lstm", LSTM_KEYS, source)
        cnn = _section(data, "char_cnn", CHAR_CNN_KEYS, source)
        embedding = cnn.get("embedding")
        if not isinstance(embedding, dict) or "dim" not in embedding:
            raise ElmoFileError(f'{source}: char_cnn.embedding must be an object with a "dim" key')
        try:
            return cls(
                lstm_dim=int(_required(lstm, "dim", source, "lstm")),
                projection_dim=int(_required(lstm, "projection_dim", source, "lstm")),
                n_layers=int(_required(lstm, "n_layers", source, "lstm")),
                cell_clip=float(lstm.get("cell_clip", 3.0)),
                proj_clip=float(lstm.get("proj_clip", 3.0)),
                use_skip_connections=bool(lstm.get("use_skip_connections", False)),
                char_embedding_dim=int(embedding["dim"]),
                filters=tuple((int(w), int(n)) for w, n in _required(cnn, "filters", source, "char_cnn")),
                n_highway=int(_required(cnn, "n_highway", source, "char_cnn")),
                activation=str(cnn.get("activation", "relu")),
                n_characters=int(cnn.get("n_characters", 262)),
                max_characters_per_token=int(cnn.get("max_characters_per_token", 50)),
                training={k: v for k, v in data.items() if k in TRAINING_KEYS},
            )
        except (TypeError, ValueError) as err:
            raise ElmoFileError(f"{source}: {err}") from err

    def to_dict(self) -> Dict[str, Any]:
        """The nested structure of ``options.json``, with the inference value n_characters=262."""
        return {
            "lstm": {
                "dim": self.lstm_dim,
                "projection_dim": self.projection_dim,
                "n_layers": self.n_layers,
                "cell_clip": self.cell_clip,
                "proj_clip": self.proj_clip,
                "use_skip_connections": self.use_skip_connections,
            },
            "char_cnn": {
                "activation": self.activation,
                "n_highway": self.n_highway,
                "embedding": {"dim": self.char_embedding_dim},
                "filters": [list(f) for f in self.filters],
                "n_characters": 262,
                "max_characters_per_token": self.max_characters_per_token,
            },
            **self.training,
        }

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "ElmoOptions":
        path = Path(path)
        try:
            text = path.read_text(encoding="utf8")
        except OSError as err:
            raise ElmoFileError(f"Cannot read ELMo options file {path}: {err}") from err
        except UnicodeDecodeError as err:  # a binary file (a pickle, an hdf5 file) in its place
            raise ElmoFileError(f"ELMo options file {path} is not UTF-8 JSON text: {err}") from err
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ElmoFileError(f"ELMo options file {path} is not valid JSON: {err}") from err
        return cls.from_dict(data, source=f"ELMo options file {path}")

    def to_file(self, path: Union[str, Path]) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf8")


def _section(data: Dict[str, Any], name: str, allowed: set, source: str) -> Dict[str, Any]:
    section = data.get(name)
    if not isinstance(section, dict):
        raise ElmoFileError(f'{source}: missing the "{name}" section')
    _check_keys(section, allowed, source, f"{name}.")
    return section


def _check_keys(data: Dict[str, Any], allowed: set, source: str, prefix: str) -> None:
    if unknown := sorted(set(data) - allowed):
        raise ElmoFileError(
            f"{source}: unknown option(s) {', '.join(prefix + k for k in unknown)}; "
            f"expected only {', '.join(prefix + k for k in sorted(allowed))}"
        )


def _required(section: Dict[str, Any], key: str, source: str, name: str) -> Any:
    if key not in section:
        raise ElmoFileError(f"{source}: missing option {name}.{key}")
    return section[key]
