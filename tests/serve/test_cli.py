"""``spacy-elmo serve``'s errors before it serves: the extra missing, a PIPELINE that names nothing,
a setting that cannot work (from a flag or its SPACY_ELMO_SERVE_* variable)."""

import sys

import pytest
from thinc.util import has_cupy_gpu
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.serve.settings import RaySettings


def test_without_the_serve_extra_it_says_what_to_install(monkeypatch) -> None:
    for module in [name for name in sys.modules if name.startswith("spacy_elmo.serve.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi fails as where it is not installed
    result = CliRunner().invoke(app, ["serve", "en"])
    assert result.exit_code == 1 and 'pip install ".[serve]"' in result.output, result.output


def test_a_pipeline_that_names_nothing_is_an_error_listing_what_it_may_be(tmp_path) -> None:
    result = CliRunner().invoke(app, ["serve", "no-such-pipeline-or-biLM"])
    assert result.exit_code == 1 and "is neither a directory, an installed pipeline package" in result.output
    result = CliRunner().invoke(app, ["serve", str(tmp_path)])
    assert result.exit_code == 1 and "without a config.cfg" in result.output


@pytest.mark.parametrize("args,env", [(["--queue-size", "0"], {}), ([], {"SPACY_ELMO_SERVE_QUEUE_SIZE": "0"})])
def test_a_setting_from_a_flag_or_its_variable_is_checked_before_anything_loads(args, env) -> None:
    result = CliRunner().invoke(app, ["serve", "en", *args], env=env)
    assert result.exit_code == 1 and "--queue-size must be at least 1, got 0" in result.output, result.output


def test_ray_replicas_without_ray_serve_say_what_to_install(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "spacy_elmo.serve.ray_deployment", raising=False)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as where it is not installed
    result = CliRunner().invoke(app, ["serve", "en", "--ray-replicas", "2"])
    assert result.exit_code == 1 and 'pip install ".[ray-serve]"' in result.output, result.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["--ray-replicas", "-1"], "--ray-replicas must be 0 (no Ray) or more, got -1"),
        (["--ray-replicas", "2", "--ray-threads", "0"], "--ray-threads must be at least 1 (torch threads per replica)"),
        (["--ray-replicas", "2", "--gpu-id", "0"], "--gpu-id puts this process's pipeline on a GPU"),
        (["--gpu-id", "-2"], "--gpu-id must be -1 (the CPU) or a GPU's index, got -2"),
    ],
)
def test_ray_settings_are_checked_before_ray_starts(args, message) -> None:
    result = CliRunner().invoke(app, ["serve", "en", *args])
    assert result.exit_code == 1 and message in result.output, result.output


def test_replicas_that_the_local_ray_cannot_place_are_refused_with_how_many_fit() -> None:
    RaySettings(replicas=4, threads=2).check_fits(available=8.0)
    with pytest.raises(
        ValueError,
        match=r"--ray-replicas 3 x --ray-threads 2 needs 6 CPUs, .* has 4: lower "
        r"--ray-replicas to 2",
    ):
        RaySettings(replicas=3, threads=2).check_fits(available=4.0)


@pytest.mark.skipif(has_cupy_gpu, reason="spaCy finds a GPU here: tests/gpu serves from it")
@pytest.mark.parametrize("args,env", [(["--gpu-id", "0"], {}), ([], {"SPACY_ELMO_SERVE_GPU_ID": "0"})])
def test_a_gpu_that_spacy_cannot_use_is_refused_before_anything_loads(args, env) -> None:
    result = CliRunner().invoke(app, ["serve", "en", *args], env=env)
    assert result.exit_code == 1 and "--gpu-id 0: spaCy finds no GPU here" in result.output, result.output
    assert "serving the" not in result.output  # the line logged once the checks pass, before the worker is built
