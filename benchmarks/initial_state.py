"""Held-out perplexity of a pretrained biLM from each initial LSTM state: zero, warm, carried.

The question it answers: what does starting every sentence from a zero state cost, and how much
of it does the stored warm start (``BiLM.warm_up``, exported by ``spacy-elmo pretrain``) win back?
The held-out text is split into sentences (spaCy's sentencizer) and each sentence is scored on
its own with the full softmax, as the ``elmo`` component reads it; "carry" lets each sentence
start where the previous sentence of its row ended (bilm-tf / AllenNLP behaviour).

    python benchmarks/initial_state.py RUN_DIR HELDOUT.txt [--max-tokens 20000]

RUN_DIR is the output directory of ``spacy-elmo pretrain`` (options.json, weights.hdf5,
checkpoint.pt with the softmax and vocabulary).
"""

import argparse
from pathlib import Path
from typing import List

import spacy

from spacy_elmo import BiLM
from spacy_elmo.pretraining.checkpoint import load_checkpoint
from spacy_elmo.pretraining.evaluate import heldout_perplexity
from spacy_elmo.pretraining.softmax import SharedSoftmax
from spacy_elmo.pretraining.vocab import Vocabulary


def heldout_sentences(path: Path, max_tokens: int) -> List[List[str]]:
    """The first sentences of a document-per-line file, up to about ``max_tokens`` tokens."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    sentences: List[List[str]] = []
    n_tokens = 0
    with path.open(encoding="utf8") as f:
        for line in f:
            for sent in nlp(line.strip()).sents:
                tokens = [t.text for t in sent if not t.is_space]
                if tokens:
                    sentences.append(tokens)
                    n_tokens += len(tokens)
            if n_tokens >= max_tokens:
                break
    return sentences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("heldout", type=Path)
    parser.add_argument("--max-tokens", type=int, default=20_000)
    args = parser.parse_args()
    checkpoint = load_checkpoint(args.run_dir / "checkpoint.pt")
    bilm = BiLM.from_files(args.run_dir / "options.json", args.run_dir / "weights.hdf5")
    vocab = Vocabulary(checkpoint["vocab"])
    softmax = SharedSoftmax(len(vocab), bilm.options.projection_dim)
    softmax.load_state_dict(checkpoint["softmax"])
    sentences = heldout_sentences(args.heldout, args.max_tokens)
    print(f"{len(sentences)} held-out sentences, {sum(map(len, sentences))} tokens")
    print(f"{'initial state':24} {'forward':>8} {'backward':>8} {'average':>8}")
    for initial, rows in [("zero", 32), ("warm", 32), ("carry", 32), ("carry", 1)]:
        ppl = heldout_perplexity(bilm, softmax, vocab, sentences, initial, batch_size=rows)
        name = initial if initial != "carry" else f"carry ({rows} row{'s' if rows > 1 else ''})"
        print(f"{name:24} {ppl['forward']:8.1f} {ppl['backward']:8.1f} {ppl['average']:8.1f}")


if __name__ == "__main__":
    main()
