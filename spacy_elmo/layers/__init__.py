"""Thinc layers of the elmo component: the biLM, the listener and the scalar mix."""

from .bilm import ElmoBiLMLayer, get_bilm, set_bilm
from .listener import ElmoListener
from .scalar_mix import ScalarMix

__all__ = ["ElmoBiLMLayer", "ElmoListener", "ScalarMix", "get_bilm", "set_bilm"]
