"""Standard ELMo files: ``options.json`` + ``weights.hdf5`` as bilm-tf dumps and AllenNLP reads.

Every dataset is checked against the shape the options imply before any is read, so a file
that does not fit says which dataset is wrong and what was expected, at once. A warm start (see
:meth:`BiLM.warm_up`) is kept in an extra group ``spacy_elmo/`` that other implementations ignore.
"""

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Protocol, Tuple, TypeVar, cast

import h5py
import numpy
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ...fileio import PathLike, atomic_path
from ..errors import ElmoFileError
from ..model.char_cnn import CharCNN, Highway
from ..model.lstm import BiLSTMStack, ProjectedLSTM
from ..model.options import ElmoOptions
from ..model.token_encoder import TokenEncoder

WARM_HIDDEN = "spacy_elmo/warm_hidden"
WARM_MEMORY = "spacy_elmo/warm_memory"

Model = TypeVar("Model", bound="ElmoWeights")


@dataclass
class Dataset:
    """One dataset of the file: its shape, and how to read it from / write it into the model."""

    shape: Tuple[int, ...]
    get: Callable[[], numpy.ndarray]
    set: Callable[[numpy.ndarray], None]
    # Parameter views that rows of the dataset fill as they are stored, ``(view, rows)``: read
    # straight into them, with no array in between. Empty where ``set`` must convert (transpose).
    into: Tuple[Tuple[torch.Tensor, slice], ...] = ()
    # What ``set`` writes: parameters, or views of them.
    writes: Tuple[torch.Tensor, ...] = ()


class ElmoWeights(Protocol):
    """What the files hold of a biLM (:class:`~spacy_elmo.bilm.BiLM` has it)."""

    options: ElmoOptions
    token_encoder: TokenEncoder
    lstm: BiLSTMStack
    warm_hidden: Optional[torch.Tensor]
    warm_memory: Optional[torch.Tensor]


def read_weights(model: ElmoWeights, weight_file: PathLike, check_values: bool = True) -> None:
    """Load ``weight_file`` into ``model``, whose options say what every dataset must be.

    Raises :class:`ElmoFileError` naming what is wrong. Datasets stored as the model holds them
    are read straight into its parameters. ``check_values=False`` skips the test for NaN and
    infinite values (a pass over every value), for a file known to have passed it unchanged
    since: a download cache's, whose checksum was taken after the check.
    """
    options = model.options
    path = Path(weight_file)
    if not path.is_file():
        raise ElmoFileError(f"ELMo weight file {path} does not exist")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise ElmoFileError(
            f"ELMo weight file {path} is not a readable HDF5 file (corrupt or truncated?): {err}"
        ) from err
    with f, torch.no_grad():
        datasets = layout(model)
        # Every dataset is found and checked before any is read: a file that does not fit is refused
        # before hundreds of MB are read, and the lookups find HDF5's metadata still in the CPU's
        # caches (between large reads they cost several times as much).
        sources = {name: _checked_dataset(f, name, d.shape, path) for name, d in datasets.items()}
        direct = {name: bool(d.into) and all(_fillable(view) for view, _ in d.into) for name, d in datasets.items()}
        # The datasets that ``set`` converts (transposes) are converted on another thread while
        # HDF5 reads the next ones: torch's copies run without the GIL, HDF5's reads with it.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="spacy-elmo-read") as converter:
            converted = []
            for name, dataset in datasets.items():
                source = sources[name]
                if direct[name]:
                    for view, rows in dataset.into:
                        _read_into(source, rows, view, name, path, check_values)
                else:
                    array = _read_array(source, name, path, check_values)
                    converted.append(converter.submit(torch.no_grad()(dataset.set), array))  # no_grad is per thread
            for conversion in converted:
                conversion.result()
        if WARM_HIDDEN in f:  # checked to exist, fit and be finite, as every dataset
            warm = {WARM_HIDDEN: options.projection_dim, WARM_MEMORY: options.lstm_dim}
            model.warm_hidden, model.warm_memory = (
                torch.from_numpy(_read_array(_checked_dataset(f, name, (options.n_layers, 2, width), path), name, path))
                for name, width in warm.items()
            )


def load_files(
    model_class: Callable[..., Model],
    options_file: PathLike,
    weight_file: PathLike,
    check_values: bool = True,
    **settings: Any,
) -> Model:
    """``model_class(options, **settings)`` holding the weights of ``weight_file``, read at file speed.

    The model is made without the random initial values that the file replaces
    (:func:`skip_random_init`; drawing them costs several times the read at the Original size),
    its large parameters get fresh memory (:func:`_fresh_pages`), and the file is copied once
    into them (:func:`read_weights`). ``benchmarks/load_speed.py`` times it against h5py.
    """
    options = ElmoOptions.from_file(options_file)
    with skip_random_init():
        model = model_class(options, **settings)
    _fresh_pages(model)
    read_weights(model, weight_file, check_values)
    return model


