"""GatheredWeight: the gradient of a weight used by many small products, computed in a few large ones."""

import pytest
import torch

from spacy_elmo.bilm.kernels.gathered_gradients import GatheredWeight

ROWS = [5, 5, 3, 1]  # the rows of each step's product, as running rows shrink


def steps_loss(product, inputs, weights):
    """A loss over products of every step's input, each step feeding the next as an LSTM's does."""
    carried = torch.zeros_like(inputs[0][:, :, :4])
    loss = 0.0
    for x, weight in zip(inputs, weights):
        x = torch.cat([x[:, :, :-4], x[:, :, -4:] + carried[:, : x.shape[1]]], dim=-1)
        out = product(x)
        carried = torch.tanh(out[:, :, :4])
        loss = loss + (out * weight).sum()
    return loss


def gradients(dtype: torch.dtype, gathered: bool, rows: int = 2048):
    torch.manual_seed(0)
    source = torch.randn(2, 8, 12, requires_grad=True)
    inputs = [torch.randn(2, rows, 8, requires_grad=True) for rows in ROWS]
    weights = [torch.randn(2, rows, 12) for rows in ROWS]
    copy = source.detach().to(dtype)
    if gathered:
        product = GatheredWeight(source, copy, rows)
        call = lambda x: product(x.to(dtype)).float()  # noqa: E731
    else:
        call = lambda x: torch.bmm(x.to(dtype), source.to(dtype)).float()  # noqa: E731
    steps_loss(call, inputs, weights).backward()
    return [source.grad, *(x.grad for x in inputs)]


@pytest.mark.parametrize("rows", [1, 4, 2048])  # multiplied at every step, every few steps, once
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_gradients_are_autograds_own(dtype, rows):
    found, expected = gradients(dtype, gathered=True, rows=rows), gradients(dtype, gathered=False)
    assert found[0].dtype == torch.float32
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
    for a, b in zip(found, expected):
        torch.testing.assert_close(a, b, **tolerance)


def test_each_backward_pass_gathers_afresh_and_keeps_nothing():
    source = torch.randn(2, 8, 12, requires_grad=True)
    product = GatheredWeight(source, source.detach().to(torch.bfloat16))
    loss = sum(product(torch.randn(2, rows, 8).bfloat16()).float().sum() for rows in ROWS)
    loss.backward(retain_graph=True)
    first = source.grad.clone()
    loss.backward()
    torch.testing.assert_close(source.grad, 2 * first)  # autograd adds the second pass's, no more
    gathering = product._gathering
    assert (gathering._inputs, gathering._gradients, gathering._sum) == ([], [], None)


def test_a_weight_without_a_gradient_wanted_keeps_nothing():
    """Only the inputs need gradients (a frozen weight): the products keep nothing for the weight."""
    source = torch.randn(2, 8, 12)  # no gradient wanted
    product = GatheredWeight(source, source)
    x = torch.randn(2, 3, 8, requires_grad=True)
    product(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(2, 3, 12) @ source.transpose(1, 2))
    assert product._gathering._inputs == [] and product._gathering._sum is None
