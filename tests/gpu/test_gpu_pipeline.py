"""The elmo component and its listeners on a GPU: placement, outputs, parity with the CPU,
precision, vector hooks, caches, memory, serialization."""

import gc

import numpy
import pytest
import spacy
import torch
from thinc.api import CupyOps, use_ops

from spacy_elmo.bilm.precision.hardware import gpu_has_native_bf16
from spacy_elmo.layers import get_bilm, get_runtime

from ..helpers import (
    FLOAT32_RTOL,
    N_LAYERS,
    WIDTH,
    assert_float32_close,
    build_ner_textcat,
    count_bilm_calls,
    elmo_config,
    make_examples,
)
from ..pipeline.helpers import train
from .helpers import assert_same_predictions, host, is_cupy_float32, predictions

pytestmark = pytest.mark.gpu

TEXTS = [
    "Alice went to Paris .",
    "It was great .",
    "Bob stayed in London",
    "The bank raised its interest rates by half a point on Tuesday , said Mr. Smith .",
    " ".join(["A long text without a full stop"] * 20),  # longer than a window: overlapping windows
]
CUDA0 = torch.device("cuda", 0)


def elmo_layers(nlp, texts=TEXTS):
    """The elmo component's layers of each text, on the host."""
    docs = [nlp.make_doc(text) for text in texts]
    return [host(layers) for layers in nlp.get_pipe("elmo").predict(docs)]


def gpu_bytes_in_use() -> int:
    """GPU memory in live arrays.

    thinc routes CuPy through torch (its PyTorchShim sets this up): a CuPy memory pool takes
    blocks from torch's allocator and keeps the freed ones for reuse, so torch counts them as
    allocated; they are subtracted here. CuPy's own default pool is counted where it is used.
    The collector runs first: spaCy's parser leaves each batch's step model in reference cycles.
    """
    import cupy
    from thinc.backends import context_pools

    gc.collect()
    torch.cuda.synchronize()
    in_use = torch.cuda.memory_allocated() + cupy.get_default_memory_pool().used_bytes()
    pool = context_pools.get().get("pytorch")
    if pool is not None:
        in_use -= pool.total_bytes() - pool.used_bytes()
    return in_use


def elmo_only(bilm_files, **model):
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files, **model))
    nlp.initialize()
    return nlp


def test_the_biLM_and_its_grad_scaler_land_on_cuda0(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files, freeze=False, grad_scaler_config={"enabled": True, "init_scale": 256.0})
    model = nlp.get_pipe("elmo").model
    assert isinstance(model.ops, CupyOps)
    bilm = get_bilm(model)
    assert bilm.device == CUDA0
    assert all(p.device == CUDA0 for p in bilm.parameters()) and all(b.device == CUDA0 for b in bilm.buffers())
    scaler = model.shims[0]._grad_scaler
    assert scaler._enabled and scaler._scale.device == CUDA0 and scaler._growth_tracker.device == CUDA0


def test_the_tensor_and_the_features_are_cupy_float32_and_released_after_the_listeners(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files)
    elmo = nlp.get_pipe("elmo")
    docs = [nlp.make_doc(text) for text in TEXTS]
    elmo.set_annotations(docs, elmo.predict(docs))
    for doc in docs:
        assert is_cupy_float32(doc.tensor) and doc.tensor.shape == (len(doc), WIDTH)
        assert is_cupy_float32(doc._.elmo_features) and doc._.elmo_features.shape == (N_LAYERS, len(doc), WIDTH)
    for doc in nlp.pipe(TEXTS):
        assert is_cupy_float32(doc.tensor)
        assert doc._.elmo_features is None and doc._.elmo_features_unread is None


def test_cpu_and_gpu_layers_agree(bilm_files) -> None:
    with use_ops("numpy"):
        expected = elmo_layers(elmo_only(bilm_files, precision="fp32"))
    found = elmo_layers(elmo_only(bilm_files, precision="fp32"))
    for got, want in zip(found, expected):
        assert_float32_close(got, want, rtol=1e-4)


