"""Packing documents into batches of contiguous windows for the two language models.

Every batch row is an endless stream of documents. Row r of process ``rank`` of ``world``
reads the documents whose running index i (counted over the whole corpus, epoch after epoch)
satisfies ``i % world == rank``, dealt to its rows in order as each row runs short. Each row
holds two token streams made of the same documents:

- forward: ``<S> w1 ... wn </S> <S> v1 ... </S> ...``
- backward: ``</S> wn ... w1 <S> </S> ... v1 <S> ...`` (each document reversed)

Each step takes a window of ``window + 1`` tokens from both streams of every row: the first
``window`` are the inputs, the last ``window`` the targets (the next token in that stream),
and the row advances by ``window``. So each LM reads its stream exactly once, in order, and
the LSTM state at the end of a window is the right state for the start of the next window
of the same row: the trainer carries it (detached: back-propagation is truncated at window
boundaries, as in bilm-tf). Targets that start a document (``<S>`` after ``</S>`` in the
forward stream, ``</S>`` after ``<S>`` in the backward one) are certain and not scored, so
exactly n + 1 targets per document and direction are scored, the same ones as held-out
perplexity scores for a sentence read alone.
"""

from dataclasses import dataclass
from typing import Any, Dict, Hashable, Iterator, List, Optional, Tuple

import torch

from ..bilm.model.token_encoder import SENTENCE_END, SENTENCE_START
from .corpus import CorpusReader, Position
from .vocab import BOS, EOS, Vocabulary


@dataclass
class WindowBatch:
    """One step of training data for ``batch`` rows and ``window`` positions.

    ``inputs``: forward and backward input tokens, [direction][row] -> list of ``window``
    tokens (words, or the BiLM's boundary keys), each in its own reading order.
    ``targets``: (2, batch, window) int64 vocabulary ids; ``scored``: (2, batch, window) bool.
    """

    inputs: Tuple[List[List[Hashable]], List[List[Hashable]]]
    targets: torch.Tensor
    scored: torch.Tensor


class WindowStream:
    """Cuts a corpus into :class:`WindowBatch` es, endlessly (epoch after epoch); resumable."""

    def __init__(
        self, reader: CorpusReader, vocab: Vocabulary, batch_size: int, window: int, rank: int = 0, world: int = 1
    ) -> None:
        if batch_size < 1 or window < 1:
            raise ValueError(f"batch size and window must be at least 1, got {batch_size} and {window}")
        self.reader = reader
        self.vocab = vocab
        self.batch_size = batch_size
        self.window = window
        self.rank = rank
        self.world = world
        self.epoch = 0
        self.position = Position()
        self.doc_index = 0  # running index of the next document, for sharding by rank
        self.rows: List[Tuple[List[Hashable], List[Hashable]]] = [([], []) for _ in range(batch_size)]
        self._documents: Optional[Iterator[Tuple[List[str], Position]]] = None

    def next_batch(self) -> WindowBatch:
        forward_inputs: List[List[Hashable]] = []
        backward_inputs: List[List[Hashable]] = []
        targets: List[torch.Tensor] = []
        for forward, backward in self.rows:
            while len(forward) < self.window + 1:
                document = self._next_document()
                forward += [SENTENCE_START, *document, SENTENCE_END]
                backward += [SENTENCE_END, *reversed(document), SENTENCE_START]
            forward_inputs.append(forward[: self.window])
            backward_inputs.append(backward[: self.window])
            targets.append(self.vocab.ids(forward[1 : self.window + 1] + backward[1 : self.window + 1]))
            del forward[: self.window], backward[: self.window]
        ids = torch.stack(targets).view(self.batch_size, 2, self.window).transpose(0, 1).contiguous()
        scored = torch.stack([ids[0] != BOS, ids[1] != EOS])
        return WindowBatch((forward_inputs, backward_inputs), ids, scored)

    def _next_document(self) -> List[str]:
        """This rank's next document, starting a new epoch at the end of the corpus."""
        restarted = False
        while True:
            if self._documents is None:
                self._documents = self.reader.documents(self.position)
            for tokens, position in self._documents:
                index = self.doc_index
                self.doc_index += 1
                self.position = position
                if index % self.world == self.rank:
                    return tokens
            if restarted:
                raise ValueError(
                    f"the corpus has no document for process {self.rank} of {self.world}: "
                    "it is empty, or has fewer documents than processes"
                )
            restarted = True
            self.epoch += 1
            self.position = Position()
            self.doc_index = 0
            self._documents = None

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """Plain containers only (loadable with ``torch.load(weights_only=True)``)."""
        return {
            "epoch": self.epoch,
            "file_index": self.position.file_index,
            "offset": self.position.offset,
            "doc_index": self.doc_index,
            "rows": [[list(forward), list(backward)] for forward, backward in self.rows],
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if len(state["rows"]) != self.batch_size:
            raise ValueError(
                f"the checkpoint has {len(state['rows'])} rows per process, this run {self.batch_size}: "
                "resume with the same batch size and number of processes"
            )
        self.epoch = int(state["epoch"])
        self.position = Position(int(state["file_index"]), int(state["offset"]))
        self.doc_index = int(state["doc_index"])
        self.rows = [(list(forward), list(backward)) for forward, backward in state["rows"]]
        self._documents = None
