"""``precision = "int8"``: dynamic int8 LSTM products for inference, its accuracy contract and refusals."""

import numpy
import pytest
import torch

from spacy_elmo import BiLM, pretrained_files
from spacy_elmo.bilm.kernels import int8_packs
from spacy_elmo.bilm.precision import resolved
from spacy_elmo.bilm.precision.hardware import Hardware
from spacy_elmo.pretraining.config import TrainingConfig

from ...helpers import MIN_MEAN_COSINE, REAL_TEXT, mean_cosines, random_bilm

pytestmark = pytest.mark.skipif(
    not int8_packs.int8_available(), reason="this torch build has no int8 kernels for this CPU"
)


def cpu(native_bf16: bool) -> Hardware:
    """A machine whose CPU multiplies bf16 in hardware, or not."""
    return Hardware(cpu_capabilities=lambda: {"amx_bf16": native_bf16})


@pytest.mark.parametrize("native_bf16", [True, False], ids=["bf16-cpu", "fp32-cpu"])
def test_int8_layers_keep_the_accuracy_contract_on_the_bundled_bilm(native_bf16):
    """The contract: mean per-token cosine to float32 of at least 0.999 in every layer (bundled
    ``en``), with the char CNN in bf16 (a CPU that multiplies bf16 in hardware) or float32."""
    files = pretrained_files("en")
    encoder = "bf16" if native_bf16 else "fp32"
    expected = numpy.concatenate(BiLM.from_files(*files, precision="fp32").embed_sentences(REAL_TEXT), axis=1)
    same_encoder = numpy.concatenate(BiLM.from_files(*files, precision=encoder).embed_sentences(REAL_TEXT), axis=1)
    int8 = BiLM.from_files(*files, precision="int8")
    int8.runtime.hardware = cpu(native_bf16)
    found = numpy.concatenate(int8.embed_sentences(REAL_TEXT), axis=1)
    numpy.testing.assert_array_equal(found[0], same_encoder[0])  # the char CNN in the encoder's dtype
    assert numpy.abs(found[1:] - same_encoder[1:]).max() > 1e-3  # the LSTM products did run in int8
    cosines = mean_cosines(found, expected)
    assert (cosines >= MIN_MEAN_COSINE).all(), cosines


@pytest.mark.parametrize("native", [True, False])
def test_the_token_encoder_runs_int8_in_bf16_only_where_the_cpu_multiplies_bf16(native):
    here = cpu(native)
    assert resolved.ResolvedPrecision("int8").token_encoder_dtype(here) == (torch.bfloat16 if native else torch.float32)
    assert resolved.ResolvedPrecision("fp32").token_encoder_dtype(here) == torch.float32
    assert resolved.ResolvedPrecision("bf16").token_encoder_dtype(here) == torch.bfloat16


def test_int8_steps_follow_each_directions_rows_and_state():
    """int8 runs each direction's steps on their own, each step one product over its input beside
    the previous output. With sentences of different lengths and a state of its own for every
    direction and row, every layer and final state stays within int8's roundings of float32's."""
    model = random_bilm(cache_size=0)
    model.runtime.hardware = cpu(native_bf16=False)  # the char CNN in float32 both times
    sentences = [["Short", "one", "."], REAL_TEXT[0], ["A"], REAL_TEXT[1][:7]]
    zero = model.runtime.initial_state(len(sentences))
    generator = torch.Generator().manual_seed(0)
    state = type(zero)(*(torch.randn(t.shape, generator=generator).clamp(-3, 3) for t in zero))
    with torch.no_grad():
        expected = model(sentences, state=state)
        model.runtime.precision = "int8"
        found = model(sentences, state=state)
    torch.testing.assert_close(found.layers[0], expected.layers[0], rtol=0, atol=0)
    for a, b in zip([found.layers[1:], *found.state], [expected.layers[1:], *expected.state]):
        # int8 here: 1-2% of the mean magnitude; a direction given the other's state: 25-45%
        assert (a - b).abs().mean() < 0.05 * b.abs().mean()


def test_int8_refuses_gradients_and_says_what_to_set():
    model = random_bilm(precision="int8")
    with pytest.raises(ValueError, match=r"'int8' is for inference only.*precision = \"auto\".*freeze = true"):
        model(REAL_TEXT[:1])
    with torch.no_grad():
        assert model(REAL_TEXT[:1]).layers.dtype == torch.float32


