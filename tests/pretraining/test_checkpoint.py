"""The random state a checkpoint carries, restored on a machine with fewer GPUs than the one that saved it."""

import random
import types

import numpy
import pytest
import torch

from spacy_elmo.bilm.precision.hardware import Hardware
from spacy_elmo.pretraining.checkpoint import rng_state, set_rng_state


def _draws():
    return random.random(), numpy.random.random_sample(), torch.rand(()).item()


@pytest.mark.parametrize("visible", [0, 1, 2])
def test_a_checkpoint_from_two_gpus_resumes_with_the_gpus_present(visible):
    """Only the states of GPUs present are set (set_rng_state_all raised IndexError); the host's always."""
    saved = {**rng_state(), "cuda": [torch.full((16,), gpu + 1, dtype=torch.uint8) for gpu in range(2)]}
    expected = _draws()
    restored = []
    cuda = types.SimpleNamespace(
        device_count=lambda: visible, set_rng_state=lambda state, device="cuda": restored.append((device, state))
    )
    set_rng_state(saved, Hardware(cuda=cuda))
    assert [device for device, _ in restored] == list(range(visible))
    for device, state in restored:
        assert torch.equal(state, saved["cuda"][device])
    assert _draws() == expected
