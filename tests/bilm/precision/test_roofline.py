"""The roofline of `spacy-elmo bench`: the FLOP count from the options, and the lines bench prints."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels.int8_packs import int8_available
from spacy_elmo.bilm.model.options import ElmoOptions
from spacy_elmo.bilm.precision import autotune, roofline, timed_passes
from spacy_elmo.bilm.precision.flops import FlopCount, flops_per_token
from spacy_elmo.bilm.precision.roofline import Product
from spacy_elmo.bilm.runtime import BiLMRuntime
from spacy_elmo.cli import app

from ...helpers import tiny_options, write_bilm_files

ORIGINAL = ElmoOptions(lstm_dim=4096, projection_dim=512, n_layers=2, n_highway=2)


def test_the_flop_count_at_the_original_size_is_the_issues_breakdown():
    count = flops_per_token(ORIGINAL)
    assert count == FlopCount(
        char_cnn=17_616_896,  # sum over the 7 filters of 2 (50 - w + 1) w 16 n
        highway=33_554_432,  # 2 layers x 2 products x 2 x 2048^2
        projection=2_097_152,  # 2 x 2048 x 512
        lstm_input=67_108_864,  # 2 layers x 2 directions x 2 x 512 x 16384
        lstm_recurrent=67_108_864,
        lstm_projection=16_777_216,  # 2 layers x 2 directions x 2 x 4096 x 512
    )
    # Issue 35: "about 204 MFLOP of products per token (char CNN 18, highway 34, projection 2, LSTM 151)".
    parts = [count.char_cnn, count.highway, count.projection, count.lstm]
    assert [round(part / 1e6) for part in parts] == [18, 34, 2, 151]
    assert count.total == 204_263_424
    assert count.describe().startswith(
        "204.3 MFLOP per token = char CNN 17.6 + highway 33.6 + projection 2.1 + LSTM 151.0"
    )


def test_the_count_follows_the_options():
    small = flops_per_token(ElmoOptions())  # the published Small: one highway, 1024-wide LSTM of 128
    assert small.highway == 2 * 2 * 2048**2 and small.lstm_recurrent == 2 * 2 * 2 * 128 * 4096
    assert flops_per_token(tiny_options()).total < autotune.MIN_MEASURED_FLOPS  # the suite's biLMs run unmeasured


def test_a_products_rate_is_that_of_its_fastest_call():
    durations = iter([0.0, 3.0, 3.0, 5.0, 7.0, 8.0])  # calls of 3, 2 and 1 s on a fake clock
    calls = []
    rate = roofline.time_product(lambda: calls.append(1), 4_000, clock=lambda: next(durations), seconds=0.0)
    assert rate == 4_000 and len(calls) == 1 + roofline.MIN_REPEATS  # one untimed call first


def test_int8_is_measured_against_the_products_it_runs():
    lstm, highway = Product("LSTM input", 2, 4, 4, 4), Product("highway", 1, 4, 4, 4, char_cnn=True)
    count = flops_per_token(tiny_options())
    line = roofline.roofline("int8", 100.0, count, {lstm: 1e9, highway: 5e9})
    assert line.best_product == lstm and line.fraction == pytest.approx(100.0 * count.total / 1e9)
    assert roofline.roofline("fp32", 100.0, count, {lstm: 1e9, highway: 5e9}).best_product == highway


def test_bench_prints_the_model_its_sizes_and_the_roofline(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(settings.PRECISION_ENV, raising=False)
    precisions = ["fp32", "int8"] if int8_available() else ["fp32"]
    tuning = autotune.Tuning(candidates=tuple(precisions), roofline_seconds=0.0, roofline_rows=64)
    monkeypatch.setattr(BiLMRuntime, "tuning", tuning)  # every runtime's default, the one bench makes included
    write_bilm_files(tmp_path / "bilm")
    result = CliRunner().invoke(app, ["bench", "--model", str(tmp_path / "bilm"), "--threads", "1"])
    assert result.exit_code == 0, result.output
    out = result.output
    options = tiny_options()
    assert f"biLM {tmp_path / 'bilm'}" in out
    assert (
        f"sizes: lstm_dim {options.lstm_dim}, projection_dim {options.projection_dim}, n_layers {options.n_layers}"
        in out
    )
    rows, words = timed_passes.BATCH_ROWS, timed_passes.BATCH_WORDS
    assert (
        f"timed on {rows} sentences of {words} made-up words ({rows * words} tokens, {rows * (words + 2)} positions"
        in out
    )
    # what the figure is, and that nlp.pipe's words/s is another one, timed elsewhere
    assert f"tokens/s: the {rows * words} words of that batch per second of one forward pass of the biLM alone" in out
    assert "no token cache" in out and "boundaries computed, not counted" in out
    assert "nlp.pipe's words/s is another figure: it adds tokenization, segmentation, batching and the layer mix" in out
    assert (
        "benchmarks/component_speed.py" in out
        and (Path(__file__).parents[3] / "benchmarks" / "component_speed.py").is_file()
    )
    assert f"FLOP per token, from the options: {flops_per_token(options).describe()}" in out
    assert "| this machine's product rate, GFLOP/s | " + " | ".join(precisions) + " |" in out
    p, g = options.projection_dim, 4 * options.lstm_dim
    for row in (
        f"| LSTM input: 2 x ({rows * (words + 2)} x {p}) @ ({p} x {g}) | ",
        f"| LSTM recurrent, per step: 2 x ({rows} x {p}) @ ({p} x {g}) | ",
        f"| large: (64 x {p}) @ ({p} x {g}) | ",
    ):
        assert row in out
    assert "| precision | tokens/s | biLM GFLOP/s | best product GFLOP/s | fraction of it |" in out
    for precision in precisions:
        (line,) = [
            line
            for line in out.splitlines()
            if line.startswith(f"| {precision} | ") and "GFLOP" not in line and "(" in line
        ]
        fraction = float(line.rstrip(" |").rsplit("|", 1)[1])
        assert fraction > 0
