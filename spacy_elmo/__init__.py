"""ELMo contextual embeddings for spaCy v3.

``BiLM`` is pure PyTorch. The spaCy pieces load on first use, so that scripts that only need the
biLM (pretraining workers, for instance) do not pay for importing spaCy.
"""

from importlib import import_module
from typing import Any

from .bilm import BiLM, ElmoFileError, ElmoOptions
from .published import pretrained_files

__version__ = "0.1.0"

_SPACY_EXPORTS = {
    "Elmo": "spacy_elmo.pipeline_component",
    "install_vector_hooks": "spacy_elmo.vector_hooks",
    "ElmoListener": "spacy_elmo.layers",
}
__all__ = ["BiLM", "ElmoFileError", "ElmoOptions", "pretrained_files", "__version__", *_SPACY_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _SPACY_EXPORTS:
        return getattr(import_module(_SPACY_EXPORTS[name]), name)
    raise AttributeError(f"module 'spacy_elmo' has no attribute {name!r}")
