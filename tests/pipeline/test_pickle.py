"""Pipelines pickle (issue 45): what ``nlp.pipe(n_process=...)`` under ``spawn`` and ``forkserver``,
and Spark, Dask or Ray workers, are sent. A pickled copy gives the docs the original gives and needs
no file outside the pickle. Listeners follow spaCy's ``upstream = "*"``: renaming keeps them fed."""

import io
import multiprocessing
import pickle
import shutil
from pathlib import Path
from typing import Iterable, Iterator, List, Sequence, Set, Tuple

import pytest
import spacy
import torch
from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import Optimizer, fix_random_seed

from spacy_elmo import BiLM
from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels.int8_packs import int8_available
from spacy_elmo.bilm.memory import offload
from spacy_elmo.bilm.memory.offload import on_disk
from spacy_elmo.embed import EmbedSettings, run_embed
from spacy_elmo.layers import ElmoListener, get_bilm

from ..bilm.helpers import write_random_model
from ..helpers import CONFIGS, WIDTH, assert_float32_close, elmo_config, make_examples, tiny_model_overrides
from .helpers import train, with_random_output_layers

TEXTS = ["Alice went home . It was great .", "Bob saw Paris and London .", "", "It was awful .", "London ? Paris !"]
TRAINING_STEPS = 10  # enough for the tiny NER to find entities in TEXTS


def shipped_ner(bilm_files: Tuple[Path, Path], **overrides: object) -> Language:
    """ner_elmo.cfg as shipped, on the tiny biLM in fp32 and one torch thread, multi-language
    (the texts' tokens are space-separated, see tests/conftest.py); not initialized."""
    config = spacy.util.load_config(
        CONFIGS / "ner_elmo.cfg",
        overrides={
            **tiny_model_overrides(),
            "nlp.lang": "xx",
            "paths.elmo_options": str(bilm_files[0]),
            "paths.elmo_weights": str(bilm_files[1]),
            "components.elmo.model.precision": "fp32",
            "components.elmo.threads": 1,
            "components.ner.model.tok2vec.width": WIDTH,
            **overrides,
        },
    )
    return spacy.util.load_model_from_config(config, auto_fill=True, validate=True)


def initialized(nlp: Language, steps: int = 0) -> Language:
    """``nlp`` initialized on the tiny examples (seed 0), then trained ``steps`` steps."""
    examples = make_examples(nlp)
    fix_random_seed(0)
    nlp.initialize(lambda: examples)
    if steps:
        train(with_random_output_layers(nlp, ["ner"]), examples, steps=steps)
    return nlp


def trained_ner(bilm_files: Tuple[Path, Path], **overrides: object) -> Language:
    nlp = initialized(shipped_ner(bilm_files, **overrides), TRAINING_STEPS)
    assert entities(nlp.pipe(TEXTS)), "the tests compare entities: the NER must find some"
    return nlp


def elmo_alone(bilm_files: Tuple[Path, Path], **model: object) -> Language:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files, **model), "store_layers": True, "threads": 1})
    nlp.initialize()
    return nlp


def entities(docs: Iterable[Doc]) -> List[Tuple[int, str, str]]:
    """(doc number, text, label) of every entity."""
    return [(i, ent.text, ent.label_) for i, doc in enumerate(docs) for ent in doc.ents]


def assert_same_docs(actual: Sequence[Doc], expected: Sequence[Doc]) -> None:
    """The same texts, doc.tensor (up to float32 rounding) and entities. Hooks are not compared:
    spaCy does not carry them across processes."""
    assert [doc.text for doc in actual] == [doc.text for doc in expected]
    for a, b in zip(actual, expected):
        assert_float32_close(a.tensor, b.tensor)
    assert entities(actual) == entities(expected)


def assert_same_layers(nlp: Language, expected: Sequence) -> None:
    for doc, layers in zip(nlp.pipe(TEXTS), expected):
        assert_float32_close(doc._.elmo_layers, layers)


def pickled(nlp: Language) -> Language:
    return pickle.loads(pickle.dumps(nlp))


def pickled_types(obj: object) -> Set[type]:
    """The type of every object that pickling ``obj`` writes."""
    seen: Set[type] = set()

    class Recorder(pickle.Pickler):
        def reducer_override(self, value: object) -> object:
            seen.add(type(value))
            return NotImplemented

    Recorder(io.BytesIO()).dump(obj)
    return seen


