"""`embed --device` and `--gpus-per-worker`: every decision, made on a CPU from what a machine has.

The decisions are pure functions of the CUDA devices torch sees, the GPU thinc's ops run on and
the options, so each case is checked here without a GPU; the GPU suite runs them for real.
"""

import json
import types

import pytest
import torch
from thinc.api import CupyOps, get_current_ops, set_current_ops

from spacy_elmo import BiLM
from spacy_elmo.bilm.precision.hardware import Hardware
from spacy_elmo.embed import EmbedSettings, OutputError, run_embed
from spacy_elmo.embed.device import parse_device, resolve_device, thinc_gpu, worker_device, worker_precision
from spacy_elmo.embed.ray_engine import ShardEmbedder, check_local_gpus

CPU, CUDA0, CUDA1 = torch.device("cpu"), torch.device("cuda", 0), torch.device("cuda", 1)
SETTINGS = EmbedSettings(whitespace=True, shard_size=2)
NO_CUDA_HERE = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")


@pytest.mark.parametrize(
    "spec, cuda_devices, thinc, prefer_gpu, expected",
    [
        ("cpu", 2, 1, True, CPU),  # cpu is the CPU whatever the machine has
        ("auto", 2, 1, False, CUDA1),  # thinc's GPU, after spacy.require_gpu(1)
        ("auto", 2, 1, True, CUDA1),  # thinc's GPU wins over the command line's cuda:0
        ("auto", 2, None, True, CUDA0),  # the command line: a visible GPU
        ("auto", 2, None, False, CPU),  # a Python caller who did not ask for the GPU
        ("auto", 0, None, True, CPU),  # no GPU anywhere
        ("auto", 0, 0, True, CPU),  # thinc on a GPU that torch cannot use (a CPU build of torch)
        ("cuda", 2, None, False, CUDA0),
        ("cuda", 2, 1, False, CUDA1),  # the pipeline's GPU, not another one
        ("cuda:1", 2, None, False, CUDA1),
        ("cuda:0", 2, 1, True, CUDA0),  # an index given is the index used
    ],
)
def test_resolve_device(spec, cuda_devices, thinc, prefer_gpu, expected):
    assert resolve_device(spec, cuda_devices, thinc, prefer_gpu) == expected


@pytest.mark.parametrize("spec", ["cuda", "cuda:0"])
def test_asking_for_cuda_without_cuda_names_the_option_and_the_ways_out(spec):
    with pytest.raises(ValueError, match=f"--device {spec}: torch sees no CUDA GPU.*--device cpu or auto"):
        resolve_device(spec, 0, None, True)


def test_a_gpu_index_past_the_visible_ones_is_an_error_that_lists_them():
    with pytest.raises(ValueError, match=r"--device cuda:2: torch sees 2 CUDA GPU\(s\), cuda:0 to cuda:1"):
        resolve_device("cuda:2", 2, None, False)


@pytest.mark.parametrize("spec", ["gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cpu:0", " auto", ""])
def test_a_malformed_device_is_an_error_that_lists_the_choices(spec):
    with pytest.raises(ValueError, match="--device must be auto, cpu, cuda or cuda:N"):
        resolve_device(spec, 2, None, True)


def test_parse_device():
    assert [parse_device(s) for s in ("auto", "cpu", "cuda", "cuda:3")] == [
        ("auto", None),
        ("cpu", None),
        ("cuda", None),
        ("cuda", 3),
    ]


def test_thinc_gpu_is_torchs_current_device_when_thincs_ops_are_cupys():
    """thinc's require_gpu(n) makes n current for torch too; CupyOps.device_id stays 0."""
    gpu_1_current = Hardware(cuda=types.SimpleNamespace(is_available=lambda: True, current_device=lambda: 1))
    assert thinc_gpu(gpu_1_current) is None  # NumpyOps: the CPU
    previous = get_current_ops()
    set_current_ops(CupyOps())
    try:
        assert thinc_gpu(gpu_1_current) == 1
    finally:
        set_current_ops(previous)


