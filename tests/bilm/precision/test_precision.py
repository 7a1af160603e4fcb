"""The precision setting of the biLM: validation, "auto", the bf16 accuracy contract, caches.

bf16 products run on every x86 CPU torch supports (emulated where the CPU lacks bf16
instructions: slowly, but with the same roundings), so these tests skip only where torch
cannot multiply bf16 at all.
"""

import threading
import types

import numpy
import pytest
import torch

from spacy_elmo import BiLM, pretrained_files
from spacy_elmo.bilm import runtime as runtime_module
from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels import kernel_for
from spacy_elmo.bilm.kernels.cell import double_cell_input_
from spacy_elmo.bilm.precision import hardware, resolved
from spacy_elmo.bilm.precision.hardware import Hardware

from ...helpers import (
    MIN_MEAN_COSINE,
    REAL_TEXT,
    cuda_fp32_precision,
    mean_cosines,
    random_bilm,
    record_own_precision,
    tiny_options,
)


def _can_multiply_bf16() -> bool:
    try:
        torch.ones(2, 2, dtype=torch.bfloat16) @ torch.ones(2, 2, dtype=torch.bfloat16)
    except RuntimeError:
        return False
    return True


CPU = torch.device("cpu")

needs_bf16 = pytest.mark.skipif(not _can_multiply_bf16(), reason="this torch build cannot multiply bfloat16 on CPU")


@pytest.fixture(scope="module")
def bundled_files():
    return pretrained_files("en")


def test_an_unknown_precision_names_the_allowed_ones():
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, int8, auto, got 'fp16'"):
        BiLM(tiny_options(), precision="fp16")
    model = random_bilm()
    with pytest.raises(ValueError, match="fp32, bf16, int8, auto"):
        model.runtime.precision = "float32"
    assert model.runtime.precision == "fp32"


# Each setting decided on each device for training and inference, on hardware faked in the test:
# measurements that pick int8 for inference and bf16 for training (what the model would time for
# each use), a GPU that multiplies bf16 natively; "mps" stands for any other device.
DECISIONS = [
    ("fp32", "cpu", False, "fp32"),
    ("fp32", "cpu", True, "fp32"),
    ("bf16", "cpu", False, "bf16"),
    ("bf16", "cpu", True, "bf16"),
    ("int8", "cpu", False, "int8"),
    ("int8", "cpu", True, "int8"),  # decided as set: a call with gradients refuses it (test_int8.py)
    ("auto", "cpu", False, "int8"),  # inference: the measured choice
    ("auto", "cpu", True, "bf16"),  # training: its own measured choice
    ("fp32", "cuda:0", False, "fp32"),
    ("bf16", "cuda:0", True, "bf16"),
    ("auto", "cuda:0", False, "bf16"),
    ("auto", "cuda:0", True, "bf16"),
    ("fp32", "mps", False, "fp32"),
    ("auto", "mps", False, "fp32"),
    ("auto", "mps", True, "fp32"),
]


@pytest.mark.parametrize("setting, device, training, expected", DECISIONS)
def test_products_decide_each_setting_per_device_and_use(setting, device, training, expected):
    bf16_gpu = Hardware(cuda=types.SimpleNamespace(get_device_capability=lambda device: (8, 0)))
    asked = []

    def measured() -> str:
        asked.append(1)
        return "bf16" if training else "int8"

    found = resolved.ResolvedPrecision.resolve(setting, torch.device(device), training, measured, bf16_gpu)
    assert found == resolved.ResolvedPrecision(expected)
    assert len(asked) == ((setting, device) == ("auto", "cpu"))  # asked only where it decides


@pytest.mark.parametrize("override, expected", [(None, "fp32"), ("fp32", "fp32"), ("bf16", "bf16"), ("int8", "fp32")])
@pytest.mark.parametrize("training", [False, True])
def test_auto_on_a_cpu_without_a_model_to_time_is_fp32_or_what_the_environment_names(
    monkeypatch, training, override, expected
):
    """What a caller without a model to time gets: no precision is known to be faster than fp32 there."""
    if override is None:
        monkeypatch.delenv(settings.PRECISION_ENV)  # set by tests/conftest.py
    else:
        monkeypatch.setenv(settings.PRECISION_ENV, override)
    assert resolved.ResolvedPrecision.resolve("auto", CPU, training) == resolved.ResolvedPrecision(expected)


