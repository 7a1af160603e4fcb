"""The feature cache keeps what it holds once full: later epochs find its share of the corpus."""

import random

import numpy

from spacy_elmo.layers.feature_cache import FeatureCache

FINGERPRINT = ("weights", 1)
VALUE = numpy.zeros((3, 4, 8), dtype="float32")  # 384 bytes


def epoch_hits(cache: FeatureCache, keys, rng: random.Random) -> int:
    """One epoch in a new order, as training reads it: look each key up, store what was missing."""
    order = list(keys)
    rng.shuffle(order)
    hits = 0
    for key in order:
        (found,) = cache.get_many([key], FINGERPRINT)
        if found is None:
            cache.put(key, VALUE)
        else:
            hits += 1
    return hits


def test_a_full_cache_keeps_what_it_holds_and_serves_its_share_of_every_epoch():
    cache = FeatureCache(max_bytes=90 * VALUE.nbytes)
    rng = random.Random(0)
    keys = [(f"sentence {i}",) for i in range(100)]
    assert epoch_hits(cache, keys, rng) == 0 and len(cache) == 90
    kept = set(cache._entries)
    for _ in range(5):
        assert epoch_hits(cache, keys, rng) == 90  # least-recently-used eviction served about 67
    assert set(cache._entries) == kept and cache.n_bytes == 90 * VALUE.nbytes


def test_new_weights_empty_the_cache_and_it_fills_again():
    cache = FeatureCache(max_bytes=2 * VALUE.nbytes)
    for key in ("a", "b", "c"):
        cache.put((key,), VALUE)
    assert len(cache) == 2
    assert cache.get_many([("a",)], ("other weights",)) == [None] and len(cache) == 0
    cache.put(("c",), VALUE)
    assert cache.get_many([("c",)], ("other weights",))[0] is VALUE