def product_copies(bilm: BiLM) -> int:
    """How many weight copies and int8 packs for its products ``bilm`` holds."""
    return len(bilm.token_encoder.copies) + len(bilm.lstm.copies)


# ---------------------------------------------------------------------- pickle round trips
@pytest.mark.parametrize("freeze", [True, False], ids=["frozen", "fine-tuned"])
def test_a_trained_ner_pipeline_pickles_to_the_same_docs(bilm_files, freeze: bool) -> None:
    nlp = trained_ner(bilm_files, **{"components.elmo.model.freeze": freeze})
    expected = list(nlp.pipe(TEXTS))
    copy = pickled(nlp)
    assert_same_docs(list(copy.pipe(TEXTS)), expected)
    listeners = [node for node in copy.get_pipe("ner").model.walk() if isinstance(node, ElmoListener)]
    assert copy.get_pipe("elmo").listeners == listeners  # the copy's own, not the original's
    # training's optimizer stays behind (spaCy's Language keeps one of its own from nlp.initialize())
    assert not any(issubclass(kind, Optimizer) for kind in pickled_types(nlp.get_pipe("elmo")))
    cache = nlp.get_pipe("elmo").model.attrs["feature_cache"]
    assert (len(cache) > 0) == freeze  # training filled it (a fine-tuned biLM's outputs change: none)
    assert len(copy.get_pipe("elmo").model.attrs["feature_cache"]) == 0  # a copy starts empty


def test_an_uninitialized_pipeline_pickles_and_initializes_as_the_original(bilm_files) -> None:
    nlp = shipped_ner(bilm_files)
    copy = initialized(pickled(nlp))
    assert_same_docs(list(copy.pipe(TEXTS)), list(initialized(nlp).pipe(TEXTS)))


PRECISIONS = [
    "fp32",
    "bf16",
    pytest.param(
        "int8",
        marks=pytest.mark.skipif(not int8_available(), reason="this torch build has no int8 kernels for this CPU"),
    ),
    "auto",
]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_precision_pickles_to_the_same_layers(bilm_files, precision: str, monkeypatch) -> None:
    monkeypatch.setenv("SPACY_ELMO_PRECISION", "bf16")  # what "auto" is here: not fp32, as in the other tests
    nlp = elmo_alone(bilm_files, precision=precision)
    expected = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]  # the low-precision copies are made now
    copy = pickled(nlp)
    copied = get_bilm(copy.get_pipe("elmo").model)
    assert copied.runtime.precision == precision
    made = product_copies(get_bilm(nlp.get_pipe("elmo").model))
    assert made > 0 or precision == "fp32"  # fp32 multiplies with the weights themselves
    assert product_copies(copied) == 0  # remade on first use: the pickle does not carry them
    assert_same_layers(copy, expected)


def test_offloaded_weights_travel_in_the_pickle(bilm_files, monkeypatch) -> None:
    """Weights moved to a temporary file (already unlinked) are pickled as values, held in memory."""
    monkeypatch.setattr(offload, "MIN_BYTES", 0)
    monkeypatch.delenv(settings.OFFLOAD_ENV, raising=False)
    nlp = elmo_alone(bilm_files, precision="bf16")
    expected = [doc._.elmo_layers for doc in nlp.pipe(TEXTS)]
    weights = list(get_bilm(nlp.get_pipe("elmo").model).parameters())
    assert any(on_disk(weight) for weight in weights)
    copy = pickled(nlp)
    copied = list(get_bilm(copy.get_pipe("elmo").model).parameters())
    assert not any(on_disk(weight) for weight in copied)
    assert all(torch.equal(a, b) for a, b in zip(copied, weights))
    assert_same_layers(copy, expected)


def test_an_elmoformanylangs_pipeline_pickles_without_its_directory(tmp_path) -> None:
    directory = write_random_model(tmp_path / "model")
    nlp = spacy.blank("zh")
    nlp.add_pipe("elmo", config={"model": {"pretrained": str(directory), "precision": "fp32"}, "store_layers": True})
    nlp.initialize()
    texts = ["中文的模型很好", "любовь Москва", ""]
    expected = [doc._.elmo_layers for doc in nlp.pipe(texts)]
    data = pickle.dumps(nlp)
    shutil.rmtree(directory)
    for doc, layers in zip(pickle.loads(data).pipe(texts), expected):
        assert_float32_close(doc._.elmo_layers, layers)