@pytest.mark.parametrize("device", ["cuda:0", "mps"])
@pytest.mark.parametrize("training", [False, True])
def test_int8_is_decided_on_a_cpu_only(device, training):
    with pytest.raises(ValueError, match=f"'int8' runs on a CPU only .*this biLM is on {device}: use"):
        resolved.ResolvedPrecision.resolve("int8", torch.device(device), training)


@pytest.mark.parametrize(
    "name, recorded, dtype",
    [("fp32", "float32", torch.float32), ("bf16", "bfloat16", torch.bfloat16), ("int8", "qint8", torch.qint8)],
)
def test_products_are_recorded_by_their_dtypes_name_and_read_back(name, recorded, dtype):
    products = resolved.ResolvedPrecision(name)
    assert (products.recorded, products.dtype) == (recorded, dtype)
    assert resolved.ResolvedPrecision.from_recorded(recorded) == products


def test_products_are_decided_ones_and_a_recorded_name_must_be_known():
    with pytest.raises(ValueError, match="products run in fp32, bf16 or int8, not 'auto'"):
        resolved.ResolvedPrecision("auto")
    with pytest.raises(ValueError, match="unknown matrix products 'float16'"):
        resolved.ResolvedPrecision.from_recorded("float16")


SERVES = {  # stored products -> the settings whose biLM they may stand in for
    "float32": {"fp32", "bf16", "int8", "auto"},
    "bfloat16": {"bf16", "auto"},
    "qint8": {"int8", "auto"},
}


@pytest.mark.parametrize("stored", sorted(SERVES))
def test_stored_products_serve_their_own_setting_and_auto_and_float32_serves_every_setting(stored):
    products = resolved.ResolvedPrecision.from_recorded(stored)
    assert {setting for setting in resolved.PRECISIONS if products.serves(setting)} == SERVES[stored]


def test_an_explicit_setting_is_what_the_products_run_in():
    assert BiLM(tiny_options(), precision="fp32").runtime.resolved_precision.dtype == torch.float32
    assert BiLM(tiny_options(), precision="bf16").runtime.resolved_precision.dtype == torch.bfloat16
    assert BiLM(tiny_options(), precision="int8").runtime.resolved_precision.dtype == torch.qint8


@pytest.mark.parametrize(
    "features, native",
    [
        ({"amx_bf16": True, "avx512_bf16": False}, True),
        ({"amx_bf16": False, "avx512_bf16": True}, True),
        ({"avx2": True, "avx512_f": True, "amx_bf16": False, "avx512_bf16": False}, False),  # emulated
        ({"architecture": "arm64"}, False),
    ],
)
def test_the_probe_reads_torchs_cpu_capabilities(features, native):
    assert Hardware(cpu_capabilities=lambda: features).cpu_has_native_bf16() is native


@needs_bf16
def test_bf16_layers_keep_the_accuracy_contract_on_a_trained_bilm(bundled_files):
    """The contract: mean per-token cosine to float32 of at least 0.999 in every layer."""
    fp32 = BiLM.from_files(*bundled_files, precision="fp32")
    bf16 = BiLM.from_files(*bundled_files, precision="bf16")
    expected = numpy.concatenate(fp32.embed_sentences(REAL_TEXT), axis=1)
    outputs = bf16.embed_sentences(REAL_TEXT)
    assert all(layers.dtype == numpy.float32 for layers in outputs)
    found = numpy.concatenate(outputs, axis=1)
    assert numpy.abs(found - expected).max() > 0  # the products did run in bf16
    assert (mean_cosines(found, expected) >= MIN_MEAN_COSINE).all(), mean_cosines(found, expected)
    assert all(p.dtype == torch.float32 for p in bf16.state_dict().values())


