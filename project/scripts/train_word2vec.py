"""Train static word vectors (gensim word2vec) on the LM corpus, for system (b).

Lines are tokenized with ``spacy.blank(lang).tokenizer`` (whitespace tokens dropped) so the
vector keys are exactly the ``ORTH`` strings a spaCy pipeline looks up (``MultiHashEmbed``'s
static vectors are keyed by ORTH, case included). The output is word2vec text format, the input
of ``python -m spacy init vectors``.
"""

import tempfile
from pathlib import Path

import spacy
import typer


def write_tokenized(text: Path, tokenized: Path, lang: str) -> None:
    """``text`` tokenized once, tokens joined by single spaces, a line per input line.

    gensim's ``corpus_file`` mode then reads this file in parallel threads, epoch after epoch,
    without tokenizing again. Tokens never contain spaces (whitespace tokens are dropped).
    """
    tokenizer = spacy.blank(lang).tokenizer
    with text.open(encoding="utf8") as src, tokenized.open("w", encoding="utf8") as out:
        lines = (line.strip() for line in src)
        for doc in tokenizer.pipe(line for line in lines if line):
            out.write(" ".join(t.text for t in doc if not t.is_space) + "\n")


def main(
    text: Path = typer.Argument(..., exists=True, dir_okay=False, help="LM corpus, a sentence per line"),
    output: Path = typer.Argument(..., help="Vectors in word2vec text format (.txt)"),
    lang: str = typer.Option("en", help="Language of the spaCy tokenizer"),
    dim: int = typer.Option(100, min=1, help="Vector size"),
    window: int = typer.Option(5, min=1, help="Context window"),
    min_count: int = typer.Option(5, min=1, help="Ignore rarer words"),
    epochs: int = typer.Option(5, min=1, help="Passes over the corpus"),
    workers: int = typer.Option(2, min=1, help="Worker threads"),
    seed: int = typer.Option(0, help="Random seed"),
) -> None:
    """Skip-gram word2vec with negative sampling on TEXT; writes OUTPUT for `spacy init vectors`."""
    from gensim.models import Word2Vec

    with tempfile.TemporaryDirectory() as tmp:
        tokenized = Path(tmp) / "tokens.txt"
        write_tokenized(text, tokenized, lang)
        model = Word2Vec(
            corpus_file=str(tokenized),
            vector_size=dim,
            window=window,
            min_count=min_count,
            sg=1,
            negative=5,
            epochs=epochs,
            workers=workers,
            seed=seed,
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    model.wv.save_word2vec_format(str(output), binary=False)
    typer.echo(f"{len(model.wv)} vectors of {dim} dims ({model.corpus_total_words:,} training tokens) -> {output}")


if __name__ == "__main__":
    typer.run(main)
