"""Parity with TensorFlow: the outputs bilm-tf produced for AllenNLP's test fixture."""

import json

import h5py
import numpy
import pytest

from spacy_elmo import BiLM


def load_case(fixture_dir):
    sentences = json.loads((fixture_dir / "sentences.json").read_text())
    expected = []
    for k in range(len(sentences)):
        with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as f:
            expected.append([f[str(i)][...] for i in range(len(sentences[k]))])
    return sentences, expected


def top_layer(expected: numpy.ndarray, n_tokens: int) -> numpy.ndarray:
    """bilm-tf's (2, T, P) [forward, backward] output as our (n_tokens, 2P) layer."""
    return numpy.concatenate([expected[0, :n_tokens], expected[1, :n_tokens]], axis=-1)


def run_batches(model: BiLM, sentences):
    """The fixture's 10 batches, in order: batch i holds sentence i of each of the 3 lists."""
    for i in range(len(sentences[0])):
        batch = [sentences[k][i].split() for k in range(len(sentences))]
        yield i, batch, model.embed_sentences(batch)


def test_carry_mode_reproduces_tensorflow(fixture_dir):
    model = BiLM.from_files(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", state="carry")
    sentences, expected = load_case(fixture_dir)
    for i, batch, outputs in run_batches(model, sentences):
        for k, (tokens, layers) in enumerate(zip(batch, outputs)):
            assert layers.shape == (3, len(tokens), 32)
            want = top_layer(expected[k][i], len(tokens))
            # AllenNLP's own criterion for this fixture.
            assert numpy.allclose(layers[2], want, atol=1e-6), (i, k, numpy.abs(layers[2] - want).max())


def test_zero_state_differs_from_carried_state(fixture_dir):
    """The fixture only matches with carried states: the check above is not vacuous."""
    model = BiLM.from_files(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    sentences, expected = load_case(fixture_dir)
    worst = 0.0
    for i, batch, outputs in run_batches(model, sentences):
        for k, layers in enumerate(outputs):
            worst = max(worst, numpy.abs(layers[2] - top_layer(expected[k][i], len(batch[k]))).max())
    assert worst > 1e-4


def test_reset_states_restarts_the_sequence(fixture_dir):
    model = BiLM.from_files(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", state="carry")
    sentences, _ = load_case(fixture_dir)
    batch = [s[0].split() for s in sentences]
    first = model.embed_sentences(batch)
    assert not numpy.allclose(model.embed_sentences(batch)[0], first[0], atol=1e-4)
    model.runtime.reset_states()
    again = model.embed_sentences(batch)
    for a, b in zip(first, again):
        numpy.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rows", [1, 5])
def test_carry_mode_rows_beyond_previous_batch_start_from_zero(fixture_dir, rows):
    """Rows that the previous batch did not have start cold; fewer rows reuse the first ones."""
    opts, weights = fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5"
    sentences, _ = load_case(fixture_dir)
    carry = BiLM.from_files(opts, weights, state="carry")
    zero = BiLM.from_files(opts, weights)
    carry.embed_sentences([s.split() for s in sentences[0][:3]])
    batch = [s.split() for s in sentences[1][:rows]]
    carried, cold = carry.embed_sentences(batch), zero.embed_sentences(batch)
    for row in range(rows):
        same = numpy.allclose(carried[row], cold[row], atol=1e-6)
        assert same == (row >= 3)