def test_a_pipeline_reading_a_feature_store_pickles_and_reads_it(bilm_files, tmp_path, count_biLM_sentences) -> None:
    texts = ["The bank raised its rates .", "Hello there"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf8")
    run_embed(tmp_path / "in.txt", tmp_path / "store", EmbedSettings(), *bilm_files, progress=False)
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files, precision="fp32"), "features": str(tmp_path / "store")})
    nlp.initialize()
    expected = list(nlp.pipe(texts))
    copy = pickled(nlp)
    count_biLM_sentences.clear()
    assert_same_docs(list(copy.pipe(texts)), expected)
    assert count_biLM_sentences == []


# ---------------------------------------------------------------------- worker processes
@pytest.fixture(params=["spawn", "forkserver"])
def start_method(request) -> Iterator[str]:
    """multiprocessing's start method set to the param for the test, restored after it."""
    if request.param not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {request.param} start method on this platform")
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method(request.param, force=True)
    yield request.param
    multiprocessing.set_start_method(before, force=True)


@pytest.mark.slow  # starts worker processes, each importing spaCy and torch
def test_n_process_2_gives_the_docs_of_one_process(bilm_files, start_method: str) -> None:
    nlp = trained_ner(bilm_files)
    texts = TEXTS * 2
    expected = list(nlp.pipe(texts, batch_size=2))  # the batches each worker gets: the same sums
    assert_same_docs(list(nlp.pipe(texts, n_process=2, batch_size=2)), expected)


# ---------------------------------------------------------------------- upstream = "*"
def test_rename_pipe_keeps_a_trained_pipeline_working(bilm_files, tmp_path) -> None:
    nlp = trained_ner(bilm_files)
    expected = list(nlp.pipe(TEXTS))
    nlp.rename_pipe("elmo", "contextual")
    assert_same_docs(list(nlp.pipe(TEXTS)), expected)
    nlp.rename_pipe("ner", "entities")
    assert nlp.get_pipe("contextual").listening_components == ["entities"]
    assert_same_docs(list(nlp.pipe(TEXTS)), expected)
    nlp.to_disk(tmp_path / "renamed")
    assert_same_docs(list(spacy.load(tmp_path / "renamed").pipe(TEXTS)), expected)
    losses = train(nlp, make_examples(nlp))
    assert set(losses) == {"entities"} and losses["entities"] > 0  # the frozen biLM has no loss


def test_a_named_upstream_listens_to_that_name_only(bilm_files) -> None:
    """``upstream = "elmo"`` registers the listener with the component of that name, as spaCy registers
    its Tok2VecListener: fed while the component is named so, a clear error while it is not."""
    nlp = initialized(shipped_ner(bilm_files, **{"components.ner.model.tok2vec.upstream": "elmo"}))
    expected = list(nlp.pipe(TEXTS))
    nlp.rename_pipe("elmo", "contextual")
    with pytest.raises(ValueError, match=r"listens to a component named 'elmo' only .* set upstream = \"\*\""):
        nlp(TEXTS[0])
    nlp.rename_pipe("contextual", "elmo")
    assert_same_docs(list(nlp.pipe(TEXTS)), expected)


def threads_of_the_unpickled(data: bytes) -> object:
    """In a fresh process: the thread setting the unpickled component runs with."""
    return pickle.loads(data).get_pipe("elmo")._threads()


def threads_in_a_fork(nlp: Language) -> object:
    """In a child forked with ``nlp`` in its memory, not pickled: the thread setting it runs with."""
    context = multiprocessing.get_context("fork")
    found = context.Queue()
    child = context.Process(target=lambda: found.put(nlp.get_pipe("elmo")._threads()))
    child.start()
    child.join(60)
    return found.get(timeout=1)


@pytest.mark.slow
def test_an_unpickled_pipeline_keeps_its_threads_and_a_forked_one_takes_one(bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files, precision="fp32"), "threads": 2})
    nlp.initialize()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(threads_of_the_unpickled, (pickle.dumps(nlp),)) == 2
    assert threads_in_a_fork(nlp) == 1
