"""A doc's vectors are its own in every precision: alone, in any batch, and beside other threads' calls."""

import random
import threading
from typing import Callable, Dict, List, Sequence, Tuple

import numpy
import pytest
import spacy
import torch
from spacy.language import Language

from spacy_elmo import BiLM
from spacy_elmo.bilm.kernels import KernelChoice, int8_packs, onednn_packs
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES, ElmoOptions

from ...helpers import elmo_config, random_bilm

# Relative to the doc's largest value: RELIABILITY.md's promise for a doc alone and in a batch.
OWN_RTOL = 1e-4
WORDS = "the a of cat dog runs quickly over lazy bridge river ran house big small green idea sleeps".split()
needs_int8 = pytest.mark.skipif(not int8_packs.int8_available(), reason="this torch build has no int8 kernels")


def sentences(count: int, seed: int = 0) -> List[List[str]]:
    """``count`` sentences of 2 to 14 words, of varied lengths and magnitudes of their vectors."""
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(2, 14))] for _ in range(count)]


def assert_own(found: numpy.ndarray, alone: numpy.ndarray, label: str) -> None:
    """``found`` (layers, tokens, width) within :data:`OWN_RTOL` of ``alone`` relative to its largest value."""
    gap = float(numpy.abs(found - alone).max() / numpy.abs(alone).max())
    assert gap <= OWN_RTOL, f"{label}: {gap:.2e} from the same doc alone"


def engines() -> List[str]:
    """The quantized engines int8 packs can be made for here: fbgemm everywhere on x86, oneDNN where
    the CPU has int8 dot products (:func:`int8_packs.pack_engine` picks it there)."""
    found = [e for e in ("fbgemm", "qnnpack") if e in torch.backends.quantized.supported_engines][:1]
    return found + (["onednn"] if int8_packs.pack_engine() == "onednn" else [])


# Every precision and kernel `auto` can pick on a CPU: float32, bf16 by plain copies and by weights
# packed for oneDNN (onednn_packs; the tiny model's weights are packed only when told), int8 with
# packs of each engine.
PRECISIONS = (
    ["fp32", "bf16"]
    + (["bf16-packed"] if onednn_packs.available() else [])
    + ([f"int8-{e}" for e in engines()] if int8_packs.int8_available() else [])
)


@pytest.fixture
def with_precision() -> Callable[[BiLM, str], BiLM]:
    """Sets a biLM's precision, ``int8-ENGINE`` packing its int8 weights for ENGINE, ``bf16-packed``
    packing every bf16 weight for oneDNN."""

    def set_precision(model: BiLM, precision: str) -> BiLM:
        name, _, way = precision.partition("-")
        if way == "packed":
            model.lstm.kernels = KernelChoice(packed_from=0)
        elif way:
            model.lstm.kernels = KernelChoice(int8_engine=way)
        model.runtime.precision = name
        model.requires_grad_(False)
        return model

    return set_precision


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_docs_vectors_do_not_depend_on_its_batch_companions(with_precision, precision: str) -> None:
    model = with_precision(random_bilm(cache_size=0), precision)
    texts = sentences(16)
    alone = [model.embed_sentences([text])[0] for text in texts]
    for size in (4, 16):
        order = list(range(len(texts)))
        random.Random(size).shuffle(order)
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            for index, found in zip(chunk, model.embed_sentences([texts[i] for i in chunk])):
                assert_own(found, alone[index], f"{precision}, doc {index} in a batch of {size}")


