"""ELMoForManyLangs models (HIT-SCIR, Che et al. 2018, "Towards Better UD Parsing"): read by directory.

A model directory holds ``config.json`` (training settings; its ``config_path`` names the network
config), ``char.dic`` and ``word.dic`` (``TOKEN<TAB>ID`` per line), and PyTorch state dicts
``token_embedder.pkl`` and ``encoder.pkl``. The reference implementation is the PyPI package
``elmoformanylangs`` (0.0.4.post2); what follows is its inference path (``Embedder.sents2elmo``),
read off its source, quirks included:

- The token encoder differs from bilm-tf's: a char CNN over the model's own character vocabulary
  (``char.dic``, one id per Unicode code point, ``<oov>`` for the others) *and* a word embedding
  over ``word.dic`` (``<oov>`` for unknown words, case kept), concatenated [word; highway output]
  before the projection. Its highways are AllenNLP's: one linear layer to twice the width, the
  first half the transform, the second the gate g, ``y = g * x + (1 - g) * relu(A x)``.
- A token is cut to its first ``max_characters_per_token - 2`` code points before *both* lookups
  (so a long word finds its cut form in ``word.dic``). Its characters are framed by the ids of
  ``<eow>`` in front and ``<bow>`` behind (the reference swaps the two names, in training too),
  then ``<pad>`` to ``max_characters_per_token``. The ``<pad>`` row of the char embedding is a
  trained (random, never updated) vector, not zero: padding positions enter the convolutions.
- Sentences are framed by ``<bos>`` and ``<eos>`` tokens: characters ``[<eow>, <bos>, <bow>]`` and
  word ``word.dic["<bos>"]`` (or ``<oov>``); likewise ``<eos>``. The reference gives a literal
  input token ``"<bos>"`` the boundary's characters too; here, as for bilm-tf's ``<S>`` (see
  :mod:`.chars`), a literal string is encoded as the text it is.
- The dictionaries are read as the reference reads them: lines split at every Unicode line break,
  each stripped, split at the tab; a line left with one field (its token was whitespace) is read
  as the token U+3000.
- The LSTM stack is AllenNLP's ``LstmCellWithProjection``, which our :class:`.lstm.ProjectedLSTM`
  computes exactly once its weights are in TensorFlow's gate order (see :func:`lstm_weights`):
  skip connections after the first layer always, clipping only where the clip value is non-zero.
- Output: layer 0 is the token vector doubled, layers 1.. [forward; backward], as bilm-tf's.
  The reference's encoder carries its state from one batch to the next; this biLM starts every
  batch from zero unless told otherwise (``state``), so the two agree on a fresh reference's
  first batch.

The weights are read with ``torch.load(weights_only=True)``: tensors only, never code. A file
that holds anything else is refused.

Not supported (no published model uses them): the reference's LSTM token encoder, its plain-LSTM
encoder, and word-only models (``char_dim`` 0).

Saving: the standard ``options.json`` + ``weights.hdf5`` layout cannot hold the character
vocabulary and the word embedding, so :meth:`.BiLM.to_files` refuses such a biLM. It is written in
its own layout instead (:func:`write_manylangs`): ``config.json`` naming the network config, which
is written beside it (the directory needs nothing else), the dictionaries, and the two state dicts
in the reference's names, shapes and gate order, forget bias included (the inverse of
:func:`lstm_weights`). The reference package reads the directory as it reads a published model;
:func:`load_manylangs` reads it back to the same layers. A warm start (:meth:`.BiLM.warm_up`), which
the reference has no place for, goes in an extra file :data:`WARM_NAME` that the reference ignores.
"""

import copy
import json
import math
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple, TypeVar

import numpy
import torch
from torch import Tensor, nn

from ..fileio import OPTIONS_NAME, WEIGHTS_NAME, PathLike, atomic_path
from ..published.layout import MANYLANGS_FILES
from .char_cnn import filter_maxima, linear, positions_needed
from .errors import ElmoFileError
from .files import skip_random_init
from .options import ElmoOptions
from .precision import LowPrecisionWeights

