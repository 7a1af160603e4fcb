"""Thinc layers of the elmo component: the biLM, the listener, the layer choice and mix."""

from .bilm import ElmoBiLMLayer, get_bilm, get_runtime, predict_mixed, set_bilm
from .bilm_settings import ElmoBiLMSettings
from .layer_choice import SelectLayers
from .listener import ElmoListener
from .scalar_mix import ScalarMix

__all__ = [
    "ElmoBiLMLayer",
    "ElmoBiLMSettings",
    "ElmoListener",
    "ScalarMix",
    "SelectLayers",
    "get_bilm",
    "get_runtime",
    "predict_mixed",
    "set_bilm",
]
