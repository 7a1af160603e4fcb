"""What the embed tests share (with their GPU twins in tests/gpu too): input sentences, a pipeline
that reads a feature store."""

from pathlib import Path
from typing import List, Optional, Tuple

import spacy
from spacy.language import Language

SENTENCES = [
    "The bank raised its rates .",
    "",
    "I sat by the river bank .",
    "Hello",
    "The bank raised its rates .",
    "A much longer sentence , with a comma , a few more words and a full stop at the end .",
    "Short one .",
]


def whitespace_tokens(lines: List[str]) -> List[List[str]]:
    return [line.split() for line in lines]


# A feature store's sentences: words a store holds, an unknown-word one, and an empty line.
STORE_TEXTS = ["The bank raised its rates .", "I sat by the river bank .", "Hello there", ""]


def store_pipeline(bilm_files: Tuple[Path, Path], features: Optional[Path] = None, precision: str = "auto") -> Language:
    """An initialized elmo pipeline of the tiny biLM, one thread, reading the feature store ``features``."""
    nlp = spacy.blank("xx")
    model = {"options_file": str(bilm_files[0]), "weight_file": str(bilm_files[1]), "precision": precision}
    nlp.add_pipe("elmo", config={"model": model, "features": str(features) if features else None, "threads": 1})
    nlp.initialize()
    return nlp
