import shutil
import warnings

import numpy
import pytest
import spacy
import srsly
import torch
from spacy.tokens import Doc

from spacy_elmo import BiLM, ElmoFileError, pretrained_files
from spacy_elmo.layers import get_bilm
from spacy_elmo.pipeline_component import install_vector_hooks

from ..helpers import N_LAYERS, WIDTH, assert_float32_close, elmo_config, write_bilm_files

TEXTS = [
    "The cat sat on the mat .",
    "Colorless green ideas sleep furiously .",
    "Hello  world , again and again .",
    "",
    "One",
]


def words_of(doc: Doc):
    return [t.text for t in doc if not t.is_space]


def test_default_config_loads_the_bundled_english_bilm() -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in particular, no "untrained" warning
        nlp.initialize()
    doc = nlp("The bank raised its rates .")
    bundled = BiLM.from_files(*pretrained_files("en"))
    numpy.testing.assert_allclose(
        doc.tensor, bundled.embed_sentences([[t.text for t in doc]])[0].mean(axis=0), atol=1e-5
    )
    assert doc.tensor.shape == (6, 256)


def test_the_package_ships_en_alone() -> None:
    """en_small left the wheel (its recipe is in project/bilm_small.md)."""
    with pytest.raises(ValueError, match=r"no bundled biLM named 'en_small'; the package ships: en$"):
        pretrained_files("en_small")


def test_no_pretrained_and_no_files_builds_an_untrained_bilm_and_says_so() -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe(
        "elmo", config={"model": {"pretrained": None, "lstm_dim": 8, "projection_dim": 3, "filters": [[1, 2]]}}
    )
    with pytest.warns(UserWarning, match="untrained"):
        nlp.initialize()
    assert nlp("Untrained but working .").tensor.shape == (4, 6)


def test_unknown_name_is_a_clear_error() -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"model": {"pretrained": "xx"}})  # resolved at initialize, never on spacy.load
    with pytest.raises(ValueError, match=r"no biLM 'xx'.*registered name \(en, small"):
        nlp.initialize()


def test_first_use_reads_the_weights_once_without_initialize(bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    doc = nlp("No initialize needed .")
    expected = BiLM.from_files(*bilm_files).embed_sentences([words_of(doc)])[0].mean(axis=0)
    assert_float32_close(doc.tensor, expected)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    nlp("Once is enough .")
    nlp.initialize()
    assert get_bilm(nlp.get_pipe("elmo").model) is bilm


def test_layers_equal_embed_sentences_over_the_same_sentences(nlp_elmo, bilm_files) -> None:
    bilm = BiLM.from_files(*bilm_files)
    words = ["Hello", "there", "\n", "friend", ".", "Second", "sentence", "here", "."]
    starts = [True, False, False, False, False, True, False, False, False]
    doc = nlp_elmo(Doc(nlp_elmo.vocab, words=words, sent_starts=starts))
    assert doc._.elmo_layers.shape == (N_LAYERS, len(words), WIDTH)
    expected = bilm.embed_sentences([["Hello", "there", "friend", "."], ["Second", "sentence", "here", "."]])
    layers = doc._.elmo_layers
    assert_float32_close(layers[:, [0, 1, 3, 4]], expected[0])
    assert_float32_close(layers[:, 5:], expected[1])
    assert not layers[:, 2].any()  # the whitespace token
    assert_float32_close(doc.tensor, layers.mean(axis=0))


def test_long_text_uses_overlapping_windows(bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files, window=6, overlap=2), "store_layers": True})
    nlp.initialize()
    words = [f"w{i % 7}" for i in range(20)]
    doc = nlp(Doc(nlp.vocab, words=words))
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    # Window 0 covers tokens 0-5 and owns 0-4; window 1 covers 4-9 and owns 5-8.
    first, second = bilm.embed_sentences([words[0:6], words[4:10]])
    assert_float32_close(doc._.elmo_layers[:, 0:5], first[:, 0:5])
    assert_float32_close(doc._.elmo_layers[:, 5:9], second[:, 1:5])


