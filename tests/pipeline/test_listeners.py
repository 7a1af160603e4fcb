import io

import numpy
import pytest
import spacy
import torch
from thinc.api import ConfigValidationError

from spacy_elmo.layers import ScalarMix, SelectLayers, get_bilm
from spacy_elmo.layers.scalar_mix import mix_weights

from ..helpers import (
    FLOAT32_RTOL,
    N_LAYERS,
    WIDTH,
    assert_float32_close,
    build_ner_textcat,
    count_bilm_calls,
    elmo_config,
    listener_config,
    make_examples,
    mix_config,
)
from .helpers import assert_learn_rate_scale_scales_the_biLM_steps_only, train

TEXTS = ["Alice went to Paris .", "It was great .", "Bob stayed in London"]


# ---------------------------------------------------------------------- scalar mix
@pytest.mark.parametrize("layer_norm", [False, True])
def test_scalar_mix_gradients_match_finite_differences(layer_norm: bool) -> None:
    rng = numpy.random.default_rng(0)
    mix = ScalarMix(3, 4, layer_norm=layer_norm, l2=0.3)
    mix.initialize()
    mix.set_param("W", rng.normal(size=3).astype("float64"))
    mix.set_param("gamma", numpy.asarray([1.7], dtype="float64"))
    Xs = [rng.normal(size=(3, n, 4)) for n in (2, 0, 3)]
    dYs = [rng.normal(size=(n, 4)) for n in (2, 0, 3)]

    def loss() -> float:
        Ys, _ = mix(Xs, is_train=False)
        W = mix.get_param("W")
        return sum(float((Y * dY).sum()) for Y, dY in zip(Ys, dYs)) + 0.3 * float((W**2).sum())

    Ys, backprop = mix(Xs, is_train=True)
    dXs = backprop(dYs)
    eps = 1e-6
    for name in ("W", "gamma"):
        param = mix.get_param(name)
        for i in range(param.size):
            param[i] += eps
            up = loss()
            param[i] -= 2 * eps
            down = loss()
            param[i] += eps
            assert mix.get_grad(name)[i] == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-7)
    for X, dX in zip(Xs, dXs):
        for index in numpy.ndindex(*X.shape):
            X[index] += eps
            up = loss()
            X[index] -= 2 * eps
            down = loss()
            X[index] += eps
            assert dX[index] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-6)


def test_scalar_mix_starts_as_the_average() -> None:
    mix = ScalarMix(3, 2)
    mix.initialize()
    X = numpy.arange(12, dtype="float32").reshape(3, 2, 2)
    (Y,) = mix.predict([X])
    numpy.testing.assert_allclose(Y, X.mean(axis=0), rtol=1e-6)
    numpy.testing.assert_allclose(mix_weights(mix), [1 / 3] * 3, rtol=1e-6)


# ---------------------------------------------------------------------- listeners
def test_two_listeners_share_one_biLM_pass(bilm_files, monkeypatch) -> None:
    nlp = build_ner_textcat(bilm_files)
    elmo = nlp.get_pipe("elmo")
    assert elmo.listening_components == ["ner", "textcat"]
    examples = make_examples(nlp)
    calls = count_bilm_calls(monkeypatch)
    losses = train(nlp, examples, steps=2)  # spaCy's output layers start at zero: step 1 has no gradient
    # One biLM call for two listeners, each distinct sentence once; step 2 hits the cache.
    assert calls == [len({eg.text for eg in examples})]
    assert losses["ner"] > 0 and losses["textcat"] > 0
    ner_mix, cat_mix = (
        next(node for node in nlp.get_pipe(name).model.walk() if node.name == "elmo_scalar_mix")
        for name in ("ner", "textcat")
    )
    assert ner_mix is not cat_mix
    assert not numpy.allclose(ner_mix.get_param("W"), 0.0)  # each task learns its own mix


def test_frozen_biLM_keeps_its_weights_and_caches_features(bilm_files, monkeypatch) -> None:
    nlp = build_ner_textcat(bilm_files)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    before = [p.detach().clone() for p in bilm.parameters()]
    examples = make_examples(nlp)
    calls = count_bilm_calls(monkeypatch)
    train(nlp, examples, steps=3)
    assert calls == [len({eg.text for eg in examples})]  # epochs 2 and 3 come from the feature cache
    assert all(torch.equal(a, b) for a, b in zip(before, bilm.parameters()))
    assert len(nlp.get_pipe("elmo").model.attrs["feature_cache"]) == len({eg.text for eg in examples})


