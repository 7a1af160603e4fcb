"""The ``spacy-elmo`` application, and how its help screens and errors read.

Help screens are click's plain ones (``rich_markup_mode=None``): typer's rich panels give a long
option list a narrow description column, break the commands' docstrings at their source line
ends, and show ``<bool>`` beside every flag. Plain help wraps each paragraph to the terminal, at
most 80 columns, and reads the same under every typer version this package supports.
"""

import contextlib
from typing import Iterator, Type

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None)


@app.callback()
def main() -> None:
    """ELMo for spaCy: train, export, download and time biLMs, and embed corpora."""


def default(text: str) -> str:
    """`` [default: text]`` for an option whose default is worked out at run time, as click shows its own."""
    return f"  [default: {text}]"


@contextlib.contextmanager
def reported(*errors: Type[BaseException]) -> Iterator[None]:
    """Turn ``errors`` into the message alone (``Error: ...``, in red, on stderr) and exit status 1:
    they say what to fix, and a traceback would hide it."""
    try:
        yield
    except errors as err:
        typer.secho(f"Error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from err
