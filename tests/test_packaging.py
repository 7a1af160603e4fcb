"""Release and `spacy package`, end to end (issue 38): spacy-elmo's own sdist and wheel, and a
trained pipeline packaged as the README says, installed into a fresh virtual environment and
loaded there by name.

The fresh environment takes torch and spaCy from this one (a ``.pth`` file to its site-packages)
rather than downloading gigabytes; spacy-elmo and the pipeline come from the wheels built here,
installed without dependencies, as a user without PyPI access to spacy-elmo would install them.
"""

import json
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import numpy
import pytest
import spacy
from spacy.training import Example

from spacy_elmo import BiLM

from .helpers import tiny_options

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TEXTS = ["Alice went to Paris .", "It was a great day", "Bob  stayed home ."]


def run(*args: str, cwd: Path = REPO, stdin: str = "") -> str:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, input=stdin, timeout=900)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def trained_pipeline(directory: Path) -> spacy.Language:
    """elmo + textcat with a listener, a few steps: what `spacy train` leaves in model-best."""
    BiLM(tiny_options()).to_files(directory / "options.json", directory / "weights.hdf5")
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "elmo",
        config={
            "model": {"options_file": str(directory / "options.json"), "weight_file": str(directory / "weights.hdf5")}
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
                "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v2", "width": None, "n_layers": None},
            }
        },
    )
    examples = [
        Example.from_dict(nlp.make_doc(t), {"cats": {"A": float(i % 2), "B": float(1 - i % 2)}})
        for i, t in enumerate(TEXTS * 4)
    ]
    nlp.initialize(lambda: examples)
    optimizer = nlp.create_optimizer()
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    return nlp


def test_release_files_and_a_packaged_pipeline_install_in_a_fresh_environment(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist), str(REPO))
    run(sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir()))
    wheel = next(dist.glob("spacy_elmo-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"spacy_elmo/configs/ner_elmo.cfg", "spacy_elmo/configs/textcat_elmo.cfg"} <= set(names)
    assert any(name.startswith("spacy_elmo/published/") and name.endswith("weights.hdf5") for name in names)

    nlp = trained_pipeline(tmp_path)
    nlp.meta.update({"name": "elmo_demo", "version": "0.0.1"})
    nlp.to_disk(tmp_path / "pipeline")
    expected = {"tensors": [nlp(t).tensor.tolist() for t in TEXTS], "cats": [nlp(t).cats for t in TEXTS]}
    for path in (tmp_path / "options.json", tmp_path / "weights.hdf5"):
        path.unlink()  # the package must not need the original weight files
    (tmp_path / "packages").mkdir()
    run(
        sys.executable,
        "-m",
        "spacy",
        "package",
        str(tmp_path / "pipeline"),
        str(tmp_path / "packages"),
        "--build",
        "wheel",
    )  # the README's command
    pipeline_wheel = next((tmp_path / "packages").glob("*/dist/*.whl"))

    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    Path(site, "reuse_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(python, "-m", "pip", "install", "-q", "--no-deps", str(wheel), str(pipeline_wheel))
    check = (
        "import json, sys, numpy, spacy\n"
        "nlp = spacy.load('en_elmo_demo')\n"
        "texts = json.loads(sys.stdin.read())\n"
        "docs = [nlp(t) for t in texts]\n"
        "print(json.dumps({'tensors': [d.tensor.tolist() for d in docs], 'cats': [d.cats for d in docs],\n"
        "                  'spacy_elmo': __import__('spacy_elmo').__file__}))\n"
    )
    found = json.loads(run(python, "-c", check, cwd=tmp_path, stdin=json.dumps(TEXTS)).strip().splitlines()[-1])
    assert found["spacy_elmo"].startswith(site)  # the installed wheel, not this checkout
    for got, want in zip(found["tensors"], expected["tensors"]):
        numpy.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(found["cats"], expected["cats"]):
        assert got.keys() == want.keys() and all(abs(got[k] - want[k]) < 1e-5 for k in want)
