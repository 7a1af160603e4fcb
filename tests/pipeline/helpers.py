"""What the pipeline tests share with each other and with their GPU twins in tests/gpu: training
steps, the fine-tuned shipped configs, the overrides of a tiny ``spacy train`` run."""

from pathlib import Path
from typing import Dict, Tuple

import numpy
import spacy
import torch
from spacy.language import Language
from thinc.api import fix_random_seed

from spacy_elmo.layers import get_bilm

from ..helpers import (
    CONFIGS,
    WIDTH,
    assert_float32_close,
    build_ner_textcat,
    make_examples,
    tiny_model_overrides,
    with_random_output_layers,
)


def train(nlp: Language, examples, steps: int = 1, **kwargs) -> Dict[str, float]:
    """``steps`` calls of ``nlp.update`` on ``examples`` with a fresh optimizer; the summed losses."""
    optimizer = nlp.create_optimizer()
    losses: Dict[str, float] = {}
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer, losses=losses, **kwargs)
    return losses


def assert_learn_rate_scale_scales_the_biLM_steps_only(bilm_files) -> None:
    """With learn_rate_scale s the biLM's weights move s times as far; the task layers as before.
    On the ops current when it is called (the GPU suite calls it on a GPU)."""
    moves = {}
    for scale in (1.0, 0.25):
        fix_random_seed(0)
        nlp = with_random_output_layers(build_ner_textcat(bilm_files, freeze=False, learn_rate_scale=scale))
        bilm = get_bilm(nlp.get_pipe("elmo").model)
        before = [p.detach().clone() for p in bilm.parameters()]
        ner = nlp.get_pipe("ner").model
        ner_before = ner.ops.to_numpy(ner.get_ref("lower").get_param("W")).copy()
        losses = train(nlp, make_examples(nlp), steps=1)  # one step, taken with this batch's gradients
        assert numpy.isfinite(losses["elmo"]) and losses["elmo"] > 0  # the listeners' gradients reached the biLM
        moves[scale] = (
            torch.cat([(p.detach() - b).flatten() for p, b in zip(bilm.parameters(), before)]).cpu().numpy(),
            ner.ops.to_numpy(ner.get_ref("lower").get_param("W")) - ner_before,
        )
    full, scaled = moves[1.0], moves[0.25]
    assert numpy.abs(full[0]).max() > 0
    # A move is a difference of float32 weights: exact up to a few of the weights' rounding steps.
    rounding = 4 * numpy.finfo(numpy.float32).eps * max(float(p.abs().max()) for p in before)
    numpy.testing.assert_allclose(scaled[0], 0.25 * full[0], rtol=1e-3, atol=rounding)
    assert_float32_close(scaled[1], full[1])


# ---------------------------------------------------------------------- the shipped configs
FINE_TUNING_TEXTS = ["Alice went home . It was great .", "Bob saw Paris and London .", "It was awful ."]


def fine_tuned_pipeline(config_name: str, bilm_files: Tuple[Path, Path], precision: str) -> Language:
    """The shipped config on the tiny biLM, ``freeze = false``, initialized on the tiny examples;
    multi-language (the texts' tokens are space-separated, see tests/conftest.py)."""
    task = "ner" if config_name.startswith("ner") else "textcat"
    overrides = {
        **tiny_model_overrides(),
        "nlp.lang": "xx",
        "paths.elmo_options": str(bilm_files[0]),
        "paths.elmo_weights": str(bilm_files[1]),
        "components.elmo.model.freeze": False,
        "components.elmo.model.precision": precision,
        f"components.{task}.model.tok2vec.width": WIDTH,
    }
    config = spacy.util.load_config(CONFIGS / config_name, overrides=overrides)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    return nlp


# A spacy train run of the tiny biLM: a few steps, evaluated twice.
TINY_TRAINING = {**tiny_model_overrides(), "training.max_steps": 6, "training.eval_frequency": 3}


def overrides_for(config: str, corpus: Path, **extra: object) -> dict:
    """``spacy train`` overrides of a shipped ``config`` on the ``corpus`` fixture's data, the tiny sizes."""
    listeners = {f"components.{c}.model.tok2vec.width": WIDTH for c in ("ner", "textcat") if c in config}
    paths = {"paths.train": str(corpus / "train.spacy"), "paths.dev": str(corpus / "dev.spacy")}
    return {**paths, **TINY_TRAINING, **listeners, **extra}
