"""Builders shared by the tests: tiny models, made in the test, no downloads."""

from pathlib import Path

import torch

from spacy_elmo import BiLM, ElmoOptions

FIXTURE_DIR = Path(__file__).parent / "fixtures" / "allennlp_elmo"


def tiny_options(**overrides) -> ElmoOptions:
    """A biLM small enough to run in milliseconds but with every part of the real one."""
    sizes = dict(
        lstm_dim=24,
        projection_dim=8,
        n_layers=2,
        char_embedding_dim=4,
        filters=((1, 4), (2, 8), (3, 8)),
        n_highway=2,
    )
    sizes.update(overrides)
    return ElmoOptions(**sizes)


def random_bilm(seed: int = 0, **kwargs) -> BiLM:
    """A tiny biLM whose weights are large enough for states and clipping to matter."""
    options = kwargs.pop("options", None) or tiny_options()
    torch.manual_seed(seed)
    model = BiLM(options, **kwargs)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.5)
    model.eval()
    return model

