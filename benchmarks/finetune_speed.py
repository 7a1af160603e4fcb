"""Words/s of ``spacy train`` with the biLM fine-tuned (``freeze = false``) on the CPU, per precision.

    python benchmarks/finetune_speed.py [--corpus project/corpus/ner/train.spacy] [--precisions fp32,auto]
        [--steps 12] [--rounds 2] [--threads 2]

spacy_elmo/configs/ner_elmo.cfg as shipped (the bundled ``en`` biLM), ``--corpus`` for training
data (WNUT-16's training set, once the project's ``fetch-data`` workflow has run), each precision as
``components.elmo.model.precision``, in interleaved rounds. A round times ``--steps`` steps where a
long run spends its steps (the schedule's last batch size, 1,000 words) after 3 untimed ones,
as ``steady_train_rate`` of benchmarks/gpu.py steps them (``nlp.update`` with the config's
batcher, dropout and optimizer). ``auto``'s decision for training is measured before its first
round (``SPACY_ELMO_CACHE`` keeps it), untimed.
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from gpu import steady_train_rate  # noqa: E402  (a sibling script: the same training steps)

PROJECT_CORPUS = Path(__file__).resolve().parent.parent / "project" / "corpus" / "ner" / "train.spacy"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=PROJECT_CORPUS)
    parser.add_argument("--precisions", default="fp32,auto")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not args.corpus.exists():
        sys.exit(f"{args.corpus} not found: make it with `python -m weasel run fetch-data project/` (the real data, "
                 "see project/README.md), or give --corpus a .spacy file of NER examples")
    torch.set_num_threads(args.threads)
    for round_ in range(args.rounds):
        for precision in args.precisions.split(","):
            overrides = {"components.elmo.model.freeze": False, "components.elmo.model.precision": precision}
            rate = steady_train_rate(args.corpus, overrides, gpu_id=-1, max_steps=args.steps)
            print(f"round {round_}, precision {precision}: {rate:,.0f} words/s", flush=True)


if __name__ == "__main__":
    main()
