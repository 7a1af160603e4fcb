"""Word senses: does a word's vector tell which of its senses a sentence uses?

The test set (``word_senses.jsonl`` beside this script) has ambiguous English words, two senses
each, several sentences per sense, written for this test (so no biLM has read them). Each line:
``{"word": "bank", "sense": "river", "text": "..."}``, the word once, in lowercase.

Nearest-neighbour sense accuracy: for every occurrence of a word, the other occurrences of the
same word are ranked by the cosine of their vectors; the occurrence scores the share of its
nearest neighbours (ties share the first place) that have its sense. A static vector (word2vec,
GloVe, or the biLM's context-free layer 0) gives every occurrence of a word the same vector, so
every neighbour ties and the score is chance: with n sentences per sense, (n - 1) / (2n - 1).

    python examples/word_senses.py      # the default pipe's token.vector and each biLM layer
    python examples/word_senses.py --options-file options.json --weight-file weights.hdf5   # another biLM
"""

import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy
import spacy
import typer
from spacy.language import Language

DATA = Path(__file__).with_name("word_senses.jsonl")


class Occurrence(NamedTuple):
    word: str
    sense: str
    text: str


def read_occurrences(path: Path = DATA) -> List[Occurrence]:
    with path.open(encoding="utf8") as f:
        return [Occurrence(**json.loads(line)) for line in f if line.strip()]


def nearest_neighbour_accuracy(occurrences: Sequence[Occurrence], vectors: numpy.ndarray) -> float:
    """Mean over occurrences of the share of their nearest same-word neighbours with their sense.

    ``vectors``: (n_occurrences, width), one row per occurrence in the given order.
    """
    unit = vectors / numpy.maximum(numpy.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    by_word: Dict[str, List[int]] = defaultdict(list)
    for i, occurrence in enumerate(occurrences):
        by_word[occurrence.word].append(i)
    scores = []
    for members in by_word.values():
        similarity = unit[members] @ unit[members].T
        senses = numpy.array([occurrences[i].sense for i in members])
        for row in range(len(members)):
            others = numpy.delete(numpy.arange(len(members)), row)
            best = similarity[row, others].max()
            nearest = others[numpy.isclose(similarity[row, others], best, rtol=0.0, atol=1e-6)]
            scores.append(float((senses[nearest] == senses[row]).mean()))
    return float(numpy.mean(scores))


def word_layers(nlp: Language, occurrences: Sequence[Occurrence]) -> numpy.ndarray:
    """(n_layers + 2, n_occurrences, width): the pipe's ``token.vector``, then every biLM layer."""
    rows = []
    for occurrence, doc in zip(occurrences, nlp.pipe(o.text for o in occurrences)):
        positions = [t.i for t in doc if t.text == occurrence.word]
        if len(positions) != 1:
            raise ValueError(f"{occurrence.word!r} must be one token of {occurrence.text!r}, found {len(positions)}")
        i = positions[0]
        rows.append(numpy.concatenate([doc[i].vector[None], doc._.elmo_layers[:, i]]))
    return numpy.stack(rows, axis=1)


def default_pipeline(options_file: Optional[Path] = None, weight_file: Optional[Path] = None) -> Language:
    """``spacy.blank("en")`` + ``elmo`` with its defaults (or other biLM files), keeping every layer."""
    nlp = spacy.blank("en")
    files = {"options_file": str(options_file), "weight_file": str(weight_file)} if options_file else {}
    nlp.add_pipe("elmo", config={"store_layers": True, "model": files})
    nlp.initialize()
    return nlp


def report(nlp: Language, occurrences: Sequence[Occurrence]) -> Dict[str, float]:
    layers = word_layers(nlp, occurrences)
    names = ["token.vector (default pipe)", "layer 0 (context-free, static)"]
    names += [f"layer {k} (LSTM)" for k in range(1, len(layers) - 1)]
    return {name: nearest_neighbour_accuracy(occurrences, vectors) for name, vectors in zip(names, layers)}


def main(
    options_file: Optional[Path] = typer.Option(None, exists=True, help="options.json of a biLM [default: the bundled one]"),
    weight_file: Optional[Path] = typer.Option(None, exists=True, help="weights.hdf5 of that biLM"),
) -> None:
    if (options_file is None) != (weight_file is None):
        raise typer.BadParameter("give both --options-file and --weight-file, or neither")
    occurrences = read_occurrences()
    words = {o.word for o in occurrences}
    print(f"{len(occurrences)} sentences, {len(words)} words, 2 senses each")
    for name, accuracy in report(default_pipeline(options_file, weight_file), occurrences).items():
        print(f"{name:32s} {accuracy:.3f}")


if __name__ == "__main__":
    typer.run(main)