CONFIG_NAME, CHARS_NAME, WORDS_NAME, TOKEN_EMBEDDER_NAME, ENCODER_NAME = MANYLANGS_FILES

# The special entries of the dictionaries, as the reference names them.
OOV, PAD, BOW, EOW, BOS, EOS = "<oov>", "<pad>", "<bow>", "<eow>", "<bos>", "<eos>"

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

# What spacy-elmo adds to a directory it writes: the warm start (tensors "hidden" and "memory"), and
# the name of the network config when the model's own name cannot be used.
WARM_NAME = "spacy_elmo_warm_state.pkl"
NETWORK_NAME = "network.json"

TOKENS_PER_CALL = 1024  # tokens per char-CNN call, as the biLM's own char CNN: bounds the activations

Model = TypeVar("Model", bound=nn.Module)


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
            **(config.get("encoder") if isinstance(config.get("encoder"), dict) else {}),
            "name": "elmo",
            "projection_dim": options.projection_dim,
            "cell_clip": _clip_value(options.cell_clip),
            "proj_clip": _clip_value(options.proj_clip),
            "dim": options.lstm_dim,
            "n_layers": options.n_layers,
        }
        config["token_embedder"] = {
            **(config.get("token_embedder") if isinstance(config.get("token_embedder"), dict) else {}),
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


class Vocabulary:
    """The characters and words of a model: each dictionary as the reference reads it.

    ``chars`` maps a character (or a special name) to its row of the char embedding; ``words``
    (None without a word embedding) a word to its row of the word embedding.
    """

    def __init__(self, chars: Dict[str, int], words: Optional[Dict[str, int]]) -> None:
        for name in (BOW, EOW, OOV, PAD, BOS, EOS):
            if name not in chars:
                raise ElmoFileError(f"{CHARS_NAME} has no entry {name!r}: the model needs it")
        if words is not None and not (OOV in words and PAD in words):
            raise ElmoFileError(f"{WORDS_NAME} needs the entries {OOV!r} and {PAD!r}")
        self.chars = chars
        self.words = words
        # One code point per character: a sorted table that NumPy looks all of a batch's characters up in.
        single = sorted((ord(c), i) for c, i in chars.items() if len(c) == 1)
        self._codes = numpy.array([c for c, _ in single], dtype=numpy.int64)
        self._code_ids = numpy.array([i for _, i in single], dtype=numpy.int64)

    def token_ids(
        self, tokens: Sequence[Hashable], max_chars: int, boundaries: Tuple[Hashable, Hashable]
    ) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """Char ids (len(tokens), max_chars) and word ids (len(tokens),), int64, as the reference
        makes them; ``boundaries`` are the biLM's sentence-start and sentence-end keys. Word ids are
        all 0 without a word embedding."""
        chars = self.chars
        start, end = boundaries
        texts = [_cut(token, max_chars, boundaries) for token in tokens]
        lengths = numpy.fromiter(map(len, texts), dtype=numpy.int64, count=len(texts))
        ids = numpy.full((len(texts), max_chars), chars[PAD], dtype=numpy.int64)
        ids[:, 0] = chars[EOW]  # sic: the reference's begin-of-word is <eow>, its end-of-word <bow>
        codes = numpy.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(numpy.int64)
        rows = numpy.repeat(numpy.arange(len(texts)), lengths)
        columns = numpy.arange(len(rows)) - numpy.repeat(numpy.cumsum(lengths) - lengths, lengths) + 1
        ids[rows, columns] = self._char_ids(codes)
        ids[numpy.arange(len(texts)), lengths + 1] = chars[BOW]
        words = numpy.zeros(len(texts), dtype=numpy.int64)
        vocabulary = self.words
        for row, (token, text) in enumerate(zip(tokens, texts)):
            name = BOS if token == start else EOS if token == end else None
            if name is not None:
                ids[row, 1] = chars[name]
            if vocabulary is not None:
                words[row] = vocabulary.get(text if name is None else name, vocabulary[OOV])
        return ids, words

    def _char_ids(self, codes: numpy.ndarray) -> numpy.ndarray:
        """The id of each code point, ``<oov>``'s for those the dictionary lacks."""
        if not len(self._codes):
            return numpy.full_like(codes, self.chars[OOV])
        where = numpy.searchsorted(self._codes, codes).clip(max=len(self._codes) - 1)
        return numpy.where(self._codes[where] == codes, self._code_ids[where], self.chars[OOV])


def _cut(token: Hashable, max_chars: int, boundaries: Tuple[Hashable, Hashable]) -> str:
    """The text whose characters a token has: its first ``max_chars - 2`` code points (the
    reference cuts longer tokens so). A boundary has one character, ``<bos>``'s or ``<eos>``'s,
    written over this placeholder's by :meth:`Vocabulary.token_ids`."""
    if token == boundaries[0] or token == boundaries[1]:
        return " "
    text = token if isinstance(token, str) else str(token)
    return text[: max_chars - 2]


class GatedHighway(nn.Module):
    """AllenNLP's highway layer, as the reference stores it: ``y = g * x + (1 - g) * relu(A x + a)``
    with ``g = sigmoid(B x + b)``, ``[A; B]`` one (2 * width, width) linear layer."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.linear = nn.Linear(width, 2 * width)
        self.low_precision = LowPrecisionWeights()

    def forward(self, x: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Shape: (n_tokens, width) -> (n_tokens, width), the product in ``dtype``, the rest float32."""
        projected = linear(x, self.linear, dtype, self.low_precision, "linear")
        gate = torch.sigmoid(projected[:, self.width :])
        return gate * x + (1 - gate) * torch.relu(projected[:, : self.width])


class ManyLangsTokenEncoder(nn.Module):
    """Layer 0 of an ELMoForManyLangs biLM: tokens -> (n_tokens, projection_dim).

    A char CNN over the model's character vocabulary (max over positions, then the activation,
    then the highways) beside a word embedding, concatenated [word; chars] and projected. A
    :class:`.BiLM` made with it as ``token_encoder`` calls :meth:`encode` for its token vectors.
    """

    def __init__(self, options: ElmoOptions, vocabulary: Vocabulary, n_chars: int, n_words: int, word_dim: int) -> None:
        super().__init__()
        self.options = options
        self.vocabulary = vocabulary
        self.char_embedding = nn.Embedding(n_chars, options.char_embedding_dim)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(options.char_embedding_dim, count, width) for width, count in options.filters
        )
        self.highways = nn.ModuleList(GatedHighway(options.n_filters) for _ in range(options.n_highway))
        self.word_embedding = nn.Embedding(n_words, word_dim) if word_dim else None
        self.projection = nn.Linear(word_dim + options.n_filters, options.projection_dim)
        self.activation = torch.relu if options.activation == "relu" else torch.tanh
        self.low_precision = LowPrecisionWeights()
        # What the model's directory says beyond the weights, written back by write_manylangs:
        # its network config and config.json (training settings).
        self.network = ManyLangsNetwork(options, word_dim)
        self.model_config: Dict[str, Any] = {}

    def encode(self, tokens: Sequence[Hashable], dtype: torch.dtype, boundaries: Tuple[Hashable, Hashable]) -> Tensor:
        """The vectors of ``tokens`` (strings, or the biLM's sentence-start and sentence-end keys
        ``boundaries``), products in ``dtype`` (float32 or bf16: the biLM chooses it, see
        :attr:`.precision.ResolvedPrecision.token_encoder_dtype`).

        Tokens go through shortest first, in chunks cut at their padding (see
        :meth:`positions_needed`). Shape: (len(tokens), projection_dim).
        """
        device = self.projection.weight.device
        if not len(tokens):
            return self.projection.weight.new_zeros((0, self.options.projection_dim))
        char_ids, word_ids = self.vocabulary.token_ids(tokens, self.options.max_characters_per_token, boundaries)
        pad = self.vocabulary.chars[PAD]
        order = numpy.argsort((char_ids != pad).sum(axis=1), kind="stable")
        encoded = []
        for begin in range(0, len(order), TOKENS_PER_CALL):
            rows = order[begin : begin + TOKENS_PER_CALL]
            chunk = char_ids[rows]
            chunk = torch.from_numpy(chunk[:, : self.positions_needed(chunk)]).to(device)
            encoded.append(self(chunk, torch.from_numpy(word_ids[rows]).to(device), dtype))
        restore = torch.from_numpy(numpy.argsort(order)).to(device)
        return torch.cat(encoded)[restore]

    def forward(self, char_ids: Tensor, word_ids: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Shapes: ``char_ids`` (n_tokens, positions), ``word_ids`` (n_tokens,) int64 ->
        (n_tokens, projection_dim) float32. Positions may stop where :meth:`positions_needed` says.

        ``dtype``: of the convolutions, highway and projection products (see :mod:`.precision`);
        embeddings, activations and the output are float32.
        """
        chars = self.char_embedding(char_ids).to(dtype)  # (n_tokens, positions, char_dim)
        x = torch.cat([self.activation(self._filter_maxima(i, chars)) for i in range(len(self.convolutions))], dim=-1)
        for highway in self.highways:
            x = highway(x, dtype)
        if self.word_embedding is not None:
            x = torch.cat([self.word_embedding(word_ids), x], dim=-1)
        return linear(x, self.projection, dtype, self.low_precision, "projection")

    def _filter_maxima(self, index: int, chars: Tensor) -> Tensor:
        """Convolution ``index``'s maximum per filter over positions, as :class:`.CharCNN`'s."""
        return filter_maxima(self.convolutions[index], chars, self.low_precision, f"conv{index}")

    def positions_needed(self, char_ids: numpy.ndarray) -> int:
        """How many leading positions give the maxima of all of them (the ``<pad>`` vector is not
        zero, but it is the same everywhere: see :func:`.char_cnn.positions_needed`)."""
        return positions_needed(char_ids, self.vocabulary.chars[PAD], self.options.filters)

def load_manylangs(
    model_class: Callable[..., Model], directory: PathLike, check_values: bool = True, **settings: Any
) -> Model:
    """``model_class(options, token_encoder=..., **settings)`` (a :class:`.BiLM`) holding the
    ELMoForManyLangs model in ``directory``.

    Every file is read and checked before the model is made; each problem is an
    :class:`ElmoFileError` naming the file. ``check_values=False`` skips the test for NaN and
    infinite weights.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ElmoFileError(f"ELMoForManyLangs model {directory}: not a directory")
    network = read_network(directory)
    options, word_dim = network.options, network.word_dim
    chars = read_dictionary(directory / CHARS_NAME)
    try:
        vocabulary = Vocabulary(chars, read_dictionary(directory / WORDS_NAME) if word_dim else None)
    except ElmoFileError as err:
        raise ElmoFileError(f"ELMoForManyLangs model {directory}: {err}") from None
    n_chars, n_words = len(vocabulary.chars), len(vocabulary.words or ())
    _check_ids(vocabulary.chars, n_chars, directory / CHARS_NAME)
    if vocabulary.words is not None:
        _check_ids(vocabulary.words, n_words, directory / WORDS_NAME)
    embedder_shapes = token_embedder_shapes(options, n_chars, n_words, word_dim)
    embedder = read_state_dict(directory / TOKEN_EMBEDDER_NAME, embedder_shapes, check_values)
    encoder = read_state_dict(directory / ENCODER_NAME, encoder_shapes(options), check_values)
    warm = read_warm_state(directory / WARM_NAME, options, check_values)
    with skip_random_init():
        token_encoder = ManyLangsTokenEncoder(options, vocabulary, n_chars, n_words, word_dim)
        token_encoder.network = network
        token_encoder.model_config = _read_json(directory / CONFIG_NAME)
        model = model_class(options, token_encoder=token_encoder, **settings)
    with torch.no_grad():
        _load_token_encoder(token_encoder, embedder)
        for index, layer in enumerate(model.lstm.layers):
            for direction, name in enumerate(("forward", "backward")):
                weights = lstm_weights(encoder, f"{name}_layer_{index}")
                layer.input_weight[direction].copy_(weights[0])
                layer.hidden_weight[direction].copy_(weights[1])
                layer.bias[direction].copy_(weights[2])
                layer.projection[direction].copy_(weights[3])
    if warm is not None:
        model.warm_hidden, model.warm_memory = warm
    return model


def is_manylangs(bilm: nn.Module) -> bool:
    """Whether ``bilm`` (a :class:`.BiLM`) holds an ELMoForManyLangs model."""
    return isinstance(getattr(bilm, "char_cnn", None), ManyLangsTokenEncoder)


def write_manylangs(bilm: nn.Module, directory: PathLike) -> Path:
    """Write ``bilm`` (a :class:`.BiLM` holding an ELMoForManyLangs model) into ``directory`` in the
    reference's own layout, each file atomically; returns the directory.

    ``config.json`` (the model's own, its ``config_path`` now the network config's name) and the
    network config beside it, ``char.dic`` and ``word.dic`` (none without a word embedding),
    ``token_embedder.pkl`` and ``encoder.pkl`` (:func:`manylangs_state_dicts`, saved with
    ``torch.save``), and :data:`WARM_NAME` when the biLM has a warm start (else an older one is
    removed). The directory loads with :func:`load_manylangs` and with the reference's ``Embedder``.
    Other files in the directory are left as they are.
    """
    encoder = getattr(bilm, "char_cnn", None)
    if not isinstance(encoder, ManyLangsTokenEncoder):
        raise ValueError(
            "elmo: write_manylangs writes ELMoForManyLangs models only; write this biLM with BiLM.to_files "
            "(the standard options.json + weights.hdf5)"
        )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    network_name = encoder.network.file_name()
    config = {**encoder.model_config, "config_path": network_name}
    texts = {CONFIG_NAME: _json_text(config), network_name: _json_text(encoder.network.to_dict())}
    texts[CHARS_NAME] = dictionary_text(encoder.vocabulary.chars, CHARS_NAME)
    if encoder.vocabulary.words is not None:
        texts[WORDS_NAME] = dictionary_text(encoder.vocabulary.words, WORDS_NAME)
    embedder_state, encoder_state = manylangs_state_dicts(bilm)
    tensors: Dict[str, Dict[str, Tensor]] = {TOKEN_EMBEDDER_NAME: embedder_state, ENCODER_NAME: encoder_state}
    warm_hidden, warm_memory = getattr(bilm, "warm_hidden", None), getattr(bilm, "warm_memory", None)
    if warm_hidden is not None and warm_memory is not None:
        tensors[WARM_NAME] = {"hidden": _saved(warm_hidden), "memory": _saved(warm_memory)}
    else:
        (directory / WARM_NAME).unlink(missing_ok=True)
    for name, text in texts.items():
        with atomic_path(directory / name) as tmp:
            tmp.write_bytes(text.encode("utf-8"))
    for name, state in tensors.items():
        with atomic_path(directory / name) as tmp:
            torch.save(state, tmp)
    return directory


def model_files(directory: Path) -> List[Path]:
    """The files of the model in ``directory`` that :func:`write_manylangs` writes, those present:
    the network config that ``config.json`` names where it is beside it, and the files of
    :data:`MANYLANGS_FILES` and :data:`WARM_NAME`. What :func:`.serialize.bilm_to_directory`
    removes where it writes a standard biLM over an ELMoForManyLangs one."""
    names = [*MANYLANGS_FILES, WARM_NAME]
    try:
        config = json.loads((directory / CONFIG_NAME).read_bytes().decode("utf-8"))
        config_path = config.get("config_path") if isinstance(config, dict) else None
    except (OSError, ValueError):
        config_path = None
    if isinstance(config_path, str) and config_path and os.path.basename(config_path) not in (OPTIONS_NAME, WEIGHTS_NAME):
        names.append(os.path.basename(config_path))
    return [directory / name for name in names if (directory / name).is_file()]


def manylangs_state_dicts(bilm: nn.Module) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """The reference's ``token_embedder.pkl`` and ``encoder.pkl`` state dicts of ``bilm``: every
    tensor of :func:`token_embedder_shapes` and :func:`encoder_shapes`, float32 on the CPU, each with
    storage of its own. The LSTM weights are :func:`lstm_weights` undone: AllenNLP's gate order and
    the forget gate's 1.0 back in the bias."""
    embedder = {name: _saved(param) for name, param in _token_encoder_parameters(bilm.char_cnn).items()}
    lstm: Dict[str, Tensor] = {}
    for index, layer in enumerate(bilm.lstm.layers):
        for direction, name in enumerate(("forward", "backward")):
            prefix = f"{name}_layer_{index}"
            bias = _saved(layer.bias[direction])
            cell = bias.shape[0] // 4
            bias[2 * cell : 3 * cell] += 1.0  # TensorFlow's forget bias, added at run time here, back in the bias
            lstm[f"{prefix}.input_linearity.weight"] = _allennlp_gate_order(_saved(layer.input_weight[direction]).T)
            lstm[f"{prefix}.state_linearity.weight"] = _allennlp_gate_order(_saved(layer.hidden_weight[direction]).T)
            lstm[f"{prefix}.state_linearity.bias"] = _allennlp_gate_order(bias)
            lstm[f"{prefix}.state_projection.weight"] = _saved(layer.projection[direction]).T.contiguous()
    return embedder, lstm


def _saved(t: Tensor) -> Tensor:
    """A float32 CPU copy with a storage of its own (``torch.save`` writes a view's whole storage)."""
    return t.detach().to("cpu", torch.float32).clone(memory_format=torch.contiguous_format)


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"


def dictionary_text(entries: Dict[str, int], name: str) -> str:
    """``char.dic`` or ``word.dic`` holding ``entries``, one ``TOKEN<TAB>ID`` line each in id order;
    a token that would not read back as itself (as the reference and :func:`read_dictionary` read
    it) is refused. None read from a dictionary is such a token: its line was one of these."""
    ordered = sorted(entries.items(), key=lambda entry: (entry[1], entry[0]))
    lines = [f"{token}\t{index}" for token, index in ordered]
    bad = [line for line, entry in zip(lines, ordered) if len(line.splitlines()) != 1 or _dictionary_entry(line) != entry]
    if bad:
        raise ValueError(
            f"elmo: {name} cannot hold the lines {bad[:3]}: a token that is empty or holds a line break, a tab or "
            "leading whitespace does not read back as itself"
        )
    return "".join(line + "\n" for line in lines)


def read_warm_state(path: Path, options: ElmoOptions, check_values: bool = True) -> Optional[Tuple[Tensor, Tensor]]:
    """The warm start that :func:`write_manylangs` wrote to ``path`` (hidden, memory), or None without the file."""
    if not path.exists():
        return None
    shapes = {
        "hidden": (options.n_layers, 2, options.projection_dim),
        "memory": (options.n_layers, 2, options.lstm_dim),
    }
    state = read_state_dict(path, shapes, check_values)
    return state["hidden"], state["memory"]


def read_network(directory: Path) -> ManyLangsNetwork:
    """The network config that ``config.json`` names, looked for where the reference looks:
    its ``config_path`` from the model directory, then that file's name in the model directory,
    then the configs the ``elmoformanylangs`` package ships (:data:`PACKAGE_CONFIGS`)."""
    config_file = directory / CONFIG_NAME
    config = _read_json(config_file)
    config_path = config.get("config_path") if isinstance(config, dict) else None
    if not isinstance(config_path, str) or not config_path:
        raise ElmoFileError(f"{config_file}: no \"config_path\" naming the network config")
    name = os.path.basename(config_path)
    tried = [directory / config_path, directory / name]
    network: Optional[ManyLangsNetwork] = None
    for path in tried:
        if path.is_file():
            network = ManyLangsNetwork.from_dict(_read_json(path), f"ELMoForManyLangs network config {path}")
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


def read_dictionary(path: Path) -> Dict[str, int]:
    """``char.dic`` or ``word.dic`` as the reference reads it (see the module's docstring); a later
    line of the same token wins, as there."""
    if not path.is_file():
        raise ElmoFileError(f"ELMoForManyLangs dictionary {path} does not exist")
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ElmoFileError(f"ELMoForManyLangs dictionary {path} is not readable UTF-8 text: {err}") from err
    entries: Dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):  # every Unicode line break, as codecs' readline
        entry = _dictionary_entry(line)
        if entry is None:
            raise ElmoFileError(f"{path}, line {number}: expected TOKEN<TAB>ID, got {line!r}")
        entries[entry[0]] = entry[1]
    return entries


