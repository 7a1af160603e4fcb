"""`spacy-elmo embed` as a command: the issue's HDF5 run, and clear errors for bad input."""

import subprocess
import sys

import h5py

from .conftest import SENTENCES


def test_command_line_writes_allennlps_file(bilm_files, corpus, tmp_path):
    """The issue's first 'done when': python -m spacy_elmo embed in.txt out.hdf5 --whitespace ..."""
    result = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "embed", str(corpus), str(tmp_path / "out.hdf5"), "--whitespace",
         "--options-file", str(bilm_files[0]), "--weight-file", str(bilm_files[1]), "--threads", "1", "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"{len(SENTENCES)} sentences" in result.stdout and "tokens/s" in result.stdout
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert len(f.keys()) == len(SENTENCES) + 1


def test_command_line_reports_bad_input_clearly(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin1"))
    for path, message in ((tmp_path / "missing.txt", "does not exist"), (tmp_path / "latin1.txt", "not UTF-8")):
        result = subprocess.run(
            [sys.executable, "-m", "spacy_elmo", "embed", str(path), str(tmp_path / "out"), "--no-progress"],
            capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 1 and "Error:" in result.stderr and message in result.stderr
    assert not (tmp_path / "out").exists()