@pytest.mark.parametrize("freeze", [True, False])
def test_only_a_biLM_being_fine_tuned_has_a_loss_and_a_column_in_spacys_training_table(bilm_files, freeze) -> None:
    """spaCy's training table (its ConsoleLogger) has a loss column per trainable component: a
    frozen biLM's would read 0.00 at every step, so a frozen biLM is not trainable and has no loss."""
    nlp = build_ner_textcat(bilm_files, freeze=freeze)
    losses = train(nlp, make_examples(nlp))
    assert set(losses) == ({"ner", "textcat"} if freeze else {"elmo", "ner", "textcat"})
    assert nlp.get_pipe("elmo").is_trainable is not freeze
    table = io.StringIO()
    log_step, finalize = spacy.registry.loggers.get("spacy.ConsoleLogger.v3")()(nlp, stdout=table)
    log_step({"epoch": 0, "step": 1, "score": 0.0, "other_scores": {}, "losses": losses})
    finalize()
    header = table.getvalue().splitlines()[0].lower()
    assert "loss ner" in header and "loss textcat" in header
    assert ("loss elmo" in header) is not freeze


def test_dev_evaluation_reads_the_feature_cache_once_training_filled_it(bilm_files, monkeypatch) -> None:
    nlp = build_ner_textcat(bilm_files)
    examples = make_examples(nlp)
    calls = count_bilm_calls(monkeypatch)
    nlp.evaluate(examples)  # before training: no cache, the biLM runs
    assert calls and len(nlp.get_pipe("elmo").model.attrs["feature_cache"]) == 0
    train(nlp, examples)
    calls.clear()
    first = nlp.evaluate(examples)
    assert calls == [], "training cached these sentences: evaluation must not run the biLM"
    first.pop("speed")
    again = nlp.evaluate(examples)
    again.pop("speed")
    assert again == first


class CpuGradScaler:
    """thinc's PyTorchGradScaler logic (scale the output gradients, unscale the parameter
    gradients) on CPU, where thinc refuses to scale: a scale applied twice or an unscale
    missed would show in the gradients."""

    found_inf = False

    def __init__(self, scale: float) -> None:
        self.scale_factor = scale

    def scale(self, tensors, inplace=False):
        return (
            [t.mul_(self.scale_factor) for t in tensors]
            if isinstance(tensors, list)
            else tensors.mul_(self.scale_factor)
        )

    def unscale(self, tensors) -> bool:
        for tensor in tensors:
            tensor.div_(self.scale_factor)
        return False


@pytest.mark.parametrize("max_batch_tokens", [4096, 12])  # 12: one sentence per biLM batch
@pytest.mark.parametrize("scaled", [False, True])
def test_fine_tuning_sums_the_gradients_of_every_listener(bilm_files, max_batch_tokens: int, scaled: bool) -> None:
    """The biLM receives the sum of all listeners' gradients, scaled and unscaled exactly once.

    In float32, set: training's "auto" is bf16 on a CPU with AMX, whose products round the two
    paths' batches apart by far more than float32 does."""
    nlp = build_ner_textcat(bilm_files, freeze=False, max_batch_tokens=max_batch_tokens, precision="fp32")
    elmo = nlp.get_pipe("elmo")
    bilm = get_bilm(elmo.model)
    examples = make_examples(nlp, 3)
    docs = [eg.predicted for eg in examples]
    rng = numpy.random.default_rng(0)
    grads_a = [rng.normal(size=(N_LAYERS, len(doc), WIDTH)).astype("float32") for doc in docs]
    grads_b = [rng.normal(size=(N_LAYERS, len(doc), WIDTH)).astype("float32") for doc in docs]

    bilm.zero_grad()
    output = bilm([[t.text for t in doc] for doc in docs])
    loss = sum(
        (output.layers[:, row, 1 : len(doc) + 1] * torch.from_numpy(a + b)).sum()
        for row, (doc, a, b) in enumerate(zip(docs, grads_a, grads_b))
    )
    loss.backward()
    expected = [p.grad.clone() for p in bilm.parameters()]

    bilm.zero_grad()
    if scaled:
        elmo.model.shims[0]._grad_scaler = CpuGradScaler(1024.0)
    losses = {}
    elmo.update(examples, losses=losses)
    first, second = elmo.listeners
    first._backprop(grads_a)
    second._backprop(grads_b)
    for param, grad in zip(bilm.parameters(), expected):
        # Relative to the whole gradient: the two paths sum in other orders, and one-by-one
        # tolerances fail on float32 rounding where entries reach hundreds (relative error ~5e-6
        # here); a missing or doubled listener gradient is off by ~1.
        assert float((param.grad - grad).norm()) <= 1e-4 * float(grad.norm())
    assert losses["elmo"] == pytest.approx(sum(float((g**2).sum()) for g in grads_a + grads_b), rel=1e-5)


