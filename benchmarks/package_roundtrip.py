"""`spacy package` round trip: train a tiny elmo + textcat pipeline, package it, install the
package into a fresh virtual environment, load it there by name and compare its vectors.

    python benchmarks/package_roundtrip.py                 # reuse this venv's torch/spacy (offline)
    python benchmarks/package_roundtrip.py --online-deps   # pip-install the dependencies for real

Too slow for the test suite (it builds and installs packages); run it by hand before a release.
"""

import json
import subprocess
import sys
import sysconfig
import tempfile
import venv
import warnings
from pathlib import Path

import spacy
import typer
from spacy.training import Example

from spacy_elmo import BiLM, ElmoOptions

REPO = Path(__file__).resolve().parent.parent
TEXTS = ["Alice went to Paris .", "It was a great day", "Bob  stayed home ."]
app = typer.Typer(add_completion=False)


def run(*args: str, cwd: Path = REPO) -> str:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def train_tiny_pipeline(directory: Path) -> spacy.Language:
    options = ElmoOptions(lstm_dim=24, projection_dim=8, filters=((1, 4), (2, 8), (3, 8)), char_embedding_dim=4)
    BiLM(options).to_files(directory / "options.json", directory / "weights.hdf5")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"options_file": str(directory / "options.json"),
                                           "weight_file": str(directory / "weights.hdf5")}})
    nlp.add_pipe("textcat", config={"model": {
        "@architectures": "spacy.TextCatReduce.v1", "exclusive_classes": True, "use_reduce_first": False,
        "use_reduce_last": False, "use_reduce_max": False, "use_reduce_mean": True, "nO": None,
        "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v2", "width": 16, "n_layers": 3},
    }})
    examples = [Example.from_dict(nlp.make_doc(t), {"cats": {"A": float(i % 2), "B": float(1 - i % 2)}})
                for i, t in enumerate(TEXTS * 4)]
    nlp.initialize(lambda: examples)
    optimizer = nlp.create_optimizer()
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    return nlp


@app.command()
def main(online_deps: bool = typer.Option(False, help="pip-install spacy/torch/h5py into the fresh venv")) -> None:
    warnings.simplefilter("ignore", UserWarning)
    with tempfile.TemporaryDirectory(prefix="elmo_package_") as tmp_name:
        tmp = Path(tmp_name)
        nlp = train_tiny_pipeline(tmp)
        nlp.meta.update({"name": "elmo_demo", "version": "0.0.1"})
        nlp.to_disk(tmp / "pipeline")
        expected = {"tensors": [nlp(t).tensor.tolist() for t in TEXTS], "cats": [nlp(t).cats for t in TEXTS]}
        for path in (tmp / "options.json", tmp / "weights.hdf5"):
            path.unlink()  # the package must not need the original weight files
        (tmp / "dist").mkdir()
        run(sys.executable, "-m", "spacy", "package", str(tmp / "pipeline"), str(tmp / "dist"), "--build", "sdist")
        sdist = next((tmp / "dist").glob("*/dist/*.tar.gz"))
        print(f"built {sdist.name} ({sdist.stat().st_size / 1024:.0f} KiB)")

        venv.create(tmp / "venv", with_pip=True)
        python = str(tmp / "venv" / "bin" / "python")
        if online_deps:
            run(python, "-m", "pip", "install", "-q", str(REPO))
        else:
            site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
            Path(site, "reuse_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
            run(python, "-m", "pip", "install", "-q", "--no-deps", str(REPO))
        run(python, "-m", "pip", "install", "-q", "--no-deps", str(sdist))
        check = (
            "import json, sys, numpy, spacy\n"
            "nlp = spacy.load('en_elmo_demo')\n"
            "texts, expected = json.loads(sys.stdin.read())\n"
            "docs = [nlp(t) for t in texts]\n"
            "diff = max(float(numpy.abs(d.tensor - numpy.asarray(e)).max()) for d, e in zip(docs, expected['tensors']))\n"
            "cats = max(abs(d.cats[k] - e[k]) for d, e in zip(docs, expected['cats']) for k in e)\n"
            "print(json.dumps({'pipeline': nlp.pipe_names, 'max_tensor_diff': diff, 'max_cats_diff': cats,\n"
            "                  'spacy_elmo': __import__('spacy_elmo').__file__}))\n"
        )
        result = subprocess.run([python, "-c", check], input=json.dumps([TEXTS, expected]),
                                capture_output=True, text=True, cwd=tmp)
        if result.returncode != 0:
            raise SystemExit(f"loading the installed package failed:\n{result.stderr}")
        report = json.loads(result.stdout.strip().splitlines()[-1])
        print(json.dumps(report, indent=2))
        if report["max_tensor_diff"] > 1e-5 or report["max_cats_diff"] > 1e-5:
            raise SystemExit("the installed package gives other vectors")
        print("OK: the packaged pipeline installs in a fresh venv, loads by name and gives the same vectors")


if __name__ == "__main__":
    app()
