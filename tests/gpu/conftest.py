"""The GPU suite (``make test-gpu``): every test here runs with thinc's ops on ``cuda:0``.

The whole directory is skipped, with the reason, where torch sees no CUDA GPU or CuPy cannot
reach one: CI and ``make test`` run on CPUs, where these tests are collected and reported as
skipped, never failed. The tiny biLMs are built in the tests (the CPU suite's builders); the
fixtures shared with the CPU suite (``bilm_files``, ``corpus``, ``tf32_allowed``, ...) are tests/conftest.py's.
"""

import os
from pathlib import Path
from typing import Iterator, Optional

import pytest
import torch
from thinc.api import require_cpu, require_gpu

GPU_TESTS = Path(__file__).parent

# cuBLAS reads this when it starts (at the first product): deterministic products in one stream,
# for the tests that compare two runs step for step (see `deterministic`).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def gpu_unavailable() -> Optional[str]:
    """Why this machine cannot run the GPU suite, or None when it can."""
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return f"torch {torch.__version__} ({build}) sees no CUDA GPU"
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # ImportError, or a CuPy built for another CUDA than the driver's
        return f"CuPy cannot reach the GPU ({type(err).__name__}: {err}); install spacy-elmo[cuda12x] (make test-gpu)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Skip this directory's tests, and only these, where the GPU suite cannot run."""
    reason = gpu_unavailable()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU suite: {reason}")
    for item in items:
        if GPU_TESTS in Path(item.path).parents:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def on_gpu() -> Iterator[None]:
    """thinc's ops on cuda:0, as after ``spacy.require_gpu(0)``; the CPU's again after the test,
    so that a failing test leaves no GPU ops to the next one. Models take the ops current when
    they are built: build a CPU pipeline inside ``thinc.api.use_ops("numpy")``."""
    require_gpu(0)
    yield
    require_cpu()
    torch.cuda.empty_cache()


@pytest.fixture
def deterministic() -> Iterator[None]:
    """Deterministic CUDA kernels (cuDNN's, torch's scatter-adds), so that two runs that should
    take the same steps do. cuBLAS needs CUBLAS_WORKSPACE_CONFIG, set at the top of this module."""
    benchmark, cudnn_deterministic = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = benchmark, cudnn_deterministic