def test_fp32_is_float32_on_the_gpu_even_where_tf32_is_allowed(bilm_files, tf32_allowed) -> None:
    """TF32 rounds products' inputs to 10 bits (~1e-3); the biLM turns it off for its fp32 calls."""
    with use_ops("numpy"):
        expected = elmo_layers(elmo_only(bilm_files, precision="fp32"))
    found = elmo_layers(elmo_only(bilm_files, precision="fp32"))
    for got, want in zip(found, expected):
        assert_float32_close(got, want, rtol=FLOAT32_RTOL)
    assert (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision) == ("tf32", "tf32")


def test_auto_is_bf16_on_a_gpu_with_native_bf16_and_close_to_fp32() -> None:
    """On the bundled biLM `en` (trained weights): the bf16 contract of tests/bilm/precision/test_precision.py."""
    pipelines = {}
    for precision in ("auto", "fp32"):
        nlp = spacy.blank("xx")
        nlp.add_pipe("elmo", config={"model": {"pretrained": "en", "precision": precision}})
        nlp.initialize()
        pipelines[precision] = nlp
    native = gpu_has_native_bf16(torch.cuda.get_device_capability(0))
    runtime = get_runtime(pipelines["auto"].get_pipe("elmo").model)
    assert runtime.resolved_precision.dtype == (torch.bfloat16 if native else torch.float32)
    auto = numpy.concatenate(elmo_layers(pipelines["auto"]), axis=1)
    fp32 = numpy.concatenate(elmo_layers(pipelines["fp32"]), axis=1)
    assert auto.dtype == numpy.float32
    if not native:  # auto is fp32 there: the same computation
        numpy.testing.assert_array_equal(auto, fp32)
        return
    assert numpy.abs(auto - fp32).max() > 0  # the products did run in bf16
    cosines = (auto * fp32).sum(-1) / (numpy.linalg.norm(auto, axis=-1) * numpy.linalg.norm(fp32, axis=-1))
    assert (cosines.mean(-1) >= 0.999).all(), cosines.mean(-1)


def test_vector_hooks_and_similarity(bilm_files) -> None:
    text = "The bank raised its rates . I sat by the river bank ."
    with use_ops("numpy"):
        cpu = elmo_only(bilm_files, precision="fp32")(text)
        expected = (cpu[1].similarity(cpu[-2]), cpu[:5].similarity(cpu[6:]), cpu.vector, cpu[6:].vector)
    doc = elmo_only(bilm_files, precision="fp32")(text)
    assert doc.has_vector and doc[1].has_vector
    assert is_cupy_float32(doc[1].vector) and is_cupy_float32(doc.vector) and is_cupy_float32(doc[6:].vector)
    numpy.testing.assert_array_equal(host(doc[1].vector), host(doc.tensor[1]))
    assert_float32_close(host(doc.vector), expected[2], rtol=1e-4)
    assert_float32_close(host(doc[6:].vector), expected[3], rtol=1e-4)
    token_similarity, span_similarity = doc[1].similarity(doc[-2]), doc[:5].similarity(doc[6:])
    assert isinstance(token_similarity, float) and isinstance(span_similarity, float)
    assert token_similarity == pytest.approx(expected[0], abs=1e-4)
    assert span_similarity == pytest.approx(expected[1], abs=1e-4)
    assert doc.similarity(doc) == pytest.approx(1.0, abs=1e-5)


def test_the_feature_and_token_caches_give_the_uncached_layers(bilm_files, monkeypatch) -> None:
    # fp32: in bf16 (auto on most GPUs) batches of other shapes may round products otherwise
    cached = build_ner_textcat(bilm_files, precision="fp32")
    uncached = build_ner_textcat(bilm_files, precision="fp32", token_cache_size=0, feature_cache_mb=0.0)
    texts = sorted({eg.text for eg in make_examples(cached)})
    calls = count_bilm_calls(monkeypatch)
    train(cached, make_examples(cached))  # a frozen biLM's training fills the feature cache
    assert len(cached.get_pipe("elmo").model.attrs["feature_cache"]) == len(texts)
    assert len(get_runtime(cached.get_pipe("elmo").model).token_cache) > 0
    calls.clear()
    served = elmo_layers(cached, texts)
    assert calls == []  # all from the feature cache
    computed = elmo_layers(uncached, texts)
    assert calls and len(get_runtime(uncached.get_pipe("elmo").model).token_cache) == 0
    for got, want in zip(served, computed):
        assert_float32_close(got, want)
    cached.get_pipe("elmo").model.attrs["feature_cache"].clear()  # now the token cache alone
    for got, want in zip(elmo_layers(cached, texts), computed):
        assert_float32_close(got, want)


