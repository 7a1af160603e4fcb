"""Settings dataclasses whose fields document their own command-line option.

:class:`~spacy_elmo.pretraining.config.TrainingConfig` (``spacy-elmo pretrain``) and
:class:`~spacy_elmo.embed.settings.EmbedSettings` (``spacy-elmo embed``) declare their fields
with :func:`setting`; the command line builds an option per field from it
(:func:`spacy_elmo.cli.options.with_settings`), so a new setting is one field and its use.
"""

from dataclasses import field
from typing import Any


def setting(default: Any, help: str, **cli: str) -> Any:
    """A settings field with its documentation, from which the command builds its option:
    ``help``; ``flag``, the option's name where it is not the field's (a ``--yes/--no`` pair for
    a bool); ``unset``, what None means; ``given_by``, the field whose option also gives this
    one's value, where it has no option of its own (``mix`` comes with ``--layers mix:W0,W1,...``)."""
    return field(default=default, metadata={"help": help, **cli})
