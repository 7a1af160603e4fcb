"""A biLM's weights named by their content, the same in every process and on every machine.

An ``embed`` manifest records it (:func:`spacy_elmo.embed.settings.model_identity`), so that a
store is served only to the biLM that computed it, and ``precision = "auto"`` keys its accuracy
check on it (:mod:`.autotune`). Unlike ``BiLMRuntime.fingerprint`` (in-process changes, at no
cost), it reads every weight, so a runtime computes it once (:class:`..precision.decisions.Decisions`).
"""

import hashlib
from typing import Dict, Protocol

import torch

from ..model.token_encoder import legacy_name


class Weighted(Protocol):
    """What a digest reads: a module's state (:class:`~spacy_elmo.bilm.BiLM`'s)."""

    def state_dict(self) -> Dict[str, torch.Tensor]: ...


def weights_digest(module: Weighted) -> str:
    """A SHA-256 (hex) of ``module``'s state: each tensor's name, dtype, shape and value bytes, by name.

    The token encoder's tensors are named as before its rename (``char_cnn.*``), so that stores and
    decisions recorded then still name the same weights."""
    digest = hashlib.sha256()
    state = {legacy_name(name): tensor for name, tensor in module.state_dict().items()}
    for name, tensor in sorted(state.items()):
        array = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{array.dtype}:{tuple(array.shape)};".encode("utf8"))
        if array.numel():
            digest.update(array.view(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()
