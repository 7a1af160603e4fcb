"""Builders shared by the tests: tiny models, made in the test, no downloads.

Fixtures shared by more than one directory live in tests/conftest.py; what a test module needs
from elsewhere comes from here (or a directory's helpers.py), never from another test module.
"""

import contextlib
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import h5py
import numpy
import spacy
import torch
from spacy.language import Language

import spacy_elmo
from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.runtime import BiLMRuntime

FIXTURE_DIR = Path(__file__).parent / "fixtures" / "allennlp_elmo"
CONFIGS = Path(spacy_elmo.__file__).parent / "configs"  # the shipped training configs

# The tests' tiny biLM: small enough to run in milliseconds but with every part of the real one.
TINY_SIZES: Dict[str, Any] = {
    "lstm_dim": 24,
    "projection_dim": 8,
    "n_layers": 2,
    "char_embedding_dim": 4,
    "filters": ((1, 4), (2, 8), (3, 8)),
    "n_highway": 2,
}
WIDTH = 2 * TINY_SIZES["projection_dim"]  # of each of its layers (both directions)
N_LAYERS = TINY_SIZES["n_layers"] + 1  # its output layers: the char CNN's and one per LSTM layer


def tiny_options(**overrides) -> ElmoOptions:
    """The tiny biLM's options, with ``overrides``."""
    return ElmoOptions(**{**TINY_SIZES, **overrides})


def tiny_model_overrides(prefix: str = "components.elmo.model") -> Dict[str, object]:
    """The tiny sizes as config overrides of ``[components.elmo.model]`` (filters as lists, as configs hold them)."""
    return {
        f"{prefix}.{name}": [list(f) for f in value] if name == "filters" else value
        for name, value in TINY_SIZES.items()
    }


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


def write_bilm_files(directory: Path, seed: int = 0, **kwargs) -> Tuple[Path, Path]:
    """Standard files (options.json, weights.hdf5) of :func:`random_bilm` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    options_file, weight_file = directory / "options.json", directory / "weights.hdf5"
    random_bilm(seed, **kwargs).to_files(options_file, weight_file)
    return options_file, weight_file


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


def count_bilm_calls(monkeypatch) -> List[int]:
    """How many sentences each biLM call (``BiLMRuntime.forward``) computes from now on, a number per call."""
    calls: List[int] = []
    _on_bilm_forward(monkeypatch, lambda sentences: calls.append(len(sentences)))
    return calls


def record_bilm_sentences(monkeypatch) -> List[List[str]]:
    """Every sentence a biLM call (``BiLMRuntime.forward``) computes from now on, in order."""
    sentences: List[List[str]] = []
    _on_bilm_forward(monkeypatch, sentences.extend)
    return sentences


def _on_bilm_forward(monkeypatch, seen: Callable[[List[List[str]]], object]) -> None:
    forward = BiLMRuntime.forward

    def watched(self, sentences, *args, **kwargs):
        seen(sentences)
        return forward(self, sentences, *args, **kwargs)

    monkeypatch.setattr(BiLMRuntime, "forward", watched)


def hdf5_arrays(path: Path) -> Dict[str, numpy.ndarray]:
    """Every dataset of an HDF5 file (a biLM's weights.hdf5), by its path in the file."""
    arrays: Dict[str, numpy.ndarray] = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    return arrays


def cuda_fp32_precision() -> Tuple[str, str]:
    """How CUDA may compute float32 products: torch's matmul and cuDNN's convolution settings
    ("ieee" or "tf32"), process-wide values that exist also in a torch built without CUDA."""
    return torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision


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


# Real text with the usual mix of frequent words, names, numbers and punctuation.
REAL_TEXT = [
    "The bank raised its interest rates by half a point on Tuesday .".split(),
    "We sat on the bank of the river and watched the boats go by .".split(),
    "Mr. Smith , who was born in 1952 , said the committee would meet again next week .".split(),
    "Prices rose sharply in March , but economists expect inflation to ease later this year .".split(),
    "She could n't believe how quickly the children had grown !".split(),
    "Is this the road to London ?".split(),
]
MIN_MEAN_COSINE = 0.999  # the accuracy contract of bf16 and int8 against float32, in every layer


def mean_cosines(a: numpy.ndarray, b: numpy.ndarray) -> numpy.ndarray:
    """Per layer, the mean over tokens of the cosine of a's and b's vectors. (n_layers, tokens, width)."""
    dots = (a * b).sum(-1)
    return (dots / (numpy.linalg.norm(a, axis=-1) * numpy.linalg.norm(b, axis=-1))).mean(-1)


# ---------------------------------------------------------------------- pipelines of the tiny biLM
def elmo_config(bilm_files: Tuple[Path, Path], **model: object) -> Dict[str, object]:
    """The ``elmo`` component's config for the biLM of ``bilm_files``, with ``model`` settings."""
    options_file, weight_file = bilm_files
    return {"model": {"options_file": str(options_file), "weight_file": str(weight_file), **model}}


def listener_config(**overrides: object) -> Dict[str, object]:
    return {"@architectures": "spacy_elmo.ElmoListener.v2", "width": WIDTH, "n_layers": N_LAYERS, **overrides}


def mix_config(**settings: object) -> Dict[str, object]:
    """A listener's ``mix`` block: the scalar mix with ``settings``."""
    return {"@layers": "spacy_elmo.ScalarMix.v1", **settings}


NAMES = {"Alice": "PERSON", "Bob": "PERSON", "Paris": "GPE", "London": "GPE"}


def make_examples(nlp: Language, n: int = 8):
    """Tiny NER + textcat data: '<name> went home . It was great|awful .'"""
    from spacy.training import Example

    examples = []
    for i in range(n):
        name = list(NAMES)[i % len(NAMES)]
        mood = "great" if i % 2 else "awful"
        doc = nlp.make_doc(f"{name} went home . It was {mood} .")
        examples.append(
            Example.from_dict(
                doc,
                {
                    "entities": [(0, len(name), NAMES[name])],
                    "cats": {"POS": float(i % 2), "NEG": float(1 - i % 2)},
                },
            )
        )
    return examples


def write_examples_corpus(directory: Path) -> Path:
    """``train.spacy`` (12 docs) and ``dev.spacy`` (4) of :func:`make_examples` in ``directory``."""
    from spacy.tokens import DocBin

    nlp = spacy.blank("xx")
    for name, n in (("train", 12), ("dev", 4)):
        DocBin(docs=[eg.reference for eg in make_examples(nlp, n)]).to_disk(directory / f"{name}.spacy")
    return directory


def build_ner_textcat(bilm_files, listener: Optional[Dict[str, object]] = None, **elmo_model: object) -> Language:
    """elmo + ner + textcat, both listening to elmo (``listener``: :func:`listener_config`'s overrides),
    initialized on :func:`make_examples`."""
    listener = listener or {}
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config=elmo_config(bilm_files, **elmo_model))
    nlp.add_pipe(
        "ner",
        config={
            "model": {
                "@architectures": "spacy.TransitionBasedParser.v2",
                "state_type": "ner",
                "extra_state_tokens": False,
                "hidden_width": 16,
                "maxout_pieces": 2,
                "use_upper": True,
                "nO": None,
                "tok2vec": listener_config(**listener),
            }
        },
    )
    nlp.add_pipe(
        "textcat",
        config={
            "model": {
                "@architectures": "spacy.TextCatReduce.v1",
                "exclusive_classes": True,
                "use_reduce_first": False,
                "use_reduce_last": False,
                "use_reduce_max": False,
                "use_reduce_mean": True,
                "nO": None,
                "tok2vec": listener_config(**listener),
            }
        },
    )
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    return nlp