def test_int8_runs_a_frozen_bilm_with_gradients_enabled():
    """A frozen biLM under autograd (a spaCy update with ``freeze = true`` outside ``no_grad``) gets
    what ``no_grad`` gives: int8's products need no gradient there."""
    model = random_bilm(precision="int8", cache_size=0)
    model.requires_grad_(False)
    with torch.no_grad():
        expected = model(REAL_TEXT[:2]).layers
    found = model(REAL_TEXT[:2]).layers
    assert not found.requires_grad
    torch.testing.assert_close(found, expected, rtol=0, atol=0)


def test_pretraining_refuses_int8():
    with pytest.raises(ValueError, match="int8 is for inference only.*Use auto, fp32 or bf16"):
        TrainingConfig(precision="int8")


def test_int8_runs_on_a_cpu_only():
    with pytest.raises(ValueError, match="'int8' runs on a CPU only.*cuda:0"):
        resolved.ResolvedPrecision.resolve("int8", torch.device("cuda", 0), training=False)


def test_int8_packs_follow_changed_weights():
    model = random_bilm(precision="int8", cache_size=0)
    model.embed_sentences(REAL_TEXT[:1])  # makes the packs
    reference = random_bilm(precision="int8", cache_size=0)
    with torch.no_grad():
        for param in [*model.parameters(), *reference.parameters()]:
            param.mul_(0.9)
    numpy.testing.assert_array_equal(
        model.embed_sentences(REAL_TEXT[:1])[0], reference.embed_sentences(REAL_TEXT[:1])[0]
    )


def test_int8_results_are_not_served_as_fp32_ones():
    model = random_bilm(cache_size=100)
    fp32 = model.runtime.fingerprint()
    model.runtime.precision = "int8"
    assert model.runtime.fingerprint() != fp32 and model.runtime.fingerprint()[0] == torch.qint8


def test_a_pack_is_made_once_while_the_weights_are_unchanged():
    def made_packs(model):
        """The int8 packs the stack keeps (held: compared by identity)."""
        kept = [made for _, made in model.lstm.copies._copies.values()]
        return [p for packs in kept for of_product in packs for p in of_product if isinstance(p, int8_packs.Packed)]

    model = random_bilm(precision="int8", cache_size=0)
    model.embed_sentences(REAL_TEXT[:2])
    first = made_packs(model)
    model.embed_sentences(REAL_TEXT[2:4])
    # gates (input and recurrent weights stacked) and projection x 2 directions per layer
    again = made_packs(model)
    assert len(first) == 2 * 2 * model.options.n_layers and len(again) == len(first)
    assert all(kept is made for kept, made in zip(again, first))  # none made again


@pytest.mark.parametrize(
    "stored, setting, serves",
    [
        ("qint8", "int8", True),
        ("qint8", "auto", True),
        ("qint8", "bf16", False),
        ("qint8", "fp32", False),
        ("bfloat16", "int8", False),
        ("float32", "int8", True),
    ],
)
def test_a_feature_store_of_int8_products_serves_int8_and_auto_only(stored, setting, serves):
    assert resolved.ResolvedPrecision.from_recorded(stored).serves(setting) is serves


def test_copies_and_pickles_of_a_model_leave_the_packs_behind():
    import copy
    import pickle

    model = random_bilm(precision="int8")
    expected = model.embed_sentences(REAL_TEXT[:1])[0]
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert len(clone.lstm.copies) == 0
        numpy.testing.assert_array_equal(clone.embed_sentences(REAL_TEXT[:1])[0], expected)