@pytest.mark.parametrize(
    "spec, gpus, expected",
    [("auto", 0, "cpu"), ("cpu", 0, "cpu"), ("auto", 1, "cuda"), ("cuda", 0.5, "cuda"), ("auto", 0.25, "cuda")],
)
def test_worker_device(spec, gpus, expected):
    assert worker_device(spec, gpus) == expected


@pytest.mark.parametrize(
    "spec, gpus, message",
    [
        ("cpu", 1, "--device cpu with --gpus-per-worker 1: the workers would hold GPUs they never use"),
        ("cpu", 0.5, "Drop --gpus-per-worker to run on CPUs, or drop --device cpu"),
        ("cuda", 0, "Ray gives a worker a GPU only when it asks for one. Add --gpus-per-worker 1"),
        ("cuda:1", 0, "--device cuda:1 with --engine ray: Ray gives a worker a GPU only when it asks"),
        ("cuda:1", 1, "which the worker sees as cuda:0; use --device cuda or auto"),
        ("auto", 2, "--gpus-per-worker must be between 0 and 1, got 2"),
        ("auto", -0.5, "--gpus-per-worker must be between 0 and 1"),
        ("gpu", 1, "--device must be auto, cpu, cuda or cuda:N"),
    ],
)
def test_worker_device_refuses_what_ray_cannot_do(spec, gpus, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        worker_device(spec, gpus)


def test_worker_precision_is_decided_once_on_the_driver():
    assert worker_precision("bf16", "cuda", 0) == "bf16"  # given: nothing to decide
    assert worker_precision("fp32", "cpu", 0) == "fp32"
    assert worker_precision("auto", "cpu", 0) == "fp32"  # no biLM to time
    # given, CPU workers take the local engine's decision for the run's biLM (measured, or SPACY_ELMO_PRECISION)
    assert worker_precision("auto", "cpu", 0, lambda: "int8") == "int8"
    assert worker_precision("fp32", "cpu", 0, lambda: "int8") == "fp32"
    with pytest.raises(ValueError, match="--precision auto with --gpus-per-worker.*Give --precision bf16 .* or fp32"):
        worker_precision("auto", "cuda", 0)
    with pytest.raises(ValueError, match="'int8' runs on a CPU only.*cuda:0"):  # refused before any worker starts
        worker_precision("int8", "cuda", 1)


def test_a_local_ray_cannot_place_more_gpu_workers_than_it_has_gpus():
    check_local_gpus(4, 0.25, 1.0)
    check_local_gpus(2, 0.0, 0.0)
    with pytest.raises(
        ValueError, match="needs 4 GPUs, and the Ray started on this machine has 1: lower --workers to 1"
    ):
        check_local_gpus(4, 1.0, 1.0)
    with pytest.raises(ValueError, match="has 0: drop --gpus-per-worker"):
        check_local_gpus(1, 0.5, 0.0)


@NO_CUDA_HERE
def test_run_embed_asked_for_cuda_on_a_cpu_machine_fails_before_any_work(bilm_files, corpus, tmp_path):
    with pytest.raises(ValueError, match="--device cuda: torch sees no CUDA GPU"):
        run_embed(corpus, tmp_path / "out", SETTINGS, *bilm_files, device="cuda", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"gpus_per_worker": 1.0}, "--gpus-per-worker is for --engine ray"),
        ({"engine": "ray", "device": "cpu", "gpus_per_worker": 1.0}, "--device cpu with --gpus-per-worker 1"),
        ({"engine": "ray", "device": "cuda"}, "Add --gpus-per-worker 1"),
    ],
)
def test_run_embed_refuses_device_options_that_contradict_before_any_work(
    bilm_files, corpus, tmp_path, options, message
):
    with pytest.raises(ValueError, match=message):
        run_embed(corpus, tmp_path / "out", SETTINGS, *bilm_files, progress=False, **options)
    assert not (tmp_path / "out").exists()


