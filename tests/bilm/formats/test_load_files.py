"""``load_files`` (what ``BiLM.from_files`` and ``from_pretrained`` use): a biLM made without
random initial values and read straight from its file.

It must give exactly what a model that draws random values first, then reads the file over them,
gives: a parameter that the file does not fill would keep undefined memory.
"""

import h5py
import numpy
import pytest
import torch

from spacy_elmo import BiLM, ElmoFileError, ElmoOptions
from spacy_elmo.bilm.formats import files
from spacy_elmo.bilm.formats.files import load_files, skip_random_init

from ...helpers import random_bilm, tiny_options


def assert_same_state(a: BiLM, b: BiLM) -> None:
    assert a.state_dict().keys() == b.state_dict().keys()
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    for (name, x), y in zip(a.named_buffers(), b.buffers()):  # the non-persistent ones too
        assert torch.equal(x, y), name


def drawn_then_read(options_file, weight_file, **settings) -> BiLM:
    """How the files were loaded before ``load_files``: random initial values drawn, then the file read over them."""
    model = BiLM(ElmoOptions.from_file(options_file), **settings)
    files.read_weights(model, weight_file)
    return model


@pytest.mark.parametrize("warm", [False, True])
def test_load_files_fills_every_parameter_as_a_drawn_model_reads_them(tmp_path, monkeypatch, warm):
    model = random_bilm(options=tiny_options(n_highway=2), state="warm" if warm else "zero")
    if warm:
        model.warm_up([["warm", "up", "text"]])
    model.to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    torch.manual_seed(123)  # values drawn that the file must then replace everywhere
    expected = drawn_then_read(tmp_path / "options.json", tmp_path / "weights.hdf5", cache_size=0)
    fresh_pages = files._fresh_pages

    def poisoned(model, *args):  # memory the file did not fill would show as NaN
        fresh_pages(model, *args)
        for param in model.parameters():
            param.data.fill_(float("nan"))
        model.token_encoder.char_embedding.weight.data[0] = 0.0  # computed, not read: nn.Embedding's padding row

    monkeypatch.setattr(files, "_fresh_pages", poisoned)
    loaded = load_files(BiLM, tmp_path / "options.json", tmp_path / "weights.hdf5", cache_size=0)
    assert_same_state(loaded, expected)
    assert all(p.is_contiguous() and p.dtype == torch.float32 for p in loaded.parameters())
    sentences = [["Loads", "at", "file", "speed", "."], ["ok"]]
    for a, b in zip(loaded.embed_sentences(sentences), expected.embed_sentences(sentences)):
        numpy.testing.assert_array_equal(a, b)


def test_from_files_draws_no_random_values(tmp_path):
    """What a caller draws after loading (a new softmax, dropout) does not depend on how the biLM was loaded."""
    random_bilm().to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    torch.manual_seed(0)
    state = torch.get_rng_state()
    BiLM.from_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    assert torch.equal(torch.get_rng_state(), state)


def test_the_file_layout_covers_every_parameter():
    """Every element of every parameter is written from the file, but the embedding's padding row (computed)."""
    model = BiLM(tiny_options(n_highway=2))
    covered = {id(p): torch.zeros_like(p, dtype=torch.bool) for p in model.parameters()}
    for dataset in files.layout(model).values():
        assert dataset.writes
        for target in dataset.writes:
            base = target if target._base is None else target._base
            mask = covered[id(base)]
            mask.as_strided(target.shape, target.stride(), target.storage_offset() - base.storage_offset())[...] = True
    covered[id(model.token_encoder.char_embedding.weight)][0] = True
    assert [name for name, p in model.named_parameters() if not covered[id(p)].all()] == []


