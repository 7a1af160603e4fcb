"""Copies of weights made for the products, kept while their sources are unchanged: one cache for
bf16 (or any low-precision dtype's) copies and int8 packs alike.

A copy is made from float32 parameters (its ``sources``) for a purpose: a product dtype, or the
quantized engine an int8 pack is made for. It is kept under a name (``"0.input_weight.T"``,
``"conv2"``) and served again while the purpose is the same and the sources'
:func:`tensor_versions` have not moved, so that a stale copy is never served: loading, an optimizer
step or ``BiLM.weights_written`` changes the key. Once a copy that replaces its sources is made,
the large float32 sources move to disk where they are frozen for inference (:mod:`.offload`).

Each module that multiplies by copies owns one cache (the LSTM stack, the token encoder, the
pretraining softmax) and clears it itself (``BiLMRuntime.release_product_copies``). Copies are cheap to
remake and keyed on this process's storage: a pickle or a deep copy of the cache starts empty.
"""

import threading
from typing import Callable, Dict, Hashable, Iterable, Sequence, Tuple, TypeVar

import torch
from torch import Tensor

from .offload import offload

Made = TypeVar("Made")


def tensor_versions(tensors: Iterable[Tensor]) -> Tuple:
    """What tells the values of ``tensors`` apart within a process: storage, device, dtype, version.

    Caches of what a model computed key on it (:class:`WeightCopies`, CUDA graphs, and through
    ``BiLMRuntime.fingerprint`` the token and feature caches). torch advances a tensor's version counter
    at every in-place write it makes (an optimizer step, ``load_state_dict``, ``copy_``); a move or
    a cast gives new storage. Writes torch cannot see, through a NumPy or DLPack view as thinc's
    optimizers make them, must be reported with ``torch.autograd.graph.increment_version``
    (``BiLM.weights_written``), so that this one key covers every change.
    """
    return tuple((t.data_ptr(), t.device, t.dtype, t._version) for t in tensors)


class WeightCopies:
    """Weight copies by name, each kept with the purpose it was made for and its sources' versions.

    With gradients reaching a source (training), :meth:`cast` casts afresh at every call, so that
    autograd carries the gradient back to the float32 parameters, and nothing is kept; a copy
    without a gradient (an int8 pack) must be refused by its maker before :meth:`get`.
    """

    def __init__(self) -> None:
        self._copies: Dict[str, Tuple[Tuple, object]] = {}
        # Held while a copy is made and its sources move: a move swaps a tensor's storage, which
        # another thread making a copy from it at that moment (two threads' first passes through
        # one biLM) must not see. The sources are this owner's parameters: its lock suffices.
        self._making = threading.Lock()

    def __len__(self) -> int:
        return len(self._copies)

    def clear(self) -> None:
        """Forget everything made; the next call makes it again."""
        self._copies.clear()

    def __reduce__(self) -> Tuple[type, Tuple[()]]:
        """Pickles and deep copies start empty: copies are cheap to remake, keyed on this process's storage."""
        return WeightCopies, ()

    def cast(self, name: str, dtype: torch.dtype, sources: Sequence[Tensor], make: Callable[[], Tensor]) -> Tensor:
        """``make().to(dtype)``, from the cache when made for ``dtype`` and ``sources`` have not
        changed since; with gradients, cast afresh. A copy in another dtype than float32 replaces
        its sources, which then move to disk where frozen."""
        if torch.is_grad_enabled() and any(source.requires_grad for source in sources):  # training
            return make().to(dtype)
        return self.get(name, dtype, sources, lambda: make().to(dtype), replaces_sources=dtype != torch.float32)

    def get(
        self,
        name: str,
        purpose: Hashable,
        sources: Sequence[Tensor],
        make: Callable[[], Made],
        replaces_sources: bool = True,
    ) -> Made:
        """``make()``, from the cache when it was made for ``purpose`` and ``sources`` have not
        changed since. ``replaces_sources``: the products read the copy, not the sources, which
        then move to disk where frozen for inference (:func:`.offload.offload`)."""
        with self._making:
            key = (purpose, tensor_versions(sources))
            if (cached := self._copies.get(name)) is not None and cached[0] == key:
                return cached[1]  # type: ignore[return-value]
            made = make()
            if replaces_sources:
                offload(sources)
                key = (purpose, tensor_versions(sources))  # a move gives the sources new storage
            self._copies[name] = (key, made)
            return made
