"""Fitting a new biLM's token encoder to static vectors before pretraining (MIMICK)."""

import json
import warnings

import h5py
import numpy
import pytest
import spacy
import torch
import torch.distributed as dist
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.pretraining import get_preset, pretrain
from spacy_elmo.pretraining.init_tokens import InitTokens, fit_init_tokens, load_static_vectors, unit_targets
from spacy_elmo.pretraining.lm import data_parallel
from spacy_elmo.pretraining.train import Trainer

from ..helpers import assert_float32_close
from .helpers import WORDS, new_trainer, write_corpus


def _vectors(width: int = 12, seed: int = 0) -> numpy.ndarray:
    """Two clusters of words plus noise: a structure spelling alone does not give away."""
    rng = numpy.random.default_rng(seed)
    centres = rng.normal(size=(2, width))
    return (centres[numpy.arange(len(WORDS)) % 2] + 0.3 * rng.normal(size=(len(WORDS), width))).astype(numpy.float32)


@pytest.fixture(scope="module")
def vectors_pipeline(tmp_path_factory):
    path = tmp_path_factory.mktemp("vectors") / "en_vectors"
    nlp = spacy.blank("xx")
    for word, vector in zip(WORDS, _vectors()):
        nlp.vocab.set_vector(word, vector)
    nlp.to_disk(path)
    return path


def test_load_static_vectors_reads_a_pipeline_and_refuses_other_paths(vectors_pipeline, tmp_path):
    words, vectors = load_static_vectors(vectors_pipeline)
    assert sorted(words) == sorted(WORDS) and vectors.shape == (len(WORDS), 12) and vectors.dtype == numpy.float32
    expected = dict(zip(WORDS, _vectors()))
    numpy.testing.assert_allclose(vectors[words.index("mat")], expected["mat"])
    with pytest.raises(ValueError, match="spacy init vectors"):
        load_static_vectors(tmp_path / "missing")
    spacy.blank("xx").to_disk(tmp_path / "empty")
    with pytest.raises(ValueError, match="no static vectors"):
        load_static_vectors(tmp_path / "empty")


def test_targets_are_centred_and_of_unit_length():
    targets = unit_targets(_vectors()).numpy()
    numpy.testing.assert_allclose(numpy.linalg.norm(targets, axis=1), 1.0, rtol=1e-5)
    assert numpy.abs(targets.mean(axis=0)).max() < 0.2  # the shared direction is gone
    assert not unit_targets(numpy.zeros((2, 3), dtype=numpy.float32)).isnan().any()


def test_fitting_init_tokens_fits_layer_0_to_the_vectors_and_leaves_the_rest_and_the_random_state():
    torch.manual_seed(0)
    bilm = BiLM(get_preset("tiny").options)
    lstm_before = {k: v.clone() for k, v in bilm.state_dict().items() if not k.startswith("token_encoder")}
    init_tokens = InitTokens(WORDS, _vectors(), bilm.options.projection_dim)
    torch.manual_seed(5)
    expected_draw = torch.rand(3)
    torch.manual_seed(5)
    cosines = []
    final = fit_init_tokens(bilm, init_tokens, epochs=150, on_epoch=lambda epoch, cosine: cosines.append(cosine))
    assert torch.equal(torch.rand(3), expected_draw)
    assert len(cosines) == 150 and final == cosines[-1]
    assert cosines[0] < 0.3 and final > 0.85
    for name, value in bilm.state_dict().items():
        if name in lstm_before:
            assert torch.equal(value, lstm_before[name]), name
    # the two clusters of the vectors now separate in layer 0 itself, without the head
    with torch.no_grad():
        layer0 = torch.nn.functional.normalize(bilm.runtime.embed_tokens(WORDS), dim=1).numpy()
    cluster = numpy.arange(len(WORDS)) % 2
    similarity = layer0 @ layer0.T
    same = similarity[cluster[:, None] == cluster[None, :]].mean()
    other = similarity[cluster[:, None] != cluster[None, :]].mean()
    assert same > other + 0.1


@pytest.mark.slow  # pretraining runs
def test_pretrain_starts_from_the_vectors_once_and_logs_the_fit(vectors_pipeline, tmp_path):
    write_corpus(tmp_path / "train.txt", 60)
    preset = get_preset("tiny")
    config = preset.training.updated(max_steps=4, checkpoint_every=2, init_tokens_epochs=5)
    pretrain(
        tmp_path / "train.txt",
        tmp_path / "out",
        preset.options,
        config,
        progress=False,
        init_tokens_from=vectors_pipeline,
    )
    records = [json.loads(line) for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()]
    fits = [r["init_tokens"] for r in records if "init_tokens" in r]
    assert len(fits) == 1 and len(fits[0]["cosine"]) == 5 and fits[0]["cosine"][-1] > fits[0]["cosine"][0]
    # resuming from the checkpoint does not fit again
    pretrain(
        tmp_path / "train.txt",
        tmp_path / "out",
        preset.options,
        config.updated(max_steps=6),
        progress=False,
        init_tokens_from=vectors_pipeline,
    )
    records = [json.loads(line) for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()]
    assert sum("init_tokens" in r for r in records) == 1