def test_fine_tuning_updates_the_biLM_in_training(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files, freeze=False)
    bilm = get_bilm(nlp.get_pipe("elmo").model)
    before = [p.detach().clone() for p in bilm.parameters()]
    losses = train(nlp, make_examples(nlp), steps=2)
    assert losses["elmo"] > 0
    assert not all(torch.equal(a, b) for a, b in zip(before, bilm.parameters()))


def test_learn_rate_scale_scales_the_biLM_steps_only(bilm_files) -> None:
    assert_learn_rate_scale_scales_the_biLM_steps_only(bilm_files)


@pytest.mark.parametrize("scale", [0.0, -0.1])
def test_learn_rate_scale_must_be_positive(bilm_files, scale: float) -> None:
    nlp = spacy.blank("xx")
    with pytest.raises(ValueError, match="freeze = true"):
        nlp.add_pipe("elmo", config=elmo_config(bilm_files, freeze=False, learn_rate_scale=scale))


@pytest.mark.parametrize("freeze", [True, False])
def test_listeners_drop_the_batch_after_backprop(bilm_files, freeze: bool) -> None:
    nlp = build_ner_textcat(bilm_files, freeze=freeze)
    listeners = nlp.get_pipe("elmo").listeners
    train(nlp, make_examples(nlp))
    for listener in listeners:  # no layers, callback or (fine-tuned) torch graph of the batch left
        assert (listener._batch_id, listener._outputs, listener._backprop) == (None, None, None)


def test_precision_options_reach_the_shim(bilm_files) -> None:
    nlp = spacy.blank("xx")
    nlp.add_pipe(
        "elmo",
        config=elmo_config(bilm_files, mixed_precision=True, grad_scaler_config={"enabled": True, "init_scale": 256.0}),
    )
    shim = nlp.get_pipe("elmo").model.shims[0]
    assert shim._mixed_precision is True
    assert shim._grad_scaler._enabled and float(shim._grad_scaler._scale) == 256.0


def test_missing_or_disabled_upstream_is_a_clear_error(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files)
    with nlp.select_pipes(disable=["elmo"]):
        with pytest.raises(ValueError, match="found no ELMo features"):
            nlp("Alice went home .")
    alone = spacy.blank("xx")
    alone.add_pipe(
        "ner",
        config={
            "model": {
                "@architectures": "spacy.TransitionBasedParser.v2",
                "state_type": "ner",
                "extra_state_tokens": False,
                "hidden_width": 16,
                "maxout_pieces": 2,
                "use_upper": True,
                "nO": None,
                "tok2vec": listener_config(),
            }
        },
    )
    alone.initialize(lambda: make_examples(alone))  # shape inference at initialization is fine
    with pytest.raises(ValueError, match="found no ELMo features"):
        alone("Alice went home .")
    with pytest.raises(ValueError, match="found no ELMo features"):
        alone.update(make_examples(alone))


def test_frozen_component_must_annotate(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files)
    examples = make_examples(nlp)
    with pytest.raises(ValueError, match="annotating_components"):
        nlp.update(examples, exclude=["elmo"])
    losses = nlp.update(examples, exclude=["elmo"], annotates=["elmo"])
    assert losses["ner"] > 0


def test_listener_with_wrong_sizes_names_them(bilm_files) -> None:
    with pytest.raises(ValueError, match="n_layers=3 and width=10, but the 'elmo' biLM gives 3 layers of width 16"):
        build_ner_textcat(bilm_files, listener={"width": 10})