def _fresh_pages(model: Any, min_bytes: int = 1 << 22) -> None:
    """Give the large parameters that the file fills whole new, unwritten memory from NumPy's
    allocator, which asks Linux for huge pages (``madvise``) where torch's does not: the first
    write of the weights then faults once per huge page, not once per small page, and costs what
    h5py's own arrays cost. Their values are undefined until read."""
    written: Dict[int, int] = {}
    for dataset in layout(model).values():
        for target in dataset.writes:
            base = target if target._base is None else target._base
            written[id(base)] = written.get(id(base), 0) + target.numel()
    for param in model.parameters():
        whole = written.get(id(param)) == param.numel()
        if whole and param.device.type == "cpu" and param.dtype == torch.float32 and param.numel() * 4 >= min_bytes:
            param.data = torch.from_numpy(numpy.empty(tuple(param.shape), dtype=numpy.float32))


class _SkipRandomInit(TorchFunctionMode):
    """Turns torch's random initializers into no-ops (see :func:`skip_random_init`)."""

    SKIPPED = frozenset({
        torch.Tensor.uniform_, torch.Tensor.normal_, torch.nn.init.uniform_, torch.nn.init.normal_,
        torch.nn.init.trunc_normal_, torch.nn.init.kaiming_uniform_, torch.nn.init.kaiming_normal_,
        torch.nn.init.xavier_uniform_, torch.nn.init.xavier_normal_, torch.nn.init.orthogonal_,
    })  # fmt: skip

    def __torch_function__(self, func: Any, types: Any, args: Tuple = (), kwargs: Optional[Dict] = None) -> Any:
        kwargs = kwargs or {}
        if func in self.SKIPPED:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


@contextlib.contextmanager
def skip_random_init() -> Iterator[None]:
    """Modules made here keep uninitialized parameters where they would draw random values
    (``nn.Linear``, ``nn.Conv1d``, the LSTM's uniform weights); values they compute (zeros, the
    embedding's padding row, buffers) are made as usual. Only for a model whose every parameter
    is then read from a file: ``tests/bilm/formats/test_load_files.py`` checks that :func:`layout`
    covers them all. The mode is this thread's only (torch function modes are thread-local).
    """
    with _SkipRandomInit():
        yield