@pytest.mark.parametrize(
    "features, expected", [({"avx512_vnni": True}, "onednn"), ({"amx_int8": True}, "onednn"), ({}, None)]
)
def test_packs_are_made_for_onednn_where_the_cpu_has_int8_dot_products(features, expected):
    """oneDNN's kernels run the packs where VNNI or AMX int8 is; elsewhere torch's engine. A pack
    runs whatever the current engine, which packing leaves as it was, and keeps int8's rounding
    only on every CPU: where its engine saturates pairs of products (oneDNN or fbgemm without VNNI),
    its products use the pair-safe layout."""
    if "onednn" not in torch.backends.quantized.supported_engines:
        pytest.skip("this torch build has no oneDNN quantized engine")
    current = torch.backends.quantized.engine
    engine = int8_packs.pack_engine(Hardware(cpu_capabilities=lambda: features))
    assert engine == (expected or current)
    generator = torch.Generator().manual_seed(0)
    weight, bias, x = (torch.randn(*shape, generator=generator) for shape in ((64, 32), (64,), (5, 32)))
    packed = int8_packs.pack(weight, bias, engine=engine)
    assert torch.backends.quantized.engine == current
    exact = int8_packs.sums_int8_products_exactly(engine)
    assert packed.layout is (int8_packs.FULL_LAYOUT if exact else int8_packs.PAIR_SAFE_LAYOUT)
    expected = x @ weight.T + bias
    assert (int8_packs.linear(x, packed) - expected).norm() < 0.02 * expected.norm()  # int8's rounding only


# The Original size's products: its gates (the step's input beside the previous output, 512 + 512,
# by 4 x 4,096 gates) and its projection (4,096 -> 512).
ORIGINAL_PRODUCTS = {"gates": (16384, 1024), "projection": (512, 4096)}


@pytest.mark.parametrize("shape", ORIGINAL_PRODUCTS.values(), ids=ORIGINAL_PRODUCTS.keys())
def test_int8_products_are_the_exact_integer_sums_of_their_quantized_values(shape):
    """Each engine that runs a pack's products (its own, and fbgemm's for few rows beside
    oneDNN's) gives every row the exact integer sum of its 8-bit values by the pack's int8 weights,
    scaled, at the Original's shapes and with rows that fill the range. A kernel that sums pairs of
    products in saturating int16 (x86 without VNNI: AVX2-only CPUs, ``make test-avx2``) fails it
    by far unless the pack has the pair-safe layout; float32's roundings stay within 1e-6."""
    out, width = shape
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out, width, generator=generator) * 0.05
    weight[1] = 0.05  # a channel of int8 weights of 127, which every full row multiplies by its largest values
    rows = torch.randn(64, width, generator=generator)
    rows[0], rows[1], rows[2] = weight[0].sign(), 1.0, -1.0  # at the range's ends: by sign, all high, all low
    packed = int8_packs.pack(weight, None)
    staged = int8_packs.StagedRows(len(rows), width, packed.layout)
    magnitudes = rows.abs().amax(dim=1, keepdim=True) * packed.layout.over_half_width
    found = staged.linear(rows, packed)
    values = (staged.scaled * 128).round().double()  # the 8-bit values the kernel reads, pins included
    for prepacked in [p for p in (packed.prepacked, packed.few_rows) if p is not None]:
        weights, shift = torch.ops.quantized.linear_unpack(prepacked)
        scales = weights.q_per_channel_scales()
        if packed.layout.pair_sum is not None:
            pairs = weights.int_repr().int().abs()[:, : width + 4].view(out, -1, 2).sum(dim=2)
            assert int(pairs.max()) <= packed.layout.pair_sum
        exact = (values @ weights.int_repr().double().T) * 2**-7 * scales + shift.double()  # (64, out)
        for count in (1, 8, 64):
            product = torch.ops.quantized.linear_dynamic(staged.scaled[:count], prepacked, False).double()
            torch.testing.assert_close(product, exact[:count], rtol=1e-6, atol=1e-6 * float(exact.abs().max()))
    torch.testing.assert_close(
        found.double(), exact * magnitudes.double(), rtol=1e-5, atol=1e-5 * float(found.abs().max())
    )


@pytest.mark.skipif(
    int8_packs.pack_engine() != "onednn", reason="packs are made for oneDNN where the CPU has VNNI or AMX"
)
def test_few_rows_run_on_fbgemm_beside_onednn_and_give_its_results_to_the_bit():
    """Where the weights are packed for oneDNN, products of up to FEW_ROWS rows run on fbgemm's
    pack of the same weight (faster there), in the full layout: the two must agree to the bit at
    every row count, or a sentence's vectors would depend on its batch. A pair-safe pack (where an
    engine is capped below VNNI) keeps to one engine."""
    generator = torch.Generator().manual_seed(0)
    rows = int8_packs.FEW_ROWS + 8
    weight, bias, x = (torch.randn(*shape, generator=generator) for shape in ((96, 40), (96,), (rows, 40)))
    packed = int8_packs.pack(weight * 0.1, bias, int8_packs.FULL_LAYOUT)
    assert packed.few_rows is not None
    assert int8_packs.pack(weight * 0.1, bias, int8_packs.PAIR_SAFE_LAYOUT).few_rows is None
    staged = int8_packs.StagedRows(rows, 40, packed.layout)
    staged.linear(x, packed)  # the scaled rows the kernels read, as a product leaves them
    for count in (1, 3, int8_packs.FEW_ROWS, int8_packs.FEW_ROWS + 1, rows):
        scaled = staged.scaled[:count]
        by_fbgemm = torch.ops.quantized.linear_dynamic(scaled, packed.few_rows, False)
        by_onednn = torch.ops.quantized.linear_dynamic(scaled, packed.prepacked, False)
        assert torch.equal(by_fbgemm, by_onednn), count


