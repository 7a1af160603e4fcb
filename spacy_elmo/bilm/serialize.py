"""Serialize a :class:`BiLM` as the bytes of its standard ELMo files, never as a pickle."""

import tempfile
from typing import Any, Dict, Optional

import srsly
import torch

from ..fileio import standard_files
from .model import BiLM, BiLMSettings
from .options import ElmoOptions


def bilm_to_bytes(bilm: Optional[BiLM]) -> bytes:
    """``options.json`` and ``weights.hdf5`` (standard layout) plus the runtime settings."""
    if bilm is None:
        return b""
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_") as tmp:
        options_file, weight_file = standard_files(tmp)
        bilm.to_files(options_file, weight_file)
        msg: Dict[str, Any] = {
            "options": srsly.json_loads(options_file.read_text(encoding="utf8")),
            "weights": weight_file.read_bytes(),
            "settings": bilm.settings.to_dict(),
        }
    return srsly.msgpack_dumps(msg)


def bilm_from_bytes(
    data: bytes, device: Optional[torch.device] = None, settings: Optional[BiLMSettings] = None
) -> Optional[BiLM]:
    """The inverse of :func:`bilm_to_bytes`, on ``device``; ``settings`` override the stored ones."""
    if not data:
        return None
    msg = srsly.msgpack_loads(data)
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_") as tmp:
        options_file, weight_file = standard_files(tmp)
        ElmoOptions.from_dict(msg["options"], source="serialized elmo options").to_file(options_file)
        weight_file.write_bytes(msg["weights"])
        settings = settings if settings is not None else BiLMSettings(**msg["settings"])
        bilm = BiLM.from_files(options_file, weight_file, **settings.to_dict())
    return bilm.to(device) if device is not None else bilm

