"""ElmoBiLMSettings: the one list of the biLM's settings, from the factory's defaults to the BiLM."""

import dataclasses
import inspect
from pathlib import Path

import pytest
import spacy
from thinc.api import Config, ConfigValidationError

import spacy_elmo.configs
from spacy_elmo.architectures import build_elmo_bilm
from spacy_elmo.bilm.runtime import BiLMSettings
from spacy_elmo.layers import ElmoBiLMSettings, get_bilm
from spacy_elmo.pipeline_component import DEFAULT_MODEL

from ..helpers import elmo_config

FIELDS = [f.name for f in dataclasses.fields(ElmoBiLMSettings)]


def test_the_architecture_takes_the_fields_as_its_keys() -> None:
    """confection validates and fill-config fills from this signature: names, types and defaults."""
    parameters = inspect.signature(build_elmo_bilm).parameters
    assert list(parameters) == FIELDS
    defaults = ElmoBiLMSettings()
    for name, parameter in parameters.items():
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert parameter.default == getattr(defaults, name), name
        assert parameter.annotation is not inspect.Parameter.empty, name


def test_the_factory_default_and_the_shipped_configs_have_the_same_keys() -> None:
    """The shipped configs spell out every setting but ``mixed_precision``, which sets nothing the
    biLM runs (it turns autocast off inside, bilm_settings.py): a setting there that does nothing
    would only mislead."""
    assert DEFAULT_MODEL == {"@architectures": "spacy_elmo.ElmoBiLM.v1", **dataclasses.asdict(ElmoBiLMSettings())}
    paths = sorted(Path(spacy_elmo.configs.__file__).parent.glob("*.cfg"))
    assert paths
    for path in paths:
        model = Config().from_disk(path, interpolate=False)["components"]["elmo"]["model"]
        assert [key for key in model if key != "@architectures"] == [f for f in FIELDS if f != "mixed_precision"], (
            path.name
        )


def test_every_setting_of_the_bilm_comes_from_a_key(bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe(
        "elmo",
        config=elmo_config(
            bilm_files, token_cache_size=7, max_batch_tokens=99, dropout=0.25, state="warm", precision="bf16"
        ),
    )
    nlp.initialize()
    expected = BiLMSettings(state="warm", cache_size=7, max_batch_tokens=99, dropout=0.25, precision="bf16")
    assert get_bilm(nlp.get_pipe("elmo").model).settings == expected


@pytest.mark.parametrize("key, value", [("window", "wide"), ("freeze", [1]), ("unknown_key", 1)])
def test_the_config_is_validated_against_the_fields(bilm_files, key: str, value: object) -> None:
    nlp = spacy.blank("xx")
    with pytest.raises(ConfigValidationError, match=key):
        nlp.add_pipe("elmo", config=elmo_config(bilm_files, **{key: value}))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"options_file": Path("options.json")}, "give both options_file and weight_file, or neither"),
        (
            {"learn_rate_scale": 0.0},
            "learn_rate_scale must be above 0, got 0.0; to keep the biLM fixed, set freeze = true",
        ),
        ({"feature_cache_mb": -1.0}, "feature_cache_mb must be 0 or more"),
        ({"window": 8, "overlap": 8}, r"overlap must be in \[0, window=8\)"),
        ({"precision": "fp16"}, "precision must be one of"),
    ],
)
def test_settings_no_biLM_runs_with_name_the_key(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ElmoBiLMSettings(**settings)