def test_layer_norm_l2_and_embed_options_train(bilm_files) -> None:
    embed = {
        "@architectures": "spacy.MultiHashEmbed.v2",
        "width": 8,
        "attrs": ["NORM", "SHAPE"],
        "rows": [100, 50],
        "include_static_vectors": False,
    }
    mix = mix_config(layer_norm=True, l2=0.01, dropout=0.2)
    nlp = build_ner_textcat(bilm_files, listener={"mix": mix, "embed": embed})
    losses = train(nlp, make_examples(nlp), steps=2)
    assert losses["ner"] > 0
    assert nlp.get_pipe("textcat").model.get_ref("tok2vec").get_dim("nO") == WIDTH + 8


ENCODE = {
    "@architectures": "spacy.MaxoutWindowEncoder.v2",
    "width": 12,
    "depth": 2,
    "window_size": 1,
    "maxout_pieces": 3,
}


def test_encode_option_gives_the_encoder_width_and_learns(bilm_files) -> None:
    """ELMo (+ embed) -> maxout to the encoder's width -> encoder, as in spacy.Tok2Vec.v2."""
    embed = {
        "@architectures": "spacy.MultiHashEmbed.v2",
        "width": 8,
        "attrs": ["NORM"],
        "rows": [100],
        "include_static_vectors": False,
    }
    nlp = build_ner_textcat(bilm_files, listener={"embed": embed, "encode": ENCODE})
    assert nlp.get_pipe("textcat").model.get_ref("tok2vec").get_dim("nO") == 12
    examples = make_examples(nlp)
    optimizer = nlp.create_optimizer()
    losses = [nlp.update(examples, sgd=optimizer, losses={})["textcat"] for _ in range(60)]
    assert losses[-1] < losses[0] / 3  # 0.25 -> 0.03 here; the mix alone, no encoder: 0.25 -> 0.21
    assert all(
        max(doc.cats, key=doc.cats.get) == max(eg.reference.cats, key=eg.reference.cats.get)
        for doc, eg in zip(nlp.pipe([eg.text for eg in examples]), examples)
    )


def test_select_layers_keeps_values_and_passes_gradients_back() -> None:
    rng = numpy.random.default_rng(0)
    Xs = [rng.normal(size=(3, n, 4)).astype("float32") for n in (2, 0, 3)]
    chosen, backprop = SelectLayers([2, 0], 3)(Xs, is_train=True)
    for X, Y in zip(Xs, chosen):
        numpy.testing.assert_array_equal(Y, X[[2, 0]])
    dYs = [rng.normal(size=Y.shape).astype("float32") for Y in chosen]
    for dY, dX in zip(dYs, backprop(dYs)):
        numpy.testing.assert_array_equal(dX[[2, 0]], dY)
        assert not dX[1].any()  # the layer the task does not read takes no gradient


@pytest.mark.parametrize("layers", [[], [0, 0], [3]])
def test_layers_must_name_distinct_biLM_layers(layers) -> None:
    with pytest.raises(ValueError, match="layers must name distinct biLM layers from 0 to 2"):
        SelectLayers(layers, 3)


def test_listener_mixes_the_chosen_layers(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files, listener={"mix": mix_config(layers=[0])})
    tok2vec = nlp.get_pipe("textcat").model.get_ref("tok2vec")
    docs = [nlp.make_doc(text) for text in TEXTS]
    nlp.get_pipe("elmo").set_annotations(docs, nlp.get_pipe("elmo").predict(docs))
    layers = nlp.get_pipe("elmo").model.predict(docs)
    for output, doc_layers in zip(tok2vec.predict(docs), layers):
        numpy.testing.assert_allclose(output, doc_layers[0], rtol=1e-6)  # one layer: the untrained mix is it
    assert train(nlp, make_examples(nlp), steps=2)["ner"] > 0


def test_a_listener_without_a_mix_averages_all_layers(bilm_files) -> None:
    """The default mix: spacy_elmo.ScalarMix.v1 over every layer, which starts as their average."""
    nlp = build_ner_textcat(bilm_files)
    tok2vec = nlp.get_pipe("textcat").model.get_ref("tok2vec")
    docs = [nlp.make_doc(text) for text in TEXTS]
    nlp.get_pipe("elmo").set_annotations(docs, nlp.get_pipe("elmo").predict(docs))
    for output, doc_layers in zip(tok2vec.predict(docs), nlp.get_pipe("elmo").model.predict(docs)):
        assert_float32_close(output, doc_layers.mean(axis=0))


