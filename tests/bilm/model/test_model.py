"""Shapes, batch independence, edge cases and the token cache of the biLM."""

import threading

import numpy
import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.bilm.kernels import Float32Kernel, KernelChoice
from spacy_elmo.bilm.kernels.reference import ReferenceKernel
from spacy_elmo.bilm.runtime import BiLMRuntime, BiLMSettings

from ...helpers import REAL_TEXT, assert_float32_close, random_bilm, tiny_options

SENTENCES = [
    "The bank raised its interest rates .".split(),
    "We sat on the bank of the river .".split(),
    ["Hi"],
    "a b c d e f g h i j k l m n o p".split(),
]
TOL = dict(atol=1e-5, rtol=1e-5)


def test_output_shapes_and_layer_zero(bilm):
    outputs = bilm.embed_sentences(SENTENCES)
    for tokens, layers in zip(SENTENCES, outputs):
        assert layers.dtype == numpy.float32
        assert layers.shape == (3, len(tokens), 16)
        numpy.testing.assert_array_equal(layers[0, :, :8], layers[0, :, 8:])


def test_layer_zero_is_context_free_and_upper_layers_are_not(bilm):
    first, second = bilm.embed_sentences(SENTENCES[:2])
    bank_1, bank_2 = first[:, 1], second[:, 4]
    numpy.testing.assert_allclose(bank_1[0], bank_2[0], **TOL)
    assert not numpy.allclose(bank_1[1], bank_2[1], atol=1e-3)
    assert not numpy.allclose(bank_1[2], bank_2[2], atol=1e-3)


def test_vectors_do_not_depend_on_batch_row_padding_or_history(bilm):
    alone = [bilm.embed_sentences([s])[0] for s in SENTENCES]
    shuffled = [SENTENCES[i] for i in (3, 1, 0, 2)] * 2
    together = bilm.embed_sentences(shuffled)
    for i, j in enumerate((3, 1, 0, 2, 3, 1, 0, 2)):
        numpy.testing.assert_allclose(together[i], alone[j], **TOL)


def test_small_token_budget_gives_the_same_vectors():
    big = random_bilm(max_batch_tokens=4096)
    small = random_bilm(max_batch_tokens=5)
    for a, b in zip(big.embed_sentences(SENTENCES), small.embed_sentences(SENTENCES)):
        numpy.testing.assert_allclose(a, b, **TOL)


def test_skip_connections_and_clipping_bound_the_layers():
    model = random_bilm()
    layers = model.embed_sentences(SENTENCES)
    top = max(numpy.abs(x[2]).max() for x in layers)
    assert max(numpy.abs(x[1]).max() for x in layers) <= 3.0 + 1e-6
    assert top <= 6.0 + 1e-6
    no_skip = random_bilm(options=tiny_options(use_skip_connections=False))
    assert max(numpy.abs(x[2]).max() for x in no_skip.embed_sentences(SENTENCES)) <= 3.0 + 1e-6


@pytest.mark.parametrize(
    "batch",
    [
        [[], ["one"], []],
        [[], []],
        [["x"]],
        [["a" * 60, "é" * 30, "z" * 48]],
        [["naïve", "日本語", "👩‍👩‍👧", "\u200b", "\ud800", "e\u0301"]],
        [["<S>", "</S>", "word"]],
    ],
)
def test_edge_cases_give_finite_vectors_of_the_right_shape(bilm, batch):
    outputs = bilm.embed_sentences(batch)
    assert len(outputs) == len(batch)
    for tokens, layers in zip(batch, outputs):
        assert layers.shape == (3, len(tokens), 16)
        assert numpy.isfinite(layers).all()


def test_empty_sentence_does_not_change_its_neighbours(bilm):
    with_empty = bilm.embed_sentences([[], SENTENCES[0], []])
    alone = bilm.embed_sentences([SENTENCES[0]])
    numpy.testing.assert_allclose(with_empty[1], alone[0], **TOL)


def test_long_tokens_share_their_first_48_bytes(bilm):
    a, b = bilm.embed_sentences([["x" * 48 + "abc"], ["x" * 48 + "zzz"]])
    numpy.testing.assert_allclose(a, b, **TOL)


def test_literal_boundary_strings_are_ordinary_text(bilm):
    """Unlike AllenNLP, "<S>" in the input is the text "<S>", not the sentence-start token."""
    (literal,) = bilm.embed_sentences([["<S>"]])
    with torch.no_grad():
        start = bilm.runtime.embed_tokens([("<boundary>", "start")]).numpy()
    assert not numpy.allclose(literal[0, 0, :8], start[0], atol=1e-4)


def test_no_sentences_gives_no_arrays(bilm):
    assert bilm.embed_sentences([]) == []


def test_forward_gives_gradients_to_every_parameter():
    model = random_bilm()
    model.train()
    output = model(SENTENCES)
    assert output.layers.shape == (3, len(SENTENCES), 18, 16)
    output.layers.sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_padding_positions_are_zero(bilm):
    with torch.no_grad():
        output = bilm([["a"], ["a", "b", "c"]])
    assert output.lengths.tolist() == [3, 5]
    assert torch.all(output.layers[:, 0, 3:] == 0)


