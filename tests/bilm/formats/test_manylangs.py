"""ELMoForManyLangs models by directory (issue 37): equal to the reference package's own output.

The reference (``elmoformanylangs`` 0.0.4.post2, with ``overrides<4``) builds and saves the random
models here and embeds with ``Embedder.sents2elmo(..., output_layer=-2)``; its encoder carries
state from batch to batch, so it is compared on a fresh Embedder's first (only) batch, which
starts from zero as ours does. Tests that need no reference build the directory from the
state-dict layout alone.
"""

import copy
import json
import logging
import math
import shutil
import sys
from pathlib import Path

import numpy
import pytest
import srsly
import torch

from spacy_elmo import BiLM, ElmoFileError
from spacy_elmo.bilm.formats.manylangs import ManyLangsTokenEncoder, is_manylangs, write_manylangs
from spacy_elmo.bilm.formats.manylangs.layout import WARM_NAME
from spacy_elmo.bilm.formats.manylangs.network import PACKAGE_CONFIGS, ManyLangsNetwork, read_network
from spacy_elmo.bilm.formats.manylangs.vocabulary import Vocabulary, dictionary_text, read_dictionary
from spacy_elmo.bilm.formats.serialize import bilm_from_bytes, bilm_from_directory, bilm_to_bytes, bilm_to_directory
from spacy_elmo.bilm.model.token_encoder import SENTENCE_END, SENTENCE_START
from spacy_elmo.published.resolve import directory_files, manylangs_directory

from ...helpers import write_bilm_files
from ..helpers import SENTENCES, network, options_of, write_random_model, write_reference_model

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def reference():
    """The reference package, or a skip that says why it cannot be imported.

    Any exception, not only ImportError (what ``pytest.importorskip`` catches): on Python 3.12+ the
    ``overrides<4`` it needs raises IndexError while decorating its classes (it reads the bytecode
    of Python 3.11 and before). The tests that need no reference run everywhere."""
    try:
        import elmoformanylangs
    except Exception as error:
        pytest.skip(
            "the reference package elmoformanylangs (with overrides<4) cannot be imported on Python "
            f"{sys.version_info.major}.{sys.version_info.minor}: {type(error).__name__}: {error}"
        )
    logging.getLogger("elmoformanylangs").setLevel(logging.WARNING)
    return elmoformanylangs


def reference_layers(package, directory: Path, sentences):
    """The reference's layers of ``sentences`` in one batch of a fresh Embedder (zero state), CPU float32."""
    embedder = package.Embedder(str(directory), batch_size=64)
    assert len(sentences) <= 64  # one batch: the first, from the zero state
    return embedder.sents2elmo(sentences, output_layer=-2)


