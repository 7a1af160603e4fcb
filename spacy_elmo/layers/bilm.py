"""The biLM as a Thinc layer: ``List[Doc]`` in, one ``(n_layers + 1, n_tokens, width)`` array per doc out.

The shim (:class:`~spacy_elmo.layers.bilm_shim.BiLMShim`) runs the layer's own runtime holding the
biLM (:func:`get_runtime`, :func:`get_bilm`) on the device of thinc's current ops. It is made lazily,
in ``model.initialize()`` (from standard files, or fresh of the configured sizes) or when weights
are deserialized, so a config that names weight files reads them exactly once and a saved
pipeline never goes back to them.

Two forward paths: a frozen one (prediction, or a frozen biLM in training), which writes each biLM
batch into the docs' outputs as it is computed and reuses what the feature cache or a feature
store holds, and a trainable one, which keeps every batch for the backward pass.
"""

import warnings
from functools import partial
from itertools import accumulate
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple, cast

import numpy
import torch
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model, Ops, get_torch_default_device, torch2xp, xp2torch
from thinc.types import Floats1d, Floats2d, Floats3d

from ..batching import Batcher, BatchPolicy, Request
from ..bilm import BiLM, ElmoOptions
from ..bilm.compute_thread import on_compute_thread
from ..bilm.runtime import BiLMRuntime
from ..published.resolve import resolve_files
from .arrays import no_backprop, split_by_lengths
from .bilm_settings import ElmoBiLMSettings
from .bilm_shim import BiLMShim
from .feature_cache import FeatureCache
from .language import BUNDLED, DEFAULT_PRETRAINED
from .segmentation import SKIPPED, Placement, SegmentPlan, plan_segments

InT = List[Doc]
OutT = List[Floats3d]  # per doc: (n_layers + 1, n_tokens, width)


UNTRAINED_WARNING = (
    "spacy_elmo: the 'elmo' component built a biLM with random, untrained weights, so its "
    "vectors carry no meaning yet. Load pretrained ELMo weights (bilm-tf / AllenNLP format) "
    "with nlp.add_pipe('elmo', config={'model': {'pretrained': NAME_URL_OR_DIRECTORY}}) (names: "
    "`spacy-elmo models`) or the same key under [components.elmo.model] in config.cfg."
)


def ElmoBiLMLayer(settings: ElmoBiLMSettings) -> Model[InT, OutT]:
    """The biLM layer of ``settings`` (see :class:`ElmoBiLMSettings`): from its files if given, else
    from ``pretrained``, else fresh of its sizes. Names and URLs are resolved (downloaded if need
    be) in ``initialize``, never here, so that loading a saved pipeline reads nothing but its own
    files.

    Dims: ``nO`` the width of every layer (2 x projection_dim), ``nL`` the number of layers
    (n_layers + 1); known at construction for a fresh model, at initialization for files.
    """
    from_files = settings.options_file is not None or settings.pretrained is not None
    fresh = None if from_files else ElmoOptions(**settings.sizes)
    return Model(
        "elmo_bilm",
        forward,
        init=init,
        shims=[BiLMShim(None, settings.mixed_precision, settings.grad_scaler(), settings.learn_rate_scale)],
        dims={"nO": None if fresh is None else fresh.output_dim, "nL": None if fresh is None else fresh.n_layers + 1},
        attrs={
            "pretrained": settings.pretrained,
            "options_file": str(settings.options_file) if settings.options_file is not None else None,
            "weight_file": str(settings.weight_file) if settings.weight_file is not None else None,
            "sizes": settings.sizes,
            "bilm_settings": settings.bilm_settings,
            "freeze": settings.freeze,
            "window": settings.window,
            "overlap": settings.overlap,
            "feature_cache": FeatureCache(int(settings.feature_cache_mb * 2**20)),
            # threads calling the pipeline at once share biLM calls; None: calls run as they come
            # (a service's worker is the pipeline's only caller)
            "batcher": Batcher(BatchPolicy(max_batch_tokens=settings.bilm_settings.max_batch_tokens)),
            "replace_listener_cfg": replace_listener_cfg,
        },
    )


def replace_listener_cfg(bilm_cfg: dict, listener_cfg: dict) -> dict:
    """Config of a listener whose upstream biLM now lives inside it (``nlp.replace_listeners``)."""
    return {**listener_cfg, "bilm": bilm_cfg}


def get_runtime(model: Model[InT, OutT]) -> BiLMRuntime:
    """The layer's own runtime (precision, caches, states); a clear error before ``nlp.initialize()``."""
    runtime = model.shims[0]._model
    if runtime is None:
        raise ValueError(
            "The elmo biLM has no weights yet: call nlp.initialize() (it loads the configured "
            "options_file/weight_file or the bundled biLM, or builds a fresh one), or load a saved pipeline."
        )
    return runtime


