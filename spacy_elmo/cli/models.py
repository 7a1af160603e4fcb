"""``spacy-elmo models`` and ``download``: the published biLMs, and fetching one into the cache."""

import functools
import json
from typing import TYPE_CHECKING, Optional

import typer

from .app import app, reported

if TYPE_CHECKING:
    from ..published.registry import PublishedModel


@app.command("models")
def models(
    lang: Optional[str] = typer.Option(
        None,
        "--lang",
        metavar="LANG",
        help="Only the biLMs for a pipeline of this language (spaCy's code: de, nb, zh ...)",
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print the registry as JSON: name -> language, url, license, cached, and every other field",
    ),
) -> None:
    """The published biLMs that `pretrained = NAME` and `download NAME` know, and which are cached."""
    from ..published.languages import language_name
    from ..published.registry import models_for_language, registered_models

    with reported(ValueError):  # a bad SPACY_ELMO_MODELS file
        registry = registered_models()
    if lang is not None:
        registry = models_for_language(lang, registry)
    if as_json:
        listing = {
            name: {
                "language": model.language,
                "url": model.url,
                "license": model.license,
                "cached": _cached(model) in ("yes", "bundled"),
                **model.to_json(),
            }
            for name, model in registry.items()
        }
        typer.echo(json.dumps(listing, indent=2, ensure_ascii=False))
        return
    if not registry:
        typer.echo(
            f"No published biLM for {language_name(lang or '')}. Train one on your text with `spacy-elmo pretrain` "
            "(docs/pretraining.md), or add one you have with SPACY_ELMO_MODELS (docs/models.md)"
        )
        return
    rows = [("name", "language", "MB", "width", "cached")]
    for model in registry.values():
        megabytes = model.megabytes
        size = "" if megabytes is None else f"{'' if model.weights_bytes else '~'}{megabytes:.0f}"
        rows.append((model.name, model.language, size, str(model.width or ""), _cached(model)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _cached(model: "PublishedModel") -> str:
    """The listing's ``cached`` column for a registry entry: bundled, no-url, yes or no."""
    from ..published.resolve import named_source

    if model.bundled:
        return "bundled"
    if model.unconfirmed:
        return "no-url"
    return "yes" if named_source(model).is_cached() else "no"


@app.command("download")
def download(
    name: str = typer.Argument(
        ..., metavar="NAME|URL", help="A name of `spacy-elmo models`, or a URL of a directory or an archive"
    ),
    force: bool = typer.Option(False, "--force", help="Fetch again, replacing the cached copy"),
    verify: bool = typer.Option(
        False,
        "--verify",
        help="Check a cached copy's sha256 against the one recorded at its download, reading every file "
        "(loads trust an unchanged size and modification time)",
    ),
) -> None:
    """Fetch a biLM into the cache ahead of use (Docker images, machines without network)."""
    from ..bilm import BiLM
    from ..bilm.formats.manylangs import load_manylangs
    from ..published.resolve import download_pretrained

    with reported(ValueError, OSError):
        paths = download_pretrained(
            name,
            check=BiLM.from_files,
            force=force,
            verify=verify,
            check_directory=functools.partial(load_manylangs, BiLM),
        )
    typer.echo(f"{name}: {' and '.join(str(p) for p in paths)}{' (sha256 verified)' if verify else ''}")
