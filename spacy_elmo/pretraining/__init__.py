"""Pretraining and fine-tuning the biLM on raw text (see :func:`pretrain`)."""

from .config import PRESETS, Preset, TrainingConfig, get_preset
from .corpus import CorpusReader
from .evaluate import heldout_perplexity
from .export import export_pipeline
from .softmax import SharedSoftmax
from .train import pretrain
from .vocab import Vocabulary

__all__ = [
    "PRESETS",
    "CorpusReader",
    "Preset",
    "SharedSoftmax",
    "TrainingConfig",
    "Vocabulary",
    "export_pipeline",
    "get_preset",
    "heldout_perplexity",
    "pretrain",
]