@pytest.mark.parametrize("cache_size,max_batch_tokens,entries", [(64, 4096, 32), (12, 20, 12), (3, 4096, 0)])
def test_cache_gives_the_same_vectors_and_follows_weight_changes(cache_size, max_batch_tokens, entries):
    """Large enough for all 32 distinct tokens, evicting between batches, smaller than a batch."""
    cached = random_bilm(cache_size=cache_size, max_batch_tokens=max_batch_tokens)
    uncached = random_bilm(cache_size=0)
    for _ in range(2):
        for a, b in zip(cached.embed_sentences(SENTENCES), uncached.embed_sentences(SENTENCES)):
            numpy.testing.assert_allclose(a, b, **TOL)
    assert len(cached.runtime.token_cache) == entries
    with torch.no_grad():
        for model in (cached, uncached):
            model.token_encoder.projection.bias.add_(1.0)
    for a, b in zip(cached.embed_sentences(SENTENCES), uncached.embed_sentences(SENTENCES)):
        numpy.testing.assert_allclose(a, b, **TOL)


def test_cache_from_several_threads_matches_serial_use():
    model = random_bilm(cache_size=8)
    expected = random_bilm(cache_size=0).embed_sentences(SENTENCES)
    failures = []

    def work() -> None:
        for _ in range(5):
            for a, b in zip(model.embed_sentences(SENTENCES), expected):
                if not numpy.allclose(a, b, atol=1e-5):
                    failures.append(numpy.abs(a - b).max())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_warm_state_is_deterministic_and_differs_from_zero():
    model = random_bilm(state="warm")
    with pytest.raises(ValueError, match="warm_up"):
        model.embed_sentences(SENTENCES)
    model.warm_up(SENTENCES[:2])
    alone = model.embed_sentences([SENTENCES[3]])[0]
    mixed = model.embed_sentences([SENTENCES[0], SENTENCES[3], []])[1]
    numpy.testing.assert_allclose(alone, mixed, **TOL)
    zero = random_bilm().embed_sentences([SENTENCES[3]])[0]
    numpy.testing.assert_array_equal(alone[0], zero[0])
    assert not numpy.allclose(alone[1], zero[1], atol=1e-3)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_a_mixed_pass_gives_the_weighted_sum_of_the_layers(precision):
    model = random_bilm(precision=precision)
    weights = [0.5, -2.0, 0.25]
    with torch.no_grad():
        layers = model(SENTENCES).layers
        mixed = model(SENTENCES, mix=weights).layers
    assert mixed.shape == (1, *layers.shape[1:])
    expected = torch.tensordot(torch.tensor(weights), layers, dims=1)
    torch.testing.assert_close(mixed[0], expected, rtol=1e-5, atol=1e-6)


def test_a_mixed_pass_gives_gradients_to_every_parameter():
    model = random_bilm()
    model.train()
    model(SENTENCES, mix=[0.2, 0.3, 0.5]).layers.sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_zero_states_hold_one_row_whatever_the_batch():
    model = random_bilm()
    state = model.runtime.initial_state(1000)
    assert state.hidden.shape[2] == state.memory.shape[2] == 1000
    row_bytes = sum(s[:, :, 0].numel() * s.element_size() for s in state)
    assert sum(s.untyped_storage().nbytes() for s in state) == row_bytes
    assert not any(s.any() for s in state)


def test_bad_arguments_are_reported():
    with pytest.raises(ValueError, match="state must be one of"):
        BiLM(tiny_options(), state="cold")
    with pytest.raises(ValueError, match="at least one sentence"):
        random_bilm()([])
    with pytest.raises(ValueError, match="mix has 2 weights, the biLM 3 output layers"):
        random_bilm()(SENTENCES, mix=[0.5, 0.5])
    with pytest.raises(ValueError, match="activation"):
        tiny_options(activation="gelu")


@pytest.mark.parametrize("window_positions", [1, 7, 2048])
def test_inference_path_matches_the_autograd_path(window_positions):
    """Without gradients the LSTM works in place, reusing one buffer across windows of
    timesteps; it must compute the very same values and final states."""
    lstm_dim = tiny_options().lstm_dim
    model = random_bilm()
    model.lstm.kernels = KernelChoice(window_bytes=window_positions * 2 * 4 * lstm_dim * 4)
    with torch.no_grad():
        fast = model(SENTENCES)
    slow = model(SENTENCES)
    assert_float32_close(fast.layers, slow.layers)
    for fast_state, slow_state in zip(fast.state, slow.state):
        assert_float32_close(fast_state, slow_state)