def _dictionary_entry(line: str) -> Optional[Tuple[str, int]]:
    """(token, id) of one dictionary line as the reference reads it, or None where it fails."""
    fields = line.strip().split("\t")
    if len(fields) == 1:
        fields.insert(0, "\u3000")  # the reference's reading of a whitespace token, stripped away
    try:
        token, index = fields
        return token, int(index)
    except ValueError:
        return None


def _check_ids(entries: Dict[str, int], rows: int, path: Path) -> None:
    """Refuse ids outside the embedding (the reference sizes it by the number of entries)."""
    bad = [(token, index) for token, index in entries.items() if not 0 <= index < rows]
    if bad:
        raise ElmoFileError(f"{path}: ids must be in 0..{rows - 1} ({rows} entries), got {bad[:3]}")


def token_embedder_shapes(
    options: ElmoOptions, n_chars: int, n_words: int, word_dim: int
) -> Dict[str, Tuple[int, ...]]:
    """Every tensor of the reference's ``ConvTokenEmbedder`` state dict, and its shape."""
    width = options.n_filters
    shapes: Dict[str, Tuple[int, ...]] = {}
    if word_dim:
        shapes["word_emb_layer.embedding.weight"] = (n_words, word_dim)
    shapes["char_emb_layer.embedding.weight"] = (n_chars, options.char_embedding_dim)
    for i, (filter_width, count) in enumerate(options.filters):
        shapes[f"convolutions.{i}.weight"] = (count, options.char_embedding_dim, filter_width)
        shapes[f"convolutions.{i}.bias"] = (count,)
    for k in range(options.n_highway):
        shapes[f"highways._layers.{k}.weight"] = (2 * width, width)
        shapes[f"highways._layers.{k}.bias"] = (2 * width,)
    shapes["projection.weight"] = (options.projection_dim, word_dim + width)
    shapes["projection.bias"] = (options.projection_dim,)
    return shapes


