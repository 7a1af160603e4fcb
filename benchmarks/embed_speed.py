"""Throughput of ``spacy-elmo embed``: the local engine on 1 and 2 torch threads, Ray on 1 and 2
workers (one torch thread each), with the biLM ``--pretrained`` (a name, URL or directory; default
the bundled ``en``), on made-up
English-like sentences.

Each run writes Parquet into a fresh directory and is timed end to end, as a user sees it:
reading and planning the input, loading the biLM (once per Ray actor), embedding, writing, and
for Ray starting a local cluster. Sentences/s and tokens/s are printed per configuration.

    python benchmarks/embed_speed.py [--sentences 2000] [--shard-size 250] [--runs local1,local2,ray1,ray2]
        [--pretrained DIRECTORY]
"""

import random
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

import typer

from harness import machine
from spacy_elmo import BiLM
from spacy_elmo.embed import EmbedSettings, run_embed
from spacy_elmo.published.resolve import resolve_pretrained

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])
WORDS = "the of and to a in is was for that on with as by it at from his an were are which be this has".split()


def write_corpus(path: Path, n: int, seed: int = 0) -> None:
    """``n`` lines of 5-45 whitespace-separated tokens: common words and made-up Zipfian ones."""
    rng = random.Random(seed)
    rare = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10))) for _ in range(5000)]
    weights = [1 / (rank + 1) for rank in range(len(rare))]
    lines: List[str] = []
    for _ in range(n):
        length = rng.randint(5, 45)
        lines.append(
            " ".join(rng.choice(WORDS) if rng.random() < 0.4 else rng.choices(rare, weights)[0] for _ in range(length))
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf8")


def run(corpus: Path, output: Path, name: str, shard_size: int, files: Tuple[Path, Path]) -> None:
    settings = EmbedSettings(whitespace=True, shard_size=shard_size)
    engine, count = ("ray", int(name[3:])) if name.startswith("ray") else ("local", int(name[5:]))
    start = time.perf_counter()
    summary = run_embed(
        corpus,
        output,
        settings,
        *files,
        engine=engine,  # type: ignore[arg-type]
        workers=count,
        threads=1 if engine == "ray" else count,
        progress=False,
    )
    seconds = time.perf_counter() - start
    label = f"ray, {count} worker(s)" if engine == "ray" else f"local, {count} thread(s)"
    print(
        f"{label:<22} {summary.sentences / seconds:>10,.1f} sentences/s {summary.tokens / seconds:>12,.0f} tokens/s",
        f"  ({seconds:.1f} s)",
    )


@app.command()
def main(
    sentences: int = typer.Option(2000, help="Sentences of the made-up corpus"),
    shard_size: int = typer.Option(250, help="Sentences per shard"),
    runs: str = typer.Option("local1,local2,ray1,ray2", help="local<threads> / ray<workers>, comma-separated"),
    pretrained: str = typer.Option("en", help="The biLM: a bundled or registry name, a URL or a directory"),
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        write_corpus(corpus, sentences)
        print(machine())
        print(f"{sentences} sentences, biLM {pretrained!r}, shards of {shard_size}")
        files = resolve_pretrained(pretrained, check=BiLM.from_files)
        for name in runs.split(","):
            run(corpus, Path(tmp) / name, name, shard_size, files)


if __name__ == "__main__":
    app()
