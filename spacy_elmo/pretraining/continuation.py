"""What a later run needs to continue pretraining exactly: the softmax and its vocabulary.

The standard files (``options.json`` + ``weights.hdf5``) hold the biLM and its warm start, but
not the output layer: bilm-tf's dumps drop it, as inference never needs it, and a continued run's
new softmax would spend its first steps relearning the old one. So ``pretrain`` also exports
``softmax.hdf5`` (datasets ``weight`` (vocab_size, projection_dim) and ``bias`` (vocab_size,),
float32) beside ``vocab.txt`` (bilm-tf's vocabulary file: the words in id order, markers first).
``--init-from OPTIONS WEIGHTS`` continues with both when they lie beside WEIGHTS, scoring held-out
text exactly as the exporting run did at its end (the optimiser's moments, not exported, rebuild
within a few steps); without them (e.g. the bundled biLM), a new vocabulary and softmax are made.

A run that keeps its token encoder near static vectors (``init_tokens_weight``, see
:mod:`.init_tokens`) also exports ``kept_vectors.hdf5``: the words (``words``, UTF-8), the vectors as
given (``vectors``, (n_words, width) float32) and the linear head that maps layer 0 to them
(``head_weight`` (width, projection_dim), ``head_bias`` (width,)). The vectors travel with the
export because a retrained word2vec is another space: ``--init-from`` with
``--init-tokens-weight`` > 0 keeps the distance to these very vectors, through the same head.
"""

from pathlib import Path
from typing import NamedTuple, Optional

import h5py
import numpy
import torch

from ..bilm import BiLM, ElmoOptions
from ..fileio import PathLike, atomic_path, standard_files
from .checkpoint import load_checkpoint
from .init_tokens import InitTokens
from .softmax import SharedSoftmax
from .vocab import MARKER_NAMES, Vocabulary

SOFTMAX_NAME = "softmax.hdf5"
VOCAB_NAME = "vocab.txt"
INIT_TOKENS_FILE = "kept_vectors.hdf5"


class Continuation(NamedTuple):
    """The output layer of an earlier run: its vocabulary and softmax parameters."""

    vocab: Vocabulary
    weight: numpy.ndarray  # (vocab_size, projection_dim) float32
    bias: numpy.ndarray  # (vocab_size,) float32


def write_continuation(
    output_dir: PathLike, vocab: Vocabulary, softmax: SharedSoftmax, init_tokens: Optional[InitTokens] = None
) -> None:
    """Write ``vocab.txt``, ``softmax.hdf5`` and, for a run that keeps vectors, ``kept_vectors.hdf5``
    into ``output_dir``, each atomically."""
    output_dir = Path(output_dir)
    with atomic_path(output_dir / VOCAB_NAME) as path:
        vocab.to_file(path)
    with atomic_path(output_dir / SOFTMAX_NAME) as path, h5py.File(path, "w") as f:
        f.create_dataset("weight", data=softmax.weight.detach().float().cpu().numpy())
        f.create_dataset("bias", data=softmax.bias.detach().float().cpu().numpy())
    if init_tokens is not None:
        with atomic_path(output_dir / INIT_TOKENS_FILE) as path, h5py.File(path, "w") as f:
            f.create_dataset("words", data=init_tokens.words, dtype=h5py.string_dtype("utf-8"))
            f.create_dataset("vectors", data=init_tokens.vectors)
            f.create_dataset("head_weight", data=init_tokens.head.weight.detach().float().cpu().numpy())
            f.create_dataset("head_bias", data=init_tokens.head.bias.detach().float().cpu().numpy())


