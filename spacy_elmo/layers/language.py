"""Which biLM the elmo component of a pipeline gets for its language.

``pretrained = "default"`` (the component's default) is the biLM bundled for the pipeline's
language: English's, ``en``, for English and multi-language (``xx``) pipelines. No other language
has one bundled, so ``add_pipe("elmo")`` in, say, a German pipeline is an error that lists the
biLMs published for German, rather than giving it the English biLM silently. A biLM named
explicitly whose language the registry knows, and that is not the pipeline's, gives one warning;
files, directories and URLs (language unknown) and ``xx`` pipelines are not checked.
"""

import warnings
from typing import Optional

from ..published.languages import language_name, same_language
from ..published.registry import find_model, models_for_language

DEFAULT_PRETRAINED = "default"
BUNDLED = {"en": "en"}  # pipeline language -> the biLM bundled for it
MULTI_LANGUAGE = "xx"


def choose_pretrained(pretrained: Optional[str], has_files: bool, pipeline_lang: str) -> Optional[str]:
    """What the component of a ``pipeline_lang`` pipeline loads for its ``pretrained`` setting:
    ``"default"`` resolved to the bundled biLM (an error where none is bundled), anything else as
    it is (with a warning for a registry biLM of another language)."""
    if has_files or pretrained is None:
        return pretrained
    if pretrained == DEFAULT_PRETRAINED:
        bundled = BUNDLED.get(pipeline_lang, BUNDLED["en"] if pipeline_lang == MULTI_LANGUAGE else None)
        if bundled is None:
            raise ValueError(no_bundled_biLM(pipeline_lang))
        return bundled
    entry = find_model(pretrained)  # the language of a biLM the registry knows; None for others
    language = (entry.language or None) if entry is not None else None
    if language and pipeline_lang != MULTI_LANGUAGE and not same_language(pipeline_lang, language):
        warnings.warn(language_warning(pipeline_lang, pretrained, language), UserWarning, stacklevel=3)
    return pretrained


def published_for(pipeline_lang: str) -> str:
    """A sentence part: the biLMs published for ``pipeline_lang``, or what to do without one."""
    names = list(models_for_language(pipeline_lang))
    if not names:
        return (
            f"none is published (`spacy-elmo models --lang {pipeline_lang}` lists none): train one on your "
            "text with `spacy-elmo pretrain`, or give your own files (options_file and weight_file)"
        )
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"the biLMs published for it are {shown} (`spacy-elmo models --lang {pipeline_lang}`)"


def no_bundled_biLM(pipeline_lang: str) -> str:
    """The error for a pipeline of a language with no bundled biLM and no biLM named."""
    language = language_name(pipeline_lang)
    return (
        f"spacy_elmo: no biLM is bundled for {language} pipelines (the bundled one is English, 'en'). "
        f"For {language}, {published_for(pipeline_lang)}: name one with nlp.add_pipe('elmo', config={{'model': "
        "{'pretrained': NAME}}) or pretrained = NAME under [components.elmo.model]. To run the English biLM on "
        "this pipeline anyway, name it: pretrained = 'en'."
    )


def language_warning(pipeline_lang: str, spec: str, bilm_lang: str) -> str:
    """The warning for a biLM of language ``bilm_lang`` in a pipeline of ``pipeline_lang``."""
    pipeline, bilm = language_name(pipeline_lang), language_name(bilm_lang)
    return (
        f"spacy_elmo: the 'elmo' component of this {pipeline} pipeline uses the biLM {spec!r}, which is "
        f"{bilm}: its vectors describe {bilm} text. For {pipeline}, {published_for(pipeline_lang)}; set one "
        "with nlp.add_pipe('elmo', config={'model': {'pretrained': NAME}}) or pretrained = NAME under "
        "[components.elmo.model]. A multi-language pipeline (spacy.blank('xx')) is not checked."
    )
