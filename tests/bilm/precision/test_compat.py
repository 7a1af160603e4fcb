"""Older torch (spacy_elmo.bilm.resolved.compat) and errors under the biLM's properties: what a torch
without ``torch.cpu.get_capabilities`` (before 2.11) gets, and a failing probe's own message."""

from pathlib import Path

import pytest
import torch

from spacy_elmo import BiLM
from spacy_elmo.bilm import settings
from spacy_elmo.bilm.kernels import int8_packs
from spacy_elmo.bilm.precision import autotune, compat
from spacy_elmo.bilm.precision.hardware import Hardware

from ...helpers import tiny_options

# Features spacy-elmo asks the CPU about (precision.py, int8.py, cli.py).
ASKED = ("avx512_bf16", "amx_bf16", "avx512_vnni", "amx_int8", "avx_vnni")

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Made-up Xeon
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni

processor\t: 1
model name\t: Made-up Xeon
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni
"""


@pytest.fixture
def old_torch(monkeypatch):
    """torch as it was before 2.11: no ``torch.cpu.get_capabilities``."""
    monkeypatch.delattr(torch.cpu, "get_capabilities", raising=False)


def with_cpuinfo(path: Path) -> Hardware:
    """A machine whose CPU's features come from ``path``, as a torch without the probe reads them."""
    return Hardware(cpu_capabilities=lambda: compat.cpu_capabilities(path))


def test_without_torchs_probe_the_features_come_from_cpuinfo(old_torch, tmp_path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    machine = with_cpuinfo(tmp_path / "cpuinfo")
    capabilities = machine.cpu_capabilities()
    assert capabilities["cpu_name"] == "Made-up Xeon"
    assert {name: capabilities.get(name, False) for name in ASKED} == {
        "avx512_bf16": True,
        "amx_bf16": False,
        "avx512_vnni": True,
        "amx_int8": False,
        "avx_vnni": False,
    }
    assert machine.cpu_has_native_bf16()


def test_without_torchs_probe_or_cpuinfo_no_feature_is_claimed(old_torch, tmp_path):
    """Slower at worst: fp32 products for ``auto``'s bf16 question, torch's own int8 engine."""
    machine = with_cpuinfo(tmp_path / "absent")
    assert machine.cpu_capabilities() == {}
    assert not machine.cpu_has_native_bf16()
    assert int8_packs.pack_engine(machine) == torch.backends.quantized.engine


@pytest.mark.skipif(not hasattr(torch.cpu, "get_capabilities"), reason="torch < 2.11 has no probe to compare with")
@pytest.mark.skipif(not compat.CPUINFO.exists(), reason="no /proc/cpuinfo here (not Linux)")
def test_cpuinfo_agrees_with_torchs_probe_on_the_features_asked():
    fallback = dict(compat._cpuinfo_capabilities(compat.CPUINFO))
    torchs = torch.cpu.get_capabilities()
    assert {name: bool(fallback.get(name)) for name in ASKED} == {name: bool(torchs.get(name)) for name in ASKED}


def test_a_failing_capability_probe_surfaces_its_own_message(monkeypatch, tmp_path):
    """Not ``'BiLMRuntime' object has no attribute 'resolved_precision'``: nn.Module's __getattr__
    replaces any AttributeError raised under a module's plain property with that."""

    def probe():
        raise AttributeError("the probe's own message")

    monkeypatch.setattr(torch.cpu, "get_capabilities", probe, raising=False)
    monkeypatch.delenv(settings.PRECISION_ENV, raising=False)
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    bilm = BiLM(tiny_options(lstm_dim=512, projection_dim=64), precision="auto")  # measured: asks the CPU
    with pytest.raises(RuntimeError, match="resolved_precision failed: AttributeError: the probe's own message"):
        _ = bilm.runtime.resolved_precision


def test_other_errors_under_a_property_pass_unchanged(monkeypatch):
    monkeypatch.delenv(settings.PRECISION_ENV, raising=False)  # auto is the runtime's decision, made up below
    bilm = BiLM(tiny_options(), precision="auto")
    bilm.runtime.tuning = autotune.Tuning(min_measured_flops=0)  # a decision the tiny biLM reads, not "tiny"'s fp32
    for training in (False, True):
        bilm.runtime.decisions.made[torch.get_num_threads(), training] = autotune.Decision("fp64", {}, "measured")
    with pytest.raises(ValueError, match="fp64"):
        _ = bilm.runtime.resolved_precision
