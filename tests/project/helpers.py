"""What the project's tests share: small corpora, and crossval.py's commands as a CLI."""

from pathlib import Path
from typing import List

import spacy
import typer
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from .scripts import load_script


def crossval_app() -> typer.Typer:
    """project/scripts/crossval.py's ``split`` and ``run`` commands, as its command line has them."""
    crossval = load_script("crossval")
    application = typer.Typer()
    application.command("split")(crossval.split)
    application.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
        crossval.run
    )
    return application


NAMES = ["Ann", "Bob", "Cyd", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kim", "Lou"]


def ner_docs(texts: List[str]) -> List[Doc]:
    nlp = spacy.blank("en")
    docs = []
    for text in texts:
        doc = nlp.make_doc(text)
        doc.ents = [doc.char_span(0, len(text.split()[0]), label="person")]
        docs.append(doc)
    return docs


def write_ner_corpus(tmp_path: Path) -> Path:
    """train/dev/test .spacy files of 13 one-entity documents in ``tmp_path / "corpus"``."""
    texts = [
        f"{name} went to the market on day {i} of the long and dusty summer holidays" for i, name in enumerate(NAMES)
    ]
    texts.append(texts[0] + " again")  # a near-duplicate of the first: must share its fold
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, part in (("train", texts[:9]), ("dev", texts[9:11]), ("test", texts[11:])):
        DocBin(docs=ner_docs(part)).to_disk(corpus / f"{name}.spacy")
    return corpus


def tiny_corpus(directory: Path, kind: str) -> None:
    nlp = spacy.blank("en")
    examples = []
    for i in range(8):
        doc = nlp.make_doc(f"Bob{i} went to Paris today")
        if kind == "ner":
            examples.append(Example.from_dict(doc, {"entities": [(0, len(f"Bob{i}"), "person")]}))
        else:
            examples.append(Example.from_dict(doc, {"cats": {"a": float(i % 2), "b": float(1 - i % 2)}}))
    directory.mkdir()
    for split in ("train", "dev"):
        DocBin(docs=[eg.reference for eg in examples]).to_disk(directory / f"{split}.spacy")
