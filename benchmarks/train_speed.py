"""Training speed on the CPU, per precision: ``spacy train`` with the biLM fine-tuned, or ``spacy-elmo pretrain``.

Two subcommands, each a rate per ``--precisions`` entry (fp32, bf16, int8, auto; see
spacy_elmo.bilm.precision.resolved), measured alike: every round of every precision in a process
of its own (the harness's ``isolated``: its imports, allocator and caches its own), the precisions
taking turns in ``--rounds`` rounds, ``--steps`` steps timed after untimed warm-up ones; printed
per round and, at the end, the median and range per precision. ``auto``'s decision is measured
before its first timed step (``SPACY_ELMO_CACHE`` keeps it), untimed.

``finetune``: words/s of ``spacy train`` with spacy_elmo/configs/ner_elmo.cfg as shipped (the
bundled ``en`` biLM) and ``freeze = false``, each precision as ``components.elmo.model.precision``,
``--corpus`` for training data (WNUT-16's training set, once the project's ``fetch-data`` workflow
has run). A round times its steps where a long run spends its steps (the schedule's last batch
size, 1,000 words) after 3 untimed ones (the harness's ``steady_train_rate``, as
benchmarks/gpu.py's steady rows).

``pretrain``: tokens/s (per direction) of a ``spacy-elmo pretrain`` preset, each precision as
``spacy-elmo pretrain --precision``. Without ``--corpus``, the harness's Zipfian random-word corpus
is generated in a temporary directory (the vocabulary pass is not timed). Tokens are window
positions, boundaries included, summed over the batch: the unit of the training log's
tokens_per_s. bf16 is faster than fp32 on some CPUs without AMX, slower on others.

    python benchmarks/train_speed.py finetune [--corpus project/corpus/ner/train.spacy] [--precisions fp32,auto]
        [--steps 12] [--rounds 2] [--threads 2]
    python benchmarks/train_speed.py pretrain [--preset small] [--corpus PATH] [--precisions auto] [--steps 30]
        [--warmup 5] [--rounds 1] [--threads 2]
"""

import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch
import typer

from harness import REPO, isolated, machine, steady_train_rate, timed, zipf_corpus
from spacy_elmo.bilm.precision.resolved import PRECISIONS

NER_TRAIN = REPO / "project" / "corpus" / "ner" / "train.spacy"

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def precisions_option(default: str) -> Any:
    """``--precisions``, the same for both subcommands."""
    return typer.Option(default, help=f"Comma-separated, of {', '.join(PRECISIONS)}")


def rounds_option(default: int) -> Any:
    """``--rounds``, the same for both subcommands."""
    return typer.Option(default, help="Interleaved rounds, each precision's in a process of its own")


def threads_option() -> Any:
    """``--threads``, the same for both subcommands."""
    return typer.Option(2, help="torch.set_num_threads")


def interleaved_rounds(
    measure: Callable[..., Mapping[str, Any]], precisions: str, rounds: int, unit: str, **kwargs: Any
) -> Dict[str, List[float]]:
    """``measure(precision=..., **kwargs)`` in a fresh process per round and precision, the
    precisions taking turns, so that a slow spell of the machine hits each alike; its ``rate`` per
    precision, printed as it comes (with the child's ``note``, if any) and summed up at the end."""
    chosen = [p.strip() for p in precisions.split(",") if p.strip()]
    if not chosen or any(p not in PRECISIONS for p in chosen):
        raise typer.BadParameter(f"--precisions {precisions!r}: a comma-separated list of {', '.join(PRECISIONS)}")
    if rounds < 1:
        raise typer.BadParameter(f"--rounds {rounds}: at least one")
    print(machine(), flush=True)
    rates: Dict[str, List[float]] = {precision: [] for precision in chosen}
    for round_ in range(rounds):
        for precision, found in rates.items():
            result = isolated(measure, precision=precision, **kwargs)
            found.append(result["rate"])
            note = f" ({result['note']})" if result.get("note") else ""
            print(f"round {round_}, precision {precision}: {found[-1]:,.0f} {unit}{note}", flush=True)
    for precision, found in rates.items():
        print(f"{precision}: median {statistics.median(found):,.0f} {unit} ({min(found):,.0f}-{max(found):,.0f})")
    return rates


