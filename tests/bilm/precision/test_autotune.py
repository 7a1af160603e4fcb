"""``precision = "auto"`` on a CPU, measured: the decision logic, its cache and its overrides.

No test times a real model: the passes and the clock are replaced, or the measurement is, by the
biLM's tuning (``bilm.runtime.tuning``: ``run``, ``clock``, ``measure``), so that the suite stays
deterministic on any CPU.
"""

import hashlib
import json
import threading
from typing import Dict, List, Optional

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.bilm import compute_thread, settings
from spacy_elmo.bilm.formats.identity import weights_digest
from spacy_elmo.bilm.kernels.int8_packs import int8_available
from spacy_elmo.bilm.precision import autotune, compat, timed_passes
from spacy_elmo.bilm.precision.autotune import Trial
from spacy_elmo.bilm.runtime import BiLMRuntime
from spacy_elmo.cli import app

from ...helpers import random_bilm, tiny_options, write_bilm_files

PRECISIONS = ["fp32", "bf16", "int8"]


def measured_options(**overrides):
    """Shapes costly enough to be measured (above MIN_MEASURED_FLOPS), yet quick to build."""
    return tiny_options(**{"lstm_dim": 512, "projection_dim": 64, **overrides})


def tuned(model: BiLM, machine: Optional["FakeMachine"] = None, **knobs) -> BiLM:
    """``model`` deciding among every precision, whatever this CPU runs, timing ``machine``'s passes
    on its clock where given, with the other ``knobs`` of its tuning
    (:class:`~spacy_elmo.bilm.precision.autotune.Tuning`) as given or by default."""
    if machine is not None:
        knobs = {"run": machine.run, "clock": machine.clock, **knobs}
    model.runtime.tuning = autotune.Tuning(candidates=tuple(PRECISIONS), **knobs)
    return model


def measured_bilm(seed: int = 0) -> BiLM:
    """A biLM of :func:`measured_options` whose weights ``seed`` decides: the same seed, the same weights."""
    torch.manual_seed(seed)
    return tuned(BiLM(measured_options()))


@pytest.fixture(autouse=True)
def fresh_decisions(monkeypatch, tmp_path):
    """No override, an empty cache directory (each biLM decides afresh)."""
    monkeypatch.delenv(settings.PRECISION_ENV, raising=False)
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))


class FakeMachine:
    """Passes that take ``seconds[p]`` on a fake clock and return layers ``noise[p]`` away from fp32's."""

    def __init__(self, seconds: Dict[str, float], noise: Dict[str, float]) -> None:
        self.seconds, self.noise, self.now, self.runs = seconds, noise, 0.0, []  # type: ignore[var-annotated]
        self.layers = torch.randn(3, 4, 6, 16, generator=torch.Generator().manual_seed(0))

    def run(self, precision: str) -> torch.Tensor:
        self.runs.append(precision)
        self.now += self.seconds[precision]
        noise = torch.randn(self.layers.shape, generator=torch.Generator().manual_seed(1))
        return self.layers + self.noise.get(precision, 0.0) * noise

    def clock(self) -> float:
        return self.now


def never(*args):
    raise AssertionError("a recorded decision must be used without timing")


def test_the_fastest_precision_that_keeps_the_contract_wins():
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5, "int8": 0.25}, noise={"bf16": 1e-4, "int8": 0.2})
    decision = autotune.decide(tuned(BiLM(measured_options()), machine).runtime)
    assert decision.choice == "bf16"  # int8 is faster, but its layers are too far from fp32's
    assert decision.trials["int8"].cosine < autotune.MIN_MEAN_COSINE <= decision.trials["bf16"].cosine
    n_tokens = timed_passes.BATCH_ROWS * timed_passes.BATCH_WORDS
    assert decision.trials["fp32"] == Trial(n_tokens / 1.0, pytest.approx(1.0))
    # Interleaved rounds: fp32, bf16, int8, fp32, bf16, int8, ...
    assert machine.runs[:6] == PRECISIONS * 2
    assert machine.runs.count("fp32") == machine.runs.count("int8") >= autotune.MIN_ROUNDS


@pytest.mark.parametrize("seconds, expected", [((1.0, 0.5, 0.25), "int8"), ((0.5, 1.0, 0.7), "fp32")])
def test_the_fastest_wins_when_all_keep_the_contract(seconds, expected):
    machine = FakeMachine(dict(zip(PRECISIONS, seconds)), noise={"bf16": 1e-4, "int8": 1e-3})
    assert autotune.decide(tuned(BiLM(measured_options()), machine).runtime).choice == expected


