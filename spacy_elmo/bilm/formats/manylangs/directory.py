"""An ELMoForManyLangs model directory, read into a biLM (:func:`load_manylangs`) and written from
one in the reference's own layout (:func:`write_manylangs`), which the reference package reads as it
reads a published model."""

import json
from pathlib import Path
from typing import Any, Callable, Dict

import torch
from torch import Tensor

from ....fileio import PathLike, atomic_path
from ...errors import ElmoFileError
from ..files import ElmoWeights, Model, skip_random_init
from .layout import CHARS_NAME, CONFIG_NAME, ENCODER_NAME, TOKEN_EMBEDDER_NAME, WARM_NAME, WORDS_NAME
from .modules import ManyLangsTokenEncoder
from .network import read_json, read_network
from .vocabulary import Vocabulary, check_ids, dictionary_text, read_dictionary
from .weights import (
    encoder_shapes,
    load_weights,
    manylangs_state_dicts,
    read_state_dict,
    read_warm_state,
    saved,
    token_embedder_shapes,
)


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
    check_ids(vocabulary.chars, n_chars, directory / CHARS_NAME)
    if vocabulary.words is not None:
        check_ids(vocabulary.words, n_words, directory / WORDS_NAME)
    embedder_shapes = token_embedder_shapes(options, n_chars, n_words, word_dim)
    embedder = read_state_dict(directory / TOKEN_EMBEDDER_NAME, embedder_shapes, check_values)
    encoder = read_state_dict(directory / ENCODER_NAME, encoder_shapes(options), check_values)
    warm = read_warm_state(directory / WARM_NAME, options, check_values)
    with skip_random_init():
        token_encoder = ManyLangsTokenEncoder(options, vocabulary, n_chars, n_words, word_dim)
        token_encoder.network = network
        token_encoder.model_config = read_json(directory / CONFIG_NAME)
        model = model_class(options, token_encoder=token_encoder, **settings)
    load_weights(token_encoder, model.lstm, embedder, encoder)
    if warm is not None:
        model.warm_hidden, model.warm_memory = warm
    return model


def is_manylangs(bilm: ElmoWeights) -> bool:
    """Whether ``bilm`` (a :class:`.BiLM`) holds an ELMoForManyLangs model."""
    return isinstance(bilm.token_encoder, ManyLangsTokenEncoder)


def write_manylangs(bilm: ElmoWeights, directory: PathLike) -> Path:
    """Write ``bilm`` (a :class:`.BiLM` holding an ELMoForManyLangs model) into ``directory`` in the
    reference's own layout, each file atomically; returns the directory.

    ``config.json`` (the model's own, its ``config_path`` now the network config's name) and the
    network config beside it (the directory needs nothing else), ``char.dic`` and ``word.dic`` (none
    without a word embedding), ``token_embedder.pkl`` and ``encoder.pkl`` in the reference's names,
    shapes and gate order (:func:`.weights.manylangs_state_dicts`), and, when the biLM has a warm
    start, :data:`.layout.WARM_NAME`, which the reference ignores (else an older one is removed).
    Other files in the directory are left as they are.
    """
    encoder = bilm.token_encoder
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
    embedder_state, encoder_state = manylangs_state_dicts(encoder, bilm.lstm)
    tensors: Dict[str, Dict[str, Tensor]] = {TOKEN_EMBEDDER_NAME: embedder_state, ENCODER_NAME: encoder_state}
    if bilm.warm_hidden is not None and bilm.warm_memory is not None:
        tensors[WARM_NAME] = {"hidden": saved(bilm.warm_hidden), "memory": saved(bilm.warm_memory)}
    else:
        (directory / WARM_NAME).unlink(missing_ok=True)
    for name, text in texts.items():
        with atomic_path(directory / name) as tmp:
            tmp.write_bytes(text.encode("utf-8"))
    for name, state in tensors.items():
        with atomic_path(directory / name) as tmp:
            torch.save(state, tmp)
    return directory


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"