def get_bilm(model: Model[InT, OutT]) -> BiLM:
    """The biLM of an initialized layer (the network; its runtime: :func:`get_runtime`)."""
    return cast(BiLM, get_runtime(model).model)


def set_bilm(model: Model[InT, OutT], bilm: BiLM) -> None:
    """Install ``bilm``, run by a runtime of the layer's settings, on thinc's device; its sizes as dims."""
    shim = model.shims[0]
    shim._model = BiLMRuntime(bilm.to(get_torch_default_device()), model.attrs["bilm_settings"])
    shim._grad_scaler.to_(shim.device)
    model.set_dim("nO", bilm.output_dim, force=True)
    model.set_dim("nL", bilm.n_output_layers, force=True)
    model.attrs["feature_cache"].clear()


def init(model: Model[InT, OutT], X: Optional[InT] = None, Y: Optional[OutT] = None) -> None:
    """Make the biLM once: from the named files, else fresh (with a warning). Loaded weights stay."""
    if model.shims[0]._model is not None:
        return
    settings = model.attrs["bilm_settings"].to_dict()
    sizes = model.attrs["sizes"]
    if model.attrs["options_file"] is not None:
        files = resolve_files(model.attrs["options_file"], model.attrs["weight_file"], check=BiLM.from_files)
        bilm = BiLM.from_files(*files, **settings)
        check_sizes(sizes, bilm.options, str(files[0]))
    elif model.attrs["pretrained"] is not None:  # downloaded if need be, its weights read once
        # "default" is resolved by the elmo component for its pipeline's language; a layer built
        # on its own knows no language and takes the bundled English biLM
        spec = BUNDLED["en"] if model.attrs["pretrained"] == DEFAULT_PRETRAINED else model.attrs["pretrained"]
        bilm = BiLM.from_pretrained(spec, **settings)
        check_sizes(sizes, bilm.options, spec)
    else:
        warnings.warn(UNTRAINED_WARNING, UserWarning, stacklevel=2)
        bilm = BiLM(ElmoOptions(**sizes), **settings)
    set_bilm(model, bilm)


def check_sizes(sizes: Dict[str, Any], options: ElmoOptions, options_file: str) -> None:
    """Refuse sizes in the config that the biLM files contradict: the config would misinform."""
    wrong = {name: value for name, value in sizes.items() if getattr(options, name) != value}
    if wrong:
        shown = ", ".join(f"{name} = {value} (the files: {getattr(options, name)})" for name, value in wrong.items())
        raise ValueError(
            f"elmo: the config sets {shown}, but the biLM comes from {options_file}. "
            "Set these sizes to null in [components.elmo.model]: the files decide them."
        )


def forward(model: Model[InT, OutT], docs: InT, is_train: bool) -> Tuple[OutT, Callable[[OutT], InT]]:
    """Each doc's layers; trained through (a biLM not frozen, in training) or not (see :func:`_run_frozen`)."""
    plan = plan_segments(docs, model.attrs["window"], model.attrs["overlap"])
    if not is_train or model.attrs["freeze"]:
        cache = model.attrs["feature_cache"]
        cache.used_in_training |= is_train  # here only with a frozen biLM, whose features stay valid
        return _run_frozen(model, docs, plan, use_cache=cache.used_in_training), no_backprop
    flat, backprop_flat = _run_trainable(model, plan.sentences)
    xp = model.ops.xp
    # One zero column at the end is the source of every skipped (whitespace) token.
    padded = xp.concatenate([flat, xp.zeros((flat.shape[0], 1, flat.shape[2]), dtype=flat.dtype)], axis=1)
    index = numpy.concatenate(plan.sources) if plan.sources else numpy.zeros(0, dtype="int64")
    index[index == SKIPPED] = plan.n_positions
    index = model.ops.asarray1i(index)
    outputs = split_by_lengths(xp, padded[:, index], [len(doc) for doc in docs], axis=1)

    def backprop(d_outputs: OutT) -> InT:
        d_padded = xp.zeros_like(padded)
        d_padded[:, index] = xp.concatenate(d_outputs, axis=1)
        backprop_flat(d_padded[:, :-1])
        return []

    return outputs, backprop


def predict_mixed(model: Model[InT, OutT], docs: InT, weights: Floats1d) -> List[Floats2d]:
    """Each doc's weighted sum of its layers, ``weights`` (n_layers + 1,): (n_tokens, width).

    What a pipeline without listeners keeps: each biLM batch is mixed as soon as it is
    computed, so the docs' layers, n_layers + 1 times as large, are never held at once.
    """
    plan = plan_segments(docs, model.attrs["window"], model.attrs["overlap"])
    return [mixed[0] for mixed in _run_frozen(model, docs, plan, use_cache=False, mix=weights)]