def run_concurrently(call: Callable[[int], numpy.ndarray], count: int, n_threads: int = 8) -> Dict[int, numpy.ndarray]:
    """``call(i)`` for each ``i`` below ``count``, from ``n_threads`` threads at once."""
    found: Dict[int, numpy.ndarray] = {}
    barrier = threading.Barrier(n_threads)

    def work(first: int) -> None:
        barrier.wait()
        for index in range(first, count, n_threads):
            found[index] = call(index)

    threads = [threading.Thread(target=work, args=(first,)) for first in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def assert_concurrent_calls_match_serial(model: BiLM, docs: Sequence[List[List[str]]], label: str) -> None:
    """Each doc (a few sentences) from 8 threads at once, at 2 torch threads each, against the same
    doc run alone before, at the same torch threads (oneDNN reuses what a first call made only at it)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        expected = [model.embed_sentences(doc) for doc in docs]
        found = run_concurrently(lambda i: model.embed_sentences(docs[i]), len(docs))
    finally:
        torch.set_num_threads(previous)
    for index in range(len(docs)):
        for sentence, (got, alone) in enumerate(zip(found[index], expected[index])):
            assert_own(got, alone, f"{label}, doc {index} sentence {sentence} from 8 threads")


# The edit loop (make test-fast) runs the kernels of plain weight copies; the packs' (int8's,
# oneDNN's bf16) in the whole suite.
@pytest.mark.parametrize("precision", [pytest.param(p, marks=[pytest.mark.slow] * ("-" in p)) for p in PRECISIONS])
def test_concurrent_calls_get_what_serial_calls_get(with_precision, precision: str) -> None:
    """Docs of a few sentences and docs of more than int8's few rows (on oneDNN's packs, if made)."""
    model = with_precision(random_bilm(cache_size=0), precision)
    docs = [sentences(1 + i % 3 + (int8_packs.FEW_ROWS if i % 4 == 0 else 0), seed=i) for i in range(16)]
    assert_concurrent_calls_match_serial(model, docs, precision)


@pytest.mark.slow
@needs_int8
@pytest.mark.skipif(int8_packs.pack_engine() != "onednn", reason="oneDNN packs are made where the CPU has VNNI or AMX")
def test_concurrent_calls_at_the_original_size_in_int8_get_what_serial_calls_get() -> None:
    """int8 at the Original size, where the weights are packed for oneDNN: docs of a few sentences
    (on fbgemm's few-rows packs) and of more sentences than those serve (on oneDNN's)."""
    torch.manual_seed(0)
    model = BiLM(ElmoOptions(**ORIGINAL_SIZES), precision="int8", cache_size=0)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.05)
    model.eval().requires_grad_(False)
    docs = [sentences(1 + i % 3 + (int8_packs.FEW_ROWS if i % 2 == 0 else 0), seed=i) for i in range(48)]
    assert_concurrent_calls_match_serial(model, docs, "Original size")


# The precisions a pipeline's config names (bf16's packs serve only weights larger than a test's).
PIPELINE_PRECISIONS = ["fp32", "bf16"] + (["int8"] if int8_packs.int8_available() else [])


def pipeline_and_texts(bilm_files, precision: str, count: int, seed: int) -> Tuple[Language, List[str], List]:
    """A blank pipeline with ``elmo`` in ``precision`` that stores its layers, ``count`` texts, and
    each text's layers from ``nlp(text)`` alone."""
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files, precision=precision), "store_layers": True})
    nlp.initialize()
    texts = [" ".join(words) for words in sentences(count, seed=seed)]
    return nlp, texts, [nlp(text)._.elmo_layers for text in texts]


@pytest.mark.parametrize("precision", PIPELINE_PRECISIONS)
def test_a_docs_vectors_from_nlp_pipe_are_those_of_nlp_alone(bilm_files, precision: str) -> None:
    nlp, texts, alone = pipeline_and_texts(bilm_files, precision, 16, seed=1)
    for batch_size in (4, 16):
        order = list(range(len(texts)))
        random.Random(batch_size).shuffle(order)
        for index, doc in zip(order, nlp.pipe([texts[i] for i in order], batch_size=batch_size)):
            assert_own(doc._.elmo_layers, alone[index], f"{precision}, doc {index} in nlp.pipe batches of {batch_size}")


@pytest.mark.slow  # starts worker processes
@pytest.mark.parametrize("precision", PIPELINE_PRECISIONS)
def test_a_docs_vectors_from_worker_processes_are_those_of_nlp_alone(bilm_files, precision: str) -> None:
    nlp, texts, alone = pipeline_and_texts(bilm_files, precision, 12, seed=2)
    for index, doc in enumerate(nlp.pipe(texts, n_process=2, batch_size=2)):
        assert_own(doc._.elmo_layers, alone[index], f"{precision}, doc {index} from a worker process")
