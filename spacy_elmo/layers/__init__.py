"""Thinc layers of the elmo component: the biLM, the listener, the layer choice and mix, row dropout."""

from .bilm import ElmoBiLMLayer, get_bilm, set_bilm
from .layer_choice import ConcatLayers, SelectLayers
from .listener import ElmoListener
from .row_dropout import RowDropout
from .scalar_mix import ScalarMix

__all__ = [
    "ConcatLayers",
    "ElmoBiLMLayer",
    "ElmoListener",
    "RowDropout",
    "ScalarMix",
    "SelectLayers",
    "get_bilm",
    "set_bilm",
]
