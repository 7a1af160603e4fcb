"""The CPU's LSTM window: the gates of how many timesteps one input product writes before the steps
read them (spacy_elmo.bilm.kernels.eager.WINDOW_GATES_BYTES), timed at two sizes in interleaved runs.

    python benchmarks/lstm_window.py [--threads 1] [--sentences 64] [--precisions bf16,int8,fp32]

``old``: windows of 1,024 positions (134 MB of float32 gates at the Original size), as before;
``new``: the shipped 16 MB. Original size, random weights, benchmarks/bilm_speed.py's sentences,
16,384-token batches; tokens/s per run.
"""

import argparse
import sys
import time
from pathlib import Path

import torch

from spacy_elmo import BiLM
from spacy_elmo.bilm.kernels import eager as lstm

sys.path.insert(0, str(Path(__file__).parent))
from bilm_speed import ORIGINAL, make_sentences  # noqa: E402  (a sibling script, not a package)

WINDOWS = {"old, 1,024 positions": 1024 * 2 * 4 * ORIGINAL.lstm_dim * 4, "new, 16 MB": lstm.WINDOW_GATES_BYTES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--precisions", default="bf16,int8,fp32")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sentences = make_sentences(args.sentences)
    tokens = sum(map(len, sentences))
    for precision in args.precisions.split(","):
        torch.manual_seed(0)
        bilm = BiLM(ORIGINAL, cache_size=0, max_batch_tokens=16384, precision=precision).eval()
        with torch.no_grad():
            for param in bilm.parameters():
                param.normal_(0.0, 0.02)
            bilm(sentences[:8])
            rates = {name: [] for name in WINDOWS}
            for _ in range(args.rounds):
                for name, size in WINDOWS.items():
                    lstm.WINDOW_GATES_BYTES = size
                    start = time.perf_counter()
                    for batch in bilm.batches(sentences):
                        bilm([sentences[i] for i in batch])
                    rates[name].append(tokens / (time.perf_counter() - start))
        for name, values in rates.items():
            print(f"{precision:5} {name:22} " + " ".join(f"{value:7,.0f}" for value in values) + " tokens/s")


if __name__ == "__main__":
    main()
