"""Reading a corpus as a stream of tokenized documents, resumable at any document.

Formats, chosen per file by its extension:

- ``.spacy``: a DocBin; its Docs' tokens are used as they are (one file is loaded at a time).
- ``.jsonl``: one JSON object per line with a ``"text"`` field; a document per line.
- anything else: plain UTF-8 text, a document per line, or with ``paragraphs=True`` a
  document per blank-line-separated paragraph (lines of a paragraph are joined by a space).

Text is tokenized with ``spacy.blank(lang).tokenizer``, so the biLM sees the tokens a spaCy
pipeline produces; whitespace tokens are dropped and empty documents skipped. Nothing but the
current line (or paragraph, or ``.spacy`` file) is held in memory. Every document comes with
the :class:`Position` just after it, so reading can resume there.
"""

import functools
import json
from pathlib import Path
from typing import Callable, Iterator, List, NamedTuple, Optional, Tuple

from ..fileio import PathLike, text_lines

Tokenizer = Callable[[str], List[str]]


class Position(NamedTuple):
    """Where reading resumes: a file (index into the sorted file list) and an offset in it, in bytes
    for text and JSONL files, in Docs for ``.spacy`` files."""

    file_index: int = 0
    offset: int = 0


def corpus_files(path: PathLike) -> List[Path]:
    """The files of a corpus: ``path`` itself, or every non-hidden file under it, sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"corpus path {path} does not exist")
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    if not files:
        raise ValueError(f"corpus directory {path} contains no files")
    return files


def spacy_tokenizer(lang: str) -> Tokenizer:
    """Tokenize with the rule-based tokenizer of ``spacy.blank(lang)``; drop whitespace tokens."""
    import spacy

    tokenizer = spacy.blank(lang).tokenizer
    return lambda text: [t.text for t in tokenizer(text) if not t.is_space]


class CorpusReader:
    """Iterates the documents of a corpus as token lists, each with the position after it."""

    def __init__(self, path: PathLike, lang: str = "en", paragraphs: bool = False) -> None:
        self.files = corpus_files(path)
        self.lang = lang
        self.paragraphs = paragraphs

    @functools.cached_property
    def tokenize(self) -> Tokenizer:
        """The tokenizer, loaded when first used."""
        return spacy_tokenizer(self.lang)

    def documents(self, start: Position = Position()) -> Iterator[Tuple[List[str], Position]]:
        """Documents from ``start`` to the end of the corpus; empty documents are skipped."""
        for file_index in range(start.file_index, len(self.files)):
            offset = start.offset if file_index == start.file_index else 0
            for tokens, next_offset in self._file_documents(self.files[file_index], offset):
                if tokens:
                    yield tokens, Position(file_index, next_offset)

    def texts(self) -> Iterator[List[str]]:
        """Just the token lists, from the start (for counting the vocabulary)."""
        return (tokens for tokens, _ in self.documents())

    def _file_documents(self, path: Path, offset: int) -> Iterator[Tuple[List[str], int]]:
        if path.suffix == ".spacy":
            yield from self._docbin_documents(path, offset)
        elif path.suffix == ".jsonl":
            for line, end in text_lines(path, offset):
                yield self.tokenize(jsonl_text(line, path, end)), end
        elif self.paragraphs:
            for paragraph, end in _paragraphs(path, offset):
                yield self.tokenize(paragraph), end
        else:
            for line, end in text_lines(path, offset):
                yield self.tokenize(line), end

    def _docbin_documents(self, path: Path, offset: int) -> Iterator[Tuple[List[str], int]]:
        import spacy
        from spacy.tokens import DocBin

        vocab = spacy.blank(self.lang).vocab
        try:
            docs = list(DocBin().from_disk(path).get_docs(vocab))
        except Exception as err:  # DocBin raises several types on a bad file
            raise ValueError(f"{path} is not a readable .spacy DocBin: {err}") from err
        for index in range(offset, len(docs)):
            yield [t.text for t in docs[index] if not t.is_space], index + 1


def _paragraphs(path: Path, offset: int) -> Iterator[Tuple[str, int]]:
    """Blank-line-separated paragraphs, lines joined by a space, each with the offset after it."""
    lines: List[str] = []
    end = offset
    for line, end in text_lines(path, offset):
        if line:
            lines.append(line)
        elif lines:
            yield " ".join(lines), end
            lines = []
    if lines:
        yield " ".join(lines), end


def jsonl_text(line: str, path: Path, end: int) -> str:
    if not line:
        return ""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: a line ending at byte {end} is not valid JSON: {err}") from err
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise ValueError(f'{path}: every JSONL line needs a string "text" field (line ending at byte {end})')
    return record["text"]


def read_documents(reader: CorpusReader, max_tokens: int, max_documents: Optional[int] = None) -> List[List[str]]:
    """The first documents of a corpus until ``max_tokens`` tokens or ``max_documents`` documents."""
    documents: List[List[str]] = []
    total = 0
    for tokens, _ in reader.documents():
        if total >= max_tokens or (max_documents is not None and len(documents) >= max_documents):
            break
        documents.append(tokens)
        total += len(tokens)
    return documents