def test_the_removed_listener_switches_are_refused_by_the_config(bilm_files) -> None:
    with pytest.raises(ConfigValidationError, match="concat_layers"):
        build_ner_textcat(bilm_files, listener={"concat_layers": True})


def test_predictions_do_not_depend_on_the_batch(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files)
    train(nlp, make_examples(nlp), steps=2)
    singles = [nlp(text).cats for text in TEXTS]
    batched = [doc.cats for doc in nlp.pipe(TEXTS)]
    for one, many in zip(singles, batched):
        assert one == pytest.approx(many, abs=FLOAT32_RTOL)


def test_replace_listeners_makes_components_independent(bilm_files, tmp_path) -> None:
    nlp = build_ner_textcat(bilm_files)
    train(nlp, make_examples(nlp), steps=2)
    expected = [(doc.cats, [(e.text, e.label_) for e in doc.ents]) for doc in nlp.pipe(TEXTS)]
    nlp.replace_listeners("elmo", "textcat", ["model.tok2vec"])
    assert nlp.get_pipe("elmo").listening_components == ["ner"]
    assert nlp.config["components"]["textcat"]["model"]["tok2vec"]["bilm"]["@architectures"] == "spacy_elmo.ElmoBiLM.v1"
    with nlp.select_pipes(disable=["elmo", "ner"]):
        cats = [doc.cats for doc in nlp.pipe(TEXTS)]
    for got, (want, _) in zip(cats, expected):
        assert got == pytest.approx(want, abs=FLOAT32_RTOL)
    nlp.to_disk(tmp_path / "replaced")
    loaded = spacy.load(tmp_path / "replaced")
    for doc, (cats, ents) in zip(loaded.pipe(TEXTS), expected):
        assert doc.cats == pytest.approx(cats, abs=FLOAT32_RTOL)
        assert [(e.text, e.label_) for e in doc.ents] == ents
    train(loaded, make_examples(loaded), steps=1)  # the replaced component still trains


def test_sourced_components_keep_listening(bilm_files, tmp_path) -> None:
    nlp = build_ner_textcat(bilm_files)
    train(nlp, make_examples(nlp), steps=2)
    expected = [doc.cats for doc in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "source")
    target = spacy.blank("xx")
    source = spacy.load(tmp_path / "source")
    target.add_pipe("elmo", source=source)
    target.add_pipe("textcat", source=source)
    assert target.get_pipe("elmo").listening_components == ["textcat"]
    for doc, cats in zip(target.pipe(TEXTS), expected):
        assert doc.cats == pytest.approx(cats, abs=FLOAT32_RTOL)


def test_trained_pipeline_round_trips_to_disk(bilm_files, tmp_path) -> None:
    nlp = build_ner_textcat(bilm_files, listener={"mix": mix_config(l2=0.1)})
    train(nlp, make_examples(nlp), steps=2)
    expected = [(doc.tensor, doc.cats) for doc in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "trained")
    loaded = spacy.load(tmp_path / "trained")
    saved_state = get_bilm(nlp.get_pipe("elmo").model).state_dict()
    for name, value in get_bilm(loaded.get_pipe("elmo").model).state_dict().items():
        assert torch.equal(value, saved_state[name]), name
    # Same weights; the original's token cache holds char-CNN outputs computed in other batch
    # shapes during training, which may differ in the last float bits.
    for doc, (tensor, cats) in zip(loaded.pipe(TEXTS), expected):
        numpy.testing.assert_allclose(doc.tensor, tensor, atol=1e-5)
        assert doc.cats == pytest.approx(cats, abs=FLOAT32_RTOL)


