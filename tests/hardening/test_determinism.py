"""The same text gives the same vectors: across batch sizes and orders, threads, processes and
a save/load round trip.

"The same" is bitwise where the arithmetic is the same (identical batches and a fixed ``threads``
setting: Python threads, save/load, processes fed the same batches) and within float32 rounding
where it is not: a different batch pads to a different length and runs GEMMs of other shapes, and
another torch thread count splits their sums differently, so the last bits differ (see
RELIABILITY.md for the sizes measured on the bundled model). The pipe here has ``threads = 1``;
the default ``"auto"`` picks the count by the machine's load, so only rounding may differ.
"""

import random
import threading
from pathlib import Path
from typing import Dict, List

import numpy
import pytest
import spacy
from spacy.language import Language

from spacy_elmo.layers import get_runtime

from ..helpers import elmo_config

# float32 rounding, relative to the largest value of a text's layers. The random tiny model's
# LSTM amplifies rounding: on one 26-token text of texts() two float32 runs differ by 4.5e-5 and
# each differs from a float64 run by 4e-4 (values up to 8.8); state leaking from another text
# would differ by O(1).
ROUNDING = 1e-4

WORDS = "the bank river money play theatre match team it was a good day to go out and see them again".split()


def texts(n: int = 40, seed: int = 0) -> List[str]:
    rng = random.Random(seed)
    made = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) for _ in range(n)]
    return made + ["", "   ", "One", "Two sentences . Here ."]


def layers_by_text(nlp: Language, items: List[str], **pipe_kwargs: object) -> Dict[str, numpy.ndarray]:
    return {doc.text: doc._.elmo_layers for doc in nlp.pipe(items, **pipe_kwargs)}


def assert_close(got: Dict[str, numpy.ndarray], expected: Dict[str, numpy.ndarray], relative_tolerance: float) -> None:
    assert got.keys() == expected.keys()
    for text, layers in expected.items():
        assert got[text].shape == layers.shape, text
        if relative_tolerance == 0:
            numpy.testing.assert_array_equal(got[text], layers, err_msg=text)
        elif layers.size:
            atol = relative_tolerance * float(numpy.abs(layers).max())
            numpy.testing.assert_allclose(got[text], layers, atol=atol, rtol=0, err_msg=text)


@pytest.fixture(scope="module")
def reference(nlp_elmo: Language) -> Dict[str, numpy.ndarray]:
    return layers_by_text(nlp_elmo, texts(), batch_size=8)


@pytest.mark.parametrize("batch_size", [1, 3, 1000])
def test_batch_size_changes_only_rounding(nlp_elmo: Language, reference, batch_size: int) -> None:
    assert_close(layers_by_text(nlp_elmo, texts(), batch_size=batch_size), reference, ROUNDING)


@pytest.mark.parametrize("seed", [1, 2])
def test_batch_order_changes_only_rounding(nlp_elmo: Language, reference, seed: int) -> None:
    shuffled = texts()
    random.Random(seed).shuffle(shuffled)
    assert_close(layers_by_text(nlp_elmo, shuffled, batch_size=8), reference, ROUNDING)


@pytest.mark.parametrize("threads", [2, "auto"])
def test_the_thread_count_changes_only_rounding(bilm_files, reference, threads) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "store_layers": True, "threads": threads})
    nlp.initialize()
    assert_close(layers_by_text(nlp, texts(), batch_size=8), reference, ROUNDING)


def test_a_text_does_not_depend_on_what_ran_before(nlp_elmo: Language, reference) -> None:
    """The token cache is warm now (the reference filled it): the same batches give the same bits."""
    get_runtime(nlp_elmo.get_pipe("elmo").model).token_cache.clear()
    cold = layers_by_text(nlp_elmo, texts(), batch_size=8)
    assert_close(layers_by_text(nlp_elmo, texts(), batch_size=8), cold, 0)
    assert_close(cold, reference, 0)


def test_threads_at_once_give_the_serial_vectors(nlp_elmo: Language, reference) -> None:
    get_runtime(nlp_elmo.get_pipe("elmo").model).token_cache.clear()  # the threads fill it concurrently
    results: List[Dict[str, numpy.ndarray]] = [{} for _ in range(4)]
    errors: List[BaseException] = []
    start = threading.Barrier(len(results))

    def work(i: int) -> None:
        try:
            start.wait()
            for _ in range(3):
                results[i] = layers_by_text(nlp_elmo, texts(), batch_size=8)
        except BaseException as err:  # surfaced below: an exception in a thread would be lost
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(results))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    for result in results:  # threads share biLM calls, so a text's rows ride in other batches: rounding only
        assert_close(result, reference, ROUNDING)


@pytest.mark.slow  # starts worker processes
def test_two_processes_give_the_serial_vectors(nlp_elmo: Language, reference) -> None:
    """Each worker gets whole batches of batch_size texts: the same batches as the reference."""
    assert_close(layers_by_text(nlp_elmo, texts(), batch_size=8, n_process=2), reference, 0)


def test_save_and_load_give_the_same_vectors(nlp_elmo: Language, reference, tmp_path: Path) -> None:
    nlp_elmo.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert_close(layers_by_text(loaded, texts(), batch_size=8), reference, 0)