def _run_frozen(
    model: Model[InT, OutT], docs: InT, plan: SegmentPlan, use_cache: bool, mix: Optional[Floats1d] = None
) -> OutT:
    """Each doc's layers, (n_layers + 1, n_tokens, width), with no gradient recorded; with
    ``mix`` (n_layers + 1,), their weighted sum, (1, n_tokens, width), made by the biLM as it
    computes the layers (the feature cache, of whole layers, is then not used).

    Every biLM batch is written into the docs' output array as soon as it is computed, so
    besides the outputs, memory holds one batch (and the feature cache), whatever the length of
    the docs. With ``use_cache``, results are looked up in and added to the bounded feature cache
    (not in ``"carry"`` mode, where outputs depend on call history). Sentences not cached are
    looked up in the ``feature_store`` attr when the component set one (``features``). A
    sentence that occurs several times runs once (not in carry mode: there, rows matter).
    """
    runtime = get_runtime(model)
    doc_lengths = [len(doc) for doc in docs]
    flat = model.ops.alloc3f(model.get_dim("nL") if mix is None else 1, sum(doc_lengths), model.get_dim("nO"))
    placement = Placement(flat, plan, doc_lengths)
    held = model.attrs["feature_cache"]  # whole layers, where the outputs depend on the sentence alone
    usable = use_cache and mix is None and runtime.state_mode != "carry" and held.max_bytes != 0
    cache = held if usable else None
    groups = _distinct_inputs(plan.sentences, carry=runtime.state_mode == "carry")
    found = _held_layers(model, runtime, cache, [tuple(plan.sentences[group[0]]) for group in groups])
    _place_held(model.ops, placement, [(group, value) for group, value in zip(groups, found) if value is not None], mix)
    todo = [group for group, value in zip(groups, found) if value is None]
    _compute_and_place(model, plan.sentences, todo, placement, cache, mix)
    return split_by_lengths(model.ops.xp, flat, doc_lengths, axis=1)


def _distinct_inputs(sentences: Sequence[Sequence[str]], carry: bool) -> List[List[int]]:
    """The sentences that share one biLM row, as groups of indices: the same tokens, in first-seen
    order; in ``carry`` mode each sentence alone (its output depends on the rows before it)."""
    copies: Dict[Tuple[Hashable, ...], List[int]] = {}
    for i, sentence in enumerate(sentences):
        copies.setdefault((i,) if carry else tuple(sentence), []).append(i)
    return list(copies.values())


def _held_layers(
    model: Model[InT, OutT], runtime: BiLMRuntime, cache: Optional[FeatureCache], keys: Sequence[Tuple[str, ...]]
) -> List[Optional[Floats3d]]:
    """Each key's layers, (n_layers + 1, len(key), width), from the feature cache, else from the
    ``feature_store`` attr (precomputed: :class:`spacy_elmo.embed.store.FeatureStore`); None where
    neither holds them."""
    found = cache.get_many(keys, runtime.fingerprint()) if cache is not None else [None] * len(keys)
    store = model.attrs.get("feature_store")
    if store is not None:
        missing = [k for k, value in enumerate(found) if value is None]
        for k, value in zip(missing, store.get_many([keys[k] for k in missing], runtime)):
            found[k] = model.ops.asarray3f(value) if value is not None else None
    return found


def _place_held(
    ops: Ops, placement: Placement, held: Sequence[Tuple[List[int], Floats3d]], mix: Optional[Floats1d]
) -> None:
    """Write held layers into the outputs: each group's sentences take its value, (n_layers + 1,
    n, width), mixed first with ``mix``; all groups in one write, their values side by side."""
    if not held:
        return
    columns = numpy.cumsum([0] + [value.shape[1] for _, value in held[:-1]])
    values = ops.xp.concatenate([value for _, value in held], axis=1)
    if mix is not None:
        values = ops.xp.tensordot(mix, values, axes=1)[None]
    placement.write([(i, first) for (group, _), first in zip(held, columns) for i in group], values)


