"""A feature store made on the CPU served to a GPU pipeline, and pretraining on a GPU."""

import pytest
import torch
from thinc.api import use_ops

from spacy_elmo.bilm.precision.hardware import gpu_has_native_bf16
from spacy_elmo.embed import EmbedSettings, run_embed
from spacy_elmo.embed.manifest import Manifest
from spacy_elmo.layers import get_bilm
from spacy_elmo.pretraining import get_preset, pretrain
from spacy_elmo.pretraining.checkpoint import load_checkpoint
from spacy_elmo.pretraining.distributed import init_distributed
from spacy_elmo.pretraining.train import Trainer

from ..embed.helpers import STORE_TEXTS, store_pipeline
from ..helpers import assert_float32_close, hdf5_arrays
from ..pretraining.helpers import write_corpus, write_repetitive_corpus
from .helpers import host, is_cupy_float32

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("precision", ["fp32", "auto"])
def test_a_store_made_on_the_cpu_serves_a_gpu_pipeline(bilm_files, tmp_path, count_biLM_sentences, precision) -> None:
    """float32 layers from a CPU serve the GPU pipeline, also where its "auto" resolves to bf16."""
    texts = [text for text in STORE_TEXTS if text]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf8")
    run_embed(
        tmp_path / "in.txt",
        tmp_path / "store",
        EmbedSettings(shard_size=2, precision="fp32"),
        *bilm_files,
        progress=False,
        device="cpu",
    )
    with use_ops("numpy"):
        expected = [doc.tensor for doc in store_pipeline(bilm_files, precision="fp32").pipe(texts)]
    assert Manifest.read(tmp_path / "store").model["products"] == "float32"
    nlp = store_pipeline(bilm_files, tmp_path / "store", precision=precision)
    assert get_bilm(nlp.get_pipe("elmo").model).device == torch.device("cuda", 0)
    count_biLM_sentences.clear()
    docs = list(nlp.pipe(texts))
    assert count_biLM_sentences == []  # every sentence from the store
    for doc, tensor in zip(docs, expected):
        assert is_cupy_float32(doc.tensor)
        assert_float32_close(host(doc.tensor), tensor)


def test_pretraining_resumed_from_a_checkpoint_ends_where_an_uninterrupted_run_does(tmp_path, deterministic) -> None:
    write_corpus(tmp_path / "corpus.txt", 120)
    preset = get_preset("tiny")
    config = preset.training.updated(
        max_steps=40, checkpoint_every=10, eval_every=100, n_negatives=8, dropout=0.2, seed=3
    )
    pretrain(tmp_path / "corpus.txt", tmp_path / "whole", preset.options, config, resume=False, progress=False)
    pretrain(
        tmp_path / "corpus.txt",
        tmp_path / "split",
        preset.options,
        config.updated(max_steps=20),
        resume=False,
        progress=False,
    )
    assert load_checkpoint(tmp_path / "split" / "checkpoint.pt")["step"] == 20
    pretrain(tmp_path / "corpus.txt", tmp_path / "split", preset.options, config, resume=True, progress=False)
    whole, resumed = hdf5_arrays(tmp_path / "whole" / "weights.hdf5"), hdf5_arrays(tmp_path / "split" / "weights.hdf5")
    assert whole.keys() == resumed.keys() and len(whole) > 10
    for name in whole:
        assert_float32_close(resumed[name], whole[name], err_msg=name)


def tiny_trainer(tmp_path, lines: int, **settings) -> Trainer:
    """A pretraining run of the ``tiny`` preset on a repetitive corpus of ``lines`` lines."""
    write_repetitive_corpus(tmp_path / "train.txt", lines)
    preset = get_preset("tiny")
    return Trainer(
        init_distributed(),
        tmp_path / "train.txt",
        tmp_path / "out",
        preset.options,
        preset.training.updated(**settings),
        dev_path=None,
        init_from=None,
        resume=False,
        progress=False,
    )


def test_bf16_pretraining_on_the_gpu_is_finite(tmp_path) -> None:
    trainer = tiny_trainer(tmp_path, 60, max_steps=10, precision="bf16")
    assert trainer.bilm.device.type == "cuda" and trainer.bilm.runtime.resolved_precision.dtype == torch.bfloat16
    for _ in range(10):
        sums, counts, _ = trainer._train_step()
        assert torch.isfinite(sums).all() and (counts > 0).all()
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in trainer.bilm.parameters())


def test_pretraining_auto_precision_follows_the_gpu(tmp_path) -> None:
    trainer = tiny_trainer(tmp_path, 20, max_steps=1, precision="auto")
    native = gpu_has_native_bf16(torch.cuda.get_device_capability(0))
    assert trainer.bilm.runtime.resolved_precision.dtype == (torch.bfloat16 if native else torch.float32)
