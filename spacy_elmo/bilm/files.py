"""Standard ELMo files: ``options.json`` + ``weights.hdf5`` as bilm-tf dumps and AllenNLP reads.

Every dataset is checked against the shape the options imply before it is loaded, so a file
that does not fit says which dataset is wrong and what was expected. A warm start (see
:meth:`BiLM.warm_up`) is kept in an extra group ``spacy_elmo/`` that other implementations ignore.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Protocol, Tuple

import h5py
import numpy
import torch

from ..fileio import PathLike, atomic_path
from .char_cnn import CharCNN
from .errors import ElmoFileError
from .lstm import BiLSTMStack
from .options import ElmoOptions

WARM_HIDDEN = "spacy_elmo/warm_hidden"
WARM_MEMORY = "spacy_elmo/warm_memory"


@dataclass
class Dataset:
    """One dataset of the file: its shape, and how to read it from / write it into the model."""

    shape: Tuple[int, ...]
    get: Callable[[], numpy.ndarray]
    set: Callable[[numpy.ndarray], None]


class ElmoWeights(Protocol):
    """What the files hold of a biLM (:class:`~spacy_elmo.bilm.BiLM` has it)."""

    options: ElmoOptions
    char_cnn: CharCNN
    lstm: BiLSTMStack
    warm_hidden: Optional[torch.Tensor]
    warm_memory: Optional[torch.Tensor]


def read_weights(model: ElmoWeights, weight_file: PathLike) -> None:
    """Load ``weight_file`` into ``model``, whose options say what every dataset must be.

    Raises :class:`ElmoFileError` naming what is wrong.
    """
    options = model.options
    path = Path(weight_file)
    if not path.is_file():
        raise ElmoFileError(f"ELMo weight file {path} does not exist")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise ElmoFileError(f"ELMo weight file {path} is not a readable HDF5 file (corrupt or truncated?): {err}") from err
    with f, torch.no_grad():
        for name, dataset in layout(model).items():
            dataset.set(_read_dataset(f, name, dataset.shape, path))
        if WARM_HIDDEN in f:
            model.warm_hidden = torch.from_numpy(
                _read_dataset(f, WARM_HIDDEN, (options.n_layers, 2, options.projection_dim), path)
            )
            model.warm_memory = torch.from_numpy(
                _read_dataset(f, WARM_MEMORY, (options.n_layers, 2, options.lstm_dim), path)
            )


def write_files(model: ElmoWeights, options_file: PathLike, weight_file: PathLike) -> None:
    """Write both files, each atomically: a crash leaves the old file or the new one."""
    with atomic_path(Path(weight_file)) as tmp, h5py.File(tmp, "w") as f:
        for name, dataset in layout(model).items():
            f.create_dataset(name, data=dataset.get())
        if model.warm_hidden is not None and model.warm_memory is not None:
            f.create_dataset(WARM_HIDDEN, data=model.warm_hidden.float().cpu().numpy())
            f.create_dataset(WARM_MEMORY, data=model.warm_memory.float().cpu().numpy())
    with atomic_path(Path(options_file)) as tmp:
        model.options.to_file(tmp)


def layout(model: ElmoWeights) -> Dict[str, Dataset]:
    """Every dataset of the standard file, bound to the model's parameters.

    Matrices are stored (in, out), TF's ``y = x @ W``; ``nn.Linear`` holds them transposed.
    Convolutions are stored (1, width, in, out); ``nn.Conv1d`` holds (out, in, width).
    ``char_embed`` lacks row 0, the padding character. ``W_0`` stacks the input rows over the
    recurrent rows, which the model keeps as two parameters.
    """
    cnn = model.char_cnn
    datasets: Dict[str, Dataset] = {}

    def bind(name: str, param: torch.Tensor, to_file: Callable[[torch.Tensor], torch.Tensor],
             from_file: Callable[[torch.Tensor], torch.Tensor]) -> None:
        datasets[name] = Dataset(
            shape=tuple(to_file(param).shape),
            get=lambda: to_file(param.detach().float().cpu()).contiguous().numpy(),
            set=lambda array: param.copy_(from_file(torch.from_numpy(array))),
        )

    def same(t: torch.Tensor) -> torch.Tensor:
        return t

    def transpose(t: torch.Tensor) -> torch.Tensor:
        return t.T

    bind("char_embed", cnn.char_embedding.weight[1:], same, same)
    for i, conv in enumerate(cnn.convolutions):
        bind(f"CNN/W_cnn_{i}", conv.weight, lambda t: t.permute(2, 1, 0).unsqueeze(0), lambda a: a[0].permute(2, 1, 0))
        bind(f"CNN/b_cnn_{i}", conv.bias, same, same)
    for k, highway in enumerate(cnn.highways):
        bind(f"CNN_high_{k}/W_transform", highway.transform.weight, transpose, transpose)
        bind(f"CNN_high_{k}/b_transform", highway.transform.bias, same, same)
        bind(f"CNN_high_{k}/W_carry", highway.carry.weight, transpose, transpose)
        bind(f"CNN_high_{k}/b_carry", highway.carry.bias, same, same)
    bind("CNN_proj/W_proj", cnn.projection.weight, transpose, transpose)
    bind("CNN_proj/b_proj", cnn.projection.bias, same, same)
    for direction in (0, 1):
        for index, layer in enumerate(model.lstm.layers):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{index}/LSTMCell"
            datasets[f"{prefix}/W_0"] = _stacked_rows(layer.input_weight[direction], layer.hidden_weight[direction])
            bind(f"{prefix}/B", layer.bias[direction], same, same)
            bind(f"{prefix}/W_P_0", layer.projection[direction], same, same)
    return datasets


def _stacked_rows(top: torch.Tensor, bottom: torch.Tensor) -> Dataset:
    """A dataset that is ``top`` (rows :n) over ``bottom`` (rows n:)."""
    split = top.shape[0]

    def get() -> numpy.ndarray:
        return torch.cat([top.detach(), bottom.detach()]).float().cpu().numpy()

    def set(array: numpy.ndarray) -> None:
        top.copy_(torch.from_numpy(array[:split]))
        bottom.copy_(torch.from_numpy(array[split:]))

    return Dataset((split + bottom.shape[0], top.shape[1]), get, set)


def _read_dataset(f: h5py.File, name: str, shape: Tuple[int, ...], path: Path) -> numpy.ndarray:
    """Read one dataset as float32, checking that it exists, fits and is finite."""
    if name not in f or not isinstance(f[name], h5py.Dataset):
        raise ElmoFileError(f"ELMo weight file {path} has no dataset {name!r} (expected shape {shape})")
    dataset = f[name]
    if tuple(dataset.shape) != shape:
        raise ElmoFileError(
            f"ELMo weight file {path}: dataset {name!r} has shape {tuple(dataset.shape)}, but the "
            f"options need {shape}. Do the options file and the weight file belong together?"
        )
    if not numpy.issubdtype(dataset.dtype, numpy.floating):
        raise ElmoFileError(f"ELMo weight file {path}: dataset {name!r} has dtype {dataset.dtype}, expected float32")
    try:
        array = numpy.asarray(dataset[...], dtype=numpy.float32)
    except OSError as err:
        raise ElmoFileError(f"ELMo weight file {path}: cannot read dataset {name!r} (truncated file?): {err}") from err
    if not numpy.isfinite(array).all():
        raise ElmoFileError(f"ELMo weight file {path}: dataset {name!r} contains NaN or infinite values")
    return array