def test_skip_random_init_skips_only_random_values():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    with skip_random_init():
        layer = torch.nn.Embedding(5, 3, padding_idx=0)
        linear = torch.nn.Linear(3, 4)
        zeros = torch.zeros(3)
    assert torch.equal(torch.get_rng_state(), state)  # nothing drawn
    assert torch.equal(layer.weight[0], torch.zeros(3)) and torch.equal(zeros, torch.zeros(3))
    assert linear.weight.shape == (4, 3)
    torch.nn.Linear(3, 4)  # outside, as usual
    assert not torch.equal(torch.get_rng_state(), state)


@pytest.fixture
def weight_files(tmp_path):
    random_bilm().to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    return tmp_path / "options.json", tmp_path / "weights.hdf5"


@pytest.mark.parametrize("dataset", ["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0", "CNN_high_0/W_carry"])
def test_nan_is_refused_in_datasets_read_in_place_and_converted(weight_files, dataset):
    options, weights = weight_files
    with h5py.File(weights, "r+") as f:
        f[dataset][0, 1] = numpy.nan
    with pytest.raises(ElmoFileError, match=f"'{dataset}' contains NaN"):
        load_files(BiLM, options, weights)
    with pytest.raises(ElmoFileError, match=f"'{dataset}' contains NaN"):
        BiLM.from_files(options, weights)
    load_files(BiLM, options, weights, check_values=False)  # a file checked before: not read twice


def test_large_but_finite_values_are_not_taken_for_infinities(weight_files):
    options, weights = weight_files
    with h5py.File(weights, "r+") as f:
        f["CNN_proj/b_proj"][...] = 3e38  # their sum overflows float32
    assert float(load_files(BiLM, options, weights).token_encoder.projection.bias.detach().max()) == pytest.approx(3e38)


def test_float64_datasets_are_converted_while_read(weight_files):
    options, weights = weight_files
    with h5py.File(weights, "r+") as f:
        name = "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"
        values = f[name][...]
        del f[name]
        f[name] = values.astype(numpy.float64)
    assert_same_state(load_files(BiLM, options, weights), drawn_then_read(options, weights))


def test_a_truncated_file_is_refused(weight_files):
    options, weights = weight_files
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) * 3 // 4])
    with pytest.raises(ElmoFileError, match="truncated"):
        load_files(BiLM, options, weights)


def test_a_file_that_does_not_fit_is_refused_before_any_dataset_is_read(weight_files, monkeypatch):
    options, weights = weight_files
    last = "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"  # the last dataset that layout() reads
    assert list(files.layout(BiLM(ElmoOptions.from_file(options))))[-1] == last
    with h5py.File(weights, "r+") as f:
        del f[last]
        f[last] = numpy.zeros((3, 3), dtype=numpy.float32)
    reads = []
    monkeypatch.setattr(files, "_read", lambda *args: reads.append(args))
    with pytest.raises(ElmoFileError, match=f"'{last}' has shape \\(3, 3\\)"):
        load_files(BiLM, options, weights)
    assert reads == []


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda f: f.move("CNN_proj/b_proj", "CNN_proj/moved"),
            r"no dataset 'CNN_proj/b_proj' \(expected shape \(8,\)\)",
        ),
        (lambda f: f.move("CNN_proj", "elsewhere"), r"no dataset 'CNN_proj/W_proj'"),
        (
            lambda f: (f.__delitem__("CNN_proj/b_proj"), f.create_group("CNN_proj/b_proj")),
            "no dataset 'CNN_proj/b_proj'",
        ),
        (
            lambda f: (f.__delitem__("CNN_proj/b_proj"), f.create_dataset("CNN_proj/b_proj", data=numpy.arange(8))),
            r"'CNN_proj/b_proj' has dtype int64, expected float32",
        ),
    ],
)
def test_datasets_missing_or_of_another_kind_are_named(weight_files, edit, message):
    options, weights = weight_files
    with h5py.File(weights, "r+") as f:
        edit(f)
    with pytest.raises(ElmoFileError, match=message):
        load_files(BiLM, options, weights)
