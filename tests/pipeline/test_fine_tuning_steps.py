"""Fine-tuning the biLM with ``nlp.update``: each step uses its own batch's gradients, and no
cache outlives it, so a fine-tuned pipeline predicts as a fresh copy of its weights.

thinc's optimizer writes the biLM's parameters in place through array views that torch does not
track; the token cache, the low-precision weight copies and the feature cache must still see
every step, in every precision.
"""

from pathlib import Path
from typing import List, Tuple

import numpy
import pytest
import spacy
import torch
from spacy.language import Language
from thinc.api import Adam

import spacy_elmo

from spacy_elmo.layers import get_bilm

from ..helpers import assert_float32_close
from .conftest import WIDTH, build_ner_textcat, make_examples

CONFIGS = Path(spacy_elmo.__file__).parent / "configs"
TINY = {
    "components.elmo.model.lstm_dim": 24,
    "components.elmo.model.projection_dim": 8,
    "components.elmo.model.filters": [[1, 4], [2, 8], [3, 8]],
}
TEXTS = ["Alice went home . It was great .", "Bob saw Paris and London .", "It was awful ."]


def fine_tuned_pipeline(config_name: str, bilm_files: Tuple[Path, Path], precision: str) -> Language:
    """The shipped config on the tiny biLM, ``freeze = false``, initialized on the tiny examples."""
    task = "ner" if config_name.startswith("ner") else "textcat"
    overrides = {
        **TINY,
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


def outputs(nlp: Language) -> List[numpy.ndarray]:
    """What a user reads: the contextual tensor of every doc, and its categories where there are."""
    found = []
    for doc in nlp.pipe(TEXTS):
        found.append(doc.tensor)
        if doc.cats:
            found.append(numpy.array([doc.cats[label] for label in sorted(doc.cats)], dtype="float32"))
    return found


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("config_name", ["ner_elmo.cfg", "textcat_elmo.cfg"])
def test_predictions_after_each_fine_tuning_step_equal_a_fresh_copy(
    config_name: str, precision: str, bilm_files, tmp_path: Path
) -> None:
    nlp = fine_tuned_pipeline(config_name, bilm_files, precision)
    examples = make_examples(nlp)
    optimizer = Adam(0.01)
    before = outputs(nlp)  # fills the token cache and the low-precision copies
    for step in range(4):
        nlp.update(examples, sgd=optimizer)
        served = outputs(nlp)
        nlp.to_disk(tmp_path / str(step))
        fresh = outputs(spacy.load(tmp_path / str(step)))
        for got, want in zip(served, fresh):
            assert_float32_close(got, want)
    moved = max(float(numpy.abs(a - b).max()) for a, b in zip(before, served))
    assert moved > 1e-3  # the updates did change the features, so a stale cache would show


def test_nlp_update_steps_the_biLM_after_its_listeners_sent_their_gradients(bilm_files) -> None:
    """``nlp.update`` calls the elmo component's ``finish_update`` before ner and textcat have run:
    the step waits for the last listener's gradients, so none is left over for the next batch."""
    nlp = build_ner_textcat(bilm_files, freeze=False)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    optimizer = nlp.create_optimizer()
    for _ in range(2):  # the first step's gradients are zero: the task layers start at zero
        before = [p.detach().clone() for p in bilm.parameters()]
        nlp.update(make_examples(nlp), sgd=optimizer)
    assert any(not torch.equal(a, b) for a, b in zip(before, bilm.parameters()))
    assert all(p.grad is None or not p.grad.any() for p in bilm.parameters())
