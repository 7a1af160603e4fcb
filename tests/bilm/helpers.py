"""Tiny ELMoForManyLangs model directories, made in the test: with the reference package's own
classes where it is installed (:func:`write_reference_model`), or from the state-dict layout alone
(:func:`write_random_model`) for the tests that need no reference. And a tiny LSTM layer with a
random batch for the GPU loops' tests (:func:`random_lstm_layer`, :func:`random_layer_batch`)."""

import copy
import json
import random
import weakref
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import torch

from spacy_elmo.bilm.formats.manylangs.network import ManyLangsNetwork
from spacy_elmo.bilm.formats.manylangs.weights import encoder_shapes, token_embedder_shapes
from spacy_elmo.bilm.kernels import Bf16Kernel, Float32Kernel
from spacy_elmo.bilm.kernels.gpu.fused import fused_weights
from spacy_elmo.bilm.memory.weight_copies import WeightCopies
from spacy_elmo.bilm.model.lstm import ProjectedLSTM, _active_rows
from spacy_elmo.bilm.model.options import ElmoOptions

# Small network configs in the reference's format. "full": word embedding, relu, two highways,
# clipping that the random weights reach. "plain": no word embedding, tanh, one highway, three
# layers, clip values 0 (the reference then does not clip).
NETWORKS: Dict[str, Dict[str, Any]] = {
    "full": {
        "encoder": {"name": "elmo", "projection_dim": 6, "cell_clip": 0.5, "proj_clip": 0.5, "dim": 10, "n_layers": 2},
        "token_embedder": {
            "name": "cnn",
            "activation": "relu",
            "filters": [[1, 4], [2, 4], [3, 8]],
            "n_highway": 2,
            "word_dim": 5,
            "char_dim": 4,
            "max_characters_per_token": 10,
        },
        "classifier": {"name": "sampled_softmax", "n_samples": 10},
        "dropout": 0.1,
    },
    "plain": {
        "encoder": {"name": "elmo", "projection_dim": 4, "cell_clip": 0, "proj_clip": 0, "dim": 8, "n_layers": 3},
        "token_embedder": {
            "name": "cnn",
            "activation": "tanh",
            "filters": [[1, 3], [4, 5]],
            "n_highway": 1,
            "word_dim": 0,
            "char_dim": 3,
            "max_characters_per_token": 8,
        },
        "classifier": {"name": "sampled_softmax", "n_samples": 10},
        "dropout": 0.1,
    },
}

SPECIALS = ["<bow>", "<eow>", "<oov>", "<pad>", "<bos>", "<eos>"]
# Characters of the vocabulary: Latin, Cyrillic, Chinese, Arabic, a character outside the BMP,
# and a space, which the reference reads back as U+3000 (its line is stripped to the id alone).
CHARS = SPECIALS + list(dict.fromkeys("abcdehtDonauschiflбовьлюМск中文的مرحبا😀 "))
# Words, with the cut form of a long word ("Donaudampfschiff" cut to 8 characters by "full").
WORDS = ["<oov>", "<pad>", "<bos>", "<eos>", "the", "中文", "любовь", "مرحبا", "Donaudam"]

SENTENCES: List[List[str]] = [
    ["the", "中文", "的", "模型"],  # 模, 型: characters the vocabulary lacks
    ["любовь", "Москва", "Любовь"],  # case kept: "Любовь" is no known word
    ["مرحبا", "بالعالم", "!"],
    ["Donaudampfschiffahrtsgesellschaft", "Donaudam", "The", "😀", "a b", "a\u3000b", ""],
    [],
    ["x"],
    ["中文"] * 12,
]


def network(name: str) -> Dict[str, Any]:
    return copy.deepcopy(NETWORKS[name])


def write_directory(
    directory: Path, config: Dict[str, Any], chars: Sequence[str] = CHARS, words: Sequence[str] = WORDS, seed: int = 0
) -> Dict[str, Dict[str, int]]:
    """config.json (naming net.json), net.json and the dictionaries, char ids shuffled so that a
    reader must take them from the file; returns the dictionaries as the reference reads them."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "net.json").write_text(json.dumps(config), encoding="utf8")
    (directory / "config.json").write_text(json.dumps({"seed": 1, "config_path": "net.json", "max_vocab_size": 150000}))
    ids = list(range(len(chars)))
    random.Random(seed).shuffle(ids)
    (directory / "char.dic").write_text("".join(f"{c}\t{i}\n" for c, i in zip(chars, ids)), encoding="utf8")
    (directory / "word.dic").write_text("".join(f"{w}\t{i}\n" for i, w in enumerate(words)), encoding="utf8")
    char_ids = {("\u3000" if c.strip() == "" else c): i for c, i in zip(chars, ids)}
    return {"chars": char_ids, "words": {w: i for i, w in enumerate(words)}}


def write_random_model(directory: Path, name: str = "full", seed: int = 0, scale: float = 0.5) -> Path:
    """A model directory whose state dicts are random tensors of the reference's names and shapes."""
    config = network(name)
    vocabulary = write_directory(directory, config)
    net = ManyLangsNetwork.from_dict(config, "test")
    word_dim = net.word_dim
    generator = torch.Generator().manual_seed(seed)

    def random_state(shapes):
        return {k: torch.randn(shape, generator=generator) * scale for k, shape in shapes.items()}

    n_chars, n_words = len(vocabulary["chars"]), len(vocabulary["words"])
    embedder_shapes = token_embedder_shapes(net.options, n_chars, n_words, word_dim)
    torch.save(random_state(embedder_shapes), directory / "token_embedder.pkl")
    torch.save(random_state(encoder_shapes(net.options)), directory / "encoder.pkl")
    return directory