def write_files(model: ElmoWeights, options_file: PathLike, weight_file: PathLike) -> None:
    """Write both files, each atomically: a crash leaves the old file or the new one."""
    datasets = layout(model)
    with atomic_path(Path(weight_file)) as tmp, h5py.File(tmp, "w") as f:
        for name, dataset in datasets.items():
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

    The datasets are bilm-tf's char CNN's: a biLM with another token encoder is refused
    (ValueError), before any file is written.
    """
    cnn = model.token_encoder
    if not isinstance(cnn, CharCNN):
        raise ValueError(
            "elmo: this biLM's token encoder (an ELMoForManyLangs model's character vocabulary and word "
            "embedding) does not fit the standard options.json + weights.hdf5 layout, so it cannot be "
            "written there; write it in its own layout with spacy_elmo.bilm.formats.manylangs.write_manylangs(bilm, "
            "directory) (nlp.to_disk does so), which BiLM.from_pretrained(directory) reads back"
        )
    datasets: Dict[str, Dataset] = {}

    def bind(
        name: str,
        param: torch.Tensor,
        to_file: Callable[[torch.Tensor], torch.Tensor],
        from_file: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        def set_param(array: numpy.ndarray) -> None:
            param.copy_(from_file(torch.from_numpy(array)))

        datasets[name] = Dataset(
            shape=tuple(to_file(param).shape),
            get=lambda: to_file(param.detach().float().cpu()).contiguous().numpy(),
            set=set_param,
            into=((param, slice(None)),) if to_file is same else (),
            writes=(param,),
        )

    def same(t: torch.Tensor) -> torch.Tensor:
        return t

    def transpose(t: torch.Tensor) -> torch.Tensor:
        return t.T

    bind("char_embed", cnn.char_embedding.weight[1:], same, same)
    for i, conv in enumerate(cast(Iterable[nn.Conv1d], cnn.convolutions)):
        assert conv.bias is not None  # nn.Conv1d's default, which every token encoder keeps
        bind(f"CNN/W_cnn_{i}", conv.weight, lambda t: t.permute(2, 1, 0).unsqueeze(0), lambda a: a[0].permute(2, 1, 0))
        bind(f"CNN/b_cnn_{i}", conv.bias, same, same)
    for k, highway in enumerate(cast(Iterable[Highway], cnn.highways)):
        bind(f"CNN_high_{k}/W_transform", highway.transform.weight, transpose, transpose)
        bind(f"CNN_high_{k}/b_transform", highway.transform.bias, same, same)
        bind(f"CNN_high_{k}/W_carry", highway.carry.weight, transpose, transpose)
        bind(f"CNN_high_{k}/b_carry", highway.carry.bias, same, same)
    bind("CNN_proj/W_proj", cnn.projection.weight, transpose, transpose)
    bind("CNN_proj/b_proj", cnn.projection.bias, same, same)
    for direction in (0, 1):
        for index, layer in enumerate(cast(Iterable[ProjectedLSTM], model.lstm.layers)):
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

    into = ((top, slice(None, split)), (bottom, slice(split, None)))
    return Dataset((split + bottom.shape[0], top.shape[1]), get, set, into, (top, bottom))


def _checked_dataset(f: h5py.File, name: str, shape: Tuple[int, ...], path: Path) -> h5py.h5d.DatasetID:
    """The dataset ``name``, checked to exist, to have ``shape`` and to hold floating-point numbers.

    HDF5's own handle (h5py's low-level ``h5d``): an ``h5py.Dataset`` adds Python work to every
    lookup and every read, which adds up over a file's datasets.
    """
    try:
        dataset = h5py.h5d.open(f.id, name.encode())
    except KeyError:  # absent, or not a dataset
        raise ElmoFileError(f"ELMo weight file {path} has no dataset {name!r} (expected shape {shape})") from None
    if tuple(dataset.shape) != shape:
        raise ElmoFileError(
            f"ELMo weight file {path}: dataset {name!r} has shape {tuple(dataset.shape)}, but the "
            f"options need {shape}. Do the options file and the weight file belong together?"
        )
    if not numpy.issubdtype(dataset.dtype, numpy.floating):
        raise ElmoFileError(f"ELMo weight file {path}: dataset {name!r} has dtype {dataset.dtype}, expected float32")
    return dataset


def _read_array(dataset: h5py.h5d.DatasetID, name: str, path: Path, check_values: bool = True) -> numpy.ndarray:
    """The whole dataset as a new float32 array, checked to be finite unless not ``check_values``."""
    array = numpy.empty(dataset.shape, dtype=numpy.float32)
    _read(dataset, array, 0, name, path)
    if check_values:
        _check_finite(torch.from_numpy(array), name, path)
    return array


def _fillable(view: torch.Tensor) -> bool:
    """Whether HDF5 can write into ``view`` itself: contiguous float32 in this process's memory."""
    return view.device.type == "cpu" and view.dtype == torch.float32 and view.is_contiguous()


def _read_into(
    dataset: h5py.h5d.DatasetID, rows: slice, view: torch.Tensor, name: str, path: Path, check_values: bool
) -> None:
    """Read ``rows`` of the dataset into ``view`` with no array in between: each byte of the
    file is copied once, into the parameter it is for."""
    _read(dataset, view.detach().numpy(), rows.indices(dataset.shape[0])[0], name, path)
    torch.autograd.graph.increment_version(view)  # a write torch did not see: caches of the old values expire
    if check_values:
        _check_finite(view, name, path)


def _read(dataset: h5py.h5d.DatasetID, target: numpy.ndarray, first_row: int, name: str, path: Path) -> None:
    """Rows ``first_row:first_row + len(target)`` of the dataset into ``target``, a C-contiguous
    float32 array of their shape (HDF5 converts other float types)."""
    file_space = dataset.get_space()
    if target.shape != file_space.shape:
        file_space.select_hyperslab((first_row,) + (0,) * (target.ndim - 1), target.shape)
    try:
        dataset.read(h5py.h5s.create_simple(target.shape), file_space, target)
    except OSError as err:
        raise ElmoFileError(f"ELMo weight file {path}: cannot read dataset {name!r} (truncated file?): {err}") from err


def _check_finite(values: torch.Tensor, name: str, path: Path) -> None:
    """Refuse NaN or infinite values. The sum is one fast pass and finite whenever every value
    is (short of float32 overflow, which the exact test below then clears)."""
    if not bool(torch.isfinite(values.sum())) and not bool(torch.isfinite(values).all()):
        raise ElmoFileError(f"ELMo weight file {path}: dataset {name!r} contains NaN or infinite values")
