"""Sizes come from the biLM's files: the shipped configs train on any biLM with no size set.

The listeners' ``width`` and ``n_layers`` are null in the shipped configs; the ``elmo`` component
gives them its biLM's sizes at initialization and the layers after them learn theirs from the
listener's output. A size that is set and that the files contradict stops initialization.
"""

from pathlib import Path
from typing import Dict, List, Tuple

import numpy
import pytest
import spacy
from spacy.cli.train import train

from spacy_elmo.layers import ScalarMix

from ..helpers import (
    CONFIGS,
    N_LAYERS,
    WIDTH,
    build_ner_textcat,
    elmo_config,
    make_examples,
    mix_config,
    tiny_options,
    write_bilm_files,
)

TEXTS = ["Alice went home . It was great .", "Bob saw Paris ."]
# Two biLMs that differ in width and in layer count: (lstm n_layers, projection_dim).
BILMS = {"16-wide, 3 layers": (2, 8), "24-wide, 2 layers": (1, 12)}


@pytest.fixture(scope="module", params=list(BILMS))
def sized_bilm(request, tmp_path_factory) -> Tuple[Path, Path, int, int]:
    """Standard files of a tiny biLM, with its output layer count and width."""
    lstm_layers, projection_dim = BILMS[request.param]
    options = tiny_options(n_layers=lstm_layers, projection_dim=projection_dim, lstm_dim=2 * projection_dim)
    options_file, weight_file = write_bilm_files(tmp_path_factory.mktemp("bilm"), options=options)
    return options_file, weight_file, lstm_layers + 1, 2 * projection_dim


def train_overrides(corpus: Path, options_file: Path, weight_file: Path, **extra: object) -> Dict[str, object]:
    """The tiny corpus and biLM, and a few steps; no size of the biLM or of the listeners."""
    return {
        "paths.train": str(corpus / "train.spacy"),
        "paths.dev": str(corpus / "dev.spacy"),
        "components.elmo.model.options_file": str(options_file),
        "components.elmo.model.weight_file": str(weight_file),
        "training.max_steps": 3,
        "training.eval_frequency": 3,
        **extra,
    }


@pytest.mark.parametrize(
    "config,tasks",
    [("ner_elmo.cfg", ["ner"]), ("textcat_elmo.cfg", ["textcat"]), ("ner_textcat_elmo.cfg", ["ner", "textcat"])],
)
@pytest.mark.slow  # spacy train runs
def test_shipped_configs_train_on_biLMs_of_any_size(
    config: str, tasks: List[str], corpus: Path, sized_bilm, tmp_path: Path
) -> None:
    options_file, weight_file, n_layers, width = sized_bilm
    train(CONFIGS / config, tmp_path / "out", overrides=train_overrides(corpus, options_file, weight_file))
    nlp = spacy.load(tmp_path / "out" / "model-last")
    assert [(listener.get_dim("nL"), listener.get_dim("nO")) for listener in nlp.get_pipe("elmo").listeners] == [
        (n_layers, width)
    ] * len(tasks)
    # The layer after the listener learned its input width: ner's maxout takes the ELMo mix and
    # the 96-wide hash embedding, textcat's linear layer the pooled mix.
    input_widths = {"ner": ("maxout", width + 96), "textcat": ("linear", width)}
    for task in tasks:
        assert nlp.config["components"][task]["model"]["tok2vec"]["width"] is None  # the saved config names no size
        nodes = list(nlp.get_pipe(task).model.walk())
        (mix,) = [node for node in nodes if node.name == "elmo_scalar_mix"]
        assert (mix.get_dim("nL"), mix.get_dim("nO")) == (n_layers, width)
        assert input_widths[task] in {(node.name, node.maybe_get_dim("nI")) for node in nodes}
    docs = list(nlp.pipe(TEXTS))
    assert docs[0].tensor.shape == (8, width)
    if "textcat" in tasks:  # a component made independent of elmo keeps the sizes through disk
        expected = [doc.cats for doc in docs]
        assert set(expected[0]) == {"POS", "NEG"}
        nlp.replace_listeners("elmo", "textcat", ["model.tok2vec"])
        nlp.to_disk(tmp_path / "replaced")
        replaced = spacy.load(tmp_path / "replaced")
        for doc, cats in zip(replaced.pipe(TEXTS), expected):
            assert doc.cats == pytest.approx(cats, abs=1e-6)


