"""The ELMo biLM in pure PyTorch: no spaCy here."""

from .bilm import BiLM, BiLMOutput
from .errors import ElmoFileError
from .model.lstm import LSTMState
from .model.options import ElmoOptions

__all__ = ["BiLM", "BiLMOutput", "ElmoFileError", "ElmoOptions", "LSTMState"]