def encoder_shapes(options: ElmoOptions) -> Dict[str, Tuple[int, ...]]:
    """Every tensor of the reference's ``ElmobiLm`` state dict (AllenNLP's ``LstmCellWithProjection``
    per layer and direction), and its shape."""
    cell, projection = options.lstm_dim, options.projection_dim
    shapes: Dict[str, Tuple[int, ...]] = {}
    for index in range(options.n_layers):
        for name in ("forward", "backward"):
            prefix = f"{name}_layer_{index}"
            shapes[f"{prefix}.input_linearity.weight"] = (4 * cell, projection)
            shapes[f"{prefix}.state_linearity.weight"] = (4 * cell, projection)
            shapes[f"{prefix}.state_linearity.bias"] = (4 * cell,)
            shapes[f"{prefix}.state_projection.weight"] = (projection, cell)
    return shapes


def lstm_weights(state: Dict[str, Tensor], prefix: str) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """One ``LstmCellWithProjection``'s weights in :class:`.ProjectedLSTM`'s layout: input weight
    (in, 4C), recurrent weight (P, 4C), bias (4C,), projection (C, P).

    AllenNLP orders the gate blocks input, forget, cell input, output and computes ``x W_i^T +
    h W_s^T + b`` with the forget gate's 1.0 inside ``b``; ProjectedLSTM orders them as TensorFlow
    (i, j, f, o) and adds TensorFlow's forget bias of 1.0 at run time, so 1.0 comes off here.
    """
    bias = _tf_gate_order(state[f"{prefix}.state_linearity.bias"]).clone()
    cell = bias.shape[0] // 4
    bias[2 * cell : 3 * cell] -= 1.0
    return (
        _tf_gate_order(state[f"{prefix}.input_linearity.weight"]).T,
        _tf_gate_order(state[f"{prefix}.state_linearity.weight"]).T,
        bias,
        state[f"{prefix}.state_projection.weight"].T,
    )


