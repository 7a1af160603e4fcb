"""A command's options built from a settings dataclass, each from its field's own documentation
(see :func:`spacy_elmo.option_fields.setting`), so a new setting is one field and its use."""

import functools
import inspect
import re
from dataclasses import Field, fields
from typing import Any, Callable, Dict, Optional, get_args

import typer

from ..pretraining.config import PRESETS
from .app import default


def parse_duration(text: str) -> float:
    """Seconds from '3600', '90s', '90m', '1.5h'."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise typer.BadParameter(f"not a duration: {text!r} (use e.g. 3600, 90m, 2h)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


# Settings whose command-line text is not their value.
SETTING_PARSERS: Dict[str, Callable[[str], Any]] = {"max_time": parse_duration}


def setting_option(setting: Field, preset: Optional[str] = None) -> inspect.Parameter:
    """The option of a settings field. Without ``preset``, its default is the field's; with the
    name of a preset (:class:`~spacy_elmo.pretraining.config.TrainingConfig`'s), it is None, which
    leaves the preset's value, and the help shows that value."""
    meta = setting.metadata
    value = setting.default if preset is None else getattr(PRESETS[preset].training, setting.name)
    declarations = [meta["flag"]] if "flag" in meta else []  # "--yes/--no" for a bool
    if value is None:
        shown = default(meta["unset"])
    elif preset is None:
        shown = ""  # typer shows the option's own default
    elif isinstance(value, bool) and declarations:
        shown = default(meta["flag"].split("/")[0 if value else 1].lstrip("-"))
    else:
        shown = default(f"the preset's; {preset}: {value}")
    parser = SETTING_PARSERS.get(setting.name)
    value_type = next((t for t in get_args(setting.type) if t is not type(None)), setting.type)
    if parser is not None or not isinstance(value_type, type):  # parsed text, or a Literal of names
        value_type = str
    option = typer.Option(
        setting.default if preset is None else None, *declarations, help=meta["help"] + shown, parser=parser
    )
    annotation = value_type if preset is None and setting.default is not None else Optional[value_type]
    return inspect.Parameter(setting.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


def with_settings(
    settings_class: type, preset: Optional[str] = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Add an option per field of the dataclass ``settings_class`` to the command, in place of its
    ``settings`` parameter, which receives the values given as a dict (see :func:`setting_option`:
    with ``preset``, only those given on the command line; the others keep the preset's). A field
    ``given_by`` another has no option: the command reads it from that one's."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command)
        kind = signature.parameters["settings"].kind
        options = [
            setting_option(s, preset).replace(kind=kind) for s in fields(settings_class) if "given_by" not in s.metadata
        ]
        parameters = []
        for name, parameter in signature.parameters.items():
            parameters.extend(options if name == "settings" else [parameter])

        @functools.wraps(command)
        def with_given_settings(**kwargs: Any) -> None:
            given = {option.name: kwargs.pop(option.name) for option in options}
            command(**kwargs, settings={name: value for name, value in given.items() if value is not None})

        with_given_settings.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return with_given_settings

    return decorate