@needs_bf16
def test_cached_results_never_cross_precisions():
    """Token encodings (and, through the fingerprint, features) computed in one precision are not
    served in the other."""
    model = random_bilm(cache_size=100)
    fp32_fingerprint = model.runtime.fingerprint()
    fp32 = model.embed_sentences(REAL_TEXT[:2])
    model.runtime.precision = "bf16"
    assert model.runtime.fingerprint() != fp32_fingerprint
    bf16 = model.embed_sentences(REAL_TEXT[:2])
    fresh = random_bilm(precision="bf16", cache_size=0).embed_sentences(REAL_TEXT[:2])
    for cached, uncached, full in zip(bf16, fresh, fp32):
        numpy.testing.assert_array_equal(cached, uncached)
        assert not numpy.array_equal(cached[0], full[0])


@needs_bf16
def test_bf16_weight_copies_follow_changed_weights():
    model = random_bilm(precision="bf16", cache_size=0)
    model.embed_sentences(REAL_TEXT[:1])  # makes the bf16 copies
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(0.9)
    changed = model.embed_sentences(REAL_TEXT[:1])[0]
    reference = random_bilm(precision="bf16", cache_size=0)
    with torch.no_grad():
        for param in reference.parameters():
            param.mul_(0.9)
    numpy.testing.assert_array_equal(changed, reference.embed_sentences(REAL_TEXT[:1])[0])


def test_bf16_lstm_copies_on_a_cpu_are_laid_out_output_major():
    """oneDNN's bf16 kernels read an (out, in) weight fastest: the copies are stored so, and
    served as (in, out) views of the same values, scaled for the in-place cell (exactly)."""
    stack = random_bilm().lstm
    layer = stack.layers[0]
    kernel = kernel_for(torch.bfloat16, torch.device("cpu"), stack.copies)
    with torch.no_grad():
        weights = kernel.weights(0, layer)
        scaled = (
            double_cell_input_(layer.input_weight.clone()),
            double_cell_input_(layer.hidden_weight.clone()),
            layer.projection * 2.0,
        )
    for weight, parameter in zip(weights[:3], scaled):
        assert weight.dtype == torch.bfloat16 and weight.transpose(1, 2).is_contiguous()
        assert torch.equal(weight, parameter.to(torch.bfloat16))


