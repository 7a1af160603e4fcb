"""Serialize a :class:`BiLM` as the bytes of its model files, never as a pickle.

A standard biLM is its ``options.json`` and ``weights.hdf5``; an ELMoForManyLangs biLM, which
that layout cannot hold, is its own model directory (:func:`.manylangs.write_manylangs`). The
same two layouts are what :func:`bilm_to_directory` writes into a saved pipeline, and
:func:`bilm_from_directory` tells them apart by the files present.
"""

import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

import srsly
import torch

from ...fileio import PathLike, standard_files
from ...published.layout import is_manylangs_directory
from ..bilm import BiLM
from ..model.options import ElmoOptions
from ..runtime import BiLMSettings
from .manylangs import is_manylangs, load_manylangs, model_files, write_manylangs

MANYLANGS_FORMAT = "elmoformanylangs"


def bilm_to_bytes(bilm: BiLM, settings: Optional[BiLMSettings] = None) -> bytes:
    """The biLM's files (``options.json`` and ``weights.hdf5``, or an ELMoForManyLangs biLM's model
    directory, file by file) and a runtime's settings (default: its own runtime's)."""
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_") as tmp:
        msg: Dict[str, Any]
        if is_manylangs(bilm):
            directory = write_manylangs(bilm, tmp)
            files = {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}
            msg = {"format": MANYLANGS_FORMAT, "files": files}
        else:
            options_file, weight_file = standard_files(tmp)
            bilm.to_files(options_file, weight_file)
            msg = {
                "options": srsly.json_loads(options_file.read_text(encoding="utf8")),
                "weights": weight_file.read_bytes(),
            }
        msg["settings"] = (bilm.settings if settings is None else settings).to_dict()
    return srsly.msgpack_dumps(msg)


def bilm_from_bytes(
    data: bytes, device: Optional[torch.device] = None, settings: Optional[BiLMSettings] = None
) -> Optional[BiLM]:
    """The inverse of :func:`bilm_to_bytes`, on ``device``; ``settings`` override the stored ones."""
    if not data:
        return None
    msg = srsly.msgpack_loads(data)
    settings = settings if settings is not None else BiLMSettings(**msg["settings"])
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_") as tmp:
        if msg.get("format") == MANYLANGS_FORMAT:
            for name, content in msg["files"].items():
                if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
                    raise ValueError(f"elmo: serialized ELMoForManyLangs biLM: {name!r} is not a file name")
                (Path(tmp) / name).write_bytes(content)
            bilm = load_manylangs(BiLM, tmp, **settings.to_dict())
        else:
            options_file, weight_file = standard_files(tmp)
            ElmoOptions.from_dict(msg["options"], source="serialized elmo options").to_file(options_file)
            weight_file.write_bytes(msg["weights"])
            bilm = BiLM.from_files(options_file, weight_file, **settings.to_dict())
    return bilm.to(device) if device is not None else bilm


def bilm_to_directory(bilm: BiLM, directory: PathLike) -> None:
    """Write ``bilm`` into ``directory`` (a saved pipeline's ``bilm/``): the standard files, or an
    ELMoForManyLangs biLM's own model directory. The files of the other layout that an earlier
    save left there are removed, so that :func:`bilm_from_directory` reads this biLM."""
    directory = Path(directory)
    if is_manylangs(bilm):
        for path in standard_files(directory):  # first: the standard pair wins where both are present
            path.unlink(missing_ok=True)
        write_manylangs(bilm, directory)
    else:
        bilm.to_files(*standard_files(directory))
        for path in model_files(directory):
            path.unlink()


def bilm_from_directory(directory: PathLike, settings: Optional[Dict[str, Any]] = None) -> BiLM:
    """The biLM that :func:`bilm_to_directory` wrote into ``directory``, or that an older version
    wrote there (always the standard files): the standard pair where it is present, else an
    ELMoForManyLangs model directory where its files are (as ``BiLM.from_pretrained`` of a
    directory tells them apart), else the standard loader's error about the missing files."""
    directory = Path(directory)
    settings = settings or {}
    standard = standard_files(directory)
    if not all(path.is_file() for path in standard) and is_manylangs_directory(directory):
        return load_manylangs(BiLM, directory, **settings)
    return BiLM.from_files(*standard, **settings)
