"""Words/s of the default ``elmo`` pipe alone on the machine and beside a competing torch job.

For each ``threads`` setting, ``nlp.pipe`` runs over synthetic sentences on an idle machine,
then again while another process (started and ended here, by pid) multiplies matrices with
torch's default threads. The share kept is loaded words/s over idle words/s of the same
setting. Run from the repository root on an otherwise quiet machine:

    python benchmarks/shared_cpu.py
"""

import subprocess
import sys
import time
import warnings
from typing import List

import spacy
import typer

from component_speed import synthetic_texts

COMPETITOR = "import torch\na = torch.randn(2048, 2048)\nwhile True:\n    a @ a\n"

app = typer.Typer(add_completion=False)


def words_per_second(setting: str, texts: List[str], repeats: int) -> float:
    """Best of ``repeats`` passes of the default pipe (bundled biLM) with this ``threads`` setting."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"threads": int(setting) if setting.isdigit() else setting})
    nlp.initialize()
    n_words = sum(len(doc) for doc in nlp.tokenizer.pipe(texts))
    list(nlp.pipe(texts[:20]))  # load and warm up
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in nlp.pipe(texts):
            pass
        best = max(best, n_words / (time.perf_counter() - start))
    return best


@app.command()
def main(
    settings: str = typer.Option("auto,1,2", help="comma-separated threads settings to compare"),
    n_docs: int = typer.Option(600, help="synthetic documents per pass"),
    repeats: int = typer.Option(2, help="passes per measurement; the best counts"),
) -> None:
    warnings.simplefilter("ignore", UserWarning)
    texts = synthetic_texts(n_docs)
    typer.echo("| threads | idle words/s | beside a torch job | share kept |\n|---|---|---|---|")
    for setting in settings.split(","):
        idle = words_per_second(setting, texts, repeats)
        competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR])
        try:
            time.sleep(3)  # let it reach its steady state
            loaded = words_per_second(setting, texts, repeats)
        finally:
            competitor.kill()
            competitor.wait()
        time.sleep(2)
        typer.echo(f"| {setting} | {idle:,.0f} | {loaded:,.0f} | {loaded / idle:.0%} |")


if __name__ == "__main__":
    app()