@needs_bf16
def test_an_autocast_around_the_bilm_does_not_change_its_precision():
    """The failure of issue 11: autocast around embed_sentences broke the in-place products."""
    model = random_bilm()
    plain = model.embed_sentences(REAL_TEXT[:3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = model.embed_sentences(REAL_TEXT[:3])
    for a, b in zip(plain, autocast):
        numpy.testing.assert_array_equal(a, b)


@needs_bf16
def test_bf16_training_gives_float32_gradients_to_every_parameter():
    model = random_bilm(precision="bf16", cache_size=0).train()
    output = model([sentence[:6] for sentence in REAL_TEXT[:3]])
    output.layers.square().sum().backward()
    assert output.layers.dtype == torch.float32
    for name, param in model.named_parameters():
        if name == "token_encoder.char_embedding.weight":
            continue  # most characters do not occur
        assert param.grad is not None and param.grad.dtype == torch.float32, name
        assert torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0, name


@needs_bf16
def test_bf16_inference_and_training_compute_the_same_layers():
    """The in-place inference loop and the autograd loop take the same bf16 roundings."""
    model = random_bilm(precision="bf16", cache_size=0)
    with torch.no_grad():
        inference = model(REAL_TEXT[:3]).layers
    training = model(REAL_TEXT[:3]).layers.detach()
    torch.testing.assert_close(inference, training, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "capability, native",
    [
        *(((8, 0), True), ((8, 6), True), ((8, 9), True), ((9, 0), True), ((10, 0), True)),
        *(((7, 0), False), ((7, 5), False), ((6, 1), False)),
    ],
)
def test_a_gpu_has_native_bf16_from_ampere_on(capability, native):
    """V100 (7.0) and T4 (7.5) emulate bf16, though torch.cuda.is_bf16_supported() says yes for them."""
    assert hardware.gpu_has_native_bf16(capability) is native


@pytest.mark.parametrize("capability, expected", [((7, 5), torch.float32), ((8, 0), torch.bfloat16)])
def test_auto_on_a_gpu_asks_the_models_gpu(capability, expected):
    """The capability of the model's device, not the current device's, nor is_bf16_supported()'s answer."""
    asked = []

    def get_device_capability(device=None):
        asked.append(device)
        return capability

    def is_bf16_supported(including_emulation=True):
        raise AssertionError("is_bf16_supported counts emulated bf16 and answers for the current device")

    cuda = types.SimpleNamespace(get_device_capability=get_device_capability, is_bf16_supported=is_bf16_supported)
    gpu = torch.device("cuda", 1)
    for setting, dtype in [("auto", expected), ("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        assert resolved.ResolvedPrecision.resolve(setting, gpu, False, hardware=Hardware(cuda=cuda)).dtype == dtype
        assert asked == [gpu]
    assert len(asked) == 1  # only "auto" looks at the hardware


def test_fp32_on_a_gpu_runs_without_tf32_and_restores_the_settings(tf32_allowed):
    with resolved.own_precision(torch.device("cuda", 0), torch.float32):
        assert cuda_fp32_precision() == ("ieee", "ieee")
    assert cuda_fp32_precision() == ("tf32", "tf32")
    with pytest.raises(RuntimeError, match="out of memory"):
        with resolved.own_precision(torch.device("cuda", 0), torch.float32):
            raise RuntimeError("CUDA out of memory")
    assert cuda_fp32_precision() == ("tf32", "tf32")


@pytest.mark.parametrize("device, dtype", [("cuda", torch.bfloat16), ("cpu", torch.float32), ("cpu", torch.bfloat16)])
def test_other_precisions_and_the_cpu_leave_the_gpu_settings_alone(tf32_allowed, device, dtype):
    with resolved.own_precision(torch.device(device), dtype):
        assert cuda_fp32_precision() == ("tf32", "tf32")


def test_nested_and_concurrent_fp32_calls_restore_the_settings_once_the_last_ends(tf32_allowed):
    """A call that ends first must not turn TF32 back on under one still running, in any thread."""
    gpu = torch.device("cuda", 0)
    inside, release = threading.Event(), threading.Event()

    def other_thread() -> None:
        with resolved.own_precision(gpu, torch.float32):
            inside.set()
            release.wait(timeout=30)

    worker = threading.Thread(target=other_thread)
    with resolved.own_precision(gpu, torch.float32):
        with resolved.own_precision(gpu, torch.float32):
            worker.start()
            assert inside.wait(timeout=30)
        assert cuda_fp32_precision() == ("ieee", "ieee")
    assert cuda_fp32_precision() == ("ieee", "ieee")  # the other thread's call still runs
    release.set()
    worker.join(timeout=30)
    assert cuda_fp32_precision() == ("tf32", "tf32")


def test_before_torch_2_9_the_legacy_tf32_flags_are_set_and_restored():
    """torch < 2.9 has only the allow_tf32 flags (torch.backends.cudnn has no ``conv`` setting)."""
    flags = types.SimpleNamespace(allow_tf32=True)
    cudnn = types.SimpleNamespace(allow_tf32=True)
    legacy = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=flags), cudnn=cudnn)  # torch.backends before 2.9
    with resolved._IeeeFloat32(legacy).held():  # what own_precision holds on CUDA in float32
        assert (flags.allow_tf32, cudnn.allow_tf32) == (False, False)
    assert (flags.allow_tf32, cudnn.allow_tf32) == (True, True)


def test_the_bilm_runs_at_its_own_precision(monkeypatch):
    """BiLM.forward enters own_precision with its device and resolved dtype (no TF32 in "fp32" on a GPU)."""
    entered = record_own_precision(monkeypatch, runtime_module)
    for setting, dtype in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        entered.clear()
        random_bilm(precision=setting)(REAL_TEXT[:1])
        assert entered == [(torch.device("cpu"), dtype)]


def test_every_product_precision_is_typed_and_has_a_kernel():
    """A precision added to .kinds is one the settings' types name and one a kernel runs."""
    from typing import get_args

    from spacy_elmo.bilm.kernels import KERNELS
    from spacy_elmo.bilm.precision.kinds import PRODUCT_PRECISIONS

    assert get_args(resolved.Explicit) == tuple(PRODUCT_PRECISIONS)
    assert get_args(resolved.Precision) == resolved.PRECISIONS
    assert {kind.kernel for kind in PRODUCT_PRECISIONS.values()} <= set(KERNELS)
