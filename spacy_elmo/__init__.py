"""ELMo contextual embeddings for spaCy v3."""

from .bilm import BiLM, ElmoFileError, ElmoOptions

__version__ = "0.1.0"
__all__ = ["BiLM", "ElmoFileError", "ElmoOptions", "__version__"]
