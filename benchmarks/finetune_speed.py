"""Words/s of ``spacy train`` with the biLM fine-tuned (``freeze = false``) on the CPU, per precision.

    python benchmarks/finetune_speed.py [--corpus project/corpus/ner/train.spacy] [--precisions fp32,auto]
        [--steps 12] [--rounds 2] [--threads 2]

spacy_elmo/configs/ner_elmo.cfg as shipped (the bundled ``en`` biLM), ``--corpus`` for training
data (WNUT-16's training set, once the project's ``fetch-data`` workflow has run), each precision as
``components.elmo.model.precision``, in interleaved rounds, each round of each precision in a
process of its own. A round times ``--steps`` steps where a long run spends its steps (the
schedule's last batch size, 1,000 words) after 3 untimed ones (the harness's ``steady_train_rate``,
as benchmarks/gpu.py's steady rows). ``auto``'s decision for training is measured before its first
round (``SPACY_ELMO_CACHE`` keeps it), untimed.
"""

import statistics
from pathlib import Path
from typing import Dict, List

import torch
import typer

from harness import REPO, isolated, machine, steady_train_rate

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def fine_tuned_rate(corpus: str, precision: str, steps: int, threads: int) -> Dict[str, float]:
    """One round of one precision (run in its own process by :func:`~harness.isolated`)."""
    torch.set_num_threads(threads)
    overrides = {"components.elmo.model.freeze": False, "components.elmo.model.precision": precision}
    return {"words_per_s": steady_train_rate(Path(corpus), overrides, gpu_id=-1, max_steps=steps)}


@app.command()
def main(
    corpus: Path = typer.Option(REPO / "project" / "corpus" / "ner" / "train.spacy", help="NER examples (.spacy)"),
    precisions: str = typer.Option("fp32,auto", help="Comma-separated"),
    steps: int = typer.Option(12, help="Timed steps per round"),
    rounds: int = typer.Option(2, help="Interleaved rounds"),
    threads: int = typer.Option(2, help="torch.set_num_threads"),
) -> None:
    if not corpus.exists():
        raise typer.BadParameter(
            f"{corpus} not found: make it with `python -m weasel run fetch-data project/` "
            "(the real data, see project/README.md), or give --corpus a .spacy file of NER examples"
        )
    torch.set_num_threads(threads)
    print(machine())
    rates: Dict[str, List[float]] = {precision: [] for precision in precisions.split(",")}
    for round_ in range(rounds):
        for precision, found in rates.items():
            found.append(
                isolated(fine_tuned_rate, corpus=str(corpus), precision=precision, steps=steps, threads=threads)[
                    "words_per_s"
                ]
            )
            print(f"round {round_}, precision {precision}: {found[-1]:,.0f} words/s", flush=True)
    for precision, found in rates.items():
        print(f"{precision}: median {statistics.median(found):,.0f} words/s ({min(found):,.0f}-{max(found):,.0f})")


if __name__ == "__main__":
    app()
