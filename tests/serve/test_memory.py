"""A service's memory stays bounded over many batches: what is ours to bound.

Each batch of fresh words leaves the vocab at its size at rest (the batch's memory zone), the
biLM's token cache within its entries and the feature cache empty (a pipeline that only predicts
never fills it); after each batch the worker hands the allocator's free pages back to the system.
"""

import random
import threading
from typing import Any, List, Sequence

import pytest
import spacy
from spacy.language import Language

from spacy_elmo.layers import get_runtime
from spacy_elmo.serve.memory import HEAP_TRIM_AVAILABLE, release_free_heap, resident_mib
from spacy_elmo.serve.pipeline import PipelineRun
from spacy_elmo.serve.worker import Worker

from ..helpers import elmo_config
from .test_worker import TIMEOUT, wait_ready

TOKEN_CACHE_ENTRIES = 256


def made_up_texts(n_texts: int, seed: int) -> List[str]:
    """Texts of 12 fresh made-up words each: every batch brings words the pipeline never saw."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [" ".join("".join(rng.choices(letters, k=rng.randint(4, 10))) for _ in range(12)) for _ in range(n_texts)]


def live_lexemes(nlp: Language) -> int:
    """The lexemes the vocab holds (``len(nlp.vocab)`` counts every lexeme ever added, zones' too)."""
    return sum(1 for _ in nlp.vocab)


@pytest.fixture(scope="module")
def small_cache_nlp(bilm_files) -> Language:
    nlp = spacy.blank("xx")
    config = elmo_config(bilm_files, token_cache_size=TOKEN_CACHE_ENTRIES)
    nlp.add_pipe("elmo", config={**config, "threads": 1})
    nlp.initialize()
    return nlp


def test_batches_of_fresh_words_leave_the_vocab_and_caches_within_their_bounds(small_cache_nlp: Language) -> None:
    nlp = small_cache_nlp
    elmo = nlp.get_pipe("elmo")
    runtime = get_runtime(elmo.model)
    run = PipelineRun(nlp)
    run(["Warm-up ."], [True])
    strings, lexemes = len(nlp.vocab.strings), live_lexemes(nlp)
    for seed in range(12):
        outputs = run(made_up_texts(8, seed), [seed % 2 == 0] * 8)
        assert len(outputs) == 8 and len(outputs[0]["tokens"]) == 12
        assert (len(nlp.vocab.strings), live_lexemes(nlp)) == (strings, lexemes), f"batch {seed} kept its words"
        assert len(runtime.token_cache) <= TOKEN_CACHE_ENTRIES
    assert len(runtime.token_cache) == TOKEN_CACHE_ENTRIES  # 12 batches of 96 new words filled it: still bounded
    assert len(elmo.model.attrs["feature_cache"]) == 0


def test_the_worker_releases_the_heap_after_the_warm_up_and_after_every_batch() -> None:
    calls: List[str] = []

    def run(texts: Sequence[str], vectors: Sequence[bool]) -> List[Any]:
        calls.append("batch")
        return list(texts)

    worker = Worker(lambda: run, warm_up_texts=("w",), after_batch=lambda: calls.append("release"))
    worker.start()
    wait_ready(worker)
    assert calls == ["batch", "release"]
    for n in range(3):
        assert worker.submit([f"text {n}"], False).result(TIMEOUT) == [f"text {n}"]
    assert worker.close(TIMEOUT)
    assert calls == ["batch", "release"] + ["batch", "release"] * 3


@pytest.mark.skipif(not HEAP_TRIM_AVAILABLE or resident_mib() is None, reason="glibc's malloc_trim on Linux")
def test_released_heap_leaves_the_resident_memory() -> None:
    """64 MiB of small blocks freed below one that stays: glibc keeps them resident until released."""
    released: List[float] = []

    def allocate_free_release() -> None:
        blocks = [bytearray(4096) for _ in range(16 * 1024)]  # malloc'd one by one, each touched
        survivor = bytearray(4096)  # above them in the heap: free() alone cannot shrink the heap's top
        before = resident_mib()
        del blocks
        kept = resident_mib()
        release_free_heap()
        after = resident_mib()
        assert before is not None and kept is not None and after is not None
        released.extend([kept - before, after - kept])
        del survivor

    thread = threading.Thread(target=allocate_free_release)  # an arena of its own, not the main one
    thread.start()
    thread.join(TIMEOUT)
    freed_without_release, freed_by_release = released
    assert freed_without_release > -16, "free() alone returned the blocks: the test no longer shows anything"
    assert freed_by_release < -48
