"""A bounded cache of frozen biLM outputs, keyed by the biLM input sentence.

With the biLM frozen, a training sentence's layers are the same in every epoch, so computing
them once is enough. Once training has used the cache, prediction uses it too: ``spacy train``
scores the same dev sentences at every evaluation. A pipeline that only predicts (loaded, never
trained in this process) never fills it, so serving costs no cache memory. Outputs of the
``"zero"`` and ``"warm"`` state modes depend on nothing but the sentence itself, which makes the
token strings a complete key.

Once full, the cache keeps what it holds and stores nothing new. Training reads every sentence
once an epoch, in a new order each time, and kept entries serve the cache's share of every later
epoch; evicting the least recently used entry would, once an epoch outgrows the cache, drop many
sentences just before their next use (docs/performance.md, "What to set", has the sizes).
"""

from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple


class FeatureCache:
    """Maps sentence keys to arrays of shape (n_layers + 1, n_tokens, width), up to ``max_bytes``,
    the first stored kept (see the module's docstring).

    Arrays stay on the device they were made on. A copy of the cache (thinc copies models, e.g.
    in ``nlp.replace_listeners``) or a pickled one starts empty, as does a cache whose
    ``fingerprint`` changed since the last lookup: :meth:`.BiLMRuntime.fingerprint`, of the weights and of
    the products that compute the values (inference's, also when a frozen biLM trains with
    gradients on).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"feature cache size must be 0 or more bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.n_bytes = 0
        self._entries: Dict[Hashable, Any] = {}
        self._fingerprint: Tuple = ()
        self.used_in_training = False  # set when training first uses the cache; prediction then does too

    def __len__(self) -> int:
        return len(self._entries)

    def __reduce__(self) -> Tuple[type, Tuple[int]]:
        """Copies and pickles (a pipeline sent to worker processes) start empty, unused."""
        return FeatureCache, (self.max_bytes,)

    def clear(self) -> None:
        self._entries.clear()
        self.n_bytes = 0

    def get_many(self, keys: Sequence[Hashable], fingerprint: Tuple) -> List[Optional[Any]]:
        """The cached array of each key, or None; empties the cache if the weights changed."""
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint
        return [self._entries.get(key) for key in keys]

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` where the budget has room for it; a full cache keeps what it holds."""
        size = int(value.nbytes)
        if self.n_bytes + size > self.max_bytes or key in self._entries:
            return
        self._entries[key] = value
        self.n_bytes += size
