"""Float32 weights kept on disk while their low-precision copies do the work (bf16 or int8 inference).

Inference in bf16 or int8 on a CPU multiplies with copies of the large weights
(:class:`~.weight_copies.WeightCopies`); the float32 parameters they were made from are still the
model's weights (what a save writes, what another precision casts), but inference no longer reads
them, and held in memory they made peak RSS in bf16 higher than in float32. So the weights of a
biLM frozen for inference (:meth:`.BiLMRuntime.prepare_inference` marks them:
:func:`freeze_for_inference`; no others) move to disk once a copy of them is made: each large
float32 source moves, at most once, to a temporary file (unlinked at once: nothing is left
behind), mapped back copy-on-write (``numpy.memmap`` mode ``"c"``): the parameter reads as before,
its pages come back from the file (the page cache, usually) when something reads them, and a
write (an optimizer step) makes private pages as any write does, the file never changes. The
pages a later read brings back are dropped again once it is done (:func:`evict`).

``SPACY_ELMO_OFFLOAD=0`` keeps the float32 weights in memory. A file that cannot be written (a
full disk) keeps them in memory too, with a warning.
"""

import contextlib
import ctypes
import logging
import mmap
import sys
import tempfile
from typing import Iterable

import numpy
import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from ..settings import switches

logger = logging.getLogger("spacy_elmo")

# Weights smaller than this stay in memory: biases and the char embedding cost little, and a
# file per small tensor would cost more than it saves. The Original size's LSTM and highway
# weights are 4-32 MB each.
MIN_BYTES = 1 << 20
# Each moved tensor's mmap and the address and version it had then: process-wide by nature, the
# file mappings of this process's address space, whichever biLM holds the tensor. Kept beside the tensors, not
# on them: a tensor's attributes travel with it when it is pickled (spawned worker processes), and
# an mmap cannot be; the copy a pickle makes holds its values in memory, as any tensor does.
_MAPPINGS: WeakIdKeyDictionary = WeakIdKeyDictionary()
_FROZEN = "_spacy_elmo_frozen_for_inference"  # on a tensor that may move (see freeze_for_inference)
_STAYS = "_spacy_elmo_in_memory"  # on a tensor whose file failed: it never moves


def offload(tensors: Iterable[Tensor]) -> None:
    """Move each large float32 CPU tensor of ``tensors`` frozen for inference to a file mapped
    copy-on-write, once; of those moved before, drop the pages that making this copy read back
    (:func:`evict`)."""
    if not switches().offload:
        return
    for tensor in tensors:
        if on_disk(tensor):
            evict([tensor])
        elif _movable(tensor):
            _move_to_file(tensor)


def evict(tensors: Iterable[Tensor]) -> None:
    """Drop from memory the pages of moved tensors that a read brought back (a new copy, or
    ``auto``'s fp32 pass); they come back from the file when read again. Pages a write made
    private are never dropped: a tensor written since it moved (its address or version changed)
    is left alone. Where Python's ``mmap`` has no ``madvise`` (Windows), pages stay until the
    system needs them."""
    for tensor in tensors:
        mapping = _MAPPINGS.get(tensor)
        unwritten = mapping is not None and (tensor.data_ptr(), tensor._version) == mapping[1:]
        if unwritten and hasattr(mapping[0], "madvise"):
            mapping[0].madvise(mmap.MADV_DONTNEED)


def return_freed_memory() -> None:
    """Hand memory freed to the allocator back to the system where the C library is glibc
    (``malloc_trim``): glibc keeps freed heap memory for reuse, so releasing hundreds of MB of
    weight copies would not lower the process's resident memory. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def freeze_for_inference(tensors: Iterable[Tensor]) -> None:
    """Let ``tensors`` move to a file once a low-precision copy of them is made: the weights of a
    biLM frozen for inference. Weights an optimizer rewrites (pretraining, fine-tuning) are never
    marked, so that their evaluations without gradients do not write them out. A pickle carries
    the mark."""
    for tensor in tensors:
        setattr(tensor, _FROZEN, True)


def on_disk(tensor: Tensor) -> bool:
    """Whether ``tensor``'s values were moved to a file by :func:`offload`."""
    return tensor in _MAPPINGS


def _movable(tensor: Tensor) -> bool:
    return (
        tensor.device.type == "cpu"
        and tensor.dtype == torch.float32
        and tensor.is_contiguous()
        and tensor.numel() * tensor.element_size() >= MIN_BYTES
        and not on_disk(tensor)
        and getattr(tensor, _FROZEN, False)
        and not getattr(tensor, _STAYS, False)
    )


def _move_to_file(tensor: Tensor) -> None:
    values = tensor.detach().numpy()
    try:
        with tempfile.TemporaryFile(prefix="spacy-elmo-weights-") as handle:
            values.tofile(handle)
            handle.flush()
            mapped = numpy.memmap(handle, dtype=values.dtype, mode="c", shape=values.shape)
    except (OSError, ValueError) as err:
        logger.warning("spacy-elmo: keeping float32 weights in memory: cannot write them to a temporary file (%s)", err)
        setattr(tensor, _STAYS, True)  # not again: each try would cost a write
        return
    tensor.data = torch.from_numpy(mapped)
    # numpy.memmap keeps its mmap object there, with no public accessor
    _MAPPINGS[tensor] = (mapped._mmap, tensor.data_ptr(), tensor._version)  # type: ignore[attr-defined]
