"""The command line, ``spacy-elmo`` (also ``python -m spacy_elmo``): a module per group of commands.

- :mod:`.training`: ``pretrain`` a biLM, ``export`` a run's checkpoint, ``copy-pretrained``;
- :mod:`.embedding`: ``embed`` a corpus's ELMo layers into a store;
- :mod:`.models`: ``models``, the published biLMs, and ``download``;
- :mod:`.bench`: ``bench``, the biLM's speed in each precision on this machine;
- :mod:`.serving`: ``serve``, a pipeline over HTTP.

:mod:`.app` holds the application and how its help and errors read; :mod:`.options` builds a
command's options from a settings dataclass.
"""

from .app import app

# Each module registers its commands; the main help lists them in this order.
# isort: off
from . import training, embedding, models, bench, serving  # noqa: F401
# isort: on

__all__ = ["app"]
