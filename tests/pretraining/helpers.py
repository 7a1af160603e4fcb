"""Small corpora and runs shared by the training tests."""

import random
from pathlib import Path
from typing import List, Optional

from spacy_elmo.pretraining import TrainingConfig, get_preset
from spacy_elmo.pretraining.distributed import Distributed
from spacy_elmo.pretraining.train import Trainer

WORDS = "the cat sat on a mat and dog ran to house big small red blue green old new man woman saw".split()


def write_corpus(path: Path, n_documents: int, seed: int = 0) -> List[List[str]]:
    """Random documents of 3-15 words from a 22-word vocabulary, a document per line."""
    rng = random.Random(seed)
    documents = [[rng.choice(WORDS) for _ in range(rng.randint(3, 15))] for _ in range(n_documents)]
    path.write_text("".join(" ".join(d) + "\n" for d in documents), encoding="utf8")
    return documents


def write_repetitive_corpus(path: Path, n_documents: int) -> None:
    """A text a small LM learns quickly: the same few sentences again and again."""
    sentences = ["the cat sat on the mat .", "a dog ran to the big house .", "the old man saw a red car ."]
    path.write_text("".join(sentences[i % 3] + "\n" for i in range(n_documents)), encoding="utf8")


def new_trainer(
    tmp_path: Path, config: TrainingConfig, dev_path: Optional[Path] = None, progress: bool = False, **extra: object
) -> Trainer:
    """A one-process run of the tiny preset on ``tmp_path / "train.txt"``, set up, not started;
    ``extra``: the rest of :class:`Trainer`'s keywords (``init_tokens_from``)."""
    return Trainer(
        Distributed(),
        tmp_path / "train.txt",
        tmp_path / "out",
        get_preset("tiny").options,
        config,
        dev_path=dev_path,
        init_from=None,
        resume=False,
        progress=progress,
        **extra,
    )
