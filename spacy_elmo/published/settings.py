"""The environment variables of downloads (the cache, the network, the registry), read here and
nowhere else in this package.

Reading them in one place keeps them in one list (docs/bilm.md, "Environment variables") and
lets :mod:`.cache` and :mod:`.registry` take plain values: they call :func:`download_settings`
at each use, so a variable set (or a test's ``monkeypatch.setenv``) after import still counts.
Nothing is cached. The biLM's own switches are in :mod:`spacy_elmo.bilm.settings`.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

CACHE_ENV = "SPACY_ELMO_CACHE"
OFFLINE_ENV = "SPACY_ELMO_OFFLINE"
MODELS_ENV = "SPACY_ELMO_MODELS"
# The values of SPACY_ELMO_OFFLINE that forbid the network, in any case.
OFFLINE_VALUES = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class DownloadSettings:
    """The download settings as the environment sets them; the defaults are those of an unset variable.

    - ``cache_dir``: ``SPACY_ELMO_CACHE`` (default unset: None, the user's cache directory, see
      :func:`.cache.cache_root`), ``~`` expanded. Where downloaded biLMs and ``precision = "auto"``'s
      decisions are kept.
    - ``offline``: ``SPACY_ELMO_OFFLINE`` (default unset: False); ``1``, ``true``, ``yes`` or ``on``
      forbid all network access: a cached biLM loads, a missing one is an error saying how to place it.
    - ``models_file``: ``SPACY_ELMO_MODELS`` (default unset: None), a JSON registry file whose
      entries add to or override the built-in ones (:func:`.registry.registered_models`).

    An empty value counts as unset.
    """

    cache_dir: Optional[Path] = None
    offline: bool = False
    models_file: Optional[Path] = None


def download_settings(environ: Optional[Mapping[str, str]] = None) -> DownloadSettings:
    """The settings as ``environ`` (default: this process's environment, read now) sets them."""
    env = os.environ if environ is None else environ
    cache_dir, models_file = env.get(CACHE_ENV), env.get(MODELS_ENV)
    return DownloadSettings(
        cache_dir=Path(cache_dir).expanduser() if cache_dir else None,
        offline=env.get(OFFLINE_ENV, "").strip().lower() in OFFLINE_VALUES,
        models_file=Path(models_file) if models_file else None,
    )