@pytest.mark.parametrize(
    "seconds, expected",
    [
        ((1.0, 0.95, 0.93), "fp32"),  # within 10%: the most accurate stays
        ((1.0, 0.8, 0.75), "bf16"),  # bf16 wins clearly; int8 is not clearly faster than bf16
        ((1.0, 0.8, 0.6), "int8"),  # int8 clearly faster than bf16 too
        ((1.0, 0.95, 0.5), "int8"),  # bf16 does not win clearly, int8 does
    ],
)
def test_a_less_accurate_precision_must_win_clearly(seconds, expected):
    machine = FakeMachine(dict(zip(PRECISIONS, seconds)), noise={"bf16": 1e-4, "int8": 1e-3})
    assert autotune.decide(tuned(BiLM(measured_options()), machine).runtime).choice == expected


@pytest.mark.parametrize(
    "lone, expected",
    [
        ((100.0, 200.0, 200.0), "int8"),  # as fast alone as bf16: its batch's win counts
        ((100.0, 200.0, 185.0), "int8"),  # slower alone, less than the batch's win: sqrt(1.33 * 0.93) > 1.1
        ((100.0, 200.0, 150.0), "bf16"),  # the two balance: sqrt(1.33 * 0.75) < 1.1
        ((100.0, 200.0, 100.0), "bf16"),  # wins the batch, takes twice bf16's time alone
        ((200.0, 100.0, 100.0), "fp32"),  # bf16 and int8 win the batch, lose as much or more alone
        ((0.0, 0.0, 0.0), "int8"),  # no lone sentence timed: the batch decides
    ],
)
def test_a_lone_sentences_speed_weighs_as_much_as_the_batchs(lone, expected):
    batch = {"fp32": 100.0, "bf16": 150.0, "int8": 200.0}
    cosine = {"fp32": 1.0, "bf16": 0.99999, "int8": 0.9999}
    trials = {p: Trial(batch[p], cosine[p], rate) for p, rate in zip(PRECISIONS, lone)}
    assert autotune.choose(trials) == expected


def test_a_services_calls_together_weigh_as_much_as_the_batch():
    """The bundled en's figures on an AVX512-VNNI EPYC at 2 threads: bf16 wins the batch and 8
    sentences, loses a lone sentence by less; int8 wins the batch by little and loses both calls."""
    trials = {
        "fp32": Trial(5366.0, 1.0, 1287.0, 3661.0),
        "bf16": Trial(7791.0, 0.99999, 1181.0, 5710.0),
        "int8": Trial(8824.0, 0.99996, 697.0, 3356.0),
    }
    assert autotune.choose(trials) == "bf16"
    # Once fp32 ran a lone sentence faster (same machine): bf16 1.44x on the batch, 0.76x alone,
    # 1.17x for 8 sentences; the three counted alike made 1.086 and kept fp32, the service as one 1.17.
    faster_alone = {"fp32": Trial(5012.0, 1.0, 1376.0, 4138.0), "bf16": Trial(7220.0, 0.99999, 1047.0, 4858.0)}
    assert autotune.choose(faster_alone) == "bf16"
    alone = {p: Trial(t.tokens_per_s, t.cosine, t.lone_tokens_per_s) for p, t in trials.items()}  # no few timed
    assert autotune.choose(alone) == "bf16"  # sqrt(1.45 * 0.92) = 1.16 for bf16; int8's 0.80
    batch_only = {p: Trial(t.tokens_per_s, t.cosine) for p, t in trials.items()}
    assert autotune.choose(batch_only) == "int8"  # 1.13x bf16's batch rate


def test_a_lone_sentence_is_timed_after_the_batch_in_each_round():
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5, "int8": 0.25}, noise={})
    lone_seconds = {"fp32": 0.2, "bf16": 0.2, "int8": 0.4}

    def lone(precision: str) -> torch.Tensor:
        machine.runs.append(f"{precision} alone")
        machine.now += lone_seconds[precision]
        return machine.layers

    passes = timed_passes.Passes(machine.run, lone=lone)
    trials = autotune.measure(passes, PRECISIONS, 320, machine.clock)
    assert machine.runs[:4] == ["fp32", "fp32 alone", "bf16", "bf16 alone"]
    assert {p: t.lone_tokens_per_s for p, t in trials.items()} == {
        p: pytest.approx(timed_passes.LONE_WORDS / seconds) for p, seconds in lone_seconds.items()
    }
    assert autotune.choose(trials) == "bf16"  # int8 is 2x bf16 on the batch, and half its speed alone