@pytest.mark.parametrize("layout", [int8_packs.FULL_LAYOUT, int8_packs.PAIR_SAFE_LAYOUT], ids=["full", "pair-safe"])
def test_a_rows_int8_product_is_its_own_whatever_the_rows_beside_it(layout):
    generator = torch.Generator().manual_seed(0)
    rows = int8_packs.FEW_ROWS + 8
    weight, bias, x = (torch.randn(*shape, generator=generator) for shape in ((96, 40), (96,), (rows, 40)))
    packed = int8_packs.pack(weight * 0.1, bias, layout)
    together = int8_packs.linear(x, packed)
    for count in range(1, rows + 1):
        assert torch.equal(int8_packs.linear(x[:count], packed), together[:count]), count


@pytest.mark.parametrize("layout", [int8_packs.FULL_LAYOUT, int8_packs.PAIR_SAFE_LAYOUT], ids=["full", "pair-safe"])
def test_every_staged_row_lies_within_its_range_and_the_pins_whatever_its_magnitude(layout):
    """The pins must stay the tensor's extremes, or one row would set the others' scale; and a row
    must stay within its range, or its pairs of products could saturate."""
    generator = torch.Generator().manual_seed(0)
    magnitudes = torch.rand(20_000, 1, generator=generator) * 100 + 1e-6
    x = torch.cat([magnitudes, -magnitudes, magnitudes * 0.5, torch.zeros_like(magnitudes)], dim=1)
    staged = int8_packs.StagedRows(len(x), 4, layout)
    staged.linear(x, int8_packs.pack(torch.randn(8, 4, generator=generator), None, layout))
    assert staged.scaled[:, :4].min() >= layout.zero - layout.half_width >= int8_packs.PIN_VALUES.min()
    assert staged.scaled[:, :4].max() <= layout.zero + layout.half_width <= int8_packs.PIN_VALUES.max()


def test_a_buffer_serves_packs_of_its_own_layout_only():
    packed = int8_packs.pack(torch.randn(8, 4), None, int8_packs.PAIR_SAFE_LAYOUT)
    with pytest.raises(ValueError, match=r"StagedRows\(rows, width, pack.layout\)"):
        int8_packs.StagedRows(2, 4, int8_packs.FULL_LAYOUT).linear(torch.randn(2, 4), packed)


def test_the_probe_says_whether_a_pack_of_the_full_range_sums_exactly():
    """A full row (8-bit values of 255) by int8 weights of 127, on each engine a pack runs on: its
    product is the exact sum just where :func:`sums_int8_products_exactly` says so."""
    packed = int8_packs.pack(torch.full((8, 8), 127 / 128), None, int8_packs.FULL_LAYOUT)  # int8 weights of 127
    staged = int8_packs.StagedRows(1, 8, int8_packs.FULL_LAYOUT)
    staged.linear(torch.ones(1, 8), packed)
    values = (staged.scaled * 128).round().double()  # the 8-bit values the kernel reads
    for prepacked, engine in ((packed.prepacked, int8_packs.pack_engine()), (packed.few_rows, "fbgemm")):
        if prepacked is None:
            continue
        weights, shift = torch.ops.quantized.linear_unpack(prepacked)
        exact = values @ weights.int_repr().double().T * 2**-7 * weights.q_per_channel_scales() + shift.double()
        product = torch.ops.quantized.linear_dynamic(staged.scaled, prepacked, False).double()
        exact_here = bool(torch.isclose(product, exact, rtol=1e-6, atol=0).all())
        assert exact_here is int8_packs.sums_int8_products_exactly(engine), engine
