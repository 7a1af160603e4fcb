"""Thinc layers of the elmo component: the biLM, the listener, the scalar mix and row dropout."""

from .bilm import ElmoBiLMLayer, get_bilm, set_bilm
from .listener import ElmoListener
from .row_dropout import RowDropout
from .scalar_mix import ScalarMix

__all__ = ["ElmoBiLMLayer", "ElmoListener", "RowDropout", "ScalarMix", "get_bilm", "set_bilm"]