def test_the_models_passes_time_a_services_calls_for_inference_only():
    model = measured_bilm()
    assert timed_passes.model_passes(model.runtime, None, training=True).lone is None
    passes = timed_passes.model_passes(model.runtime, None, training=False)
    assert passes.lone is not None and passes.few is not None
    assert passes.lone("fp32").shape[1:3] == (1, timed_passes.LONE_WORDS + 2)
    assert passes.few("fp32").shape[1:3] == (timed_passes.FEW_ROWS, timed_passes.LONE_WORDS + 2)


def test_a_recorded_decision_is_read_back_without_timing(monkeypatch):
    model = measured_bilm()
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5, "int8": 0.8}, noise={})
    first = autotune.decide(tuned(model, machine).runtime)
    assert (first.choice, first.source) == ("bf16", "measured")
    again = autotune.decide(tuned(measured_bilm(), run=never, clock=never).runtime)
    assert (again.choice, again.source, again.trials) == ("bf16", "cache", first.trials)
    recorded = json.loads(autotune.decisions_path().read_text())
    (entry,) = recorded.values()
    assert entry["fields"]["threads"] == torch.get_num_threads() and entry["choice"] == "bf16"
    assert entry["fields"]["weights"] == weights_digest(model)


def test_another_model_of_the_same_shapes_checks_its_own_accuracy_at_the_recorded_speeds():
    """The speeds are the shapes'; the accuracy is the weights': a second model runs one untimed
    pass per precision (no clock), and decides by its own cosines."""
    first = autotune.decide(tuned(measured_bilm(0), FakeMachine({"fp32": 1.0, "bf16": 0.8, "int8": 0.5}, {})).runtime)
    assert (first.choice, first.source) == ("int8", "measured")
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.8, "int8": 0.5}, noise={"bf16": 1e-4, "int8": 0.2})
    other = autotune.decide(tuned(measured_bilm(1), run=machine.run, clock=never).runtime)
    assert (other.choice, other.source) == ("bf16", "checked") and machine.runs == PRECISIONS
    assert {p: t.tokens_per_s for p, t in other.trials.items()} == {p: t.tokens_per_s for p, t in first.trials.items()}
    assert (
        autotune.decide(tuned(measured_bilm(0), run=never, clock=never).runtime).choice == "int8"
    )  # each model keeps its own
    recorded = json.loads(autotune.decisions_path().read_text())
    assert sorted(e["choice"] for e in recorded.values()) == ["bf16", "int8"]


def test_a_record_from_before_decisions_named_their_weights_lends_its_speeds_not_its_accuracy():
    fields = autotune.decision_fields(measured_options(), torch.get_num_threads())
    old_key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]  # the key format before
    trials = {
        "fp32": {"tokens_per_s": 100.0, "cosine": 1.0},
        "bf16": {"tokens_per_s": 150.0, "cosine": 1.0},
        "int8": {"tokens_per_s": 300.0, "cosine": 1.0},
    }
    path = autotune.decisions_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({old_key: {"choice": "int8", "trials": trials, "fields": fields, "measured": "then"}}))
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.8, "int8": 0.5}, noise={"bf16": 1e-4, "int8": 0.2})
    decision = autotune.decide(tuned(measured_bilm(), run=machine.run, clock=never).runtime)
    assert (decision.choice, decision.source) == ("bf16", "checked")  # int8 is too far from fp32 with these weights
    assert decision.trials["int8"].tokens_per_s == 300.0 and len(json.loads(path.read_text())) == 2


def test_a_decision_is_for_the_planned_thread_count_and_measured_at_it():
    """Under a plan (the component's threads = "auto"), the count of the moment changes nothing."""
    seen: List[int] = []

    def measure(passes, precisions, n_tokens, clock):
        seen.append(torch.get_num_threads())
        return {p: Trial(100.0, 1.0) for p in precisions}

    model, before = tuned(measured_bilm(), measure=measure), torch.get_num_threads()
    model.runtime.planned_threads = before + 2
    autotune.decide(model.runtime)
    torch.set_num_threads(before + 1)  # a busy moment: fewer threads for a call
    try:
        autotune.decide(model.runtime)
    finally:
        torch.set_num_threads(before)
    assert seen == [before + 2] and torch.get_num_threads() == before
    (entry,) = json.loads(autotune.decisions_path().read_text()).values()
    assert entry["fields"]["threads"] == before + 2


