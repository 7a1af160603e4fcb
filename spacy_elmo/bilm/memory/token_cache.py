"""A bounded cache of char-CNN outputs keyed by token string.

Word frequencies follow Zipf's law, so most tokens of a batch were seen before: looking their
vectors up skips the char CNN and highway layers. Vectors live in one preallocated slab on the
model's device; an LRU map gives each cached token a row. The cache is only consulted when no
gradient is needed, and it empties itself whenever the encoder's weights change (in place,
replaced, or moved to another device), so it can never serve stale vectors.
"""

import threading
from collections import OrderedDict
from typing import Callable, Hashable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor


class TokenCache:
    """Maps up to ``max_entries`` keys to rows of a (max_entries, width) slab. Thread-safe."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"cache size must be 0 or more, got {max_entries}")
        self.max_entries = max_entries
        self._rows: "OrderedDict[Hashable, int]" = OrderedDict()
        self._slab: Optional[Tensor] = None
        self._fingerprint: Tuple = ()
        self._lock = threading.Lock()

    def __reduce__(self) -> Tuple[type, Tuple[int]]:
        """Copies and pickles start empty: vectors are cheap to recompute, locks cannot be copied."""
        return TokenCache, (self.max_entries,)

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self._slab = None

    def lookup(self, keys: Sequence[Hashable], fingerprint: Tuple, compute: Callable[[List[int]], Tensor]) -> Tensor:
        """Vectors for the distinct ``keys``, calling ``compute`` for the ones not cached.

        ``compute(positions)`` returns the vectors of ``keys[p] for p in positions``, shape
        (len(positions), width). Returns shape (len(keys), width).
        """
        if self.max_entries == 0:
            return compute(list(range(len(keys))))
        with self._lock:
            if fingerprint != self._fingerprint:
                self._rows.clear()
                self._slab = None
                self._fingerprint = fingerprint
            missing = [i for i, key in enumerate(keys) if key not in self._rows]
            present = [i for i, key in enumerate(keys) if key in self._rows]
            fresh = compute(missing) if missing else None
            if fresh is not None and self._slab is None:
                self._slab = fresh.new_empty((self.max_entries, fresh.shape[1]))
            assert self._slab is not None
            device = self._slab.device
            out = self._slab.new_empty((len(keys), self._slab.shape[1]))
            if present:
                rows = torch.tensor([self._rows[keys[i]] for i in present], device=device)
                out[torch.tensor(present, device=device)] = self._slab.index_select(0, rows)
                for i in present:
                    self._rows.move_to_end(keys[i])
            if fresh is not None:
                out[torch.tensor(missing, device=device)] = fresh
                if len(keys) <= self.max_entries:
                    # This batch's keys are now the most recent, so evictions spare them.
                    rows = torch.tensor([self._insert(keys[i]) for i in missing], device=device)
                    self._slab.index_copy_(0, rows, fresh)
            return out

    def _insert(self, key: Hashable) -> int:
        """Give ``key`` a row, evicting the least recently used key when full."""
        if len(self._rows) < self.max_entries:
            row = len(self._rows)
        else:
            _, row = self._rows.popitem(last=False)
        self._rows[key] = row
        return row