# ---------------------------------------------------------------------- finetune
def fine_tuned_rate(corpus: str, precision: str, steps: int, threads: int) -> Dict[str, Any]:
    """One round of one precision of ``finetune`` (run in its own process by :func:`~harness.isolated`)."""
    torch.set_num_threads(threads)
    overrides = {"components.elmo.model.freeze": False, "components.elmo.model.precision": precision}
    return {"rate": steady_train_rate(Path(corpus), overrides, gpu_id=-1, max_steps=steps)}


@app.command()
def finetune(
    corpus: Path = typer.Option(NER_TRAIN, help="NER examples (.spacy)"),
    precisions: str = precisions_option("fp32,auto"),
    steps: int = typer.Option(12, help="Timed steps per round"),
    rounds: int = rounds_option(2),
    threads: int = threads_option(),
) -> None:
    """spacy train words/s with the biLM fine-tuned (freeze = false); needs an NER corpus."""
    if not corpus.exists():
        raise typer.BadParameter(
            f"{corpus} not found: make it with `python -m weasel run fetch-data project/` and `corpus` "
            "(the real data, see project/README.md), or give --corpus a .spacy file of NER examples"
        )
    interleaved_rounds(fine_tuned_rate, precisions, rounds, "words/s", corpus=str(corpus), steps=steps, threads=threads)


# ---------------------------------------------------------------------- pretrain
def pretrain_rate(
    preset: str, corpus: Optional[str], precision: str, steps: int, warmup: int, threads: int
) -> Dict[str, Any]:
    """One round of one precision of ``pretrain`` (run in its own process by :func:`~harness.isolated`):
    tokens/s over ``steps`` steps after ``warmup`` untimed ones, and a line on what was trained."""
    from spacy_elmo.pretraining import get_preset
    from spacy_elmo.pretraining.distributed import Distributed
    from spacy_elmo.pretraining.train import Trainer

    torch.set_num_threads(threads)
    chosen = get_preset(preset)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(corpus) if corpus else Path(tmp) / "corpus.txt"
        if not corpus:
            zipf_corpus(path)
        config = chosen.training.updated(max_steps=warmup + steps, precision=precision)
        trainer = Trainer(
            Distributed(),
            path,
            Path(tmp) / "out",
            chosen.options,
            config,
            dev_path=None,
            init_from=None,
            resume=False,
            progress=False,
        )
        for _ in range(warmup):
            trainer._train_step()
        seconds = timed(lambda: [trainer._train_step() for _ in range(steps)])
    tokens = steps * config.batch_size * config.window
    n_params = sum(p.numel() for p in trainer.loss.parameters())
    note = (
        f"preset {preset}: {n_params / 1e6:.1f} M parameters (softmax included), "
        f"batch {config.batch_size} x window {config.window}, {config.n_negatives or 'full'} softmax, "
        f"{threads} thread(s), {precision} precision ({trainer.bilm.runtime.resolved_precision.dtype}): "
        f"{seconds / steps * 1000:.0f} ms/step, 5 M tokens in {5e6 / (tokens / seconds) / 3600:.2f} h"
    )
    return {"rate": tokens / seconds, "note": note}


@app.command()
def pretrain(
    preset: str = typer.Option("small", help="A preset of spacy-elmo pretrain"),
    corpus: Optional[Path] = typer.Option(None, help="A document per line [default: a Zipfian random corpus]"),
    precisions: str = precisions_option("auto"),
    steps: int = typer.Option(30, help="Timed steps per round"),
    warmup: int = typer.Option(5, help="Untimed steps first, each round"),
    rounds: int = rounds_option(1),
    threads: int = threads_option(),
) -> None:
    """spacy-elmo pretrain tokens/s of a preset, per precision."""
    if corpus is not None and not corpus.exists():
        raise typer.BadParameter(f"{corpus} not found", param_hint="--corpus")
    interleaved_rounds(
        pretrain_rate,
        precisions,
        rounds,
        "tokens/s",
        preset=preset,
        corpus=str(corpus) if corpus else None,
        steps=steps,
        warmup=warmup,
        threads=threads,
    )


if __name__ == "__main__":
    app()