@pytest.mark.parametrize(
    "sizes,configured",
    [({"width": 10}, "n_layers=3 and width=10"), ({"n_layers": 2}, "n_layers=2 and width=16")],
)
def test_a_size_the_files_contradict_is_a_clear_error(
    sizes: Dict[str, int], configured: str, corpus: Path, bilm_files, tmp_path: Path
) -> None:
    set_sizes = {f"components.ner.model.tok2vec.{name}": value for name, value in sizes.items()}
    overrides = train_overrides(corpus, *bilm_files, **set_sizes)
    expected = (
        f"The ELMo listener in 'ner' is configured for {configured}, but the 'elmo' biLM gives 3 layers "
        "of width 16: set n_layers and width of spacy_elmo.ElmoListener.v2 to null"
    )
    with pytest.raises(ValueError, match=expected):
        train(CONFIGS / "ner_elmo.cfg", tmp_path / "out", overrides=overrides)


def test_sizes_that_agree_with_the_files_may_be_set(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files, listener={"width": WIDTH, "n_layers": N_LAYERS})
    assert [listener.get_dim("nO") for listener in nlp.get_pipe("elmo").listeners] == [WIDTH, WIDTH]


def test_a_fresh_biLM_sizes_its_listeners_when_they_are_added() -> None:
    """A biLM built from sizes (no files) knows its sizes before initialization."""
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"model": {"pretrained": None, "lstm_dim": 24, "projection_dim": 6, "n_layers": 1}})
    nlp.add_pipe(
        "textcat",
        config={
            "model": {
                "@architectures": "spacy_elmo.ElmoBOWTextCat.v1",
                "exclusive_classes": True,
                "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v2"},
            }
        },
    )
    (listener,) = nlp.get_pipe("elmo").listeners
    assert (listener.get_dim("nL"), listener.get_dim("nO")) == (2, 12)


def test_chosen_layers_are_checked_against_the_biLM_at_initialization(bilm_files) -> None:
    unsized = {"width": None, "n_layers": None}
    nlp = build_ner_textcat(bilm_files, listener={**unsized, "mix": mix_config(layers=[2, 0])})
    assert nlp.get_pipe("textcat").model.get_ref("tok2vec").get_dim("nO") == WIDTH
    with pytest.raises(ValueError, match=r"layers must name distinct biLM layers from 0 to 2 .*got \[3\]"):
        build_ner_textcat(bilm_files, listener={**unsized, "mix": mix_config(layers=[3])})


def test_a_listener_without_sizes_or_upstream_says_what_to_add() -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe(
        "textcat",
        config={
            "model": {
                "@architectures": "spacy_elmo.ElmoBOWTextCat.v1",
                "exclusive_classes": True,
                "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v2"},
            }
        },
    )
    with pytest.raises(ValueError, match="An ELMo listener has no width and n_layers, .* add the 'elmo' component"):
        nlp.initialize(lambda: make_examples(nlp))


def test_a_listener_whose_upstream_has_not_initialized_says_so(bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    textcat = nlp.add_pipe(
        "textcat",
        config={
            "model": {
                "@architectures": "spacy_elmo.ElmoBOWTextCat.v1",
                "exclusive_classes": True,
                "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v2"},
            }
        },
    )
    with pytest.raises(
        ValueError, match="The ELMo listener in 'textcat' has no width .* Initialize 'elmo' before 'textcat'"
    ):
        textcat.initialize(lambda: make_examples(nlp), nlp=nlp)


def test_the_mix_after_a_listener_learns_its_sizes_from_the_sample() -> None:
    model = ScalarMix()
    with pytest.raises(ValueError, match="has no n_layers and width: give them, or initialize it on a sample"):
        model.initialize()
    model = ScalarMix()
    model.initialize(X=[numpy.zeros((3, 2, 5), dtype="float32")])
    assert (model.get_dim("nL"), model.get_dim("nO")) == (3, 5)
