"""The ELMo biLM in pure PyTorch: no spaCy here."""

from .errors import ElmoFileError
from .lstm import LSTMState
from .model import BiLM, BiLMOutput
from .options import ElmoOptions

__all__ = ["BiLM", "BiLMOutput", "ElmoFileError", "ElmoOptions", "LSTMState"]
