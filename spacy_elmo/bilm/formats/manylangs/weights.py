"""ELMoForManyLangs' weights: the reference's two state dicts, read, checked and converted both ways.

``token_embedder.pkl`` holds the token encoder's tensors under the names of the reference's
``ConvTokenEmbedder``; ``encoder.pkl`` the LSTM stack's, AllenNLP's ``LstmCellWithProjection`` per
layer and direction, which :class:`spacy_elmo.bilm.model.lstm.ProjectedLSTM` computes exactly once the weights are in
TensorFlow's gate order (:func:`lstm_weights`); writing undoes it (:func:`manylangs_state_dicts`).
The files are read with ``torch.load(weights_only=True)``: tensors only, never code. A file that
holds anything else is refused.
"""

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple, cast

import torch
from torch import Tensor, nn

from ...errors import ElmoFileError
from ...model.lstm import BiLSTMStack, ProjectedLSTM
from ...model.options import ElmoOptions
from .modules import GatedHighway, ManyLangsTokenEncoder

# The reference names each layer's directions so; ProjectedLSTM holds them at indices 0 and 1.
LSTM_DIRECTIONS = ("forward", "backward")


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
        for name in LSTM_DIRECTIONS:
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
    bias = _swap_gates(state[f"{prefix}.state_linearity.bias"]).clone()
    cell = bias.shape[0] // 4
    bias[2 * cell : 3 * cell] -= 1.0
    return (
        _swap_gates(state[f"{prefix}.input_linearity.weight"]).T,
        _swap_gates(state[f"{prefix}.state_linearity.weight"]).T,
        bias,
        state[f"{prefix}.state_projection.weight"].T,
    )


def _swap_gates(t: Tensor) -> Tensor:
    """Gate blocks (along dim 0) from AllenNLP's i, f, g, o to TensorFlow's i, g (j), f, o, and back
    (the swap of the middle two is its own inverse)."""
    i, f, g, o = t.chunk(4, dim=0)
    return torch.cat([i, g, f, o])


def _token_encoder_parameters(encoder: ManyLangsTokenEncoder) -> Dict[str, Tensor]:
    """The token encoder's parameters under their names in the reference's ``token_embedder.pkl``."""
    params: Dict[str, Tensor] = {}
    if encoder.word_embedding is not None:
        params["word_emb_layer.embedding.weight"] = encoder.word_embedding.weight
    params["char_emb_layer.embedding.weight"] = encoder.char_embedding.weight
    for i, conv in enumerate(cast(Iterable[nn.Conv1d], encoder.convolutions)):
        assert conv.bias is not None  # nn.Conv1d's default, which every token encoder keeps
        params[f"convolutions.{i}.weight"] = conv.weight
        params[f"convolutions.{i}.bias"] = conv.bias
    for k, highway in enumerate(cast(Iterable[GatedHighway], encoder.highways)):
        params[f"highways._layers.{k}.weight"] = highway.linear.weight
        params[f"highways._layers.{k}.bias"] = highway.linear.bias
    params["projection.weight"] = encoder.projection.weight
    params["projection.bias"] = encoder.projection.bias
    return params


def read_state_dict(path: Path, shapes: Mapping[str, Tuple[int, ...]], check_values: bool = True) -> Dict[str, Tensor]:
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


def read_warm_state(path: Path, options: ElmoOptions, check_values: bool = True) -> Optional[Tuple[Tensor, Tensor]]:
    """The warm start that :func:`.directory.write_manylangs` wrote to ``path`` (hidden, memory), or
    None without the file. Shapes: (n_layers, 2, projection_dim) and (n_layers, 2, lstm_dim)."""
    if not path.exists():
        return None
    shapes = {
        "hidden": (options.n_layers, 2, options.projection_dim),
        "memory": (options.n_layers, 2, options.lstm_dim),
    }
    state = read_state_dict(path, shapes, check_values)
    return state["hidden"], state["memory"]


def load_weights(
    token_encoder: ManyLangsTokenEncoder,
    lstm: BiLSTMStack,
    embedder_state: Dict[str, Tensor],
    encoder_state: Dict[str, Tensor],
) -> None:
    """Copy the reference's ``token_embedder.pkl`` and ``encoder.pkl`` state dicts (as
    :func:`read_state_dict` checked them) into a biLM's token encoder and LSTM stack, the LSTM's
    weights converted by :func:`lstm_weights`."""
    with torch.no_grad():
        for name, param in _token_encoder_parameters(token_encoder).items():
            param.copy_(embedder_state[name])
        for index, layer in enumerate(cast(Iterable[ProjectedLSTM], lstm.layers)):
            for direction, name in enumerate(LSTM_DIRECTIONS):
                weights = lstm_weights(encoder_state, f"{name}_layer_{index}")
                layer.input_weight[direction].copy_(weights[0])
                layer.hidden_weight[direction].copy_(weights[1])
                layer.bias[direction].copy_(weights[2])
                layer.projection[direction].copy_(weights[3])


def manylangs_state_dicts(
    token_encoder: ManyLangsTokenEncoder, lstm: BiLSTMStack
) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """The reference's ``token_embedder.pkl`` and ``encoder.pkl`` state dicts of a biLM's token
    encoder and LSTM stack: every tensor of :func:`token_embedder_shapes` and :func:`encoder_shapes`,
    float32 on the CPU, each with storage of its own. The LSTM weights are :func:`lstm_weights`
    undone: AllenNLP's gate order and the forget gate's 1.0 back in the bias."""
    embedder = {name: saved(param) for name, param in _token_encoder_parameters(token_encoder).items()}
    encoder: Dict[str, Tensor] = {}
    for index, layer in enumerate(cast(Iterable[ProjectedLSTM], lstm.layers)):
        for direction, name in enumerate(LSTM_DIRECTIONS):
            prefix = f"{name}_layer_{index}"
            bias = saved(layer.bias[direction])
            cell = bias.shape[0] // 4
            bias[2 * cell : 3 * cell] += 1.0  # TensorFlow's forget bias, added at run time here, back in the bias
            encoder[f"{prefix}.input_linearity.weight"] = _swap_gates(saved(layer.input_weight[direction]).T)
            encoder[f"{prefix}.state_linearity.weight"] = _swap_gates(saved(layer.hidden_weight[direction]).T)
            encoder[f"{prefix}.state_linearity.bias"] = _swap_gates(bias)
            encoder[f"{prefix}.state_projection.weight"] = saved(layer.projection[direction]).T.contiguous()
    return embedder, encoder


def saved(t: Tensor) -> Tensor:
    """A float32 CPU copy with a storage of its own (``torch.save`` writes a view's whole storage)."""
    return t.detach().to("cpu", torch.float32).clone(memory_format=torch.contiguous_format)
