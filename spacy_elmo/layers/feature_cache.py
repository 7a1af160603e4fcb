"""A bounded LRU cache of frozen biLM outputs, keyed by the biLM input sentence.

With the biLM frozen, a training sentence's layers are the same in every epoch, so computing
them once is enough. Once training has used the cache, prediction uses it too: ``spacy train``
scores the same dev sentences at every evaluation. A pipeline that only predicts (loaded, never
trained in this process) never fills it, so serving costs no cache memory. Outputs of the ``"zero"`` and ``"warm"`` state modes depend on nothing but
the sentence itself, which makes the token strings a complete key.
"""

from collections import OrderedDict
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple


class FeatureCache:
    """Maps sentence keys to arrays of shape (n_layers + 1, n_tokens, width), up to ``max_bytes``.

    Arrays stay on the device they were made on. A copy of the cache (thinc copies models, e.g.
    in ``nlp.replace_listeners``) starts empty, as does a cache whose weights ``fingerprint``
    changed since the last lookup.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"feature cache size must be 0 or more bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.n_bytes = 0
        self._entries: "OrderedDict[Hashable, Any]" = OrderedDict()
        self._fingerprint: Tuple = ()
        self.used_in_training = False  # set when training first uses the cache; prediction then does too

    def __len__(self) -> int:
        return len(self._entries)

    def __deepcopy__(self, memo: Dict) -> "FeatureCache":
        return FeatureCache(self.max_bytes)

    def clear(self) -> None:
        self._entries.clear()
        self.n_bytes = 0

    def get_many(self, keys: Sequence[Hashable], fingerprint: Tuple) -> List[Optional[Any]]:
        """The cached array of each key, or None; empties the cache if the weights changed."""
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint
        found = []
        for key in keys:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            found.append(value)
        return found

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` unless it alone exceeds the budget; evicts least recently used keys."""
        size = int(value.nbytes)
        if size > self.max_bytes or key in self._entries:
            return
        while self.n_bytes + size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.n_bytes -= int(evicted.nbytes)
        self._entries[key] = value
        self.n_bytes += size
