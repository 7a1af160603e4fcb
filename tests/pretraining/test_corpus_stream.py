import json

import pytest
import spacy
from spacy.tokens import DocBin

from spacy_elmo.bilm.model.token_encoder import SENTENCE_END as E
from spacy_elmo.bilm.model.token_encoder import SENTENCE_START as S
from spacy_elmo.embed.reader import SentenceSource
from spacy_elmo.pretraining.corpus import CorpusReader, Position
from spacy_elmo.pretraining.stream import WindowStream
from spacy_elmo.pretraining.vocab import Vocabulary


def test_formats_are_read_and_tokenized_with_spacy(tmp_path):
    (tmp_path / "a.txt").write_text("Hello, world!\n\n  \nIt's  fine.\n", encoding="utf8")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "JSON line."}) + "\n\n", encoding="utf8")
    nlp = spacy.blank("xx")
    DocBin(docs=[nlp("From a  DocBin.")]).to_disk(tmp_path / "c.spacy")
    (tmp_path / ".hidden").write_text("ignored\n")
    documents = list(CorpusReader(tmp_path).texts())
    assert documents == [
        ["Hello", ",", "world", "!"],
        ["It", "'s", "fine", "."],
        ["JSON", "line", "."],
        ["From", "a", "DocBin", "."],
    ]


def test_paragraph_mode_joins_lines(tmp_path):
    (tmp_path / "a.txt").write_text("one two\nthree\n\n\nfour\n", encoding="utf8")
    assert list(CorpusReader(tmp_path, paragraphs=True).texts()) == [["one", "two", "three"], ["four"]]


@pytest.mark.parametrize("paragraphs", [False, True])
def test_reading_resumes_at_every_position(tmp_path, paragraphs):
    (tmp_path / "a.txt").write_text("a b\n\nc\nd e\n\nf\n", encoding="utf8")
    (tmp_path / "b.txt").write_text("g\nh i\n", encoding="utf8")
    reader = CorpusReader(tmp_path, paragraphs=paragraphs)
    everything = list(reader.documents())
    for i, (_, position) in enumerate(everything):
        assert [d for d, _ in reader.documents(position)] == [d for d, _ in everything[i + 1 :]]
    assert [d for d, _ in reader.documents(Position())] == [d for d, _ in everything]


def test_bad_input_gets_clear_errors(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"title": "no text"}\n', encoding="utf8")
    with pytest.raises(ValueError, match='"text" field'):
        list(CorpusReader(tmp_path / "bad.jsonl").texts())
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        list(CorpusReader(tmp_path / "bad.txt").texts())
    with pytest.raises(FileNotFoundError):
        CorpusReader(tmp_path / "missing")


def test_non_utf8_text_error_names_the_line_and_the_fix(tmp_path):
    """pretrain and embed read text with one function: both name the line (also when reading
    resumes past the start of the file) and give a conversion that keeps the file's name."""
    path = tmp_path / "my corpus.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": "ok"}\n{"text": "caf\xe9"}\n')
    reader = CorpusReader(path)
    resumed_at = next(reader.documents())[1]  # after line 1
    fix = f"iconv -f LATIN1 -t UTF-8 '{path}' > '{path}.utf8' && mv '{path}.utf8' '{path}'"
    for read in (
        lambda: list(reader.texts()),
        lambda: list(reader.documents(resumed_at)),
        lambda: SentenceSource(path).plan(10),
    ):
        with pytest.raises(ValueError) as error:
            read()
        message = str(error.value)
        assert f"{path} is not UTF-8 text: line 3 (byte 45 of the file) holds b'\\xe9'" in message
        assert fix in message


def _stream(tmp_path, text, batch_size=1, window=4, rank=0, world=1):
    (tmp_path / "c.txt").write_text(text, encoding="utf8")
    reader = CorpusReader(tmp_path / "c.txt")
    vocab = Vocabulary(["a", "b", "c", "d", "e"])
    return WindowStream(reader, vocab, batch_size, window, rank, world), vocab


def test_windows_are_contiguous_streams_in_both_directions(tmp_path):
    stream, vocab = _stream(tmp_path, "a b c\nd e\n", window=4)
    first, second, third = stream.next_batch(), stream.next_batch(), stream.next_batch()
    forward = [S, "a", "b", "c", E, S, "d", "e", E, S, "a", "b", "c", E]
    backward = [E, "c", "b", "a", S, E, "e", "d", S, E, "c", "b", "a", S]
    assert first.inputs[0][0] + second.inputs[0][0] + third.inputs[0][0] == forward[:12]
    assert first.inputs[1][0] + second.inputs[1][0] + third.inputs[1][0] == backward[:12]
    # targets: the next token of each stream; document-start targets are not scored
    assert first.targets[0, 0].tolist() == vocab.ids(forward[1:5]).tolist()
    assert second.targets[1, 0].tolist() == vocab.ids(backward[5:9]).tolist()
    assert second.scored[0, 0].tolist() == [False, True, True, True]  # E -> S not scored
    assert first.scored[1, 0].tolist() == [True, True, True, True]
    assert second.scored[1, 0].tolist() == [False, True, True, True]  # S -> E not scored
    # per document and direction: n + 1 scored targets, as held-out perplexity counts them
    assert int(first.scored[0].sum() + second.scored[0].sum()) == (3 + 1) + (2 + 1) - 0


def test_documents_are_sharded_by_process(tmp_path):
    text = "".join(f"{w}\n" for w in "abcde" * 2)
    seen = []
    for rank in (0, 1):
        stream, _ = _stream(tmp_path, text, window=2, rank=rank, world=2)
        tokens = [t for _ in range(8) for t in stream.next_batch().inputs[0][0] if isinstance(t, str)]
        seen.append(tokens[:5])
    assert seen == [["a", "c", "e", "b", "d"], ["b", "d", "a", "c", "e"]]


def test_stream_state_resumes_exactly(tmp_path):
    stream, _ = _stream(tmp_path, "a b c\nd e\nc c c c c c\n", batch_size=2, window=3)
    for _ in range(3):
        stream.next_batch()
    state = stream.state_dict()
    expected = [stream.next_batch() for _ in range(6)]  # crosses into the next epoch
    resumed, _ = _stream(tmp_path, "a b c\nd e\nc c c c c c\n", batch_size=2, window=3)
    resumed.load_state_dict(state)
    for want in expected:
        got = resumed.next_batch()
        assert got.inputs == want.inputs
        assert got.targets.equal(want.targets)
    assert resumed.epoch >= 1


def test_stream_needs_a_document_per_process(tmp_path):
    stream, _ = _stream(tmp_path, "a\n", rank=1, world=2)
    with pytest.raises(ValueError, match="no document for process 1"):
        stream.next_batch()
