"""How much task signal do a biLM's features carry? A linear probe, in a minute.

Training a spaCy pipeline takes tens of minutes and its score mixes the features with the
encoder, the optimiser and the seed. A probe asks the features alone: every document of a text
classification task becomes the mean of its token vectors, a logistic regression learns the
labels on the train split, and its accuracy on the dev split is printed. Rows: each ELMo layer
and their concatenation, optionally static vectors (``--vectors``, e.g. word2vec) and a binary
bag of words, alone and with the ELMo layers concatenated (the ELMo part scaled by ``--weight``
after standardisation). The regularisation C is the best of a small grid on dev, the same for
every row, so rows compare fairly; use it to rank biLMs, not as a task result.

Needs scikit-learn (``pip install scikit-learn``).
"""

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
import spacy
import typer
from spacy.tokens import Doc, DocBin

from spacy_elmo.bilm import BiLM
from spacy_elmo.published import pretrained_files

C_GRID = (0.01, 0.1, 1.0)


def load_split(corpus: Path, split: str) -> Tuple[List[Doc], numpy.ndarray]:
    """The split's docs and their labels (the highest-scoring category), shape (n_docs,)."""
    docs = list(DocBin().from_disk(corpus / f"{split}.spacy").get_docs(spacy.blank("en").vocab))
    if not docs:
        raise typer.BadParameter(f"{corpus / split}.spacy holds no documents")
    return docs, numpy.array([max(doc.cats, key=doc.cats.get) for doc in docs])


def elmo_features(bilm: BiLM, docs: Sequence[Doc]) -> numpy.ndarray:
    """Mean of each layer over a doc's tokens: (n_docs, n_layers + 1, width); zeros for an empty doc."""
    layers = bilm.embed_sentences([[token.text for token in doc] for doc in docs])
    return numpy.stack(
        [doc_layers.mean(axis=1) if doc_layers.shape[1] else doc_layers.sum(axis=1) for doc_layers in layers]
    )


def vector_features(vectors: Path, docs: Sequence[Doc]) -> numpy.ndarray:
    """Mean static vector of each doc, (n_docs, dim), as ``doc.vector`` gives it."""
    nlp = spacy.load(vectors)
    return numpy.stack([nlp.make_doc(doc.text).vector for doc in docs])


def accuracy(train: Tuple, dev: Tuple) -> float:
    """Dev accuracy of a logistic regression, the best over C_GRID."""
    from sklearn.linear_model import LogisticRegression

    (X, y), (X_dev, y_dev) = train, dev
    return max((LogisticRegression(C=C, max_iter=3000).fit(X, y).predict(X_dev) == y_dev).mean() for C in C_GRID)


def standardise(train: numpy.ndarray, dev: numpy.ndarray) -> Tuple[numpy.ndarray, numpy.ndarray]:
    mean, std = train.mean(axis=0), train.std(axis=0) + 1e-6
    return (train - mean) / std, (dev - mean) / std


def probe_rows(
    elmo: Tuple[numpy.ndarray, numpy.ndarray],
    labels: Tuple[numpy.ndarray, numpy.ndarray],
    texts: Tuple[Sequence[str], Sequence[str]],
    vectors: Optional[Tuple[numpy.ndarray, numpy.ndarray]],
    weight: float,
) -> Dict[str, float]:
    """Dev accuracy per feature set."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.feature_extraction.text import CountVectorizer

    (y, y_dev), rows = labels, {}
    n_layers = elmo[0].shape[1]
    for name, layer_ids in [
        *((f"ELMo layer {i}", [i]) for i in range(n_layers)),
        ("ELMo, all layers", list(range(n_layers))),
    ]:
        X, X_dev = standardise(*(features[:, layer_ids].reshape(len(features), -1) for features in elmo))
        rows[name] = accuracy((X, y), (X_dev, y_dev))
    all_layers = standardise(*(features.reshape(len(features), -1) for features in elmo))
    if vectors is not None:
        static = standardise(*vectors)
        rows["static vectors"] = accuracy((static[0], y), (static[1], y_dev))
        rows["static vectors + ELMo"] = accuracy(
            (numpy.hstack([static[0], weight * all_layers[0]]), y),
            (numpy.hstack([static[1], weight * all_layers[1]]), y_dev),
        )
    bag = CountVectorizer(lowercase=True, token_pattern=r"\S+", binary=True).fit(texts[0])
    words = bag.transform(texts[0]), bag.transform(texts[1])
    rows["bag of words"] = accuracy((words[0], y), (words[1], y_dev))
    rows["bag of words + ELMo"] = accuracy(
        (hstack([words[0], csr_matrix(weight * all_layers[0])]).tocsr(), y),
        (hstack([words[1], csr_matrix(weight * all_layers[1])]).tocsr(), y_dev),
    )
    return rows


def main(
    corpus: Path = typer.Argument(
        ..., exists=True, file_okay=False, help="Task directory with train.spacy and dev.spacy"
    ),
    elmo_options: Optional[Path] = typer.Option(
        None, exists=True, help="options.json of the biLM [default: the bundled one]"
    ),
    elmo_weights: Optional[Path] = typer.Option(
        None, exists=True, help="weights.hdf5 of the biLM [default: the bundled one]"
    ),
    vectors: Optional[Path] = typer.Option(
        None, exists=True, help="A spaCy pipeline or vectors directory with static vectors"
    ),
    weight: float = typer.Option(0.1, help="Scale of the standardised ELMo features beside other features"),
) -> None:
    """Print the dev accuracy of a linear probe per feature set."""
    if (elmo_options is None) != (elmo_weights is None):
        raise typer.BadParameter("give both --elmo-options and --elmo-weights, or neither")
    bilm = BiLM.from_files(*(pretrained_files("en") if elmo_options is None else (elmo_options, elmo_weights)))
    (train, y), (dev, y_dev) = load_split(corpus, "train"), load_split(corpus, "dev")
    static = (vector_features(vectors, train), vector_features(vectors, dev)) if vectors is not None else None
    rows = probe_rows(
        (elmo_features(bilm, train), elmo_features(bilm, dev)),
        (y, y_dev),
        ([doc.text for doc in train], [doc.text for doc in dev]),
        static,
        weight,
    )
    print(f"{corpus}: {len(train)} train, {len(dev)} dev documents; dev accuracy of a linear probe")
    for name, score in rows.items():
        print(f"{name:<24} {score:.3f}")


if __name__ == "__main__":
    typer.run(main)