def test_tensor_weights_choose_the_mix(bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={**elmo_config(bilm_files), "store_layers": True, "tensor_weights": [0.0, 0.0, 1.0]})
    nlp.initialize()
    doc = nlp("Only the top layer .")
    assert_float32_close(doc.tensor, doc._.elmo_layers[2])
    bad = spacy.blank("xx")
    bad.add_pipe("elmo", config={**elmo_config(bilm_files), "tensor_weights": [1.0, 1.0]})
    with pytest.raises(ValueError, match="tensor_weights has 2 values"):
        bad.initialize()


@pytest.mark.parametrize("static_vectors", [False, True])
def test_vectors_and_similarity_come_from_elmo(nlp_elmo, static_vectors: bool) -> None:
    if static_vectors:
        for word in ("cat", "dog", "sat", "the"):
            nlp_elmo.vocab.set_vector(word, numpy.ones(5, dtype="float32"))
    doc = nlp_elmo("the cat sat  the dog sat")
    tensor = doc.tensor
    assert doc[1].has_vector and doc.has_vector and doc[0:2].has_vector
    numpy.testing.assert_array_equal(doc[1].vector, tensor[1])
    words = [i for i, t in enumerate(doc) if not t.is_space]
    numpy.testing.assert_allclose(doc.vector, tensor[words].mean(axis=0), rtol=1e-6)
    numpy.testing.assert_allclose(doc[2:5].vector, tensor[[2, 4]].mean(axis=0), rtol=1e-6)
    a, b = tensor[1], tensor[5]
    cosine = float(a @ b / numpy.linalg.norm(a) / numpy.linalg.norm(b))
    assert doc[1].similarity(doc[5]) == pytest.approx(cosine, rel=1e-5)
    # The same word in another context gets another vector: contextual, not static.
    assert doc[2].similarity(doc[6]) < 0.9999
    assert doc[0:3].similarity(doc[4:7]) == pytest.approx(
        float(
            doc[0:3].vector @ doc[4:7].vector / numpy.linalg.norm(doc[0:3].vector) / numpy.linalg.norm(doc[4:7].vector)
        ),
        rel=1e-5,
    )
    assert doc[3].similarity(doc[1]) == 0.0  # whitespace token: zero vector


def test_empty_and_whitespace_docs(nlp_elmo) -> None:
    empty = nlp_elmo("")
    assert empty.tensor.shape == (0, WIDTH)
    assert empty._.elmo_layers.shape == (N_LAYERS, 0, WIDTH)
    assert empty.vector.shape == (WIDTH,) and not empty.vector.any()
    blank = nlp_elmo("   \n\n ")
    assert blank.tensor.shape == (len(blank), WIDTH) and not blank.tensor.any()
    docs = list(nlp_elmo.pipe(["", "   "]))
    assert [d.tensor.shape[0] for d in docs] == [0, len(docs[1])]


def test_pipe_keeps_order_and_matches_single_docs(nlp_elmo) -> None:
    nlp_elmo.get_pipe("elmo").cfg["pipe_batch_tokens"] = 7
    singles = [nlp_elmo(text).tensor for text in TEXTS]
    piped = list(nlp_elmo.pipe(TEXTS, batch_size=3))
    assert [d.text for d in piped] == TEXTS
    for doc, tensor in zip(piped, singles):
        assert_float32_close(doc.tensor, tensor)


@pytest.mark.slow  # starts worker processes
def test_n_process_2_works_and_gives_the_same_tensors(nlp_elmo) -> None:
    texts = TEXTS * 4
    expected = [doc.tensor for doc in nlp_elmo.pipe(texts)]
    docs = list(nlp_elmo.pipe(texts, n_process=2, batch_size=4))
    assert [d.text for d in docs] == texts
    for doc, tensor in zip(docs, expected):
        numpy.testing.assert_allclose(doc.tensor, tensor, atol=1e-5)
        install_vector_hooks(doc)  # hooks do not survive the trip between processes
        if len(doc):
            numpy.testing.assert_array_equal(doc[0].vector, doc.tensor[0])