def with_random_output_layers(nlp: Language, components: Sequence[str] = ("ner", "textcat")) -> Language:
    """Give the heads' zero-initialized weights small random values.

    spaCy starts the output layers of ``ner`` and ``textcat`` at zero, so their first step sends
    no gradient back to the listeners (the elmo loss of that step is 0.0): a test of what a
    gradient does to the biLM needs nonzero heads.
    """
    rng = numpy.random.default_rng(0)
    for name in components:
        for node in nlp.get_pipe(name).model.walk():
            if node.has_param("W") and not node.ops.xp.any(node.get_param("W")):
                shape = node.get_param("W").shape
                node.set_param("W", node.ops.asarray(rng.normal(0.0, 0.1, shape).astype("float32")))
    return nlp


# ---------------------------------------------------------------- another CPU kind, simulated
# `make test-avx2`: the libraries capped at AVX2 before torch loads (ATen's kernels, oneDNN's, fbgemm's,
# MKL's, whose AVX2 kernels many AMD CPUs get too), and spacy-elmo's view of the CPU without the
# features they no longer use, so a machine with AVX512 or AMX also tests what an AVX2-only one runs.
AVX2_LIBRARIES = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
}
BEYOND_AVX2 = ("avx512", "amx", "avx_vnni")  # the prefixes of the features such a CPU lacks


def see_an_avx2_cpu(environ: Dict[str, str], directory: Path) -> None:
    """Make this process's spacy-elmo see an AVX2-only CPU: torch's probe of the CPU's features
    and the /proc/cpuinfo it falls back to (a copy in ``directory``) lose :data:`BEYOND_AVX2`.
    Refused unless ``environ`` capped the libraries (:data:`AVX2_LIBRARIES`) before torch loaded."""
    missing = [f"{name}={value}" for name, value in AVX2_LIBRARIES.items() if environ.get(name) != value]
    if missing:
        raise RuntimeError(f"an AVX2-only CPU needs {' '.join(missing)} set before torch loads: run make test-avx2")
    from spacy_elmo.bilm.precision import compat

    probe = getattr(torch.cpu, "get_capabilities", None)  # torch >= 2.11
    if probe is not None:

        def avx2_capabilities() -> Dict[str, Any]:
            return {name: value for name, value in probe().items() if not name.startswith(BEYOND_AVX2)}

        torch.cpu.get_capabilities = avx2_capabilities
    if compat.CPUINFO.exists():
        cpuinfo = directory / "cpuinfo"
        cpuinfo.write_text("\n".join(map(_without_beyond_avx2, compat.CPUINFO.read_text().splitlines())))
        compat.CPUINFO = cpuinfo


def _without_beyond_avx2(line: str) -> str:
    """A /proc/cpuinfo line, its flags (if it lists them) without :data:`BEYOND_AVX2`."""
    key, colon, value = line.partition(":")
    if key.strip() != "flags":
        return line
    return key + colon + " " + " ".join(flag for flag in value.split() if not flag.startswith(BEYOND_AVX2))
