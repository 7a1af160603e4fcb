"""Precomputed features: the elmo component reads layers from a store made by `spacy-elmo embed`."""

import json
import shutil
from pathlib import Path
from typing import List

import numpy
import pytest
import spacy
from spacy.cli.train import train
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.training import Corpus
from typer.testing import CliRunner

import spacy_elmo
from spacy_elmo import BiLM
from spacy_elmo.cli import app
from spacy_elmo.embed import EmbedSettings, run_embed
from spacy_elmo.embed.store import FeatureStore

from ..helpers import NAMES, WIDTH, assert_float32_close
from .helpers import STORE_TEXTS, store_pipeline

TINY_TRAINING = {
    "components.ner.model.tok2vec.width": WIDTH,
    "training.max_steps": 4,
    "training.eval_frequency": 2,
}


def annotated_docs(nlp: Language, n: int) -> List[Doc]:
    """NER Docs tokenized as annotated corpora (tweets) often are, not as spaCy's tokenizer would:
    "can't", "home." and "#fun" are one token each. spacy train gives the pipeline their text
    re-tokenized, unless (the last Doc) their spaces are unknown."""
    docs = []
    for i in range(n):
        name = list(NAMES)[i % len(NAMES)]
        words = [name, "can't", "go", "home.", "#fun" if i % 2 else "#sad"]
        docs.append(Doc(nlp.vocab, words=words, spaces=[True] * 4 + [False], ents=[f"B-{NAMES[name]}"] + ["O"] * 4))
    docs.append(Doc(nlp.vocab, words=["Bob", "lives", "in", "New", "York-based", "flats"]))
    return docs


def lookup_keys(docs: List[Doc]) -> List[tuple]:
    """What the component looks up for each doc: its tokens without whitespace (no sentences, short docs)."""
    return [tuple(t.text for t in doc if not t.is_space) for doc in docs]


@pytest.mark.parametrize("name", ["store", "store.hdf5"])
def test_stored_sentences_skip_the_biLM_and_give_the_same_vectors(bilm_files, tmp_path, count_biLM_sentences, name):
    (tmp_path / "in.txt").write_text("\n".join(STORE_TEXTS) + "\n", encoding="utf8")
    run_embed(tmp_path / "in.txt", tmp_path / name, EmbedSettings(shard_size=2), *bilm_files, progress=False)
    plain, stored = store_pipeline(bilm_files), store_pipeline(bilm_files, tmp_path / name)
    count_biLM_sentences.clear()
    docs = list(stored.pipe(STORE_TEXTS[:3]))
    assert count_biLM_sentences == []
    for doc, reference in zip(docs, plain.pipe(STORE_TEXTS[:3])):
        numpy.testing.assert_allclose(doc.tensor, reference.tensor, atol=1e-5)
    count_biLM_sentences.clear()
    unseen = stored("A sentence the store lacks .")
    assert count_biLM_sentences == [["A", "sentence", "the", "store", "lacks", "."]]
    numpy.testing.assert_allclose(unseen.tensor, plain("A sentence the store lacks .").tensor, atol=1e-5)


def test_a_store_of_another_biLM_is_an_error_that_names_the_fix(bilm_files, other_bilm_files, tmp_path):
    (tmp_path / "in.txt").write_text("Hello there\n", encoding="utf8")
    run_embed(tmp_path / "in.txt", tmp_path / "store", EmbedSettings(), *other_bilm_files, progress=False)
    nlp = store_pipeline(bilm_files, tmp_path / "store")
    with pytest.raises(ValueError, match="another biLM .*spacy-elmo embed.*features = null"):
        nlp("Hello there")