def test_textcat_listener_with_static_vectors_initializes(bilm_files) -> None:
    """TextCatReduce hands its labels to a tok2vec of unknown width; the embedding must not take
    the number of labels for its width ("Attempt to change dimension 'nO' ... from 8 to 2")."""
    embed = {
        "@architectures": "spacy.MultiHashEmbed.v2",
        "width": 8,
        "attrs": ["NORM"],
        "rows": [100],
        "include_static_vectors": True,
    }
    nlp = spacy.blank("xx")
    for i, word in enumerate(["went", "home", "It", "was", "great", "awful", "."]):
        nlp.vocab.set_vector(word, numpy.full(4, i, dtype="f"))
    nlp.add_pipe("elmo", config=elmo_config(bilm_files))
    nlp.add_pipe(
        "textcat",
        config={
            "model": {
                "@architectures": "spacy.TextCatReduce.v1",
                "exclusive_classes": True,
                "use_reduce_first": False,
                "use_reduce_last": False,
                "use_reduce_max": False,
                "use_reduce_mean": True,
                "nO": None,
                "tok2vec": listener_config(embed=embed),
            }
        },
    )
    nlp.initialize(lambda: make_examples(nlp))
    assert nlp.get_pipe("textcat").model.get_ref("tok2vec").get_dim("nO") == WIDTH + 8
    assert train(nlp, make_examples(nlp), steps=1)["textcat"] > 0


# ---------------------------------------------------------------------- per-doc features
def assert_released(docs) -> None:
    for doc in docs:
        assert doc._.elmo_features is None and doc._.elmo_features_unread is None


def test_pipe_releases_the_features_once_every_listener_has_read_them(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files)
    train(nlp, make_examples(nlp), steps=2)
    elmo, ner, textcat = (nlp.get_pipe(name) for name in ("elmo", "ner", "textcat"))
    # The reference: features set by hand, without the ids of unread listeners, are kept.
    kept = [nlp.make_doc(text) for text in TEXTS]
    for doc, layers in zip(kept, elmo.predict(kept)):
        doc._.elmo_features = layers
    for component in (ner, textcat):
        component.set_annotations(kept, component.predict(kept))
    assert all(doc._.elmo_features is not None for doc in kept)
    piped = list(nlp.pipe(TEXTS))
    assert_released(piped)
    for got, want in zip(piped, kept):
        assert got.cats == pytest.approx(want.cats, rel=1e-5)
        assert [(e.text, e.label_) for e in got.ents] == [(e.text, e.label_) for e in want.ents]
        assert got.tensor.shape == (len(got), WIDTH)  # what the user asked for stays


def test_features_wait_for_every_listener_whatever_the_order(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files)
    elmo, ner, textcat = (nlp.get_pipe(name) for name in ("elmo", "ner", "textcat"))
    docs = [nlp.make_doc(text) for text in TEXTS]
    elmo.set_annotations(docs, elmo.predict(docs))
    textcat.set_annotations(docs, textcat.predict(docs))
    (ner_listener,) = elmo.listener_map["ner"]
    for doc in docs:
        assert doc._.elmo_features is not None and doc._.elmo_features_unread == (ner_listener.id,)
    ner.set_annotations(docs, ner.predict(docs))
    assert_released(docs)
    with pytest.raises(ValueError, match="run 'elmo' on it again first"):
        ner.predict(docs)


def test_replaced_listeners_are_not_waited_for_and_without_listeners_nothing_is_kept(bilm_files) -> None:
    nlp = build_ner_textcat(bilm_files)
    nlp.replace_listeners("elmo", "textcat", ["model.tok2vec"])
    assert_released(nlp.pipe(TEXTS))
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    with nlp.select_pipes(enable=["elmo"]):
        docs = list(nlp.pipe(TEXTS))
    assert_released(docs)
    assert all(doc._.elmo_layers is None for doc in docs)


def test_without_listeners_only_the_layers_asked_for_are_kept(nlp_elmo) -> None:
    docs = list(nlp_elmo.pipe(TEXTS))
    assert_released(docs)
    for doc in docs:  # store_layers = true in this fixture
        assert isinstance(doc._.elmo_layers, numpy.ndarray) and doc._.elmo_layers.shape == (N_LAYERS, len(doc), WIDTH)


def test_annotating_listeners_read_the_features_twice_in_a_training_step(bilm_files) -> None:
    """A component in [training.annotating_components] reads in its update and again when it
    annotates; the features must outlive both reads and the next components' update."""
    nlp = build_ner_textcat(bilm_files)
    losses = {}
    for _ in range(2):
        nlp.update(make_examples(nlp), exclude=["elmo"], annotates=["elmo", "ner", "textcat"], losses=losses)
    assert losses["ner"] > 0 and losses["textcat"] > 0