def test_cli_refuses_init_tokens_with_init_from(vectors_pipeline, tmp_path):
    write_corpus(tmp_path / "train.txt", 10)
    result = CliRunner().invoke(
        app,
        [
            "pretrain",
            str(tmp_path / "train.txt"),
            str(tmp_path / "out"),
            "--preset",
            "tiny",
            "--max-steps",
            "1",
            "--init-tokens-from",
            str(vectors_pipeline),
            "--init-from",
            "a.json",
            "b.hdf5",
        ],
    )
    assert result.exit_code == 1 and "give one of them" in result.output


def _weights_after(tmp_path, name, vectors_pipeline, weight, steps):
    preset = get_preset("tiny")
    config = preset.training.updated(
        max_steps=steps[0], checkpoint_every=2, init_tokens_epochs=30, init_tokens_weight=weight
    )
    for max_steps in steps:
        pretrain(
            tmp_path / "train.txt",
            tmp_path / name,
            preset.options,
            config.updated(max_steps=max_steps),
            progress=False,
            init_tokens_from=vectors_pipeline,
        )
    return BiLM.from_files(tmp_path / name / "options.json", tmp_path / name / "weights.hdf5")


def _distance_to_vectors(bilm, vectors_pipeline):
    """Mean cosine of layer 0 to the centred vectors under the best linear map (least squares)."""
    words, vectors = load_static_vectors(vectors_pipeline)
    with torch.no_grad():
        layer0 = bilm.runtime.embed_tokens(words).numpy()
    targets = unit_targets(vectors).numpy()
    features = numpy.hstack([layer0, numpy.ones((len(words), 1), dtype=numpy.float32)])
    fitted = features @ numpy.linalg.lstsq(features, targets, rcond=None)[0]
    cosine = (fitted * targets).sum(1) / numpy.linalg.norm(fitted, axis=1)
    return 1.0 - cosine.mean()


@pytest.mark.slow  # pretraining runs
def test_a_kept_distance_holds_layer_0_near_the_vectors_and_resumes_exactly(vectors_pipeline, tmp_path):
    write_corpus(tmp_path / "train.txt", 60)
    free = _weights_after(tmp_path, "free", vectors_pipeline, 0.0, [40])
    kept = _weights_after(tmp_path, "kept", vectors_pipeline, 5.0, [40])
    assert _distance_to_vectors(kept, vectors_pipeline) < _distance_to_vectors(free, vectors_pipeline)
    records = [json.loads(line) for line in (tmp_path / "kept" / "log.jsonl").read_text().splitlines()]
    assert [r["init_tokens"]["weight"] for r in records if "init_tokens" in r] == [5.0]
    assert all(0.0 < r["vectors_cosine"] <= 1.0 for r in records if "ppl" in r)
    assert not any(
        "vectors_cosine" in r
        for r in (json.loads(line) for line in (tmp_path / "free" / "log.jsonl").read_text().splitlines())
    )
    # stopped at step 20 and resumed: the same weights as the run in one go (the head and sampled words included)
    resumed = _weights_after(tmp_path, "resumed", vectors_pipeline, 5.0, [20, 40])
    for name, value in kept.state_dict().items():
        assert_float32_close(resumed.state_dict()[name], value, err_msg=name)


# not slow: 2-step runs, the fast loop's check of resuming with kept vectors
def test_a_kept_distance_needs_the_vectors_also_to_resume(vectors_pipeline, tmp_path):
    write_corpus(tmp_path / "train.txt", 20)
    preset = get_preset("tiny")
    config = preset.training.updated(max_steps=2, checkpoint_every=2, init_tokens_epochs=1, init_tokens_weight=1.0)
    with pytest.raises(ValueError, match="--init-tokens-from"):
        pretrain(tmp_path / "train.txt", tmp_path / "none", preset.options, config, progress=False)
    pretrain(
        tmp_path / "train.txt",
        tmp_path / "out",
        preset.options,
        config,
        progress=False,
        init_tokens_from=vectors_pipeline,
    )
    with pytest.raises(ValueError, match="also to resume"):
        pretrain(tmp_path / "train.txt", tmp_path / "out", preset.options, config.updated(max_steps=4), progress=False)
    with pytest.raises(ValueError, match="init_tokens_weight must be >= 0"):
        preset.training.updated(init_tokens_weight=-1.0)


