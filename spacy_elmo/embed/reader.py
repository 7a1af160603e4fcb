"""The input of ``spacy-elmo embed``: a corpus read as numbered sentences, in shards.

The formats are the pretrain command's (see :mod:`spacy_elmo.pretraining.corpus`), read one record
per sentence: a line of a text file, a line of a ``.jsonl`` file (its ``"text"``), a Doc of a
``.spacy`` file. Unlike pretraining, empty records are kept: an empty line is a sentence with
no tokens, so that sentence ``i`` is always record ``i`` of the input (AllenNLP's line numbers).

A Doc's tokens are those ``spacy train`` and ``nlp.evaluate`` give the ``elmo`` component for
it, so that a feature store (:mod:`.store`) made from a training corpus serves that corpus:
``spacy.Corpus`` (``gold_preproc = false``) re-tokenizes the Doc's text, unless the Doc's spaces
are unknown; ``gold_tokens`` keeps the Doc's own tokens (``gold_preproc = true``).

A first pass (:meth:`SentenceSource.plan`) only finds where each shard of ``shard_size``
sentences starts; any process can then read any shard on its own (:meth:`SentenceSource.read`),
which is what lets a run resume at a shard and lets Ray workers read their shards in parallel.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from ..fileio import PathLike, text_lines
from ..pretraining.corpus import corpus_files, jsonl_text, spacy_tokenizer

if TYPE_CHECKING:
    from spacy.tokens import Doc

Tokenizer = Callable[[str], List[str]]


@dataclass(frozen=True)
class Sentence:
    """One input record: its number in the input, its text (stripped) and its tokens. (A dataclass:
    a NamedTuple's ``index`` would hide ``tuple.index``.)"""

    index: int
    text: str
    tokens: List[str]


@dataclass(frozen=True)
class ShardSpec:
    """Sentences ``first_index`` .. ``first_index + count - 1``, starting in file ``file_index`` at
    ``offset`` (a byte offset, or a Doc number for ``.spacy`` files)."""

    shard: int
    first_index: int
    count: int
    file_index: int
    offset: int


class SentenceSource:
    """A corpus (a file or a directory of files, sorted by name) as numbered sentences.

    ``whitespace``: split text on whitespace (pre-tokenized input, AllenNLP's convention);
    otherwise tokenize with ``spacy.blank(lang)``, dropping whitespace tokens as the ``elmo``
    component does. ``.spacy`` Docs: see :meth:`doc_tokens` (``whitespace`` does not apply).
    """

    def __init__(self, path: PathLike, lang: str = "en", whitespace: bool = False, gold_tokens: bool = False) -> None:
        self.files = corpus_files(path)
        self.lang = lang
        self.whitespace = whitespace
        self.gold_tokens = gold_tokens
        self._tokenizer: Optional[Tokenizer] = None
        self._docbin: Tuple[Optional[Path], list] = (None, [])

    def description(self) -> List[Dict[str, Any]]:
        """Names and sizes of the input files: a resumed run must read the same input."""
        return [{"name": path.name, "bytes": path.stat().st_size} for path in self.files]

    def tokenize(self, text: str) -> List[str]:
        return text.split() if self.whitespace else self._spacy_tokenize(text)

    def doc_tokens(self, doc: "Doc") -> List[str]:
        """The tokens the ``elmo`` component sees for ``doc`` in ``spacy train`` / ``nlp.evaluate``.

        ``spacy.Corpus`` (``gold_preproc = false``) gives the pipeline ``nlp.make_doc(doc.text)``,
        whose tokens differ from annotated ones (e.g. tweets); only a Doc whose spaces are unknown
        keeps its own, as does every Doc with ``gold_tokens`` (for ``gold_preproc = true``).
        """
        if self.gold_tokens or doc.has_unknown_spaces:
            return [t.text for t in doc if not t.is_space]
        return self._spacy_tokenize(doc.text)

    def _spacy_tokenize(self, text: str) -> List[str]:
        if self._tokenizer is None:
            self._tokenizer = spacy_tokenizer(self.lang)
        return self._tokenizer(text)

    def plan(self, shard_size: int) -> List[ShardSpec]:
        """Where each shard of ``shard_size`` sentences starts (the last one may be shorter).

        Reads the whole input once, without tokenizing.
        """
        if shard_size < 1:
            raise ValueError(f"shard size must be at least 1 sentence, got {shard_size}")
        starts: List[Tuple[int, int, int]] = []  # (first index, file index, offset) of each shard
        index = 0
        for file_index, path in enumerate(self.files):
            position = (file_index, 0)
            for end in self._record_ends(path):
                if index % shard_size == 0:
                    starts.append((index, *position))
                position = (file_index, end)
                index += 1
        return [
            ShardSpec(shard, first, min(shard_size, index - first), file_index, offset)
            for shard, (first, file_index, offset) in enumerate(starts)
        ]

    def read(self, spec: ShardSpec) -> Iterator[Sentence]:
        """The sentences of one shard, in input order."""
        index = spec.first_index
        for file_index in range(spec.file_index, len(self.files)):
            offset = spec.offset if file_index == spec.file_index else 0
            for text, tokens in self._records(self.files[file_index], offset):
                if index == spec.first_index + spec.count:
                    return
                yield Sentence(index, text, tokens)
                index += 1
        if index != spec.first_index + spec.count:
            raise ValueError(
                f"the input ended at sentence {index} inside a shard that should reach sentence "
                f"{spec.first_index + spec.count}: did the input files change during the run?"
            )

    def _records(self, path: Path, offset: int) -> Iterator[Tuple[str, List[str]]]:
        """``(text, tokens)`` of each record of one file, from ``offset`` on."""
        if path.suffix == ".spacy":
            for doc in self._docs(path)[offset:]:
                yield doc.text.strip(), self.doc_tokens(doc)
            return
        for line, end in text_lines(path, offset):
            text = jsonl_text(line, path, end).strip() if path.suffix == ".jsonl" else line
            yield text, self.tokenize(text)

    def _record_ends(self, path: Path) -> Iterator[int]:
        """The offset after each record of one file (see :class:`ShardSpec`)."""
        if path.suffix == ".spacy":
            yield from range(1, len(self._docs(path)) + 1)
            return
        for line, end in text_lines(path, 0):
            if path.suffix == ".jsonl":
                jsonl_text(line, path, end)  # a malformed line fails now, not hours into the run
            yield end

    def _docs(self, path: Path) -> list:
        """The Docs of a ``.spacy`` file; the last file read is kept, as its shards come in turn."""
        if self._docbin[0] != path:
            import spacy
            from spacy.tokens import DocBin

            try:
                docs = list(DocBin().from_disk(path).get_docs(spacy.blank(self.lang).vocab))
            except Exception as err:  # DocBin raises several types on a bad file
                raise ValueError(f"{path} is not a readable .spacy DocBin: {err}") from err
            self._docbin = (path, docs)
        return self._docbin[1]