@pytest.mark.parametrize("window_steps", [1, 3, 100])
def test_the_lstm_gradients_are_those_of_the_cell_written_out(window_steps):
    """Gradients through windows of input gates (one, several, all timesteps), with rows ending at
    different steps, to the inputs, the initial states and every weight: a plain cell's, for a loss
    on the outputs and the final states."""
    from ..helpers import random_layer_batch, random_lstm_layer

    lengths = [7, 5, 5, 2]
    windows = KernelChoice(window_bytes=window_steps * len(lengths) * 2 * 4 * 24 * 4)  # 24 cells
    layer = random_lstm_layer(0, torch.device("cpu"))
    batch = random_layer_batch(lengths, torch.device("cpu"))
    found = {}
    for name, run in (
        ("layer", lambda x, h, c: Float32Kernel(choice=windows)(0, layer, x, batch.active, h, c)),
        ("reference", lambda x, h, c: ReferenceKernel()(0, layer, x, batch.active, h, c)),
    ):
        leaves = [t.clone().requires_grad_() for t in (batch.inputs, batch.hidden, batch.memory)]
        torch.manual_seed(1)  # the same weights of the loss for both
        sum((result * torch.randn(result.shape)).sum() for result in run(*leaves)).backward()
        found[name] = [t.grad for t in leaves] + [p.grad.clone() for p in layer.parameters()]
        layer.zero_grad(set_to_none=True)
    for a, b in zip(found["layer"], found["reference"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_deep_copy_gives_the_same_vectors():
    import copy

    model = random_bilm()
    model.embed_sentences(SENTENCES)
    clone = copy.deepcopy(model)
    assert len(clone.runtime.token_cache) == 0
    for a, b in zip(model.embed_sentences(SENTENCES), clone.embed_sentences(SENTENCES)):
        assert_float32_close(a, b)


@pytest.mark.parametrize("seed", range(3))
def test_char_cnn_cut_at_the_padding_gives_the_maxima_of_all_positions(seed):
    """Short tokens skip windows wholly in padding: the same vectors as over all 50 positions."""
    encoder = random_bilm(seed).token_encoder
    words = ["a", "I", "to", "ELMo", "naïve", "🙂", "x" * 9, "<S>"]
    ids = encoder.token_ids(words).chars
    needed = encoder.positions_needed(ids)
    assert needed < 50 == encoder.positions_needed(encoder.token_ids(words + ["y" * 60]).chars)
    with torch.no_grad():
        cut, full = encoder(torch.from_numpy(ids[:, :needed])), encoder(torch.from_numpy(ids))
    assert_float32_close(cut, full)


def test_weights_written_advances_every_parameters_version():
    bilm = BiLM(tiny_options())
    before = [parameter._version for parameter in bilm.parameters()]
    bilm.weights_written()
    assert [parameter._version for parameter in bilm.parameters()] == [v + 1 for v in before]


# A biLM's state dict as it has always been named: pretraining checkpoints and saved pipelines load by these keys.
STATE_KEYS = [
    "warm_hidden",
    "warm_memory",
    "token_encoder.char_embedding.weight",
    *(f"token_encoder.convolutions.{i}.{p}" for i in range(3) for p in ("weight", "bias")),
    *(
        f"token_encoder.highways.{i}.{m}.{p}"
        for i in range(2)
        for m in ("transform", "carry")
        for p in ("weight", "bias")
    ),
    "token_encoder.projection.weight",
    "token_encoder.projection.bias",
    *(f"lstm.layers.{i}.{p}" for i in range(2) for p in ("input_weight", "hidden_weight", "bias", "projection")),
]


def test_the_state_dict_keeps_its_keys_and_reloads(tmp_path):
    model = random_bilm(precision="bf16", state="warm")
    model.warm_up([["a", "b"]])
    with torch.no_grad():
        model(REAL_TEXT[:1])  # copies made: they are no part of the state
    assert list(model.state_dict()) == STATE_KEYS
    torch.save(model.state_dict(), tmp_path / "state.pt")
    other = random_bilm(precision="bf16", state="warm", seed=1)
    other.warm_up([["c"]])
    other.load_state_dict(torch.load(tmp_path / "state.pt"))
    numpy.testing.assert_array_equal(other.embed_sentences(REAL_TEXT[:2])[0], model.embed_sentences(REAL_TEXT[:2])[0])


def test_two_runtimes_of_one_bilm_own_their_settings_and_give_its_layers() -> None:
    """What runs a biLM owns its runtime: another one, of other settings and calls, changes
    nothing of the biLM's own calls, and in the same settings gives the same layers to the bit."""
    model = random_bilm()
    mine = BiLMRuntime(model, BiLMSettings(cache_size=0))
    other = BiLMRuntime(model, BiLMSettings(precision="bf16", state="carry"))
    with torch.no_grad():
        other(REAL_TEXT[:3])
        assert torch.equal(mine(REAL_TEXT[:3]).layers, model(REAL_TEXT[:3]).layers)
    assert (model.runtime.precision, model.runtime.state_mode) == ("fp32", "zero")
    assert len(mine.token_cache) == 0 and len(other.token_cache) > 0 and len(model.runtime.token_cache) > 0
    assert [p is q for p, q in zip(mine.parameters(), model.parameters())] == [True] * len(list(model.parameters()))
    model.dropout = 0.25  # the network's own setting: every runtime reads it
    assert mine.settings.dropout == other.settings.dropout == model.settings.dropout == 0.25


def test_an_unknown_setting_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="cache"):
        BiLM(tiny_options(), cache=10)
