"""How a batch of spaCy docs becomes biLM input sentences, and how outputs find their tokens.

Policy (the biLM was trained on sentences, so we give it sentences where we can):

- **Sentences first.** When a doc has sentence boundaries (a parser, senter or sentencizer ran
  before ``elmo``, or the doc came with them), every sentence is one biLM input.
- **Windows otherwise, and for overlong sentences.** A stretch longer than ``window`` tokens is
  cut into windows of ``window`` tokens that start every ``window - overlap`` tokens. A token
  inside an overlap takes its vectors from the window where it is further from the edge: the
  first ``overlap // 2`` tokens of an overlap belong to the earlier window, the rest to the later
  one. So every token (away from the doc's own ends) sees at least ``overlap // 2`` tokens of
  context on each side, no text is ever refused for its length, and memory per batch stays
  bounded by the biLM's token budget.
- **Whitespace tokens are skipped.** spaCy makes runs of whitespace into tokens; the biLM never
  saw a " " or "\\n\\n" token in training, so feeding them would disturb the states of the words
  around them. They are left out of the biLM input, and their rows in every layer are zero.
"""

from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

import numpy
from spacy.attrs import IS_SPACE
from spacy.tokens import Doc
from thinc.api import get_array_module
from thinc.types import Floats3d

SKIPPED = -1  # source index of a token that has no biLM position (whitespace)


@dataclass
class SegmentPlan:
    """The biLM inputs of a batch of docs and where each token's vectors come from.

    ``sentences``: the biLM input sentences (lists of token strings), in doc order.
    ``sources``: one int64 array per doc, shape (n_tokens,): the token's position in the
    concatenation of all sentences (sentence 0's tokens, then sentence 1's, ...), or
    :data:`SKIPPED` for a whitespace token.
    """

    sentences: List[List[str]] = field(default_factory=list)
    sources: List[numpy.ndarray] = field(default_factory=list)

    @property
    def n_positions(self) -> int:
        return sum(len(sentence) for sentence in self.sentences)


def check_window(window: int, overlap: int) -> None:
    if window < 1:
        raise ValueError(f"elmo window must be at least 1 token, got {window}")
    if not 0 <= overlap < window:
        raise ValueError(f"elmo overlap must be in [0, window={window}), got {overlap}")


def plan_segments(docs: Sequence[Doc], window: int, overlap: int) -> SegmentPlan:
    """Split ``docs`` into biLM sentences by the module's policy; see :class:`SegmentPlan`."""
    check_window(window, overlap)
    plan = SegmentPlan()
    offset = 0
    for doc in docs:
        sources = numpy.full(len(doc), SKIPPED, dtype=numpy.int64)
        words = numpy.flatnonzero(doc.to_array(IS_SPACE) == 0) if len(doc) else numpy.zeros(0, dtype=numpy.int64)
        texts = [doc[int(i)].text for i in words]
        # Token ranges processed independently: the sentences if known, else the whole doc.
        whole = not len(doc) or not doc.has_annotation("SENT_START")
        for start, end in [(0, len(doc))] if whole else [(sent.start, sent.end) for sent in doc.sents]:
            lo, hi = numpy.searchsorted(words, (start, end))
            for first, last, own_first, own_last in _windows(int(hi - lo), window, overlap):
                plan.sentences.append(texts[lo + first : lo + last])
                owned = words[lo + own_first : lo + own_last]
                sources[owned] = offset + numpy.arange(own_first - first, own_last - first)
                offset += last - first
        plan.sources.append(sources)
    return plan


def _windows(length: int, window: int, overlap: int) -> List[Tuple[int, int, int, int]]:
    """``(first, last, own_first, own_last)`` of each window over ``length`` tokens.

    The window covers tokens [first, last) and gives vectors to tokens [own_first, own_last);
    the owned ranges partition [0, length). No window for length 0.
    """
    if length == 0:
        return []
    stride = window - overlap
    starts = list(range(0, max(length - overlap, 1), stride))
    spans = []
    for k, first in enumerate(starts):
        last = min(first + window, length)
        own_first = 0 if k == 0 else first + overlap // 2
        own_last = length if k == len(starts) - 1 else starts[k + 1] + overlap // 2
        spans.append((first, last, own_first, own_last))
    return spans


class Placement:
    """Writes sentences' layers into ``flat``, (n_layers + 1, n_tokens, width), the docs' tokens
    one after another (see :meth:`write`).

    Which token each sentence position fills is worked out once, on the host, from
    ``plan.sources``; overlap positions that another window owns, and whitespace tokens, are
    left out (their rows stay as they are: zero, or the owning window's).
    """

    def __init__(self, flat: Floats3d, plan: SegmentPlan, doc_lengths: Sequence[int]) -> None:
        self.flat = flat
        # For every position of the concatenated sentences, the output token (docs one after another)
        # it fills, or -1 where it fills none (an overlap another window owns).
        self.filled_token = numpy.full(plan.n_positions, -1, dtype=numpy.int64)
        offset = 0
        for sources, length in zip(plan.sources, doc_lengths):
            tokens = numpy.flatnonzero(sources != SKIPPED)
            self.filled_token[sources[tokens]] = offset + tokens
            offset += length
        self.starts = numpy.cumsum([0] + [len(sentence) for sentence in plan.sentences])

    def write(self, sentences: Sequence[Tuple[int, int]], values: Floats3d) -> None:
        """Write ``sentences``, ``[(i, first), ...]``: sentence ``i``'s layers are
        ``values[:, first : first + len(sentence i)]``, where ``values`` is (n_layers + 1, columns,
        width): a biLM batch's rows viewed as columns, or held layers side by side.

        One scatter per layer, whatever the number of sentences; its temporary holds one layer of
        the written positions, not a copy of the batch.
        """
        if not sentences:
            return
        # The output tokens the positions fill and the value columns they take, on the host; positions
        # that fill no token of theirs left out.
        starts = self.starts
        targets = numpy.concatenate([self.filled_token[starts[i] : starts[i + 1]] for i, _ in sentences])
        columns = numpy.concatenate([numpy.arange(first, first + starts[i + 1] - starts[i]) for i, first in sentences])
        owned = targets >= 0
        if not owned.any():
            return
        xp = get_array_module(self.flat)
        targets, columns = xp.asarray(targets[owned]), xp.asarray(columns[owned])
        for layer in range(self.flat.shape[0]):
            self.flat[layer, targets] = values[layer, columns]
