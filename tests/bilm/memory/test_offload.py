"""Float32 weights of a biLM frozen for inference moved to disk once their low-precision copies do
the work (:mod:`spacy_elmo.bilm.memory.offload`).

The tiny test models' weights are far below ``MIN_BYTES``: tests that run a biLM lower it.
"""

import logging
import pickle
import tempfile

import numpy
import pytest
import torch

from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels import int8_packs
from spacy_elmo.bilm.memory import offload
from spacy_elmo.bilm.memory.offload import freeze_for_inference, on_disk

from ...helpers import REAL_TEXT, random_bilm, write_bilm_files


@pytest.fixture
def every_weight_moves(monkeypatch):
    monkeypatch.setattr(offload, "MIN_BYTES", 0)
    monkeypatch.delenv(settings.OFFLOAD_ENV, raising=False)


def made_copies(model):
    """The identities of every low-precision copy and int8 pack the model holds."""
    caches = (model.token_encoder.copies, model.lstm.copies)
    return [id(made) for cache in caches for _, made in cache._copies.values()]


def large_parameters(model):
    return [p for p in model.parameters() if p.dim() >= 2]


def test_a_moved_tensor_keeps_its_values_and_takes_writes():
    weight = torch.nn.Parameter(torch.randn(512, 1024))
    values, address = weight.detach().clone(), weight.data_ptr()
    freeze_for_inference([weight])
    offload.offload([weight])
    assert on_disk(weight) and weight.data_ptr() != address
    assert torch.equal(weight, values)
    with torch.no_grad():
        weight.mul_(2.0)  # copy-on-write: the parameter changes, the file does not matter
    assert torch.equal(weight, 2.0 * values)
    offload.offload([weight])  # once only
    assert torch.equal(weight, 2.0 * values)


def test_small_tensors_other_dtypes_unfrozen_ones_and_opted_out_runs_stay_in_memory(monkeypatch):
    small, half = torch.randn(16, 16), torch.randn(1024, 1024).bfloat16()
    kept = torch.randn(1024, 1024)  # not frozen for inference: being trained, say
    freeze_for_inference([small, half])
    address = kept.data_ptr()
    offload.offload([small, half, kept])
    assert kept.data_ptr() == address
    assert not any(on_disk(t) for t in (small, half, kept))
    monkeypatch.setenv(settings.OFFLOAD_ENV, "0")
    large = torch.randn(1024, 1024)
    freeze_for_inference([large])
    offload.offload([large])
    assert not on_disk(large)


def test_evicted_pages_come_back_from_the_file_and_written_ones_are_never_dropped():
    weight = torch.randn(512, 1024)
    values = weight.clone()
    freeze_for_inference([weight])
    offload.offload([weight])
    assert torch.equal(weight, values)  # read back
    offload.evict([weight])
    assert torch.equal(weight, values)  # read back again, from the file
    weight.mul_(2.0)  # a write: private pages, the version moves
    offload.evict([weight])
    offload.offload([weight])
    assert torch.equal(weight, 2.0 * values)


def test_a_file_that_cannot_be_written_keeps_the_weights_in_memory_with_a_warning(monkeypatch, caplog):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", full_disk)
    weight = torch.randn(1024, 1024)
    values, address = weight.clone(), weight.data_ptr()
    freeze_for_inference([weight])
    with caplog.at_level(logging.WARNING, logger="spacy_elmo"):
        offload.offload([weight])
    assert "No space left" in caplog.text and weight.data_ptr() == address and torch.equal(weight, values)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_low_precision_inference_moves_its_weights_and_computes_the_same(every_weight_moves, monkeypatch, precision):
    if precision == "int8" and not int8_packs.int8_available():
        pytest.skip("this torch build has no int8 kernels for this CPU")
    moved = random_bilm(precision=precision, cache_size=0)
    monkeypatch.setenv(settings.OFFLOAD_ENV, "0")
    kept = random_bilm(precision=precision, cache_size=0)
    expected = kept.embed_sentences(REAL_TEXT)
    monkeypatch.delenv(settings.OFFLOAD_ENV)
    moved.runtime.prepare_inference()
    first = moved.embed_sentences(REAL_TEXT)
    lstm_weights = [layer.hidden_weight for layer in moved.lstm.layers]
    assert all(on_disk(w) for w in lstm_weights) and not any(on_disk(w) for w in large_parameters(kept))
    fingerprint, copies = moved.runtime.fingerprint(), made_copies(moved)
    again = moved.embed_sentences(REAL_TEXT)
    assert moved.runtime.fingerprint() == fingerprint
    assert made_copies(moved) == copies  # the copies made before the move are served, not made again
    for found, same, reference in zip(first, again, expected):
        numpy.testing.assert_array_equal(found, reference)
        numpy.testing.assert_array_equal(same, reference)


def test_moved_weights_save_and_train_as_before(every_weight_moves, tmp_path):
    model = random_bilm(precision="bf16", cache_size=0)
    model.runtime.prepare_inference()
    model.embed_sentences(REAL_TEXT[:2])
    assert any(on_disk(p) for p in model.parameters())
    saved = write_bilm_files(tmp_path / "fresh")  # the same seed, never moved
    model.to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    assert (tmp_path / "weights.hdf5").read_bytes() == saved[1].read_bytes()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    model(REAL_TEXT[:2]).layers.square().sum().backward()
    optimizer.step()
    assert all(not torch.equal(p, b) for p, b in zip(large_parameters(model), before) if p.grad is not None)


def test_a_biLM_not_frozen_for_inference_keeps_its_weights_in_memory(every_weight_moves):
    """Its weights may be trained (fine-tuning, pretraining): no switch is needed to keep them."""
    model = random_bilm(precision="bf16", cache_size=0)
    addresses = [p.data_ptr() for p in model.parameters()]
    model.embed_sentences(REAL_TEXT[:2])
    assert [p.data_ptr() for p in model.parameters()] == addresses


def test_a_biLM_with_moved_weights_pickles_with_its_values(every_weight_moves):
    """Spawned worker processes get the model by pickle: the copy holds its values in memory."""
    model = random_bilm(precision="bf16", cache_size=0)
    model.runtime.prepare_inference()
    expected = model.embed_sentences(REAL_TEXT[:2])
    assert any(on_disk(p) for p in model.parameters())
    copy = pickle.loads(pickle.dumps(model))
    assert not any(on_disk(p) for p in copy.parameters())
    for found, reference in zip(copy.embed_sentences(REAL_TEXT[:2]), expected):
        numpy.testing.assert_array_equal(found, reference)