def _compute_and_place(
    model: Model[InT, OutT],
    sentences: Sequence[List[str]],
    todo: Sequence[List[int]],
    placement: Placement,
    cache: Optional[FeatureCache],
    mix: Optional[Floats1d],
) -> None:
    """Run the biLM on one sentence of each group in ``todo``, batch by batch, and write each batch
    into the outputs (every sentence of its group) and the ``cache``, before the next is made."""
    if not todo:
        return
    runtime, ops = get_runtime(model), model.ops
    weights = None if mix is None else [float(w) for w in ops.to_numpy(mix)]
    compute = partial(_predict, model.shims[0], weights)
    batcher: Optional[Batcher] = model.attrs["batcher"]
    for batch in runtime.batches([sentences[group[0]] for group in todo]):
        batch_sentences = [sentences[todo[b][0]] for b in batch]
        if runtime.state_mode == "carry" or batcher is None:  # carry: a row depends on the calls before it
            output = compute(batch_sentences)
        else:
            run = partial(_run_joined, compute, runtime.model.device.type == "cpu")
            width = max(len(sentence) for sentence in batch_sentences) + 2
            output = batcher.call(Request(batch_sentences, width, run, key=None if weights is None else tuple(weights)))
        layers = torch2xp(output.float(), ops=ops)  # (n_layers + 1, rows, time, width)
        del output
        n_layers, rows, n_steps, width = layers.shape
        # the rows' positions as columns: row r's sentence starts at column r * n_steps + 1
        placement.write(
            [(i, row * n_steps + 1) for row, b in enumerate(batch) for i in todo[b]],
            layers.reshape(n_layers, rows * n_steps, width),
        )
        if cache is not None:
            for row, sentence in enumerate(batch_sentences):
                cache.put(tuple(sentence), ops.xp.ascontiguousarray(layers[:, row, 1 : len(sentence) + 1]))
        del layers  # freed before the next batch's are made: one batch's layers at a time


def _predict(shim: BiLMShim, mix: Optional[List[float]], sentences: Sequence[Sequence[str]]) -> torch.Tensor:
    """The biLM's layers of ``sentences``, mixed with ``mix`` if given: (n_layers + 1 or 1, rows, time, width)."""
    return shim.predict(ArgsKwargs(args=(sentences,), kwargs={"mix": mix})).layers


def _run_joined(
    compute: Callable[[Sequence[Sequence[str]]], torch.Tensor],
    on_cpu: bool,
    requests: Sequence[Sequence[Sequence[str]]],
) -> List[torch.Tensor]:
    """One biLM call for the sentences of ``requests`` (threads' calls the batcher joined), on the
    process's compute thread where it runs on a CPU (:mod:`spacy_elmo.bilm.compute_thread`); each
    request its own rows, as many positions as its own longest sentence."""
    sentences = [sentence for request in requests for sentence in request]
    layers = on_compute_thread(compute, sentences) if on_cpu else compute(sentences)
    if len(requests) == 1:
        return [layers]
    ends = accumulate(len(request) for request in requests)
    return [layers[:, end - len(request) : end, : max(map(len, request)) + 2] for request, end in zip(requests, ends)]


def _run_trainable(model: Model[InT, OutT], sentences: List[List[str]]) -> Tuple[Floats3d, Callable[[Floats3d], None]]:
    """As :func:`_run_frozen`, with gradients: returns the layers and their backprop callback."""
    shim, xp = model.shims[0], model.ops.xp
    found: List[Optional[Floats3d]] = [None] * len(sentences)
    chunks = []  # (rows, torch layers, xp layers, shim backprop) per biLM batch
    for rows in get_runtime(model).batches(sentences) if sentences else ():
        output, shim_backprop = shim.begin_update(ArgsKwargs(args=([sentences[i] for i in rows],), kwargs={}))
        layers_t = output.layers.float()
        layers = torch2xp(layers_t, ops=model.ops)
        for row, i in enumerate(rows):
            found[i] = layers[:, row, 1 : len(sentences[i]) + 1]
        chunks.append((rows, layers_t, layers, shim_backprop))

    def backprop_flat(d_flat: Floats3d) -> None:
        if not chunks:
            return
        d_sentences = split_by_lengths(xp, d_flat, [len(s) for s in sentences], axis=1)
        grads = []
        for rows, _, layers, _ in chunks:
            d_layers = xp.zeros_like(layers)
            for row, i in enumerate(rows):
                d_layers[:, row, 1 : len(sentences[i]) + 1] = d_sentences[i]
            grads.append(xp2torch(d_layers, device=shim.device))
        # One backward pass over every batch, through the last shim callback: the grad scaler
        # must scale and unscale the accumulated parameter gradients exactly once.
        chunks[-1][3](ArgsKwargs(args=([chunk[1] for chunk in chunks],), kwargs={"grad_tensors": grads}))

    flat = xp.concatenate(found, axis=1) if found else model.ops.alloc3f(model.get_dim("nL"), 0, model.get_dim("nO"))
    return flat, backprop_flat
