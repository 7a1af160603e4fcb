"""The character and word vocabularies of an ELMoForManyLangs model: ``char.dic`` and ``word.dic``.

Each holds ``TOKEN<TAB>ID`` per line. They are read as the reference reads them: lines split at
every Unicode line break, each stripped, split at the tab; a line left with one field (its token
was whitespace) is read as the token U+3000. A token is cut to its first
``max_characters_per_token - 2`` code points before *both* lookups (so a long word finds its cut
form in ``word.dic``); its characters are framed by the ids of ``<eow>`` in front and ``<bow>``
behind (the reference swaps the two names, in training too), then ``<pad>``. Sentence boundaries
have the characters ``[<eow>, <bos>, <bow>]`` and the word ``<bos>`` (or ``<oov>``); likewise
``<eos>``. The reference gives a literal input token ``"<bos>"`` the boundary's characters too;
here, as for bilm-tf's ``<S>`` (see :mod:`spacy_elmo.bilm.model.chars`), a literal string is encoded as the text it is.
"""

from pathlib import Path
from typing import Dict, Hashable, Optional, Sequence, Tuple

import numpy

from ...errors import ElmoFileError
from .layout import CHARS_NAME, WORDS_NAME

# The special entries of the dictionaries, as the reference names them.
OOV, PAD, BOW, EOW, BOS, EOS = "<oov>", "<pad>", "<bow>", "<eow>", "<bos>", "<eos>"


class Vocabulary:
    """The characters and words of a model: each dictionary as the reference reads it.

    ``chars`` maps a character (or a special name) to its row of the char embedding; ``words``
    (None without a word embedding) a word to its row of the word embedding.
    """

    def __init__(self, chars: Dict[str, int], words: Optional[Dict[str, int]]) -> None:
        for name in (BOW, EOW, OOV, PAD, BOS, EOS):
            if name not in chars:
                raise ElmoFileError(f"{CHARS_NAME} has no entry {name!r}: the model needs it")
        if words is not None and not (OOV in words and PAD in words):
            raise ElmoFileError(f"{WORDS_NAME} needs the entries {OOV!r} and {PAD!r}")
        self.chars = chars
        self.words = words
        # One code point per character: a sorted table that NumPy looks all of a batch's characters up in.
        single = sorted((ord(c), i) for c, i in chars.items() if len(c) == 1)
        self._codes = numpy.array([c for c, _ in single], dtype=numpy.int64)
        self._code_ids = numpy.array([i for _, i in single], dtype=numpy.int64)

    def token_ids(
        self, tokens: Sequence[Hashable], max_chars: int, boundaries: Tuple[Hashable, Hashable]
    ) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """Char ids (len(tokens), max_chars) and word ids (len(tokens),), int64, as the reference
        makes them; ``boundaries`` are the biLM's sentence-start and sentence-end keys. Word ids are
        all 0 without a word embedding."""
        chars = self.chars
        start, end = boundaries
        texts = [_cut(token, max_chars, boundaries) for token in tokens]
        lengths = numpy.fromiter(map(len, texts), dtype=numpy.int64, count=len(texts))
        ids = numpy.full((len(texts), max_chars), chars[PAD], dtype=numpy.int64)
        ids[:, 0] = chars[EOW]  # sic: the reference's begin-of-word is <eow>, its end-of-word <bow>
        codes = numpy.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(numpy.int64)
        rows = numpy.repeat(numpy.arange(len(texts)), lengths)
        columns = numpy.arange(len(rows)) - numpy.repeat(numpy.cumsum(lengths) - lengths, lengths) + 1
        ids[rows, columns] = self._char_ids(codes)
        ids[numpy.arange(len(texts)), lengths + 1] = chars[BOW]
        words = numpy.zeros(len(texts), dtype=numpy.int64)
        vocabulary = self.words
        for row, (token, text) in enumerate(zip(tokens, texts)):
            name = BOS if token == start else EOS if token == end else None
            if name is not None:
                ids[row, 1] = chars[name]
            if vocabulary is not None:
                words[row] = vocabulary.get(text if name is None else name, vocabulary[OOV])
        return ids, words

    def _char_ids(self, codes: numpy.ndarray) -> numpy.ndarray:
        """The id of each code point, ``<oov>``'s for those the dictionary lacks."""
        if not len(self._codes):
            return numpy.full_like(codes, self.chars[OOV])
        where = numpy.searchsorted(self._codes, codes).clip(max=len(self._codes) - 1)
        return numpy.where(self._codes[where] == codes, self._code_ids[where], self.chars[OOV])


def _cut(token: Hashable, max_chars: int, boundaries: Tuple[Hashable, Hashable]) -> str:
    """The text whose characters a token has: its first ``max_chars - 2`` code points (the
    reference cuts longer tokens so). A boundary has one character, ``<bos>``'s or ``<eos>``'s,
    written over this placeholder's by :meth:`Vocabulary.token_ids`."""
    if token == boundaries[0] or token == boundaries[1]:
        return " "
    return (token if isinstance(token, str) else str(token))[: max_chars - 2]


def dictionary_text(entries: Dict[str, int], name: str) -> str:
    """``char.dic`` or ``word.dic`` holding ``entries``, one ``TOKEN<TAB>ID`` line each in id order;
    a token that would not read back as itself (as the reference and :func:`read_dictionary` read
    it) is refused. None read from a dictionary is such a token: its line was one of these."""
    ordered = sorted(entries.items(), key=lambda entry: (entry[1], entry[0]))
    lines = [f"{token}\t{index}" for token, index in ordered]
    bad = [
        line for line, entry in zip(lines, ordered) if len(line.splitlines()) != 1 or _dictionary_entry(line) != entry
    ]
    if bad:
        raise ValueError(
            f"elmo: {name} cannot hold the lines {bad[:3]}: a token that is empty or holds a line break, a tab or "
            "leading whitespace does not read back as itself"
        )
    return "".join(line + "\n" for line in lines)


def read_dictionary(path: Path) -> Dict[str, int]:
    """``char.dic`` or ``word.dic`` as the reference reads it (see the module's docstring); a later
    line of the same token wins, as there."""
    if not path.is_file():
        raise ElmoFileError(f"ELMoForManyLangs dictionary {path} does not exist")
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ElmoFileError(f"ELMoForManyLangs dictionary {path} is not readable UTF-8 text: {err}") from err
    entries: Dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):  # every Unicode line break, as codecs' readline
        entry = _dictionary_entry(line)
        if entry is None:
            raise ElmoFileError(f"{path}, line {number}: expected TOKEN<TAB>ID, got {line!r}")
        entries[entry[0]] = entry[1]
    return entries


def _dictionary_entry(line: str) -> Optional[Tuple[str, int]]:
    """(token, id) of one dictionary line as the reference reads it, or None where it fails."""
    fields = line.strip().split("\t")
    if len(fields) == 1:
        fields.insert(0, "\u3000")  # the reference's reading of a whitespace token, stripped away
    try:
        token, index = fields
        return token, int(index)
    except ValueError:
        return None


def check_ids(entries: Dict[str, int], rows: int, path: Path) -> None:
    """Refuse ids outside the embedding (the reference sizes it by the number of entries)."""
    bad = [(token, index) for token, index in entries.items() if not 0 <= index < rows]
    if bad:
        raise ElmoFileError(f"{path}: ids must be in 0..{rows - 1} ({rows} entries), got {bad[:3]}")
