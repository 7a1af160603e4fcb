"""Array helpers shared by the layers and the component."""

from typing import List, Sequence

import numpy
from spacy.tokens import Doc
from thinc.types import Floats3d


def split_by_lengths(xp, array, lengths: Sequence[int], axis: int) -> List:
    """Cut ``array`` along ``axis`` into contiguous pieces of the given lengths.

    The split points are computed on the host; the pieces stay on ``array``'s device.
    """
    if not len(lengths):
        return []
    points = numpy.cumsum(lengths)[:-1].tolist()
    return [xp.ascontiguousarray(part) for part in xp.split(array, points, axis=axis)]


def no_backprop(d_outputs: List[Floats3d]) -> List[Doc]:
    """The backprop callback of layers whose inputs take no gradient (a frozen or absent biLM)."""
    return []