def test_initialize_never_overwrites_loaded_weights(nlp_elmo) -> None:
    bilm = get_bilm(nlp_elmo.get_pipe("elmo").model)
    with torch.no_grad():
        bilm.token_encoder.projection.bias.add_(1.0)
    before = nlp_elmo("Keep my weights .").tensor
    nlp_elmo.initialize()
    assert get_bilm(nlp_elmo.get_pipe("elmo").model) is bilm
    numpy.testing.assert_array_equal(nlp_elmo("Keep my weights .").tensor, before)


def test_real_allennlp_files_load(fixture_dir) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe(
        "elmo",
        config={
            "model": {
                "options_file": str(fixture_dir / "options.json"),
                "weight_file": str(fixture_dir / "lm_weights.hdf5"),
            },
            "store_layers": True,
        },
    )
    nlp.initialize()
    doc = nlp("The quick brown fox .")
    assert doc._.elmo_layers.shape == (3, 5, 32)
    expected = BiLM.from_files(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5").embed_sentences(
        [words_of(doc)]
    )[0]
    assert_float32_close(doc._.elmo_layers, expected)


def test_disk_round_trip_is_self_contained(tmp_path, bilm_files) -> None:
    originals = tmp_path / "originals"
    originals.mkdir()
    copies = [shutil.copy(path, originals / path.name) for path in bilm_files]
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(copies))
    nlp.initialize()
    expected = [doc.tensor for doc in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(originals)  # the saved pipeline must not need them
    assert (tmp_path / "pipeline" / "elmo" / "bilm" / "weights.hdf5").is_file()
    loaded = spacy.load(tmp_path / "pipeline")
    for doc, tensor in zip(loaded.pipe(TEXTS), expected):
        numpy.testing.assert_array_equal(doc.tensor, tensor)
    standard = BiLM.from_files(
        tmp_path / "pipeline" / "elmo" / "bilm" / "options.json",
        tmp_path / "pipeline" / "elmo" / "bilm" / "weights.hdf5",
    )
    assert standard.options == get_bilm(loaded.get_pipe("elmo").model).options


def test_bytes_round_trip(nlp_elmo, bilm_files) -> None:
    expected = [doc.tensor for doc in nlp_elmo.pipe(TEXTS)]
    data = nlp_elmo.to_bytes()
    fresh = spacy.blank("xx")
    fresh.add_pipe(
        "elmo", config={"model": {"pretrained": None, "lstm_dim": 4, "projection_dim": 3, "filters": [[1, 2]]}}
    )
    fresh.get_pipe("elmo").from_bytes(nlp_elmo.get_pipe("elmo").to_bytes())
    for doc, tensor in zip(fresh.pipe(TEXTS), expected):
        numpy.testing.assert_array_equal(doc.tensor, tensor)
    again = spacy.blank("xx")
    again.add_pipe("elmo", config=elmo_config(bilm_files))
    again.from_bytes(data)
    for doc, tensor in zip(again.pipe(TEXTS), expected):
        numpy.testing.assert_array_equal(doc.tensor, tensor)


def test_analyze_pipes_shows_what_elmo_assigns_and_that_it_requires_nothing(bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    analysis = nlp.analyze_pipes()
    assigns = analysis["summary"]["elmo"]["assigns"]
    assert "doc.tensor" in assigns
    assert {"doc._.elmo_layers", "doc._.elmo_features", "doc.user_token_hooks"} <= set(assigns)
    assert analysis["summary"]["elmo"]["requires"] == []
    assert analysis["problems"]["elmo"] == []


def elmo_pipes(bilm_files, other_files):
    """Two initialized elmo pipes that differ in every part: the biLM's weights and ``cfg``."""
    pipes = []
    for files, store_layers in ((bilm_files, True), (other_files, False)):
        nlp = spacy.blank("xx")
        nlp.add_pipe("elmo", config={**elmo_config(files), "store_layers": store_layers})
        nlp.initialize()
        pipes.append(nlp.get_pipe("elmo"))
    return pipes


def same_bilm(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(get_bilm(a.model).parameters(), get_bilm(b.model).parameters()))


@pytest.mark.parametrize(
    "excluded, written",
    [
        ([], {"cfg", "bilm"}),
        (["cfg"], {"bilm"}),
        (["model"], {"cfg"}),  # spaCy's name for a pipe's weights
        (["bilm"], {"cfg"}),
        (["cfg", "model", "vocab"], set()),
    ],
)
def test_to_disk_writes_only_what_exclude_leaves(nlp_elmo, tmp_path, excluded, written) -> None:
    nlp_elmo.get_pipe("elmo").to_disk(tmp_path / "elmo", exclude=excluded)
    assert {path.name for path in (tmp_path / "elmo").iterdir()} == written


def test_from_disk_reads_only_what_exclude_leaves(bilm_files, tmp_path) -> None:
    source, target = elmo_pipes(bilm_files, write_bilm_files(tmp_path / "other", seed=1))
    source.to_disk(tmp_path / "elmo")
    target_cfg = dict(target.cfg)
    target.from_disk(tmp_path / "elmo", exclude=["cfg"])
    assert target.cfg == target_cfg and same_bilm(target, source)

    source, target = elmo_pipes(bilm_files, write_bilm_files(tmp_path / "other", seed=1))
    target.from_disk(tmp_path / "elmo", exclude=["model"])
    assert target.cfg == source.cfg and not same_bilm(target, source)

    (tmp_path / "elmo" / "cfg").unlink()  # an excluded part need not exist
    target.from_disk(tmp_path / "elmo", exclude=["cfg"])
    assert same_bilm(target, source)


def test_to_bytes_and_from_bytes_honour_exclude(bilm_files, tmp_path) -> None:
    source, target = elmo_pipes(bilm_files, write_bilm_files(tmp_path / "other", seed=1))
    assert set(srsly.msgpack_loads(source.to_bytes(exclude=["cfg"]))) == {"bilm"}
    assert set(srsly.msgpack_loads(source.to_bytes(exclude=["model"]))) == {"cfg"}
    target_cfg = dict(target.cfg)
    target.from_bytes(source.to_bytes(), exclude=["cfg"])
    assert target.cfg == target_cfg and same_bilm(target, source)

    source, target = elmo_pipes(bilm_files, write_bilm_files(tmp_path / "other", seed=1))
    target.from_bytes(source.to_bytes(), exclude=["model"])
    assert target.cfg == source.cfg and not same_bilm(target, source)
    target.from_bytes(source.to_bytes(exclude=["bilm"]))  # bytes without the biLM leave it as it is
    assert not same_bilm(target, source)


def test_from_bytes_with_an_empty_bilm_part_says_so(bilm_files) -> None:
    elmo = spacy.blank("xx").add_pipe("elmo", config=elmo_config(bilm_files))
    with pytest.raises(ValueError, match="holds no biLM"):
        elmo.from_bytes(srsly.msgpack_dumps({"bilm": b""}))


def test_bad_weight_configs_are_clear_errors(bilm_files, tmp_path) -> None:
    nlp = spacy.blank("xx")
    with pytest.raises(ValueError, match="both options_file and weight_file"):
        nlp.add_pipe("elmo", config={"model": {"options_file": str(bilm_files[0])}})
    nlp.add_pipe(
        "elmo", config={"model": {"options_file": str(bilm_files[0]), "weight_file": str(tmp_path / "nope.hdf5")}}
    )
    with pytest.raises(ElmoFileError, match="does not exist"):
        nlp.initialize()


def test_sizes_come_from_the_files_and_may_not_contradict_them(bilm_files) -> None:
    options = BiLM.from_files(*bilm_files).options
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files, lstm_dim=options.lstm_dim))  # agrees: fine
    nlp.initialize()
    assert nlp.config["components"]["elmo"]["model"]["projection_dim"] is None  # null: the files decide
    wrong = spacy.blank("xx")
    wrong.add_pipe("elmo", config=elmo_config(bilm_files, lstm_dim=options.lstm_dim + 1, n_highway=options.n_highway))
    with pytest.raises(ValueError, match=rf"lstm_dim = {options.lstm_dim + 1} \(the files: {options.lstm_dim}\).*null"):
        wrong.initialize()
