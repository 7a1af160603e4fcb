"""The biLM's switches and torchrun's launch, as the environment sets them (spacy_elmo.bilm.settings)."""

import pytest

from spacy_elmo.bilm.settings import (
    BiLMSwitches,
    TorchrunLaunch,
    switches,
    torchrun_launch,
)


def test_unset_variables_give_the_defaults() -> None:
    assert switches({}) == BiLMSwitches(precision=None, offload=True, fused_lstm=True, cuda_graphs=True)
    assert torchrun_launch({}) == TorchrunLaunch(world=1, rank=0, local_rank=0)


def test_each_variable_sets_its_switch() -> None:
    environ = {
        "SPACY_ELMO_PRECISION": " bf16 ",
        "SPACY_ELMO_OFFLOAD": "0",
        "SPACY_ELMO_FUSED_LSTM": " 0",
        "SPACY_ELMO_CUDA_GRAPHS": "0 ",
    }
    assert switches(environ) == BiLMSwitches(precision="bf16", offload=False, fused_lstm=False, cuda_graphs=False)


@pytest.mark.parametrize("value", ["1", "", "off", "false"])
def test_a_switch_is_off_only_at_zero(value: str) -> None:
    assert switches({"SPACY_ELMO_OFFLOAD": value}).offload


def test_an_empty_precision_counts_as_unset() -> None:
    assert switches({"SPACY_ELMO_PRECISION": "  "}).precision is None


def test_the_process_environment_is_read_at_each_call(monkeypatch) -> None:
    monkeypatch.setenv("SPACY_ELMO_CUDA_GRAPHS", "0")
    assert not switches().cuda_graphs
    monkeypatch.delenv("SPACY_ELMO_CUDA_GRAPHS")
    assert switches().cuda_graphs


def test_torchrun_sets_the_launch() -> None:
    launch = torchrun_launch({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"})
    assert launch == TorchrunLaunch(world=4, rank=3, local_rank=1)


@pytest.mark.parametrize(
    "environ, message",
    [
        ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 but RANK is not set: start each process with torchrun"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' must be a whole number"),
        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": ""}, "LOCAL_RANK='' must be a whole number"),
    ],
)
def test_a_broken_launch_says_what_to_fix(environ, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        torchrun_launch(environ)
