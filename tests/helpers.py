"""Builders shared by the tests: tiny models, made in the test, no downloads."""

import contextlib
from pathlib import Path
from typing import Iterator, List, Tuple

import numpy
import torch

from spacy_elmo import BiLM, ElmoOptions

FIXTURE_DIR = Path(__file__).parent / "fixtures" / "allennlp_elmo"


def tiny_options(**overrides) -> ElmoOptions:
    """A biLM small enough to run in milliseconds but with every part of the real one."""
    sizes = dict(
        lstm_dim=24,
        projection_dim=8,
        n_layers=2,
        char_embedding_dim=4,
        filters=((1, 4), (2, 8), (3, 8)),
        n_highway=2,
    )
    sizes.update(overrides)
    return ElmoOptions(**sizes)


def random_bilm(seed: int = 0, **kwargs) -> BiLM:
    """A tiny biLM whose weights are large enough for states and clipping to matter."""
    options = kwargs.pop("options", None) or tiny_options()
    torch.manual_seed(seed)
    model = BiLM(options, **kwargs)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.5)
    model.eval()
    return model



# float32 keeps 24 bits of mantissa (6e-8 relative); sums of hundreds of terms reordered by another
# batch shape or another CPU's kernels drift by a few hundred units in the last place.
FLOAT32_RTOL = 1e-5


def assert_float32_close(actual, expected, rtol: float = FLOAT32_RTOL, err_msg: str = "") -> None:
    """``actual`` equals ``expected`` up to float32 rounding of the same quantity computed another way.

    Each element may differ by ``rtol`` of the array's largest magnitude: the rounding error of a
    reordered sum scales with its terms, not with its result, so an element near zero gets the
    same absolute slack as the largest one. Takes numpy arrays or torch tensors.
    """
    actual, expected = (_as_numpy(x) for x in (actual, expected))
    scale = float(numpy.abs(expected).max()) if expected.size else 0.0
    numpy.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-30), err_msg=err_msg)


def _as_numpy(x) -> numpy.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return numpy.asarray(x)


def record_own_precision(monkeypatch, module) -> List[Tuple[torch.device, torch.dtype]]:
    """Replace ``module.own_precision`` by a recorder: the returned list gets the (device, dtype)
    of every block entered, so a test sees at which precision a model ran."""
    entered: List[Tuple[torch.device, torch.dtype]] = []

    @contextlib.contextmanager
    def recording(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
        entered.append((device, dtype))
        yield

    monkeypatch.setattr(module, "own_precision", recording)
    return entered