def test_gpu_memory_stays_bounded_while_piping_many_docs(bilm_files) -> None:
    """The peak while streaming docs depends on the batch, not on how many docs went through."""
    nlp = build_ner_textcat(bilm_files)
    texts = [f"Alice went home on day {i} . It was great ." for i in range(3000)]  # a new token per doc
    for _ in nlp.pipe(texts[:100], batch_size=100):  # warm-up: allocator pools
        pass
    peaks = []
    for n in (300, 3000):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for _ in nlp.pipe(texts[:n], batch_size=100):
            pass
        peaks.append(torch.cuda.max_memory_allocated())
    few, many = peaks
    assert many <= 1.2 * few + 2**20, (few, many)  # ten times the docs, not ten times the memory


def test_docs_kept_by_the_user_keep_only_their_tensor_on_the_gpu(bilm_files, monkeypatch) -> None:
    """The layers of a doc (N_LAYERS times its tensor) must not stay with the docs a user keeps.

    Without CUDA graphs: their buffers, kept for the next batch by design (spacy_elmo/bilm/kernels/gpu/cuda_graphs.py),
    would count as held here."""
    monkeypatch.setenv("SPACY_ELMO_CUDA_GRAPHS", "0")
    nlp = build_ner_textcat(bilm_files)
    texts = [f"Alice went home on day {i} . It was great ." for i in range(2000)]
    list(nlp.pipe(texts[:50]))  # warm-up
    before = gpu_bytes_in_use()
    kept = list(nlp.pipe(texts))
    held = gpu_bytes_in_use() - before
    assert all(doc._.elmo_features is None for doc in kept)
    tensor_bytes = sum(doc.tensor.nbytes for doc in kept)
    # The tensors, each rounded up by the allocator (blocks of 512 bytes): far below their layers'.
    assert held < tensor_bytes + 512 * len(kept), (held, tensor_bytes, N_LAYERS * tensor_bytes)


def test_to_disk_on_the_gpu_reloads_on_the_gpu_and_on_the_cpu(bilm_files, tmp_path) -> None:
    nlp = build_ner_textcat(bilm_files, precision="fp32")  # the CPU computes fp32 products
    train(nlp, make_examples(nlp), steps=2)
    expected = predictions(nlp, TEXTS)
    nlp.to_disk(tmp_path / "pipeline")
    on_gpu = spacy.load(tmp_path / "pipeline")
    assert get_bilm(on_gpu.get_pipe("elmo").model).device == CUDA0
    assert_same_predictions(predictions(on_gpu, TEXTS), expected)
    with use_ops("numpy"):
        on_cpu = spacy.load(tmp_path / "pipeline")
        assert get_bilm(on_cpu.get_pipe("elmo").model).device == torch.device("cpu")
        docs = list(on_cpu.pipe(TEXTS))
        assert all(isinstance(doc.tensor, numpy.ndarray) for doc in docs)
        found = [(doc.tensor, dict(doc.cats), [(e.text, e.label_) for e in doc.ents]) for doc in docs]
    # Another device's kernels: scores differ by ~1e-6, enough to break a near tie between entities.
    assert_same_predictions(found, expected, rtol=1e-4, entities=False)


def test_replace_listeners_and_to_bytes_on_the_gpu(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files, precision="fp32")
    train(nlp, make_examples(nlp), steps=2)
    expected = predictions(nlp, TEXTS)
    nlp.replace_listeners("elmo", "textcat", ["model.tok2vec"])
    assert nlp.get_pipe("elmo").listening_components == ["ner"]
    own = next(node for node in nlp.get_pipe("textcat").model.walk() if node.name == "elmo_bilm")
    assert get_bilm(own).device == CUDA0 and get_bilm(own) is not get_bilm(nlp.get_pipe("elmo").model)
    assert_same_predictions(predictions(nlp, TEXTS), expected)
    copy = spacy.util.load_model_from_config(nlp.config, auto_fill=False)
    copy.from_bytes(nlp.to_bytes())
    assert get_bilm(copy.get_pipe("elmo").model).device == CUDA0
    assert_same_predictions(predictions(copy, TEXTS), expected)
