"""Which files of a directory make a biLM: the standard pair, or an ELMoForManyLangs model.

- Standard (bilm-tf / AllenNLP): ``options.json`` + ``weights.hdf5``; else one ``*options*.json``
  with one ``*weights*.hdf5`` (AllenNLP's names, CLARIN.SI's ``slovenian-elmo-weights.hdf5``), or
  with the only ``*.hdf5`` (the NLPL repository's ``model.hdf5``). Hidden files (``._options.json``,
  macOS's resource forks in a zip) never count.
- ELMoForManyLangs (HIT-SCIR's layout, read by :mod:`spacy_elmo.bilm.formats.manylangs`): ``config.json``
  naming the network config, ``char.dic``, ``word.dic``, ``token_embedder.pkl``, ``encoder.pkl``.

:func:`find_model_directory` finds the one directory of an extracted archive that holds a model.
"""

import os
from pathlib import Path
from typing import List, Optional, Tuple

from ..fileio import standard_files

# An ELMoForManyLangs model's directory: its config.json names the network config; char.dic,
# word.dic and the two PyTorch state dicts.
MANYLANGS_FILES = ("config.json", "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl")
STANDARD, MANYLANGS = "standard", "elmoformanylangs"
# Folders of an archive that never hold the model: macOS's resource forks.
_IGNORED_FOLDERS = ("__MACOSX",)


def standard_pair(directory: Path) -> Optional[Tuple[Path, Path]]:
    """``(options file, weight file)`` of the standard biLM in ``directory``, or None."""
    standard = standard_files(directory)
    if all(path.is_file() for path in standard):
        return standard
    options = _visible(directory, "*options*.json")
    if len(options) != 1:
        return None
    weights = _visible(directory, "*weights*.hdf5") or _visible(directory, "*.hdf5")
    return (options[0], weights[0]) if len(weights) == 1 else None


def is_manylangs_directory(directory: Path) -> bool:
    """Whether ``directory`` holds an ELMoForManyLangs model: two of its files at least (one
    ``config.json`` is any tool's); the load then names each one that is missing."""
    return sum((directory / name).is_file() for name in MANYLANGS_FILES) >= 2


def find_model_directory(root: Path, label: str) -> Tuple[Path, str]:
    """The one directory under ``root`` (``root`` included) that holds a model, and its format.

    Raises ValueError naming what was found when there is none, or more than one. ``label``
    names ``root`` in messages (an archive's URL).
    """
    found: List[Tuple[Path, str]] = []
    files: List[str] = []
    for current, folders, names in os.walk(root):
        folders[:] = sorted(f for f in folders if f not in _IGNORED_FOLDERS and not f.startswith("."))
        directory = Path(current)
        files.extend(str((directory / name).relative_to(root)) for name in sorted(names))
        if standard_pair(directory) is not None:  # the standard pair wins
            found.append((directory, STANDARD))
        elif is_manylangs_directory(directory):
            found.append((directory, MANYLANGS))
    if len(found) == 1:
        return found[0]
    if not found:
        shown = ", ".join(files[:12]) + (f" and {len(files) - 12} more" if len(files) > 12 else "")
        raise ValueError(
            f"{label} holds no ELMo model: no directory with options.json + weights.hdf5 (or one *options*.json "
            f"and one *.hdf5), nor an ELMoForManyLangs model ({', '.join(MANYLANGS_FILES)}); "
            f"it holds: {shown or 'nothing'}"
        )
    shown = ", ".join(f"{(d.relative_to(root).as_posix() if d != root else '.')} ({kind})" for d, kind in found)
    raise ValueError(f"{label} holds several ELMo models, so it does not say which one to use: {shown}")


def _visible(directory: Path, pattern: str) -> List[Path]:
    return sorted(p for p in directory.glob(pattern) if not p.name.startswith(".") and p.is_file())
