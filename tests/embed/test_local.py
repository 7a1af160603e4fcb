"""`spacy-elmo embed` on one machine: AllenNLP's HDF5 layout, Parquet shards, the layer choices."""

import json

import h5py
import numpy
import pyarrow.parquet as pq
import pytest
import spacy
from spacy.tokens import DocBin

from spacy_elmo import BiLM
from spacy_elmo.embed import EmbedSettings, parse_layers, run_embed
from spacy_elmo.embed.parquet import arrays_of

from .helpers import SENTENCES, whitespace_tokens

SETTINGS = EmbedSettings(whitespace=True, shard_size=3)


def expected_layers(bilm_files, sentences):
    return BiLM.from_files(*bilm_files).embed_sentences(sentences)


def read_parquet(directory):
    table = pq.read_table(sorted(directory.glob("shard-*.parquet")))
    tokens = table["tokens"].to_pylist()
    return table["index"].to_pylist(), tokens, arrays_of(table["layers"], [len(t) for t in tokens], (3, 16))


def test_hdf5_has_allennlps_layout_and_the_biLMs_values(bilm_files, corpus, tmp_path):
    """The `allennlp elmo --all` file: datasets "0".."N-1" and sentence_to_index, JSON in a (1,) vlen str."""
    output = tmp_path / "out.hdf5"
    run_embed(corpus, output, SETTINGS, *bilm_files, progress=False)
    expected = expected_layers(bilm_files, whitespace_tokens(SENTENCES))
    with h5py.File(output, "r") as f:
        assert set(f.keys()) == {str(i) for i in range(len(SENTENCES))} | {"sentence_to_index"}
        mapping = f["sentence_to_index"]
        assert mapping.shape == (1,) and h5py.check_string_dtype(mapping.dtype) is not None
        assert json.loads(mapping[0]) == {s: str(i) for i, s in enumerate(SENTENCES)}  # a repeat maps to its last line
        for i, layers in enumerate(expected):
            assert f[str(i)].dtype == numpy.float32 and f[str(i)].shape == layers.shape
            numpy.testing.assert_allclose(f[str(i)][()], layers, atol=1e-4)
    assert f"{output.name}.parts" not in {p.name for p in tmp_path.iterdir()}
    assert expected[1].shape == (3, 0, 16)  # the empty line: a sentence without tokens


def test_parquet_shards_hold_index_tokens_and_layers(bilm_files, corpus, tmp_path):
    run_embed(corpus, tmp_path / "out", SETTINGS, *bilm_files, progress=False)
    assert len(list((tmp_path / "out").glob("shard-*.parquet"))) == 3
    schema = pq.read_schema(tmp_path / "out" / "shard-000000.parquet")
    assert str(schema.field("index").type) == "int64"
    assert str(schema.field("tokens").type) == "list<element: string>"
    assert str(schema.field("layers").type) == "list<element: list<element: list<element: float>>>"
    index, tokens, layers = read_parquet(tmp_path / "out")
    assert index == list(range(len(SENTENCES)))
    assert tokens == whitespace_tokens(SENTENCES)
    for got, want in zip(layers, expected_layers(bilm_files, tokens)):
        numpy.testing.assert_allclose(got, want, atol=1e-4)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["complete"] and [s["sentences"] for s in manifest["shards"]] == [3, 3, 1]


@pytest.mark.parametrize("layers", ["top", "average", "mix:0.5,0.25,0.25"])
def test_layer_choices(bilm_files, corpus, tmp_path, layers):
    choice, mix = parse_layers(layers)
    settings = EmbedSettings(layers=choice, mix=mix, whitespace=True)
    run_embed(corpus, tmp_path / "out.h5", settings, *bilm_files, progress=False)
    weights = {"top": [0, 0, 1], "average": [1 / 3] * 3}.get(layers, [0.5, 0.25, 0.25])
    with h5py.File(tmp_path / "out.h5", "r") as f:
        for i, full in enumerate(expected_layers(bilm_files, whitespace_tokens(SENTENCES))):
            numpy.testing.assert_allclose(f[str(i)][()], numpy.tensordot(weights, full, axes=1), atol=1e-4)


def test_layer_weights_must_fit_the_biLM(bilm_files, corpus, tmp_path):
    with pytest.raises(ValueError, match="one weight per layer"):
        run_embed(corpus, tmp_path / "out", EmbedSettings(layers="mix", mix=(0.5, 0.5)), *bilm_files, progress=False)
    with pytest.raises(ValueError, match="mix:0.2"):
        parse_layers("mix:a,b")


def test_spacy_tokenizer_jsonl_and_docbin_inputs(bilm_files, tmp_path):
    """Without --whitespace the spaCy tokenizer splits text, of .spacy Docs too (see test_store.py)."""
    nlp = spacy.blank("xx")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "Don\'t stop."}\n\n', encoding="utf8")
    DocBin(docs=[nlp.make_doc("New  York, NY")]).to_disk(tmp_path / "in" / "b.spacy")
    run_embed(tmp_path / "in", tmp_path / "out", EmbedSettings(shard_size=2), *bilm_files, progress=False)
    index, tokens, layers = read_parquet(tmp_path / "out")
    assert index == [0, 1, 2]
    assert tokens == [["Do", "n't", "stop", "."], [], ["New", "York", ",", "NY"]]
    assert [a.shape[1] for a in layers] == [4, 0, 4]


def test_precision_reaches_the_biLM_and_the_manifest(bilm_files, corpus, tmp_path):
    settings = EmbedSettings(whitespace=True, precision="bf16")
    run_embed(corpus, tmp_path / "bf16", settings, *bilm_files, progress=False)
    manifest = json.loads((tmp_path / "bf16" / "manifest.json").read_text())
    assert "bfloat16" in json.dumps(manifest["model"]) and manifest["settings"]["precision"] == "bf16"
    _, tokens, layers = read_parquet(tmp_path / "bf16")
    for got, want in zip(layers, expected_layers(bilm_files, tokens)):
        if want.size:
            cosine = (got * want).sum(-1) / (numpy.linalg.norm(got, axis=-1) * numpy.linalg.norm(want, axis=-1) + 1e-12)
            assert cosine.mean() > 0.99 and not numpy.array_equal(got, want)
    with pytest.raises(ValueError, match="fp32"):
        EmbedSettings(precision="fp16")
