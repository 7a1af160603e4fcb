"""Contextual similarity with the bundled English biLM, beside what static vectors give.

For each word, a query sentence uses it in one sense; two candidate sentences use it in the same
sense and in another. ELMo's vector of the word should be closer to the same-sense occurrence:
``token.similarity`` (the pipe's default ``token.vector``, the average of the biLM's layers) and
the top biLM layer alone (the paper found it the best layer for word senses). A static vector (a word2vec or GloVe
table, or the biLM's own context-free layer 0) is one vector per word form, so it scores both
candidates 1.000 and cannot tell the senses apart.

    python examples/contextual_similarity.py
"""

from typing import List, NamedTuple

import numpy
import spacy
from spacy.language import Language
from spacy.tokens import Doc, Token


class Case(NamedTuple):
    word: str
    query: str
    same_sense: str
    other_sense: str


CASES = [
    Case("bank", "She deposited the money at the bank .", "The bank raised its interest rates .",
         "They sat on the grassy bank of the river ."),
    Case("bank", "We walked along the bank of the river .", "The river burst its bank after the storm .",
         "The bank lent the company money ."),
    Case("play", "The actors rehearsed the play in the theatre .", "The new play opens on Broadway tonight .",
         "The children went outside to play football ."),
    Case("play", "The team will play the final on Saturday .", "England play France in the match tomorrow .",
         "Shakespeare wrote the play in 1600 ."),
    Case("match", "The match ended in a draw .", "He scored twice in the match against Chelsea .",
         "He struck a match to light the candle ."),
    Case("apple", "Apple released a new phone .", "Apple shares rose after the launch .",
         "She ate an apple for lunch ."),
]


def occurrence(doc: Doc, word: str) -> Token:
    for token in doc:
        if token.lower_ == word:
            return token
    raise ValueError(f"{word!r} is not a token of {doc.text!r}")


def elmo_pipeline() -> Language:
    """spacy.blank("en") + the elmo pipe with its defaults: the bundled English biLM."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"store_layers": True})  # doc._.elmo_layers: every layer
    nlp.initialize()
    return nlp


def top_layer_similarity(a: Token, b: Token) -> float:
    """Cosine of the two tokens' vectors in the top biLM layer (``doc._.elmo_layers[-1]``)."""
    u, v = a.doc._.elmo_layers[-1][a.i], b.doc._.elmo_layers[-1][b.i]
    return float(u @ v / (numpy.linalg.norm(u) * numpy.linalg.norm(v)))


def score_pair(same: float, other: float) -> str:
    return f"**{same:.3f}** vs {other:.3f}" if same > other else f"{same:.3f} vs **{other:.3f}** (wrong way)"


def table(nlp: Language) -> List[str]:
    lines = [
        "| word | query | same sense | other sense | ELMo, token.similarity | ELMo, top layer | static vector |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        query, same, other = (occurrence(doc, case.word) for doc in nlp.pipe([case.query, case.same_sense, case.other_sense]))
        lines.append(
            f"| {case.word} | {case.query} | {case.same_sense} | {case.other_sense} "
            f"| {score_pair(query.similarity(same), query.similarity(other))} "
            f"| {score_pair(top_layer_similarity(query, same), top_layer_similarity(query, other))} "
            "| 1.000 vs 1.000 (tie) |"
        )
    return lines


def main() -> None:
    lines = table(elmo_pipeline())
    print("Cosine similarity of the word in the query to the same word in each candidate (same vs other sense):\n")
    print("\n".join(lines))
    for column, name in ((4, "token.similarity"), (5, "the top layer")):
        right = sum("wrong way" not in line.split(" | ")[column] for line in lines[2:])
        print(f"ELMo, {name}: the same sense ranks first in {right} of {len(CASES)} cases.")
    print("A static vector is one vector per word form: every case is a tie.")


if __name__ == "__main__":
    main()
