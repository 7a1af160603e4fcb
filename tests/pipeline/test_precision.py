"""``[components.elmo.model] precision``: its default, where it goes, what it survives."""

from pathlib import Path

import numpy
import pytest
import spacy
from thinc.api import Config

import spacy_elmo.configs
from spacy_elmo.bilm.kernels.int8_packs import int8_available
from spacy_elmo.layers import get_bilm, get_runtime
from spacy_elmo.pipeline_component import DEFAULT_MODEL

from ..helpers import build_ner_textcat, elmo_config, make_examples

TEXTS = ["The cat sat on the mat .", "Prices rose sharply in March ."]


def test_the_default_is_auto() -> None:
    assert DEFAULT_MODEL["precision"] == "auto"
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo")
    assert nlp.config["components"]["elmo"]["model"]["precision"] == "auto"


def test_the_shipped_configs_set_it() -> None:
    paths = sorted(Path(spacy_elmo.configs.__file__).parent.glob("*.cfg"))
    assert paths
    for path in paths:
        config = Config().from_disk(path, interpolate=False)
        assert config["components"]["elmo"]["model"]["precision"] == "auto", path.name


def test_the_setting_reaches_the_bilm_and_survives_saving(bilm_files, tmp_path) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files, precision="bf16"))
    nlp.initialize()
    assert get_runtime(nlp.get_pipe("elmo").model).precision == "bf16"
    expected = [doc.tensor for doc in nlp.pipe(TEXTS)]
    assert all(tensor.dtype == numpy.float32 for tensor in expected)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert get_runtime(loaded.get_pipe("elmo").model).precision == "bf16"
    for doc, tensor in zip(loaded.pipe(TEXTS), expected):
        numpy.testing.assert_array_equal(doc.tensor, tensor)


def test_a_config_without_it_still_loads(bilm_files) -> None:
    """Pipelines saved before the setting existed have no precision key."""
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    config = nlp.config.copy()
    del config["components"]["elmo"]["model"]["precision"]
    reloaded = spacy.util.load_model_from_config(config, auto_fill=False)
    reloaded.initialize()
    assert get_runtime(reloaded.get_pipe("elmo").model).precision == "auto"


def test_an_unknown_precision_is_a_clear_error(bilm_files) -> None:
    nlp = spacy.blank("xx")
    with pytest.raises(ValueError, match="elmo.model -> precision") as error:  # spaCy's config check
        nlp.add_pipe("elmo", config=elmo_config(bilm_files, precision="int4"))
    assert all(name in str(error.value) for name in ("'int4'", "'fp32'", "'bf16'", "'auto'"))


@pytest.mark.skipif(not int8_available(), reason="this torch build has no int8 kernels for this CPU")
def test_int8_serves_a_pipeline_and_refuses_fine_tuning_it(bilm_files) -> None:
    """int8 products have no gradient: an update with freeze = false says so and what to set."""
    nlp = build_ner_textcat(bilm_files, precision="int8", freeze=False)
    assert [doc.cats for doc in nlp.pipe(TEXTS)]  # inference runs
    with pytest.raises(ValueError, match=r"'int8' is for inference only.*precision = \"auto\""):
        nlp.update(make_examples(nlp), sgd=nlp.create_optimizer())
    frozen = build_ner_textcat(bilm_files, precision="int8", freeze=True)
    frozen.update(make_examples(frozen), sgd=frozen.create_optimizer())  # a frozen biLM needs no gradient


@pytest.mark.parametrize("freeze", [True, False])
def test_a_frozen_biLM_makes_its_inference_weights_as_it_loads(bilm_files, tmp_path, freeze: bool) -> None:
    """bf16 copies are made at initialize and at load, not in the first batch; a biLM to be
    fine-tuned makes none (its weights change with every step)."""

    def copies(nlp) -> int:
        return len(get_bilm(nlp.get_pipe("elmo").model).token_encoder.copies)

    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files, precision="bf16", freeze=freeze))
    nlp.initialize()
    assert (copies(nlp) > 0) == freeze
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert (copies(loaded) > 0) == freeze
    made = copies(loaded)
    first = [doc._.elmo_vectors for doc in loaded.pipe(TEXTS)]
    assert not freeze or copies(loaded) == made
    for got, expected in zip(first, [doc._.elmo_vectors for doc in nlp.pipe(TEXTS)]):
        numpy.testing.assert_allclose(got, expected, rtol=1e-5)