def read_init_tokens(weight_file: PathLike, projection_dim: int) -> InitTokens:
    """The init-tokens vectors and head exported beside ``weight_file`` (see the module docstring)."""
    path = Path(weight_file).parent / INIT_TOKENS_FILE
    if not path.exists():
        raise ValueError(
            f"a kept distance to static vectors continues with the vectors of the run that kept it, but there is "
            f"no {INIT_TOKENS_FILE} beside {weight_file}: continue from an export of such a run (spacy-elmo export, or "
            "the end of pretrain), or set --init-tokens-weight 0"
        )
    try:
        with h5py.File(path, "r") as f:
            words = [word.decode("utf8") if isinstance(word, bytes) else word for word in f["words"][...]]
            vectors = f["vectors"][...].astype(numpy.float32)
            head_weight, head_bias = f["head_weight"][...], f["head_bias"][...]
    except (OSError, KeyError) as err:
        raise ValueError(f"{path} is not a {INIT_TOKENS_FILE} exported by spacy-elmo pretrain ({err})") from err
    init_tokens = InitTokens(words, vectors, projection_dim)
    try:
        init_tokens.head.load_state_dict({"weight": torch.from_numpy(head_weight), "bias": torch.from_numpy(head_bias)})
    except RuntimeError as err:  # torch's size mismatch
        raise ValueError(f"{path} holds a head for another biLM (projection_dim {projection_dim} here): {err}") from err
    return init_tokens


def find_continuation(weight_file: PathLike) -> Optional[Continuation]:
    """The vocabulary and softmax exported beside ``weight_file``, or None when either is missing."""
    directory = Path(weight_file).parent
    vocab_path, softmax_path = directory / VOCAB_NAME, directory / SOFTMAX_NAME
    if not (vocab_path.exists() and softmax_path.exists()):
        return None
    lines = vocab_path.read_text(encoding="utf8").splitlines()  # bilm-tf's file, as Vocabulary.to_file writes it
    if tuple(lines[: len(MARKER_NAMES)]) != MARKER_NAMES:
        raise ValueError(
            f"{vocab_path} does not start with the markers {', '.join(MARKER_NAMES)}: not a vocabulary of "
            "spacy-elmo pretrain"
        )
    vocab = Vocabulary(lines[len(MARKER_NAMES) :])
    try:
        with h5py.File(softmax_path, "r") as f:
            weight, bias = f["weight"][...].astype(numpy.float32), f["bias"][...].astype(numpy.float32)
    except (OSError, KeyError) as err:
        raise ValueError(
            f"{softmax_path} is not a softmax exported by spacy-elmo pretrain ({err}); remove it to start a new softmax"
        ) from err
    if weight.ndim != 2 or bias.shape != (weight.shape[0],) or weight.shape[0] != len(vocab):
        raise ValueError(
            f"{softmax_path} has a softmax of shape {weight.shape} and bias {bias.shape}, but {vocab_path} has "
            f"{len(vocab)} entries: they come from different runs; remove both to start a new softmax"
        )
    return Continuation(vocab, weight, bias)


def load_softmax(softmax: SharedSoftmax, continuation: Continuation) -> None:
    """Copy the exported parameters into ``softmax``; its projection size must match."""
    if tuple(softmax.weight.shape) != continuation.weight.shape:
        raise ValueError(
            f"the exported softmax has shape {continuation.weight.shape}, the biLM needs "
            f"{tuple(softmax.weight.shape)}: the softmax was exported with another biLM"
        )
    with torch.no_grad():
        softmax.weight.copy_(torch.from_numpy(continuation.weight))
        softmax.bias.copy_(torch.from_numpy(continuation.bias))


def export_checkpoint(checkpoint_path: PathLike, output_dir: PathLike) -> int:
    """Export a run's checkpoint (of a run still going, or stopped) as the files its end would
    write, so ``--init-from`` continues from them; return the checkpoint's step. Only the warm
    start, which the end of a run computes from the corpus, is missing."""
    checkpoint = load_checkpoint(Path(checkpoint_path))
    bilm = BiLM(ElmoOptions.from_dict(checkpoint["options"]))
    bilm.load_state_dict(checkpoint["bilm"])
    vocab = Vocabulary(checkpoint["vocab"])
    softmax = SharedSoftmax(len(vocab), checkpoint["softmax"]["weight"].shape[1])
    softmax.load_state_dict(checkpoint["softmax"])
    init_tokens = None
    if checkpoint.get("kept_vectors") is not None:
        words, vectors = checkpoint["kept_vectors"]["words"], checkpoint["kept_vectors"]["vectors"].numpy()
        init_tokens = InitTokens(words, vectors, bilm.options.projection_dim)
        init_tokens.head.load_state_dict(checkpoint["vectors_head"])
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    bilm.to_files(*standard_files(output_dir))
    write_continuation(output_dir, vocab, softmax, init_tokens)
    return int(checkpoint["step"])