def _kept_file(directory):
    with h5py.File(directory / "kept_vectors.hdf5", "r") as f:
        return {name: f[name][...] for name in ("words", "vectors", "head_weight", "head_bias")}


# not slow: a 6-step run, its export and a 1-step continuation, the fast loop's check of both
def test_a_kept_run_continues_from_its_export_with_its_vectors_and_head(vectors_pipeline, tmp_path):
    write_corpus(tmp_path / "train.txt", 20)
    preset = get_preset("tiny")
    config = preset.training.updated(max_steps=6, checkpoint_every=2, init_tokens_epochs=2, init_tokens_weight=1.0)
    pretrain(
        tmp_path / "train.txt",
        tmp_path / "kept",
        preset.options,
        config,
        progress=False,
        init_tokens_from=vectors_pipeline,
    )
    end = _kept_file(tmp_path / "kept")
    words, vectors = load_static_vectors(vectors_pipeline)
    assert [w.decode() for w in end["words"]] == words
    numpy.testing.assert_array_equal(end["vectors"], vectors)
    # `spacy-elmo export` of the checkpoint writes the same file as the end of the run
    assert CliRunner().invoke(app, ["export", str(tmp_path / "kept"), str(tmp_path / "snapshot")]).exit_code == 0
    for name, value in _kept_file(tmp_path / "snapshot").items():
        numpy.testing.assert_array_equal(value, end[name], err_msg=name)
    # continued with a vanishing learning rate: the same vectors and head, kept without a new fit
    snapshot = tmp_path / "snapshot"
    continued = config.updated(max_steps=1, learning_rate=1e-12)
    pretrain(
        tmp_path / "train.txt",
        tmp_path / "continued",
        preset.options,
        continued,
        progress=False,
        init_from=(snapshot / "options.json", snapshot / "weights.hdf5"),
    )
    again = _kept_file(tmp_path / "continued")
    numpy.testing.assert_array_equal(again["vectors"], end["vectors"])
    assert_float32_close(again["head_weight"], end["head_weight"])
    records = [json.loads(line) for line in (tmp_path / "continued" / "log.jsonl").read_text().splitlines()]
    assert not any("init_tokens" in record for record in records)


# not slow: a 2-step run, the fast loop's check of --init-from
def test_continuing_a_kept_distance_needs_the_exported_vectors(vectors_pipeline, tmp_path):
    write_corpus(tmp_path / "train.txt", 20)
    preset = get_preset("tiny")
    config = preset.training.updated(max_steps=2, checkpoint_every=2)
    pretrain(tmp_path / "train.txt", tmp_path / "free", preset.options, config, progress=False)
    assert not (tmp_path / "free" / "kept_vectors.hdf5").exists()
    free = tmp_path / "free"
    with pytest.raises(ValueError, match="no kept_vectors.hdf5 beside"):
        pretrain(
            tmp_path / "train.txt",
            tmp_path / "continued",
            preset.options,
            config.updated(init_tokens_weight=1.0),
            progress=False,
            init_from=(free / "options.json", free / "weights.hdf5"),
        )


def _kept_trainer(tmp_path, vectors_pipeline) -> Trainer:
    """A one-process run that fits and keeps the distance to the vectors (the init-tokens targets are a buffer)."""
    write_corpus(tmp_path / "train.txt", 20)
    preset = get_preset("tiny")
    config = preset.training.updated(max_steps=3, init_tokens_epochs=2, init_tokens_weight=1.0)
    return new_trainer(tmp_path, config, init_tokens_from=vectors_pipeline)


def test_no_buffer_changes_in_training(vectors_pipeline, tmp_path):
    """Why DDP need not broadcast buffers at every step: the targets and the forget biases are constants."""
    trainer = _kept_trainer(tmp_path, vectors_pipeline)
    before = {name: buffer.clone() for name, buffer in trainer.objective.named_buffers()}
    assert "init_tokens.targets" in before and any(name.endswith("forget_bias") for name in before)
    for _ in range(3):
        trainer._train_step()
    after = dict(trainer.objective.named_buffers())
    assert after.keys() == before.keys()
    for name, buffer in before.items():
        assert torch.equal(after[name], buffer), name


def test_ddp_does_not_broadcast_the_targets_at_every_step(vectors_pipeline, tmp_path):
    """The targets matrix, (n_words, width), was broadcast from rank 0 before every step (gloo, one process)."""
    objective = _kept_trainer(tmp_path, vectors_pipeline).objective
    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # the current flag, not the deprecated one
            model = data_parallel(objective)
        assert any(buffer is objective.init_tokens.targets for buffer in model.module.buffers())
        assert not model.will_sync_module_buffers()
    finally:
        dist.destroy_process_group()