def assert_layers_equal(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    for i, (mine, ref) in enumerate(zip(ours, theirs)):
        assert mine.shape == ref.shape, f"sentence {i}"
        for layer in range(ref.shape[0]):
            difference = float(numpy.abs(mine[layer] - ref[layer]).max()) if ref.shape[1] else 0.0
            assert difference <= TOLERANCE, f"sentence {i} layer {layer}: max difference {difference}"


@pytest.mark.parametrize("name", ["full", "plain"])
def test_layers_equal_the_reference(reference, tmp_path, name) -> None:
    directory = write_reference_model(tmp_path / name, name)
    theirs = reference_layers(reference, directory, SENTENCES)
    bilm = BiLM.from_pretrained(str(directory))
    assert bilm.n_output_layers == network(name)["encoder"]["n_layers"] + 1
    assert_layers_equal(bilm.embed_sentences(SENTENCES), theirs)
    # The vectors come from the token cache the second time, keyed on the token strings.
    assert "中文" in bilm.runtime.token_cache._rows and SENTENCE_START in bilm.runtime.token_cache._rows
    assert_layers_equal(bilm.embed_sentences(SENTENCES), theirs)


def test_the_random_weights_reach_the_clip_values(reference, tmp_path) -> None:
    """The comparison covers clipping: the reference's layer 1 reaches +-proj_clip."""
    directory = write_reference_model(tmp_path / "full", "full")
    layer_1 = numpy.concatenate([s[1] for s in reference_layers(reference, directory, SENTENCES) if s.size])
    assert numpy.isclose(numpy.abs(layer_1).max(), network("full")["encoder"]["proj_clip"])


def test_each_sentence_alone_equals_the_reference(reference, tmp_path) -> None:
    """One sentence per fresh Embedder: no batch-mates, no sorting."""
    directory = write_reference_model(tmp_path / "full", "full", seed=3)
    bilm = BiLM.from_pretrained(str(directory))
    for sentence in SENTENCES[:4]:
        assert_layers_equal(bilm.embed_sentences([sentence]), reference_layers(reference, directory, [sentence]))


def test_legacy_torch_files_load(reference, tmp_path) -> None:
    """The published models were saved by torch 0.4, before the zip format."""
    directory = write_reference_model(tmp_path / "full", "full", legacy=True)
    ours = BiLM.from_pretrained(str(directory)).embed_sentences(SENTENCES[:2])
    assert_layers_equal(ours, reference_layers(reference, directory, SENTENCES[:2]))


def test_input_ids_are_the_references(reference, tmp_path) -> None:
    """Char and word ids of every token (cut, <eow> first and <bow> last, OOV, boundaries) as its
    ``read_list`` + ``create_one_batch`` make them."""
    from elmoformanylangs.elmo import read_list
    from elmoformanylangs.frontend import create_one_batch

    directory = write_reference_model(tmp_path / "full", "full")
    config = network("full")
    max_chars = config["token_embedder"]["max_characters_per_token"]
    chars, words = read_dictionary(directory / "char.dic"), read_dictionary(directory / "word.dic")
    vocabulary = Vocabulary(chars, words)
    for sentence in SENTENCES:
        data, _ = read_list([sentence], max_chars)
        ref_words, ref_chars, _, _ = create_one_batch(data, words, chars, config, sort=False)
        tokens = [SENTENCE_START, *sentence, SENTENCE_END]
        char_ids, word_ids = vocabulary.token_ids(tokens, max_chars, (SENTENCE_START, SENTENCE_END))
        numpy.testing.assert_array_equal(char_ids, ref_chars[0].numpy())
        numpy.testing.assert_array_equal(word_ids, ref_words[0].numpy())


def test_dictionaries_are_read_as_the_reference_reads_them(tmp_path) -> None:
    import codecs

    path = tmp_path / "char.dic"
    path.write_text("<pad>\t0\n \t1\na\t2\na\t3\nx\u2028y\t4\n", encoding="utf8")
    expected = {}
    for line in codecs.open(str(path), "r", encoding="utf-8"):  # the reference's own loop
        tokens = line.strip().split("\t")
        if len(tokens) == 1:
            tokens.insert(0, "\u3000")
        try:
            token, i = tokens
            expected[token] = int(i)
        except ValueError:
            break
    with pytest.raises(ElmoFileError, match="line 5"):  # "x" alone: the reference fails there too
        read_dictionary(path)
    path.write_text("<pad>\t0\n \t1\na\t2\na\t3\n", encoding="utf8")
    assert read_dictionary(path) == expected == {"<pad>": 0, "\u3000": 1, "a": 3}


def test_the_package_configs_are_the_references(reference) -> None:
    configs = Path(reference.__file__).parent / "configs"
    for name, config in PACKAGE_CONFIGS.items():
        assert json.loads((configs / name).read_text()) == config


# ---------------------------------------------------------------- without the reference
def test_literal_boundary_names_are_text(tmp_path) -> None:
    """Unlike the reference, a token "<bos>" is its characters, not the sentence start (as "<S>"
    for bilm-tf models, see spacy_elmo.bilm.model.chars)."""
    bilm = BiLM.from_pretrained(str(write_random_model(tmp_path / "m")))
    with torch.no_grad():
        vectors = bilm.runtime.embed_tokens(["<bos>", SENTENCE_START, "<eos>", SENTENCE_END])
    assert not torch.allclose(vectors[0], vectors[1]) and not torch.allclose(vectors[2], vectors[3])


def test_network_config_is_found_where_the_reference_looks(tmp_path) -> None:
    directory = write_random_model(tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    # The published models name the file by a path on their authors' machine: its name beside config.json.
    config["config_path"] = "/Users/someone/models/word_elmo/net.json"
    (directory / "config.json").write_text(json.dumps(config))
    assert read_network(directory).options == options_of("full")
    # Not there either: the config that elmoformanylangs ships under that name.
    config["config_path"] = "/Users/someone/models/word_elmo/cnn_50_100_512_4096_sample.json"
    (directory / "config.json").write_text(json.dumps(config))
    shipped = read_network(directory)
    assert (shipped.options.lstm_dim, shipped.options.projection_dim, shipped.word_dim) == (4096, 512, 100)
    assert shipped.options.filters[-1] == (7, 1024) and shipped.options.cell_clip == 3.0
    config["config_path"] = "unknown.json"
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ElmoFileError, match="unknown.json"):
        read_network(directory)


def test_zero_clip_values_mean_no_clipping(tmp_path) -> None:
    bilm = BiLM.from_pretrained(str(write_random_model(tmp_path / "m", "plain")))
    assert bilm.options.cell_clip == bilm.options.proj_clip == math.inf


@pytest.mark.parametrize("missing", ["config.json", "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl"])
def test_a_missing_file_is_named(tmp_path, missing) -> None:
    directory = write_random_model(tmp_path / "m")
    (directory / missing).unlink()
    with pytest.raises(ElmoFileError, match=missing.replace(".", r"\.")):
        BiLM.from_pretrained(str(directory))


def test_a_corrupt_file_gives_a_clear_error(tmp_path) -> None:
    directory = write_random_model(tmp_path / "m")
    data = (directory / "encoder.pkl").read_bytes()
    (directory / "encoder.pkl").write_bytes(data[: len(data) // 2])
    with pytest.raises(ElmoFileError, match=r"encoder\.pkl is not a readable PyTorch file"):
        BiLM.from_pretrained(str(directory))
    (directory / "encoder.pkl").write_bytes(b"not a pickle at all")
    with pytest.raises(ElmoFileError, match=r"encoder\.pkl"):
        BiLM.from_pretrained(str(directory))


class Payload:
    """A pickle that would create a file when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("content", ["payload", "module", "not tensors", "list"])
def test_a_pickle_that_is_not_a_plain_state_dict_is_refused(tmp_path, content) -> None:
    directory = write_random_model(tmp_path / "m")
    marker = tmp_path / "unpickled"
    state = torch.load(directory / "token_embedder.pkl", weights_only=True)
    value = {
        "payload": {**state, "extra": Payload(marker)},
        "module": torch.nn.Linear(2, 2),
        "not tensors": {name: 1.0 for name in state},
        "list": list(state.values()),
    }[content]
    torch.save(value, directory / "token_embedder.pkl")
    with pytest.raises(ElmoFileError, match=r"token_embedder\.pkl is not a (plain PyTorch )?state dict"):
        BiLM.from_pretrained(str(directory))
    assert not marker.exists()


def test_weights_that_do_not_fit_are_refused(tmp_path) -> None:
    directory = write_random_model(tmp_path / "m")
    with open(directory / "char.dic", "a", encoding="utf8") as f:
        f.write("z\t999\n")
    with pytest.raises(ElmoFileError, match="char.dic: ids must be in"):
        BiLM.from_pretrained(str(directory))
    directory = write_random_model(tmp_path / "n")
    net = json.loads((directory / "net.json").read_text())
    net["encoder"]["dim"] = 12
    (directory / "net.json").write_text(json.dumps(net))
    with pytest.raises(ElmoFileError, match="belong together"):
        BiLM.from_pretrained(str(directory))


def test_nan_weights_are_refused(tmp_path) -> None:
    directory = write_random_model(tmp_path / "m")
    state = torch.load(directory / "encoder.pkl", weights_only=True)
    next(iter(state.values()))[0] = float("nan")
    torch.save(state, directory / "encoder.pkl")
    with pytest.raises(ElmoFileError, match="NaN"):
        BiLM.from_pretrained(str(directory))


def test_the_format_is_detected_by_directory(tmp_path, bilm_files) -> None:
    directory = write_random_model(tmp_path / "m")
    assert manylangs_directory(str(directory)) == directory
    assert manylangs_directory(directory.as_uri()) == directory
    assert manylangs_directory(str(bilm_files[0].parent)) is None  # the standard layout
    assert manylangs_directory("en") is None  # a registry name is never a directory
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text("{}")  # another tool's directory
    assert manylangs_directory(str(tmp_path / "other")) is None
    with pytest.raises(ValueError, match="ELMoForManyLangs"):
        directory_files(str(directory))
    bilm = BiLM.from_pretrained(directory.as_uri(), cache_size=0, max_batch_tokens=7)
    assert isinstance(bilm.token_encoder, ManyLangsTokenEncoder)
    assert (bilm.runtime.token_cache.max_entries, bilm.runtime.max_batch_tokens) == (0, 7)


def test_settings_and_batching_do_not_change_the_layers(tmp_path) -> None:
    """Zero state: a sentence's layers do not depend on its batch-mates, nor on the cache."""
    directory = write_random_model(tmp_path / "m")
    together = BiLM.from_pretrained(str(directory)).embed_sentences(SENTENCES)
    alone = BiLM.from_pretrained(str(directory), cache_size=0, max_batch_tokens=1)
    for sentence, layers in zip(SENTENCES, together):
        numpy.testing.assert_allclose(alone.embed_sentences([sentence])[0], layers, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_the_precisions_apply(tmp_path, precision) -> None:
    directory = write_random_model(tmp_path / "m", scale=0.3)
    exact = BiLM.from_pretrained(str(directory)).embed_sentences(SENTENCES)
    lower = BiLM.from_pretrained(str(directory), precision=precision).embed_sentences(SENTENCES)
    for a, b in zip(exact, lower):
        assert numpy.abs(a - b).max(initial=0.0) <= 0.05 * max(numpy.abs(a).max(initial=0.0), 1.0)


def test_it_cannot_be_written_in_the_standard_layout(tmp_path) -> None:
    bilm = BiLM.from_pretrained(str(write_random_model(tmp_path / "m")))
    with pytest.raises(ValueError, match="ELMoForManyLangs"):
        bilm.to_files(tmp_path / "options.json", tmp_path / "weights.hdf5")
    assert not (tmp_path / "options.json").exists()


def test_gradients_reach_the_token_encoder(tmp_path) -> None:
    bilm = BiLM.from_pretrained(str(write_random_model(tmp_path / "m")))
    output = bilm([["the", "中文"], []])
    output.layers.sum().backward()
    assert bilm.token_encoder.word_embedding.weight.grad is not None
    assert bilm.token_encoder.char_embedding.weight.grad.abs().sum() > 0


def test_a_dictionary_without_a_special_entry_is_refused(tmp_path) -> None:
    directory = write_random_model(tmp_path / "m")
    lines = (directory / "char.dic").read_text(encoding="utf8").splitlines(keepends=True)
    (directory / "char.dic").write_text(
        "".join(line for line in lines if not line.startswith("<bos>")), encoding="utf8"
    )
    with pytest.raises(ElmoFileError, match="char.dic has no entry '<bos>'"):
        BiLM.from_pretrained(str(directory))


# ---------------------------------------------------------------- writing the native layout
def assert_same_layers(ours, theirs, tolerance: float = 1e-6) -> None:
    assert len(ours) == len(theirs)
    for mine, other in zip(ours, theirs):
        numpy.testing.assert_allclose(mine, other, rtol=0, atol=tolerance)


@pytest.mark.parametrize("name", ["full", "plain"])
def test_the_reference_reads_the_directory_we_write(reference, tmp_path, name) -> None:
    """write_manylangs writes the reference's own format: its Embedder, given only our directory
    (the original is gone), gives our layers on a first batch, as it does for its own files."""
    original = write_reference_model(tmp_path / "original", name, seed=5)
    bilm = BiLM.from_pretrained(str(original))
    ours = bilm.embed_sentences(SENTENCES)
    written = write_manylangs(bilm, tmp_path / "written")
    shutil.rmtree(original)
    assert_layers_equal(ours, reference_layers(reference, written, SENTENCES))


def test_the_reference_reads_a_directory_with_a_warm_start(reference, tmp_path) -> None:
    """The warm start is a file of spacy-elmo's own, beside the reference's, which ignores it."""
    bilm = BiLM.from_pretrained(str(write_reference_model(tmp_path / "original", "full")))
    bilm.warm_up([["the", "中文"], ["любовь"]])
    written = write_manylangs(bilm, tmp_path / "written")
    assert (written / WARM_NAME).is_file()
    bilm.runtime.state_mode = "zero"
    assert_layers_equal(bilm.embed_sentences(SENTENCES[:3]), reference_layers(reference, written, SENTENCES[:3]))


@pytest.mark.parametrize("name", ["full", "plain"])
def test_written_directory_reads_back_the_same(tmp_path, name) -> None:
    """Every file read back as it was read: dictionaries, network config, config.json's other keys,
    the token embedder's tensors exactly, the LSTM's up to the rounding of the forget bias's 1.0."""
    original = write_random_model(tmp_path / "original", name)
    config = json.loads((original / "config.json").read_text())
    config["config_path"] = "/home/authors/models/net.json"  # as the published models name it
    (original / "config.json").write_text(json.dumps(config))
    bilm = BiLM.from_pretrained(str(original))
    written = write_manylangs(bilm, tmp_path / "written")
    expected = {"config.json", "net.json", "char.dic", "token_embedder.pkl", "encoder.pkl"}
    assert {p.name for p in written.iterdir()} == expected | ({"word.dic"} if name == "full" else set())
    assert json.loads((written / "config.json").read_text()) == {**config, "config_path": "net.json"}
    assert json.loads((written / "net.json").read_text()) == network(name)
    for dictionary in ("char.dic", "word.dic")[: 2 if name == "full" else 1]:
        assert read_dictionary(written / dictionary) == read_dictionary(original / dictionary)
    for file, exact in (("token_embedder.pkl", True), ("encoder.pkl", False)):
        before = torch.load(original / file, weights_only=True)
        after = torch.load(written / file, weights_only=True)
        assert list(after) == list(before) if exact else set(after) == set(before)
        for key, tensor in before.items():
            assert after[key].dtype == torch.float32 and after[key].shape == tensor.shape
            assert after[key].untyped_storage().nbytes() == tensor.numel() * 4  # no other tensor's storage
            if exact:
                assert torch.equal(after[key], tensor), key
            else:
                torch.testing.assert_close(after[key], tensor, rtol=0, atol=1e-6)
    shutil.rmtree(original)  # the written directory needs nothing else
    again = BiLM.from_pretrained(str(written))
    assert_same_layers(again.embed_sentences(SENTENCES), bilm.embed_sentences(SENTENCES))


def test_a_warm_start_is_written_and_read(tmp_path) -> None:
    bilm = BiLM.from_pretrained(str(write_random_model(tmp_path / "original")), state="warm")
    bilm.warm_up([["the", "中文"], ["любовь", "x"]])
    written = write_manylangs(bilm, tmp_path / "written")
    again = BiLM.from_pretrained(str(written), state="warm")
    assert torch.equal(again.warm_hidden, bilm.warm_hidden) and torch.equal(again.warm_memory, bilm.warm_memory)
    assert_same_layers(again.embed_sentences(SENTENCES), bilm.embed_sentences(SENTENCES))
    bilm.warm_hidden = bilm.warm_memory = None
    write_manylangs(bilm, written)  # rewritten without one: the old warm start goes
    assert not (written / WARM_NAME).exists()
    assert BiLM.from_pretrained(str(written)).warm_hidden is None


def test_the_network_config_gets_a_name_of_its_own_where_it_must() -> None:
    net = ManyLangsNetwork.from_dict(network("full"), "test")
    for name, written in [
        (None, "network.json"),
        ("cnn_50_100_512_4096_sample.json", "cnn_50_100_512_4096_sample.json"),
        ("options.json", "network.json"),
        ("char.dic", "network.json"),
        ("a\\b.json", "network.json"),
        (".hidden.json", "network.json"),
    ]:
        net.name = name
        assert net.file_name() == written
    # Without the config as read (a network made from sizes), one in the reference's format is made.
    made = ManyLangsNetwork(options_of("plain"), 0).to_dict()
    assert ManyLangsNetwork.from_dict(made, "made").options == options_of("plain")
    assert (
        made["encoder"]["cell_clip"] == 0
        and made["dropout"] == PACKAGE_CONFIGS["cnn_50_100_512_4096_sample.json"]["dropout"]
    )


def test_a_token_that_would_not_read_back_is_refused(tmp_path) -> None:
    entries = {"<pad>": 0, "\u3000": 1, "中": 2, "😀": 3}  # U+3000: the reference's reading of a whitespace token
    (tmp_path / "char.dic").write_text(dictionary_text(entries, "char.dic"), encoding="utf8")
    assert read_dictionary(tmp_path / "char.dic") == entries
    for token in ["a\tb", "a\nb", "a\u2028b", " a", ""]:  # "b " is fine: the tab follows it
        with pytest.raises(ValueError, match="does not read back"):
            dictionary_text({"<pad>": 0, token: 1}, "word.dic")


def test_only_a_manylangs_bilm_is_written_so(tmp_path, bilm_files) -> None:
    with pytest.raises(ValueError, match="BiLM.to_files"):
        write_manylangs(BiLM.from_files(*bilm_files), tmp_path / "written")


@pytest.mark.parametrize("how", ["bytes", "deepcopy", "directory"])
def test_serialized_and_copied_it_gives_the_same_layers(tmp_path, bilm_files, how) -> None:
    """bilm_to_bytes (what thinc's shim and nlp.to_bytes use), a deep copy, and a saved pipeline's
    bilm/ folder (bilm_to_directory); the settings and the warm start go too."""
    bilm = BiLM.from_pretrained(str(write_random_model(tmp_path / "original")), cache_size=7, max_batch_tokens=9)
    bilm.warm_up([["the"]])
    if how == "bytes":
        data = bilm_to_bytes(bilm)
        assert srsly.msgpack_loads(data)["format"] == "elmoformanylangs"
        shutil.rmtree(tmp_path / "original")
        copied = bilm_from_bytes(data)
    elif how == "deepcopy":
        copied = copy.deepcopy(bilm)
    else:
        standard = write_bilm_files(tmp_path / "bilm")  # what an earlier save of a standard biLM left there
        bilm_to_directory(bilm, tmp_path / "bilm")
        assert not any(path.exists() for path in standard)
        shutil.rmtree(tmp_path / "original")
        copied = bilm_from_directory(tmp_path / "bilm", bilm.settings.to_dict())
    assert is_manylangs(copied) and copied.settings == bilm.settings
    assert torch.equal(copied.warm_hidden, bilm.warm_hidden)
    assert_same_layers(copied.embed_sentences(SENTENCES), bilm.embed_sentences(SENTENCES))
    if how == "directory":  # a standard biLM saved over it: the files of the other layout go
        bilm_to_directory(BiLM.from_files(*bilm_files), tmp_path / "bilm")
        assert {path.name for path in (tmp_path / "bilm").iterdir()} == {"options.json", "weights.hdf5"}
        assert not is_manylangs(bilm_from_directory(tmp_path / "bilm"))


def test_bytes_of_a_standard_bilm_keep_their_layout(bilm_files) -> None:
    """Bytes written before (options + weights) still load: a standard biLM is written as it was."""
    msg = srsly.msgpack_loads(bilm_to_bytes(BiLM.from_files(*bilm_files)))
    assert set(msg) == {"options", "weights", "settings"}