def test_auto_measures_on_the_compute_thread_at_the_callers_plan():
    """The biLM's calls run on the compute thread, so ``auto`` measures there too (from another
    thread, beside its OpenMP threads, every precision ran slower), for the caller's planned count."""
    seen: List[tuple] = []

    def measure(passes, precisions, n_tokens, clock):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return {p: Trial(100.0, 1.0) for p in precisions}

    threads, model = torch.get_num_threads() + 1, tuned(measured_bilm(), measure=measure)
    model.runtime.planned_threads = threads
    autotune.cpu_auto_precision(model.runtime)
    ((name, count),) = seen
    assert name.startswith(compute_thread.THREAD_NAME) and count == threads


def test_the_decision_is_kept_by_the_runtime(monkeypatch):
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5, "int8": 0.8}, noise={})
    model = tuned(BiLM(measured_options()), machine)
    autotune.decide(model.runtime)
    autotune.decisions_path().unlink()  # only the process's memory is left
    assert autotune.decide(tuned(model, run=never, clock=never).runtime).choice == "bf16"


def test_another_thread_count_or_other_shapes_are_measured_again():
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5, "int8": 0.8}, noise={})
    autotune.decide(tuned(BiLM(measured_options()), machine).runtime)
    runs = len(machine.runs)
    autotune.decide(tuned(BiLM(measured_options(n_highway=1)), machine).runtime)
    assert len(machine.runs) > runs
    runs = len(machine.runs)
    model = tuned(BiLM(measured_options()), machine)
    model.runtime.planned_threads = torch.get_num_threads() + 1  # the count it decides for
    autotune.decide(model.runtime)
    assert len(machine.runs) > runs
    assert len(json.loads(autotune.decisions_path().read_text())) == 3
    fields = autotune.decision_fields(measured_options(), 1)
    assert fields != autotune.decision_fields(measured_options(), 2)
    assert fields != autotune.decision_fields(measured_options(lstm_dim=256), 1)
    assert fields["cpu"] == compat.cpu_capabilities().get("cpu_name", "") and fields["torch"] == torch.__version__


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"k": {"choice": "fp64", "trials": {}}}', ""])
def test_an_unreadable_cache_file_is_ignored_and_rewritten(content):
    path = autotune.decisions_path()
    path.parent.mkdir(parents=True)
    path.write_text(content)
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5, "int8": 0.8}, noise={})
    assert autotune.decide(tuned(BiLM(measured_options()), machine).runtime).choice == "bf16"
    (entry,) = json.loads(path.read_text()).values()
    assert entry["choice"] == "bf16"


@pytest.mark.parametrize("value", ["fp32", "bf16", "int8"])
def test_the_environment_decides_auto_without_timing(monkeypatch, value):
    monkeypatch.setenv(settings.PRECISION_ENV, value)
    decision = autotune.decide(tuned(BiLM(measured_options()), run=never, clock=never).runtime)
    assert (decision.choice, decision.source) == (value, "env")
    assert not autotune.decisions_path().exists()


@pytest.mark.parametrize(
    "value, message",
    [("fp16", "SPACY_ELMO_PRECISION='fp16': precision must be one of"), ("auto", "give fp32, bf16 or int8")],
)
def test_a_wrong_environment_value_says_what_to_set(monkeypatch, value, message):
    monkeypatch.setenv(settings.PRECISION_ENV, value)
    with pytest.raises(ValueError, match=message):
        autotune.decide(tuned(BiLM(measured_options()), run=never, clock=never).runtime)


def test_a_tiny_model_runs_fp32_unmeasured():
    decision = autotune.decide(tuned(BiLM(tiny_options()), run=never, clock=never).runtime)
    assert (decision.choice, decision.source) == ("fp32", "tiny")


