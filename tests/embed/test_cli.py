"""`spacy-elmo embed` as a command: the issue's HDF5 run, and clear errors for bad input."""

import subprocess
import sys

import h5py
import pytest
import torch

from .helpers import SENTENCES


@pytest.mark.slow  # runs the command in a subprocess
def test_command_line_writes_allennlps_file(bilm_files, corpus, tmp_path):
    """The issue's first 'done when': python -m spacy_elmo embed in.txt out.hdf5 --whitespace ..."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy_elmo",
            "embed",
            str(corpus),
            str(tmp_path / "out.hdf5"),
            "--whitespace",
            "--options-file",
            str(bilm_files[0]),
            "--weight-file",
            str(bilm_files[1]),
            "--threads",
            "1",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"{len(SENTENCES)} sentences" in result.stdout and "tokens/s" in result.stdout
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert len(f.keys()) == len(SENTENCES) + 1


@pytest.mark.slow  # runs the command in a subprocess
def test_command_line_reports_bad_input_clearly(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin1"))
    (tmp_path / "empty.txt").write_bytes(b"")
    for path, message in (
        (tmp_path / "missing.txt", "does not exist"),
        (tmp_path / "latin1.txt", "not UTF-8 text: line 1"),
        (tmp_path / "empty.txt", f"{tmp_path / 'empty.txt'} has no text"),  # not an empty output and exit 0
    ):
        result = subprocess.run(
            [sys.executable, "-m", "spacy_elmo", "embed", str(path), str(tmp_path / "out"), "--no-progress"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1 and "Error:" in result.stderr and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_device_options_reach_run_embed_with_the_command_lines_gpu_preference(monkeypatch, tmp_path):
    """The command line's auto takes a visible GPU (prefer_gpu); --device and --gpus-per-worker pass through."""
    from typer.testing import CliRunner

    import spacy_elmo.embed
    from spacy_elmo.cli import app

    calls = []
    monkeypatch.setattr(spacy_elmo.embed, "run_embed", lambda *args, **kwargs: calls.append(kwargs) or "done")
    for options, expected in (
        ([], ("auto", 0.0)),
        (["--device", "cuda:1", "--gpus-per-worker", "0.5"], ("cuda:1", 0.5)),
    ):
        result = CliRunner().invoke(app, ["embed", str(tmp_path / "in.txt"), str(tmp_path / "out"), *options])
        assert result.exit_code == 0, result.output
        assert (calls[-1]["device"], calls[-1]["gpus_per_worker"], calls[-1]["prefer_gpu"]) == (*expected, True)


@pytest.mark.slow  # runs the command in a subprocess
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_command_line_asked_for_a_gpu_it_lacks_says_which_option_to_change(corpus, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy_elmo",
            "embed",
            str(corpus),
            str(tmp_path / "out"),
            "--device",
            "cuda",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "Error: --device cuda: torch sees no CUDA GPU" in result.stderr
    assert "--device cpu or auto" in result.stderr and not (tmp_path / "out").exists()


def test_every_embed_setting_has_an_option_whose_default_is_the_fields():
    """The options are built from EmbedSettings' fields: none is missing, none has a default of its own."""
    from dataclasses import fields

    import typer

    from spacy_elmo.cli import app
    from spacy_elmo.embed import EmbedSettings, parse_layers

    command = typer.main.get_command(app).commands["embed"]  # type: ignore[attr-defined]
    defaults = {param.name: param.default for param in command.params}
    for setting in fields(EmbedSettings):
        if "given_by" in setting.metadata:  # mix: the weights of --layers mix:W0,...
            given_by = setting.metadata["given_by"]
            assert parse_layers(defaults[given_by]) == (getattr(EmbedSettings(), given_by), setting.default)
        else:
            assert setting.name in defaults, f"embed has no option for EmbedSettings.{setting.name}"
            assert defaults[setting.name] == setting.default, setting.name


def test_embed_options_reach_run_embed_as_settings(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import spacy_elmo.embed
    from spacy_elmo.cli import app
    from spacy_elmo.embed import EmbedSettings

    calls = []
    monkeypatch.setattr(spacy_elmo.embed, "run_embed", lambda *args, **kwargs: calls.append(args[2]) or "done")
    paths = [str(tmp_path / "in.txt"), str(tmp_path / "out")]
    result = CliRunner().invoke(app, ["embed", *paths])
    assert result.exit_code == 0, result.output
    assert calls[-1] == EmbedSettings()
    result = CliRunner().invoke(
        app,
        [
            "embed",
            *paths,
            "--layers",
            "mix:0.2,0.3,0.5",
            "--state",
            "warm",
            "--lang",
            "de",
            "--whitespace",
            "--shard-size",
            "5",
            "--batch-tokens",
            "64",
            "--precision",
            "fp32",
        ],
    )
    assert result.exit_code == 0, result.output
    assert calls[-1] == EmbedSettings(
        state="warm",
        layers="mix",
        mix=(0.2, 0.3, 0.5),
        lang="de",
        whitespace=True,
        shard_size=5,
        batch_tokens=64,
        precision="fp32",
    )
    result = CliRunner().invoke(app, ["embed", *paths, "--layers", "mix:a"])
    assert result.exit_code == 1 and "--layers mix needs numbers" in result.output
