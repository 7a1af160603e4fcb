"""CPU inference with the LSTM's two directions run together at each step, or one after the other
(``spacy_elmo.bilm.lstm.DIRECTIONS_APART``: the product dtypes that run them apart), per precision.

    python benchmarks/lstm_directions.py [--precisions int8,bf16,fp32] [--threads 2] [--rounds 5]

The biLM at the published Original size (random weights, written once to ``--weights``), the 480
English sentences of examples/word_senses.jsonl tokenized by spaCy's blank English, in batches of
64 sentences as ``nlp.pipe(batch_size=64)`` gives them; the token cache is warm after the
untimed first pass, so the LSTM is what is timed. Both orders run interleaved in one process,
``--rounds`` times; words/s per round and the median of each.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List

import spacy
import torch

from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm import lstm
from spacy_elmo.bilm.precision import INT8

sys.path.insert(0, str(Path(__file__).parent))
from peer_transformers import load_texts  # noqa: E402  (a sibling script: the same 480 sentences)

DTYPES = {"int8": INT8, "bf16": torch.bfloat16, "fp32": torch.float32}


def sentences() -> List[List[str]]:
    return [[token.text for token in doc] for doc in spacy.blank("en").pipe(load_texts(480))]


def words_per_second(bilm: BiLM, batches: List[List[List[str]]]) -> Callable[[], float]:
    words = sum(len(s) for batch in batches for s in batch)

    def run() -> float:
        start = time.perf_counter()
        for batch in batches:
            bilm.embed_sentences(batch)
        return words / (time.perf_counter() - start)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precisions", default="int8,bf16,fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--weights", type=Path, default=Path(tempfile.gettempdir()) / "spacy-elmo-original-random")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    options_file, weight_file = args.weights / "options.json", args.weights / "weights.hdf5"
    if not weight_file.exists():
        args.weights.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        BiLM(ElmoOptions(lstm_dim=4096, projection_dim=512, n_layers=2, n_highway=2)).to_files(options_file, weight_file)
    all_sentences = sentences()
    batches = [all_sentences[i : i + 64] for i in range(0, len(all_sentences), 64)]
    print(f"torch {torch.__version__}, {args.threads} threads; {len(all_sentences)} sentences in batches of 64")
    shipped = lstm.DIRECTIONS_APART
    for name in args.precisions.split(","):
        bilm = BiLM.from_files(options_file, weight_file, precision=name)
        run = words_per_second(bilm, batches)
        run()
        rates = {"together": [], "apart": []}
        for _ in range(args.rounds):
            for order in rates:
                lstm.DIRECTIONS_APART = (DTYPES[name],) if order == "apart" else ()
                rates[order].append(run())
        lstm.DIRECTIONS_APART = shipped
        for order, values in rates.items():
            print(f"{name} directions {order:8s}: " + " ".join(f"{v:,.0f}" for v in values)
                  + f" words/s, median {statistics.median(values):,.0f}")
        print(f"{name}: shipped order: {'apart' if DTYPES[name] in shipped else 'together'}")


if __name__ == "__main__":
    main()