def write_reference_model(directory: Path, name: str = "full", seed: int = 0, legacy: bool = False) -> Path:
    """A model directory made by the reference package's own classes (``elmoformanylangs``), every
    parameter drawn at random (biases, the ``<pad>`` rows and the forget gates' biases included),
    saved with ``torch.save`` of its state dicts (``legacy``: in torch's pre-1.6 format, as the
    published models were)."""
    from elmoformanylangs.frontend import Model
    from elmoformanylangs.modules.embedding_layer import EmbeddingLayer

    config = network(name)
    vocabulary = write_directory(directory, config, seed=seed)
    embedder = config["token_embedder"]
    words: Optional[EmbeddingLayer] = None
    if embedder["word_dim"]:
        words = EmbeddingLayer(embedder["word_dim"], vocabulary["words"], fix_emb=False)
    chars = EmbeddingLayer(embedder["char_dim"], vocabulary["chars"], fix_emb=False)
    torch.manual_seed(seed)
    model = Model(config, words, chars)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.5)
    save: Dict[str, Any] = {} if not legacy else {"_use_new_zipfile_serialization": False}
    torch.save(model.token_embedder.state_dict(), directory / "token_embedder.pkl", **save)
    torch.save(model.encoder.state_dict(), directory / "encoder.pkl", **save)
    return directory


def options_of(name: str) -> ElmoOptions:
    return ManyLangsNetwork.from_dict(network(name), "test").options


# ---------------------------------------------------------------------- LSTM layers (fused loop, CUDA graphs)
class LayerBatch(NamedTuple):
    """A layer's batch, rows sorted longest first: ``inputs`` (time, 2, rows, 8), ``active`` (the
    rows running at each step), ``hidden`` (2, rows, 8), ``memory`` (2, rows, 24)."""

    inputs: torch.Tensor
    active: List[int]
    hidden: torch.Tensor
    memory: torch.Tensor


def random_lstm_layer(seed: int, device: torch.device) -> ProjectedLSTM:
    """A layer of 24 cells projected to 8, whose weights and bias are large enough for clipping to bite."""
    torch.manual_seed(seed)
    layer = ProjectedLSTM(input_dim=8, lstm_dim=24, projection_dim=8, cell_clip=1.5, proj_clip=1.0)
    with torch.no_grad():
        for param in layer.parameters():
            param.normal_(0.0, 0.5)
    return layer.to(device)


def random_layer_batch(lengths: Sequence[int], device: torch.device) -> LayerBatch:
    """Random inputs and initial states for :func:`random_lstm_layer` over rows of ``lengths`` (longest first)."""
    n_steps, batch = max(lengths), len(lengths)
    return LayerBatch(
        torch.randn(n_steps, 2, batch, 8, device=device),
        _active_rows(lengths, n_steps),
        torch.randn(2, batch, 8, device=device),
        torch.randn(2, batch, 24, device=device),
    )


def eager_kernel(dtype: torch.dtype, device: torch.device) -> Float32Kernel:
    """The eager loop's kernel with products in ``dtype`` (float32 or bf16), copies laid out as on ``device``."""
    if dtype == torch.float32:
        return Float32Kernel()
    return Bf16Kernel(WeightCopies(), out_major=device.type == "cpu")


def eager_layer(layer: ProjectedLSTM, batch: LayerBatch, dtype: torch.dtype):
    """The eager, in-place loop's outputs, final hidden and memory (no autograd); ``batch`` stays
    as it is (the kernel updates its own copy of the states)."""
    with torch.no_grad():
        return eager_kernel(dtype, batch.inputs.device)(0, layer, *_own_states(batch))


# Each test layer's bf16 copies, kept as a stack keeps its layers': a copy is made once per weights.
_COPIES: "weakref.WeakKeyDictionary[ProjectedLSTM, WeightCopies]" = weakref.WeakKeyDictionary()


def fused_inputs(layer: ProjectedLSTM, dtype: torch.dtype):
    """The fused loop's product weights in ``dtype`` and its bias, as :class:`FusedKernel` passes them."""
    copies = _COPIES.setdefault(layer, WeightCopies())
    return fused_weights(copies, 0, layer, dtype), layer.gate_bias().contiguous()


def _own_states(batch: LayerBatch) -> LayerBatch:
    """``batch`` with copies of its states, which a kernel may overwrite."""
    return batch._replace(hidden=batch.hidden.clone(), memory=batch.memory.clone())