def _tf_gate_order(t: Tensor) -> Tensor:
    """Gate blocks (along dim 0) from AllenNLP's i, f, g, o to TensorFlow's i, g (j), f, o."""
    i, f, g, o = t.chunk(4, dim=0)
    return torch.cat([i, g, f, o])


def _allennlp_gate_order(t: Tensor) -> Tensor:
    """Gate blocks (along dim 0) from TensorFlow's i, g (j), f, o back to AllenNLP's i, f, g, o."""
    i, g, f, o = t.chunk(4, dim=0)
    return torch.cat([i, f, g, o])


def _token_encoder_parameters(encoder: ManyLangsTokenEncoder) -> Dict[str, Tensor]:
    """The token encoder's parameters under their names in the reference's ``token_embedder.pkl``."""
    params: Dict[str, Tensor] = {}
    if encoder.word_embedding is not None:
        params["word_emb_layer.embedding.weight"] = encoder.word_embedding.weight
    params["char_emb_layer.embedding.weight"] = encoder.char_embedding.weight
    for i, conv in enumerate(encoder.convolutions):
        params[f"convolutions.{i}.weight"] = conv.weight
        params[f"convolutions.{i}.bias"] = conv.bias
    for k, highway in enumerate(encoder.highways):
        params[f"highways._layers.{k}.weight"] = highway.linear.weight
        params[f"highways._layers.{k}.bias"] = highway.linear.bias
    params["projection.weight"] = encoder.projection.weight
    params["projection.bias"] = encoder.projection.bias
    return params


