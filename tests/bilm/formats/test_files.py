"""Reading and writing the standard options.json + weights.hdf5 files."""

import json
import shutil
import stat

import h5py
import numpy
import pytest

from spacy_elmo import BiLM, ElmoFileError

from ...helpers import hdf5_arrays, random_bilm

SENTENCES = [["Files", "round", "trip", "."], [], ["exactly"]]


def test_written_files_have_the_bilm_tf_layout_and_bytes(fixture_dir, tmp_path):
    model = BiLM.from_files(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    model.to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    original, written = hdf5_arrays(fixture_dir / "lm_weights.hdf5"), hdf5_arrays(tmp_path / "weights.hdf5")
    assert sorted(written) == sorted(original)
    for name, array in original.items():
        assert written[name].dtype == numpy.float32
        numpy.testing.assert_array_equal(written[name], array, err_msg=name)
    assert json.loads((tmp_path / "options.json").read_text()) == json.loads((fixture_dir / "options.json").read_text())


@pytest.mark.parametrize("state", ["zero", "warm"])
def test_round_trip_gives_bit_identical_outputs(tmp_path, state):
    model = random_bilm(state=state)
    if state == "warm":
        model.warm_up([["warm", "up", "text"], ["more", "."]])
        model.runtime.token_cache.clear()  # same call history for both models: bit-for-bit comparable
    model.to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    reloaded = BiLM.from_files(tmp_path / "options.json", tmp_path / "weights.hdf5", state=state)
    for a, b in zip(model.embed_sentences(SENTENCES), reloaded.embed_sentences(SENTENCES)):
        numpy.testing.assert_array_equal(a, b)


def test_written_files_get_the_usual_permissions_and_no_temporaries(tmp_path):
    random_bilm().to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    (tmp_path / "reference").write_text("")  # what open(path, "w") gives, not mkstemp's private 0o600
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(["options.json", "weights.hdf5", "reference"], modes["reference"])


@pytest.fixture
def files(tmp_path):
    model = random_bilm()
    model.to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    return tmp_path / "options.json", tmp_path / "weights.hdf5"


def edit_weights(path, edit):
    with h5py.File(path, "r+") as f:
        edit(f)


def test_missing_dataset_is_named(files):
    options, weights = files
    edit_weights(weights, lambda f: f.__delitem__("CNN_proj/W_proj"))
    with pytest.raises(ElmoFileError, match=r"no dataset 'CNN_proj/W_proj' \(expected shape \(20, 8\)\)"):
        BiLM.from_files(options, weights)


def test_wrong_shape_is_named(files):
    options, weights = files

    def edit(f):
        del f["CNN/b_cnn_1"]
        f["CNN/b_cnn_1"] = numpy.zeros(7, dtype=numpy.float32)

    edit_weights(weights, edit)
    with pytest.raises(ElmoFileError, match=r"'CNN/b_cnn_1' has shape \(7,\), but the options need \(8,\)"):
        BiLM.from_files(options, weights)


def test_options_that_disagree_with_weights(files):
    options, weights = files
    data = json.loads(options.read_text())
    data["lstm"]["dim"] = 32
    options.write_text(json.dumps(data))
    with pytest.raises(ElmoFileError, match=r"LSTMCell/W_0' has shape \(16, 96\), but the options need \(16, 128\)"):
        BiLM.from_files(options, weights)


def test_nan_weights_are_refused(files):
    options, weights = files
    edit_weights(weights, lambda f: f["char_embed"].__setitem__((3, 1), numpy.nan))
    with pytest.raises(ElmoFileError, match="'char_embed' contains NaN"):
        BiLM.from_files(options, weights)


def test_truncated_file(files):
    options, weights = files
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ElmoFileError, match="truncated"):
        BiLM.from_files(options, weights)


def test_not_an_hdf5_file(files):
    options, weights = files
    weights.write_text("this is not hdf5")
    with pytest.raises(ElmoFileError, match="not a readable HDF5 file"):
        BiLM.from_files(options, weights)


def test_missing_weight_file(files, tmp_path):
    with pytest.raises(ElmoFileError, match="does not exist"):
        BiLM.from_files(files[0], tmp_path / "nope.hdf5")


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: d["lstm"].pop("projection_dim"), "missing option lstm.projection_dim"),
        (lambda d: d["lstm"].__setitem__("layers", 2), "unknown option.*lstm.layers"),
        (lambda d: d.__setitem__("surprise", 1), "unknown option.*surprise"),
        (lambda d: d.pop("char_cnn"), 'missing the "char_cnn" section'),
        (lambda d: d["char_cnn"].__setitem__("activation", "gelu"), "activation must be one of"),
    ],
)
def test_bad_options_are_named(files, change, message):
    options, weights = files
    data = json.loads(options.read_text())
    change(data)
    options.write_text(json.dumps(data))
    with pytest.raises(ElmoFileError, match=message):
        BiLM.from_files(options, weights)


def test_training_keys_are_accepted_and_kept(fixture_dir, tmp_path):
    data = json.loads((fixture_dir / "options.json").read_text())
    data.update(dropout=0.1, n_epochs=10, unroll_steps=20)
    data["char_cnn"]["n_characters"] = 261
    (tmp_path / "options.json").write_text(json.dumps(data))
    shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / "weights.hdf5")
    model = BiLM.from_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    model.to_files(tmp_path / "out.json", tmp_path / "out.hdf5")
    written = json.loads((tmp_path / "out.json").read_text())
    assert written["dropout"] == 0.1 and written["unroll_steps"] == 20
    assert written["char_cnn"]["n_characters"] == 262


def test_invalid_json(files):
    options, weights = files
    options.write_text("{lstm: ")
    with pytest.raises(ElmoFileError, match="not valid JSON"):
        BiLM.from_files(options, weights)