def test_the_device_is_not_part_of_the_outputs_identity(bilm_files, corpus, tmp_path):
    """An output started on one device is finished on another: the manifest never names one."""
    run_embed(corpus, tmp_path / "out", SETTINGS, *bilm_files, device="cpu", progress=False)
    manifest = (tmp_path / "out" / "manifest.json").read_text()
    assert "device" not in manifest and "cuda" not in manifest
    summary = run_embed(corpus, tmp_path / "out", SETTINGS, *bilm_files, device="auto", prefer_gpu=True, progress=False)
    assert (summary.shards_done, summary.shards_skipped) == (0, 4)


def test_a_resumed_run_must_compute_the_products_it_started_with_however_asked(bilm_files, corpus, tmp_path):
    """The precision setting may differ (auto on a bf16 GPU, bf16 to finish on a CPU), not the products."""
    # what embed's "auto" computes on this CPU: inference's decision for this biLM (not training's)
    auto_here = BiLM.from_files(*bilm_files, precision="auto").runtime.resolved_precision_for(training=False).precision
    other = "bf16" if auto_here == "fp32" else "fp32"
    started = EmbedSettings(whitespace=True, shard_size=2, precision=auto_here)
    run_embed(corpus, tmp_path / "out", started, *bilm_files, progress=False)
    summary = run_embed(
        corpus, tmp_path / "out", EmbedSettings(whitespace=True, shard_size=2), *bilm_files, progress=False
    )
    assert summary.shards_skipped == 4  # "auto" computes the same products here: accepted
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["settings"]["precision"] == auto_here
    stored = "float32" if auto_here == "fp32" else "bfloat16"
    with pytest.raises(
        OutputError, match=f"computed with {stored} matrix products.*Finish it with --precision {auto_here}"
    ):
        run_embed(
            corpus,
            tmp_path / "out",
            EmbedSettings(whitespace=True, shard_size=2, precision=other),
            *bilm_files,
            progress=False,
        )


@pytest.mark.parametrize("prefer_gpu, expected", [(True, CUDA0), (False, CPU)])
def test_auto_moves_the_local_biLM_to_the_gpu_from_the_command_line_only(
    bilm_files, corpus, tmp_path, monkeypatch, prefer_gpu, expected
):
    """Where torch sees a GPU (faked here; the biLM stays put), the command line's auto moves the
    biLM there and a Python caller's stays on the CPU: spaCy's convention, require_gpu() opts in."""
    moved = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(BiLM, "to", lambda self, device: moved.append(device) or self)
    run_embed(corpus, tmp_path / "out", SETTINGS, *bilm_files, prefer_gpu=prefer_gpu, progress=False)
    assert moved == [expected]


def test_a_ray_worker_runs_its_biLM_where_it_is_told_in_the_decided_precision(bilm_files, corpus):
    """The actor's logic, without Ray: "cuda" is the GPU Ray gave it, an error where there is none."""
    settings = EmbedSettings(whitespace=True, precision="bf16").to_dict()
    worker = ShardEmbedder(*map(str, bilm_files), str(corpus), settings, str(corpus.parent), 1, "cpu")
    assert worker.runtime.model.device == CPU and worker.runtime.resolved_precision.dtype == torch.bfloat16
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda: torch sees no CUDA GPU"):
            ShardEmbedder(*map(str, bilm_files), str(corpus), settings, str(corpus.parent), 1, "cuda")


def test_ray_gpu_workers_get_the_precision_the_manifest_records(bilm_files, corpus, tmp_path, monkeypatch):
    """auto is decided on the driver for the workers' GPUs (a bf16 GPU, faked here), handed to
    every worker as bf16 and recorded so, though the driver's own biLM on the CPU resolves otherwise."""
    from spacy_elmo.embed import ray_engine

    calls = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(ray_engine, "embed_on_ray", lambda *args, **kwargs: calls.append((args[3], kwargs)))
    run_embed(corpus, tmp_path / "out", SETTINGS, *bilm_files, engine="ray", gpus_per_worker=0.5, progress=False)
    ((workers_settings, options),) = calls
    assert workers_settings.precision == "bf16"
    assert (options["device"], options["gpus_per_worker"]) == ("cuda", 0.5)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["model"]["products"] == "bfloat16" and manifest["settings"]["precision"] == "auto"
