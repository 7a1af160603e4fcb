"""Fine-tuning the biLM with ``nlp.update``: each step uses its own batch's gradients, and no
cache outlives it, so a fine-tuned pipeline predicts as a fresh copy of its weights.

thinc's optimizer writes the biLM's parameters in place through array views that torch does not
track; the token cache, the low-precision weight copies and the feature cache must still see
every step, in every precision.
"""

from pathlib import Path
from typing import List

import numpy
import pytest
import spacy
import torch
from spacy.language import Language
from thinc.api import Adam

from spacy_elmo.layers import get_bilm

from ..helpers import assert_float32_close, build_ner_textcat, make_examples
from .helpers import FINE_TUNING_TEXTS, fine_tuned_pipeline


def outputs(nlp: Language) -> List[numpy.ndarray]:
    """What a user reads: the contextual tensor of every doc, and its categories where there are."""
    found = []
    for doc in nlp.pipe(FINE_TUNING_TEXTS):
        found.append(doc.tensor)
        if doc.cats:
            found.append(numpy.array([doc.cats[label] for label in sorted(doc.cats)], dtype="float32"))
    return found


# The edit loop (make test-fast) runs each config in one precision, each precision in one config;
# the whole suite every pair.
@pytest.mark.parametrize(
    "config_name, precision",
    [
        ("ner_elmo.cfg", "fp32"),
        ("textcat_elmo.cfg", "bf16"),
        pytest.param("ner_elmo.cfg", "bf16", marks=pytest.mark.slow),
        pytest.param("textcat_elmo.cfg", "fp32", marks=pytest.mark.slow),
    ],
)
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
