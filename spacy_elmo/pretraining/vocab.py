"""The output vocabulary of the language models: the words the softmax predicts.

Input is characters, so any string can be read; only the *predicted* words need ids. Ids are
ordered by descending corpus frequency (ties by first appearance), after the three markers, so
that the log-uniform sampler of :mod:`.softmax` matches the Zipfian shape of the counts.
"""

from collections import Counter
from typing import Dict, Hashable, Iterable, List, Sequence

import torch

from ..bilm.model.token_encoder import SENTENCE_END, SENTENCE_START
from ..fileio import PathLike

BOS, EOS, UNK = 0, 1, 2
MARKER_NAMES = ("<S>", "</S>", "<UNK>")


class Vocabulary:
    """Word <-> id for the softmax. Ids 0, 1, 2 are <S>, </S> and <UNK>; words follow."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words: List[str] = list(words)
        self._ids: Dict[Hashable, int] = {SENTENCE_START: BOS, SENTENCE_END: EOS}
        for i, word in enumerate(self.words):
            self._ids.setdefault(word, i + len(MARKER_NAMES))

    def __len__(self) -> int:
        return len(self.words) + len(MARKER_NAMES)

    @classmethod
    def build(cls, documents: Iterable[Sequence[str]], max_size: int, min_count: int = 1) -> "Vocabulary":
        """Count words over a stream of documents (one counter entry per distinct word in memory) and
        keep the most frequent; ``max_size`` counts the three markers too."""
        if max_size <= len(MARKER_NAMES):
            raise ValueError(f"vocabulary size must exceed {len(MARKER_NAMES)} (the markers), got {max_size}")
        counts: Counter = Counter()
        for tokens in documents:
            counts.update(tokens)
        kept = [w for w, n in counts.most_common(max_size - len(MARKER_NAMES)) if n >= min_count]
        if not kept:
            raise ValueError(f"no word occurs at least {min_count} times in the corpus: is it empty?")
        return cls(kept)

    def ids(self, tokens: Sequence[Hashable]) -> torch.Tensor:
        """Ids of tokens (words or the BiLM's boundary keys); unknown words get <UNK>. (n,) int64."""
        get = self._ids.get
        return torch.tensor([get(t, UNK) for t in tokens], dtype=torch.int64)

    def to_file(self, path: PathLike) -> None:
        """bilm-tf's vocabulary file: one word per line, markers first, in id order."""
        with open(path, "w", encoding="utf8") as f:
            for word in [*MARKER_NAMES, *self.words]:
                f.write(word.replace("\n", " ") + "\n")
