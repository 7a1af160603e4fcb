"""The one cache of the products' weight copies: kept while the sources are unchanged and the
purpose the same, made afresh with gradients, empty in pickles and deep copies."""

import copy
import pickle

import torch

from spacy_elmo.bilm.memory.weight_copies import WeightCopies, tensor_versions


def counting(source: torch.Tensor, made: list):
    def make() -> torch.Tensor:
        made.append(1)
        return source.detach().clone()

    return make


def test_a_copy_is_kept_until_its_source_is_written():
    source, made, copies = torch.ones(3), [], WeightCopies()
    first = copies.cast("w", torch.bfloat16, [source], counting(source, made))
    assert copies.cast("w", torch.bfloat16, [source], counting(source, made)) is first and len(made) == 1
    with torch.no_grad():
        source.add_(1.0)
    again = copies.cast("w", torch.bfloat16, [source], counting(source, made))
    assert len(made) == 2 and again.dtype == torch.bfloat16 and float(again[0]) == 2.0


def test_a_copy_for_another_purpose_replaces_the_one_of_that_name():
    source, made, copies = torch.ones(3), [], WeightCopies()
    copies.get("w", "engine a", [source], counting(source, made), replaces_sources=False)
    copies.get("w", "engine b", [source], counting(source, made), replaces_sources=False)
    copies.get("w", "engine b", [source], counting(source, made), replaces_sources=False)
    assert len(made) == 2 and len(copies) == 1


def test_with_gradients_a_cast_is_made_afresh_and_carries_the_gradient():
    source, copies = torch.ones(3, requires_grad=True), WeightCopies()
    cast = copies.cast("w", torch.bfloat16, [source], lambda: source)
    cast.float().sum().backward()
    assert len(copies) == 0 and torch.equal(source.grad, torch.ones(3))


def test_pickles_and_deep_copies_start_empty_and_clear_forgets():
    source, copies = torch.ones(3), WeightCopies()
    copies.cast("w", torch.bfloat16, [source], lambda: source)
    assert len(copy.deepcopy(copies)) == 0 and len(pickle.loads(pickle.dumps(copies))) == 0
    copies.clear()
    assert len(copies) == 0


def test_tensor_versions_move_with_a_write():
    tensor = torch.zeros(2)
    before = tensor_versions([tensor])
    tensor.add_(1.0)
    assert tensor_versions([tensor]) != before