def test_features_need_a_frozen_biLM_and_an_existing_store(bilm_files, tmp_path):
    nlp = spacy.blank("en")
    model = {"options_file": str(bilm_files[0]), "weight_file": str(bilm_files[1]), "freeze": False}
    with pytest.raises(ValueError, match="freeze = true"):
        nlp.add_pipe("elmo", config={"model": model, "features": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="not an output of spacy-elmo embed"):
        store_pipeline(bilm_files, tmp_path / "missing")


@pytest.mark.parametrize("gold_preproc", [False, True])
def test_a_store_of_spacy_files_serves_the_docs_spacy_train_makes_of_them(bilm_files, tmp_path, gold_preproc):
    """By default a Doc is stored as spacy.Corpus gives it to the pipeline with gold_preproc = false:
    nlp.make_doc(doc.text), or its own tokens where its spaces are unknown; --gold-tokens stores its
    own tokens, as gold_preproc = true gives it."""
    nlp = spacy.blank("en")
    DocBin(docs=annotated_docs(nlp, 4)).to_disk(tmp_path / "train.spacy")
    options = ["--gold-tokens"] if gold_preproc else []
    result = CliRunner().invoke(
        app,
        [
            "embed",
            str(tmp_path / "train.spacy"),
            str(tmp_path / "store"),
            "--options-file",
            str(bilm_files[0]),
            "--weight-file",
            str(bilm_files[1]),
            "--threads",
            "1",
            "--no-progress",
            *options,
        ],
    )
    assert result.exit_code == 0, result.output
    keys = lookup_keys([eg.predicted for eg in Corpus(tmp_path / "train.spacy", gold_preproc=gold_preproc)(nlp)])
    assert (keys[0] == ("Alice", "ca", "n't", "go", "home", ".", "#", "sad")) != gold_preproc
    stored = FeatureStore(tmp_path / "store").get_many(keys, BiLM.from_files(*bilm_files).runtime)
    assert [None if a is None else a.shape[1] for a in stored] == [len(key) for key in keys]


def test_a_store_written_before_gold_tokens_existed_still_reads(bilm_files, tmp_path):
    """Its manifest's settings lack the field; stores made then must keep serving pipelines."""
    (tmp_path / "in.txt").write_text("Hello there\n", encoding="utf8")
    run_embed(tmp_path / "in.txt", tmp_path / "store", EmbedSettings(), *bilm_files, progress=False)
    manifest = json.loads((tmp_path / "store" / "manifest.json").read_text())
    del manifest["settings"]["gold_tokens"]
    (tmp_path / "store" / "manifest.json").write_text(json.dumps(manifest))
    store = FeatureStore(tmp_path / "store")
    assert store.get_many([("Hello", "there")], BiLM.from_files(*bilm_files).runtime)[0].shape == (3, 2, WIDTH)


@pytest.mark.slow  # a spacy train run
def test_spacy_train_reads_its_features_from_the_store(bilm_files, tmp_path, count_biLM_sentences):
    """Every training and dev doc is in the store, though spacy train re-tokenizes the annotated
    tokens: training and evaluation never run the biLM."""
    nlp = spacy.blank("en")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, n in (("train", 12), ("dev", 4)):
        DocBin(docs=annotated_docs(nlp, n)).to_disk(corpus / f"{name}.spacy")
    run_embed(corpus, tmp_path / "store", EmbedSettings(), *bilm_files, progress=False)
    count_biLM_sentences.clear()
    overrides = {
        **TINY_TRAINING,
        "paths.train": str(corpus / "train.spacy"),
        "paths.dev": str(corpus / "dev.spacy"),
        "paths.elmo_options": str(bilm_files[0]),
        "paths.elmo_weights": str(bilm_files[1]),
        "components.elmo.features": str(tmp_path / "store"),
    }
    train(Path(spacy_elmo.__file__).parent / "configs" / "ner_elmo.cfg", tmp_path / "out", overrides=overrides)
    assert count_biLM_sentences == []
    trained = spacy.load(tmp_path / "out" / "model-last")
    assert trained("Alice went home .").tensor.shape == (4, WIDTH)
    # the saved pipeline names the store; where it is gone, the biLM computes the layers
    shutil.rmtree(tmp_path / "store")
    moved = spacy.load(tmp_path / "out" / "model-last")
    with pytest.warns(UserWarning, match="does not exist here"):
        doc = moved("Alice went home .")
    numpy.testing.assert_allclose(doc.tensor, store_pipeline(bilm_files)("Alice went home .").tensor, atol=1e-5)


def store_of(bilm_files, tmp_path, precision: str) -> Path:
    """A store of STORE_TEXTS whose products are ``precision``, as the manifest records them."""
    (tmp_path / "in.txt").write_text("\n".join(STORE_TEXTS) + "\n", encoding="utf8")
    run_embed(
        tmp_path / "in.txt", tmp_path / precision, EmbedSettings(precision=precision), *bilm_files, progress=False
    )
    products = json.loads((tmp_path / precision / "manifest.json").read_text())["model"]["products"]
    assert products == {"fp32": "float32", "bf16": "bfloat16"}[precision]
    return tmp_path / precision


def test_a_float32_store_serves_a_pipeline_that_multiplies_in_bf16(bilm_files, tmp_path, count_biLM_sentences):
    """A store written on a CPU feeds a GPU pipeline whose precision "auto" resolves to bf16 there:
    here bf16 is set explicitly (torch runs it on a CPU). Its values are the store's float32 ones."""
    store = store_of(bilm_files, tmp_path, "fp32")
    stored = store_pipeline(bilm_files, store, precision="bf16")
    count_biLM_sentences.clear()
    docs = list(stored.pipe(STORE_TEXTS[:3]))
    assert count_biLM_sentences == []
    for doc, reference in zip(docs, store_pipeline(bilm_files, precision="fp32").pipe(STORE_TEXTS[:3])):
        assert_float32_close(doc.tensor, reference.tensor)
    assert (
        FeatureStore(store).get_many([("Hello", "there")], BiLM.from_files(*bilm_files, precision="bf16").runtime)[0]
        is not None
    )


def test_a_bf16_store_serves_auto_and_bf16_but_a_float32_pipeline_gets_an_error_naming_both_fixes(bilm_files, tmp_path):
    store = FeatureStore(store_of(bilm_files, tmp_path, "bf16"))
    for precision in ("bf16", "auto"):  # auto accepts bf16 values, even where it resolves to float32
        assert (
            store.get_many([("Hello", "there")], BiLM.from_files(*bilm_files, precision=precision).runtime)[0]
            is not None
        )
    fixes = r'\[components.elmo.model\] precision = "auto" .* or "bf16".*spacy-elmo embed .*--precision fp32'
    with pytest.raises(
        ValueError, match=f"bfloat16 matrix products, and this pipeline's biLM asks for float32 .*{fixes}"
    ):
        store.get_many([("Hello", "there")], BiLM.from_files(*bilm_files, precision="fp32").runtime)
    with pytest.raises(ValueError, match="asks for float32"):
        store_pipeline(bilm_files, store.path, precision="fp32")("Hello there")


def test_the_precision_setting_is_checked_again_when_it_changes(bilm_files, tmp_path):
    """ "auto" and "fp32" resolve alike on most CPUs: the check keys on the setting, not only the dtype."""
    store = FeatureStore(store_of(bilm_files, tmp_path, "bf16"))
    bilm = BiLM.from_files(*bilm_files, precision="auto")
    assert store.get_many([("Hello", "there")], bilm.runtime)[0] is not None
    bilm.runtime.precision = "fp32"
    with pytest.raises(ValueError, match="asks for float32"):
        store.get_many([("Hello", "there")], bilm.runtime)
