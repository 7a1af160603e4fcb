"""project/code/elmo_variants.py: the variants not adopted, swapped in by overrides of the shipped configs."""

import importlib.util
from pathlib import Path
from typing import Dict, Sequence

import numpy
import pytest
from spacy.cli._util import parse_config_overrides
from spacy.language import Language
from spacy.util import load_config, load_model_from_config
from thinc.api import Adam
from typer.testing import CliRunner

from ..helpers import WIDTH, make_examples
from .helpers import crossval_app, tiny_corpus
from .helpers import write_ner_corpus as write_corpus
from .scripts import PROJECT_DIR, load_script

# Imported as `spacy train --code` imports it: the registrations are its side effect.
_spec = importlib.util.spec_from_file_location("elmo_variants", PROJECT_DIR / "code" / "elmo_variants.py")
assert _spec is not None and _spec.loader is not None
variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(variants)

SHIPPED = PROJECT_DIR.parent / "spacy_elmo" / "configs" / "ner_textcat_elmo.cfg"
# The overrides that project/docs/lab-notebook.md gives for the three variants.
VARIANTS = [
    "--components.ner.model.tok2vec.mix.@layers",
    "elmo_project.ConcatLayers.v1",
    "--components.ner.model.tok2vec.@architectures",
    "elmo_project.ElmoListenerSkipEncoder.v1",
    "--components.textcat.model.@architectures",
    "elmo_project.ElmoBOWTextCat.v1",
    "--components.textcat.model.bow_dropout",
    "0.5",
]
TEXTS = ["Alice went to Paris .", "It was great ."]


def variant_pipeline(bilm_files, extra: Sequence[str] = ()) -> Language:
    options_file, weight_file = bilm_files
    overrides: Dict[str, object] = {
        **parse_config_overrides([*VARIANTS, *extra]),
        "paths.elmo_options": str(options_file),
        "paths.elmo_weights": str(weight_file),
    }
    nlp = load_model_from_config(load_config(SHIPPED, overrides=overrides), auto_fill=True, validate=True)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    return nlp


def test_the_overrides_build_the_variants_and_they_train(bilm_files) -> None:
    nlp = variant_pipeline(bilm_files)
    elmo = nlp.get_pipe("elmo")
    docs = list(elmo.pipe(nlp.make_doc(text) for text in TEXTS))
    layers = elmo.model.predict(docs)
    outputs = nlp.get_pipe("ner").model.get_ref("tok2vec").layers[0].predict(docs)  # before the parser's projection
    for doc, output, doc_layers in zip(docs, outputs, layers):
        # [encoder (96); the 3 layers side by side; the hash embedding (96)]
        assert output.shape == (len(doc), 96 + 3 * WIDTH + 96)
        side_by_side = numpy.concatenate(list(doc_layers), axis=1)
        numpy.testing.assert_allclose(output[:, 96 : 96 + 3 * WIDTH], side_by_side, rtol=1e-6)
    assert any(node.name == "row_dropout" for node in nlp.get_pipe("textcat").model.walk())
    optimizer = Adam(0.01)
    losses = [nlp.update(make_examples(nlp), sgd=optimizer, losses={}) for _ in range(2)]
    assert losses[-1]["ner"] > 0 and losses[-1]["textcat"] > 0


def test_concat_layers_refuses_the_mix_options(bilm_files) -> None:
    with pytest.raises(ValueError, match="elmo_project.ConcatLayers.v1 has no mix: set layer_norm = false"):
        variant_pipeline(bilm_files, ["--components.ner.model.tok2vec.mix.l2", "0.1"])


def test_concat_layers_keeps_values_and_passes_gradients_back() -> None:
    rng = numpy.random.default_rng(0)
    Xs = [rng.normal(size=(2, n, 4)).astype("float32") for n in (2, 0, 3)]
    Ys, backprop = variants.ConcatLayers(2, 4)(Xs, is_train=True)
    for X, Y in zip(Xs, Ys):
        numpy.testing.assert_array_equal(Y, numpy.concatenate([X[0], X[1]], axis=1))
    for X, dX in zip(Xs, backprop(Ys)):
        numpy.testing.assert_array_equal(dX, X)  # the inverse reshaping


def test_row_dropout_drops_whole_rows_in_training_only() -> None:
    scores = numpy.ones((64, 3), dtype="float32")
    layer = variants.RowDropout(0.5)
    assert layer.predict(scores) is scores
    dropped, backprop = layer(scores, is_train=True)
    kept = dropped.sum(axis=1) > 0
    assert 0 < kept.sum() < len(scores)
    numpy.testing.assert_array_equal(dropped[kept], 2.0)  # kept rows scaled by 1 / (1 - rate)
    numpy.testing.assert_array_equal(backprop(scores).sum(axis=1) > 0, kept)
    with pytest.raises(ValueError, match="0 <= rate < 1"):
        variants.RowDropout(1.0)


def marking_code(tmp_path: Path) -> Path:
    """A code file that leaves tmp_path/imported behind when it is imported."""
    code = tmp_path / "mark.py"
    code.write_text(f"from pathlib import Path\nPath({str(tmp_path / 'imported')!r}).write_text('yes')\n")
    return code


def test_scripts_train_loads_the_code(tmp_path: Path) -> None:
    tiny_corpus(tmp_path / "corpus", "textcat")
    args = [
        str(PROJECT_DIR / "configs" / "textcat_cnn.cfg"),
        str(tmp_path / "runs"),
        "--corpus",
        str(tmp_path / "corpus"),
        "--max-steps",
        "2",
        "--eval-frequency",
        "2",
        "--code",
        str(marking_code(tmp_path)),
    ]
    result = CliRunner().invoke(load_script("train").app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "imported").read_text() == "yes"


def test_scripts_crossval_run_loads_the_code(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path)
    assert CliRunner().invoke(crossval_app(), ["split", str(corpus), str(tmp_path / "cv"), "--k", "3"]).exit_code == 0
    args = [
        "run",
        str(PROJECT_DIR / "configs" / "ner_cnn.cfg"),
        str(tmp_path / "cv"),
        str(tmp_path / "runs"),
        str(tmp_path / "metrics"),
        "--system",
        "cnn",
        "--task",
        "ner",
        "--folds",
        "1",
        "--max-steps",
        "2",
        "--eval-frequency",
        "2",
        "--code",
        str(marking_code(tmp_path)),
    ]
    result = CliRunner().invoke(crossval_app(), args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "imported").read_text() == "yes"
