"""Language codes of the registry's biLMs and of spaCy pipelines: their names, and which fit which."""

import re
from typing import Dict

# Language codes (ISO 639-1 where there is one, else 639-3) and their English names, for the
# listing and the language check of the elmo component.
# fmt: off
LANGUAGE_NAMES: Dict[str, str] = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "cu": "Old Church Slavonic",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian",
    "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish", "gl": "Galician",
    "grc": "Ancient Greek", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian",
    "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "la": "Latin", "lt": "Lithuanian",
    "lv": "Latvian", "nb": "Norwegian Bokmål", "nl": "Dutch", "nn": "Norwegian Nynorsk", "no": "Norwegian",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian",
    "sv": "Swedish", "ta": "Tamil", "tr": "Turkish", "ug": "Uyghur", "uk": "Ukrainian", "ur": "Urdu",
    "vi": "Vietnamese", "zh": "Chinese", "xx": "multi-language",
}
# fmt: on
# A language code that covers others: a Norwegian ("no") biLM fits Bokmål and Nynorsk pipelines.
_MACRO_LANGUAGES = {"nb": "no", "nn": "no"}


def language_name(code: str) -> str:
    """``"German ('de')"`` for ``"de"``; the code alone for one this module does not name."""
    name = LANGUAGE_NAMES.get(code.lower())
    return f"{name} ({code!r})" if name else repr(code)


def same_language(pipeline: str, model: str) -> bool:
    """Whether a biLM of language ``model`` fits a pipeline of language ``pipeline``: the same primary
    code (``zh`` and ``zh-hans``), or ``model`` a language that covers ``pipeline`` (``no`` for ``nb``)."""
    first, second = (_primary(code) for code in (pipeline, model))
    return first == second or _MACRO_LANGUAGES.get(first) == second


def _primary(code: str) -> str:
    return re.split(r"[-_]", code.strip().lower(), maxsplit=1)[0]
