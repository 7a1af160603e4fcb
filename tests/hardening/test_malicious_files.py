"""A model or checkpoint file that is really a pickle with a payload is refused, unexecuted.

The payload creates a marker file when unpickled. Each test first shows that the file *is*
live (plain unpickling runs it), then that loading it the spacy-elmo way raises a clear error
and leaves no marker.
"""

import pickle
from pathlib import Path

import pytest
import spacy
import srsly
import torch

from spacy_elmo import ElmoFileError
from spacy_elmo.pretraining.checkpoint import FORMAT_VERSION, load_checkpoint

from ..helpers import elmo_config


class Payload:
    """Unpickling this calls ``open(marker, "w")``, which creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def plant(path: Path, payload: object, *, with_torch: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if with_torch:
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))


def assert_live(path: Path, marker: Path) -> None:
    """The planted file runs its payload under a plain (unsafe) unpickler."""
    if path.read_bytes()[:2] == b"PK":  # torch.save zip archive
        torch.load(path, weights_only=False)
    else:
        pickle.loads(path.read_bytes())
    assert marker.exists(), "the payload must be live, or the test proves nothing"
    marker.unlink()


@pytest.fixture
def saved_pipeline(tmp_path, bilm_files) -> Path:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    return tmp_path / "pipeline"


@pytest.mark.parametrize("with_torch", [False, True], ids=["pickle", "torch.save"])
def test_pipeline_weight_file_that_is_a_pickle(saved_pipeline: Path, tmp_path: Path, with_torch: bool) -> None:
    marker = tmp_path / "PWNED"
    weights = saved_pipeline / "elmo" / "bilm" / "weights.hdf5"
    weights.unlink()
    plant(weights, {"weights": Payload(marker)}, with_torch=with_torch)
    assert_live(weights, marker)
    with pytest.raises(ElmoFileError, match="not a readable HDF5 file"):
        spacy.load(saved_pipeline)
    assert not marker.exists()


def test_pipeline_bytes_whose_weights_are_a_pickle(saved_pipeline: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    nlp = spacy.load(saved_pipeline)
    elmo = nlp.get_pipe("elmo")
    msg = srsly.msgpack_loads(elmo.to_bytes())
    bilm_msg = srsly.msgpack_loads(msg["bilm"])
    bilm_msg["weights"] = pickle.dumps(Payload(marker))
    msg["bilm"] = srsly.msgpack_dumps(bilm_msg)
    with pytest.raises(ElmoFileError, match="not a readable HDF5 file"):
        elmo.from_bytes(srsly.msgpack_dumps(msg))
    assert not marker.exists()


def test_options_file_that_is_a_pickle(saved_pipeline: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    options = saved_pipeline / "elmo" / "bilm" / "options.json"
    plant(options, Payload(marker), with_torch=False)
    with pytest.raises(ElmoFileError, match="is not UTF-8 JSON text"):
        spacy.load(saved_pipeline)
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("with_torch", [False, True], ids=["pickle", "torch.save"])
def test_checkpoint_that_is_a_pickle(tmp_path: Path, with_torch: bool) -> None:
    marker = tmp_path / "PWNED"
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    # Everything a real checkpoint has at the top level, plus the payload.
    plant(
        checkpoint, {"format": FORMAT_VERSION, "step": torch.tensor(3), "rng": Payload(marker)}, with_torch=with_torch
    )
    assert_live(checkpoint, marker)
    with pytest.raises(ValueError, match="cannot read checkpoint"):
        load_checkpoint(checkpoint)
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("with_torch", [False, True], ids=["pickle", "torch.save"])
def test_pretraining_resume_refuses_a_pickled_checkpoint(tmp_path: Path, with_torch: bool) -> None:
    """``pretrain`` resumes from OUTPUT_DIR/checkpoint.pt: a planted one stops the run, unexecuted."""
    from spacy_elmo.pretraining import get_preset, pretrain
    from spacy_elmo.pretraining.checkpoint import CHECKPOINT_NAME

    from ..pretraining.helpers import write_corpus

    marker = tmp_path / "PWNED"
    write_corpus(tmp_path / "train.txt", 20)
    plant(
        tmp_path / "out" / CHECKPOINT_NAME, {"format": FORMAT_VERSION, "config": Payload(marker)}, with_torch=with_torch
    )
    assert_live(tmp_path / "out" / CHECKPOINT_NAME, marker)
    preset = get_preset("tiny")
    with pytest.raises(ValueError, match="cannot read checkpoint"):
        pretrain(
            tmp_path / "train.txt",
            tmp_path / "out",
            preset.options,
            preset.training.updated(max_steps=1),
            resume=True,
            progress=False,
        )
    assert not marker.exists()
    assert not (tmp_path / "out" / "weights.hdf5").exists()