def _load_token_encoder(encoder: ManyLangsTokenEncoder, state: Dict[str, Tensor]) -> None:
    for name, param in _token_encoder_parameters(encoder).items():
        param.copy_(state[name])


def read_state_dict(path: Path, shapes: Dict[str, Tuple[int, ...]], check_values: bool = True) -> Dict[str, Tensor]:
    """A PyTorch state dict holding exactly the tensors ``shapes`` names, each of its shape.

    Read with ``weights_only=True``: a pickle that holds anything but tensors and plain
    containers is refused, never run. Raises :class:`ElmoFileError` naming what is wrong.
    """
    if not path.is_file():
        raise ElmoFileError(f"ELMoForManyLangs weight file {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights only" in str(err).lower():
            reason = next((line.strip() for line in str(err).splitlines() if "Unsupported" in line), "")
            raise ElmoFileError(
                f"ELMoForManyLangs weight file {path} is not a plain PyTorch state dict: it holds objects other "
                f"than tensors, which are never unpickled here (refused; {reason or 'weights_only load failed'})"
            ) from None
        raise ElmoFileError(
            f"ELMoForManyLangs weight file {path} is not a readable PyTorch file (corrupt?): {err}"
        ) from err
    except Exception as err:  # torch raises RuntimeError, EOFError, ValueError ... for broken files
        raise ElmoFileError(
            f"ELMoForManyLangs weight file {path} is not a readable PyTorch file (corrupt or truncated?): {err}"
        ) from err
    tensors = isinstance(state, Mapping) and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items())
    if not tensors:
        raise ElmoFileError(f"ELMoForManyLangs weight file {path} is not a state dict (a mapping of names to tensors)")
    missing, unexpected = [k for k in shapes if k not in state], [k for k in state if k not in shapes]
    if missing or unexpected:
        raise ElmoFileError(
            f"ELMoForManyLangs weight file {path} does not fit the network config: missing {missing[:4]}, "
            f"unexpected {unexpected[:4]}. Do the network config and the weights belong together?"
        )
    for name, shape in shapes.items():
        tensor = state[name]
        if tuple(tensor.shape) != shape:
            raise ElmoFileError(
                f"ELMoForManyLangs weight file {path}: {name} has shape {tuple(tensor.shape)}, but the network config "
                f"and the dictionaries need {shape}. Do they belong together?"
            )
        if not tensor.is_floating_point():
            raise ElmoFileError(f"ELMoForManyLangs weight file {path}: {name} has dtype {tensor.dtype}, not floats")
        if check_values and not bool(torch.isfinite(tensor).all()):
            raise ElmoFileError(f"ELMoForManyLangs weight file {path}: {name} contains NaN or infinite values")
    return {name: state[name].float() for name in shapes}


def _read_json(path: Path) -> Any:
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