def test_inference_and_training_each_resolve_auto_by_their_own_decision():
    timed: List[List[str]] = []

    def measure(passes, precisions, n_tokens, clock):
        timed.append(list(precisions))
        trials = {"fp32": Trial(100.0, 1.0), "bf16": Trial(120.0, 1.0), "int8": Trial(300.0, 0.9999)}
        return {p: trials[p] for p in precisions}

    model = tuned(BiLM(measured_options(), precision="auto"), measure=measure)
    with torch.no_grad():
        assert model.runtime.resolved_precision.dtype == torch.qint8
        assert model.runtime.resolved_precision.dtype == torch.qint8
    assert model.runtime.resolved_precision.dtype == torch.bfloat16  # gradients on: training's decision, never int8
    assert model.runtime.resolved_precision.dtype == torch.bfloat16
    assert (
        model.runtime.resolved_precision_for(training=False).precision == "int8"
    )  # inference's, whatever the gradient mode
    assert timed == [PRECISIONS, ["fp32", "bf16"]]  # each measured once; training without int8
    fields = [entry["fields"]["pass"] for entry in json.loads(autotune.decisions_path().read_text()).values()]
    assert sorted(fields) == ["inference", "training"]


@pytest.mark.parametrize("override, training_choice", [("fp32", "fp32"), ("bf16", "bf16"), ("int8", "measured")])
def test_the_environment_decides_training_too_except_int8(monkeypatch, override, training_choice):
    monkeypatch.setenv(settings.PRECISION_ENV, override)
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5}, noise={})
    assert autotune.decide(tuned(BiLM(measured_options()), run=never, clock=never).runtime).choice == override
    training = autotune.decide(tuned(BiLM(measured_options()), machine).runtime, training=True)
    assert (training.source if training_choice == "measured" else training.choice) == training_choice
    assert set(machine.runs) <= {"fp32", "bf16"}


def test_a_training_step_is_timed_and_leaves_the_model_as_it_was():
    """timed_pass(training=True.runtime): a forward pass with gradients and a backward pass to every parameter,
    whose gradients are dropped; no random draw, nothing stored, the layers of the forward pass."""
    model = random_bilm(precision="auto", cache_size=100).train()
    sentences = [["The", "bank", "rose", "."], ["It", "fell"]]
    parameters = dict(model.named_parameters())
    projection = parameters["token_encoder.projection.weight"]
    stale = projection.grad = torch.ones_like(projection)
    reached: List[str] = []
    for name, parameter in parameters.items():
        parameter.register_hook(lambda grad, name=name: reached.append(name))
    values = {name: parameter.detach().clone() for name, parameter in parameters.items()}
    rng = torch.get_rng_state()
    found = timed_passes.timed_pass(model.runtime, sentences, "fp32", training=True)
    assert set(reached) == set(parameters)  # the backward pass reached every parameter
    assert projection.grad is stale and torch.equal(stale, torch.ones_like(stale))
    assert all(p.grad is None for name, p in parameters.items() if name != "token_encoder.projection.weight")
    assert all(torch.equal(p, values[name]) for name, p in parameters.items())
    assert (
        torch.equal(torch.get_rng_state(), rng) and len(model.runtime.token_cache) == 0 and model.lstm.dropout.training
    )
    assert not found.requires_grad
    torch.testing.assert_close(found, timed_passes.timed_pass(model.runtime, sentences, "fp32"), rtol=0, atol=1e-5)


def test_worst_cosine_skips_padding_and_takes_the_worst_layer():
    expected = torch.ones(2, 1, 3, 4)
    expected[:, :, 2] = 0.0  # a padding position, zero in both
    found = expected.clone()
    found[1, 0, 0] = torch.tensor([1.0, 1.0, 1.0, -1.0])  # cosine 0.5 at one of layer 1's two positions
    assert autotune.worst_cosine(found, expected) == pytest.approx(0.75)


