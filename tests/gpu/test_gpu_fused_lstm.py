"""The fused LSTM loop (spacy_elmo/bilm/fused_lstm.py) compiled for the GPU, on the bundled biLM's
trained weights, against the eager loop on the same GPU (``SPACY_ELMO_FUSED_LSTM=0``).
tests/bilm/test_fused_lstm.py checks the same kernels on tiny sizes, in Triton's interpreter on a
CPU and compiled here."""

import numpy
import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.bilm import fused_lstm

from ..helpers import assert_float32_close

pytestmark = pytest.mark.gpu

SENTENCES = [
    "The bank raised its interest rates by half a point on Tuesday , said Mr. Smith .".split(),
    ["Hi"],
    [],
    "Alice went to Paris and Bob stayed in London".split(),
] * 40


def layers_of(bilm: BiLM, fused: bool, monkeypatch) -> numpy.ndarray:
    monkeypatch.setenv(fused_lstm.SWITCH, "1" if fused else "0")
    return numpy.concatenate([layers.reshape(-1, layers.shape[-1]) for layers in bilm.embed_sentences(SENTENCES)])


def test_the_fused_loop_runs_on_the_gpu_and_gives_the_eager_layers(monkeypatch) -> None:
    bilm = BiLM.from_pretrained("en", precision="fp32", cache_size=0).cuda().eval()
    with torch.no_grad():
        assert fused_lstm.use_fused_lstm(bilm.device, bilm.products.dtype)
    assert_float32_close(layers_of(bilm, True, monkeypatch), layers_of(bilm, False, monkeypatch))


def test_the_fused_bf16_loop_keeps_the_bf16_contract(monkeypatch) -> None:
    """Mean per-token cosine to float32 >= 0.999 per sentence, and no farther from float32 than the
    eager bf16 loop, beyond bf16's rounding."""
    bilm = BiLM.from_pretrained("en", precision="fp32", cache_size=0).cuda().eval()
    exact = layers_of(bilm, False, monkeypatch)
    bilm.precision = "bf16"
    fused, eager = layers_of(bilm, True, monkeypatch), layers_of(bilm, False, monkeypatch)
    cosines = (fused * exact).sum(-1) / (numpy.linalg.norm(fused, axis=-1) * numpy.linalg.norm(exact, axis=-1))
    assert cosines.mean() >= 0.999 and cosines.min() >= 0.99, (cosines.mean(), cosines.min())
    assert numpy.abs(fused - exact).max() <= 1.5 * numpy.abs(eager - exact).max() + 2**-8
