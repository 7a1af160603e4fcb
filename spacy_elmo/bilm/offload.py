"""Float32 weights kept on disk while their low-precision copies do the work (bf16 or int8 inference).

Inference in bf16 or int8 on a CPU multiplies with copies of the large weights (see
:class:`~.precision.LowPrecisionWeights`, :class:`~.int8.Int8Weights`); the float32 parameters
they were made from are still the model's weights (what a save writes, what training updates,
what another precision casts), but inference no longer reads them. Held in memory they made peak
RSS in bf16 1.16x float32's at the Original size. So once a copy is made without gradients, each
large float32 source moves to a temporary file (unlinked at once: nothing is left behind), mapped
back copy-on-write (``numpy.memmap`` mode ``"c"``): the parameter reads as before, its pages come
back from the file (the page cache, usually) when something reads them, and a write (an optimizer
step) makes private pages as any write does, the file never changes. Each parameter moves at most
once, so a fine-tuning run that evaluates between steps does not write its weights out again.

``SPACY_ELMO_OFFLOAD=0`` keeps the float32 weights in memory. A file that cannot be written (a
full disk) keeps them in memory too, with a warning.
"""

import logging
import os
import tempfile
from typing import Iterable

import numpy
import torch
from torch import Tensor

logger = logging.getLogger("spacy_elmo")

OFFLOAD_ENV = "SPACY_ELMO_OFFLOAD"
# Weights smaller than this stay in memory: biases and the char embedding cost little, and a
# file per small tensor would cost more than it saves. The Original size's LSTM and highway
# weights are 4-32 MB each.
MIN_BYTES = 1 << 20
_MOVED = "_spacy_elmo_on_disk"  # set on a tensor once its values moved to a file


def offload(tensors: Iterable[Tensor]) -> None:
    """Move each large float32 CPU tensor of ``tensors`` to a file mapped copy-on-write, once."""
    if os.environ.get(OFFLOAD_ENV, "1").strip() == "0":
        return
    for tensor in tensors:
        if _movable(tensor):
            _move_to_file(tensor)


def keep_in_memory(tensors: Iterable[Tensor]) -> None:
    """Never move ``tensors`` to a file: for weights being trained, which an optimizer rewrites
    (pretraining, fine-tuning), so that their evaluations without gradients do not write them out."""
    for tensor in tensors:
        setattr(tensor, _MOVED, True)


def on_disk(tensor: Tensor) -> bool:
    """Whether ``tensor``'s values were moved to a file by :func:`offload` (or are kept in memory
    for good: :func:`keep_in_memory`)."""
    return getattr(tensor, _MOVED, False)


def _movable(tensor: Tensor) -> bool:
    return (
        tensor.device.type == "cpu"
        and tensor.dtype == torch.float32
        and tensor.is_contiguous()
        and tensor.numel() * tensor.element_size() >= MIN_BYTES
        and not on_disk(tensor)
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
        setattr(tensor, _MOVED, True)  # not again: each try would cost a write
        return
    tensor.data = torch.from_numpy(mapped)
    setattr(tensor, _MOVED, True)