def test_bench_prints_the_rates_and_records_the_choice(tmp_path, monkeypatch):
    """On a tiny model: real passes, too small to matter, and measured although auto would not measure it
    (nor would it with SPACY_ELMO_PRECISION set: bench measures, and says the variable decides instead)."""
    # every runtime's default, the one bench makes included
    monkeypatch.setattr(
        BiLMRuntime, "tuning", autotune.Tuning(candidates=("fp32", "int8") if int8_available() else ("fp32",))
    )
    monkeypatch.setenv(settings.PRECISION_ENV, " fp32 ")
    write_bilm_files(tmp_path)
    result = CliRunner().invoke(app, ["bench", "--model", str(tmp_path), "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "| fp32 |" in result.output and "1.00x | " in result.output and " | 1.00000 |" in result.output
    assert "| precision | tokens/s | / fp32 | a lone sentence, tokens/s |" in result.output
    assert "| training step (forward and backward) | tokens/s | / fp32 |" in result.output
    entries = {entry["fields"]["pass"]: entry for entry in json.loads(autotune.decisions_path().read_text()).values()}
    chosen = f"{entries['inference']['choice']} for inference, {entries['training']['choice']} for training"
    assert f'precision "auto" here: {chosen} (recorded in {autotune.decisions_path()})' in result.output
    assert set(entries["training"]["trials"]) == {"fp32"}  # no int8 in training (and bf16 left out by the test)
    assert "SPACY_ELMO_PRECISION=fp32 overrides it in this environment" in result.output


def test_bench_takes_a_model_or_a_size():
    result = CliRunner().invoke(app, ["bench", "--model", "en", "--size", "small"])
    assert result.exit_code == 1 and "give --model or --size, not both" in result.output
    result = CliRunner().invoke(app, ["bench", "--size", "huge"])
    assert result.exit_code == 1 and "--size must be one of original, small, got 'huge'" in result.output


def test_a_cache_directory_that_cannot_be_written_costs_a_measurement_not_an_error(monkeypatch, tmp_path, caplog):
    (tmp_path / "not_a_directory").write_text("")
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "not_a_directory"))
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5, "int8": 0.8}, noise={})
    assert autotune.decide(tuned(BiLM(measured_options()), machine).runtime).choice == "bf16"
    assert "cannot keep precision decisions" in caplog.text and "SPACY_ELMO_CACHE" in caplog.text


def test_bench_of_untrained_weights_prints_the_choice_without_recording_it(monkeypatch):
    machine = FakeMachine({"fp32": 1.0, "bf16": 0.5, "int8": 0.8}, noise={})
    model = tuned(BiLM(measured_options()), machine)
    assert autotune.remeasure(model.runtime, record=False).choice == "bf16"
    assert not autotune.decisions_path().exists() and not model.runtime.decisions.made
    assert autotune.remeasure(model.runtime).choice == "bf16"
    assert (
        autotune.decide(tuned(model, run=never, clock=never).runtime).source == "measured"
    )  # remembered by its runtime
    assert json.loads(autotune.decisions_path().read_text())


def test_the_timed_pass_is_the_models_own_in_each_precision():
    """timed_pass: an explicit precision, zero states, no cache, the model's settings untouched."""
    model = random_bilm(state="carry", precision="auto", cache_size=100).train()
    sentences = [["The", "bank", "rose", "."], ["It", "fell"]]
    for precision in PRECISIONS[:2]:
        fresh = random_bilm(precision=precision, cache_size=0)
        with torch.no_grad():
            expected = fresh(sentences).layers
        torch.testing.assert_close(
            timed_passes.timed_pass(model.runtime, sentences, precision), expected, rtol=0, atol=0
        )
    assert (model.runtime.precision, model.runtime.state_mode, model.training, len(model.runtime.token_cache)) == (
        "auto",
        "carry",
        True,
        0,
    )
    assert model.lstm.dropout.training


def held_copies(model: BiLM) -> int:
    """How many low-precision weight copies and int8 packs the model holds."""
    return len(model.token_encoder.copies) + len(model.lstm.copies)


@pytest.mark.skipif(not int8_available(), reason="this torch build has no int8 kernels for this CPU")
def test_measuring_leaves_no_candidates_copies_behind():
    """Each candidate's copies (float32 input weights with their bias row, bf16 copies, int8 packs)
    are dropped once timed; inference then makes only the chosen precision's."""
    model = tuned(BiLM(measured_options(), precision="auto"))
    with torch.no_grad():
        timed_passes.timed_pass(model.runtime, [["warm", "copies"]], "bf16")
        timed_passes.timed_pass(model.runtime, [["warm", "copies"]], "int8")
    assert held_copies(model) > 0
    decision = autotune.decide(model.runtime)
    assert decision.source == "measured" and held_copies(model) == 0
    with torch.no_grad():
        model([["now", "infer"]])
    assert held_copies(model) == held_copies(after_one_pass(decision.choice))


def after_one_pass(precision: str) -> BiLM:
    """A model of the same shapes after one pass in ``precision``."""
    model = BiLM(measured_options(), precision=precision)
    with torch.no_grad():
        model([["now", "infer"]])
    return model
