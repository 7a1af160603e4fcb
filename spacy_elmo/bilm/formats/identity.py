"""A biLM's weights named by their content, the same in every process and on every machine.

An ``embed`` manifest records it (:func:`spacy_elmo.embed.settings.model_identity`), so that a
store is served only to the biLM that computed it, and ``precision = "auto"`` keys its accuracy
check on it (:mod:`.autotune`): two models of the same shapes share their speeds, never their
accuracy. Unlike :meth:`BiLM.fingerprint`, which tells in-process changes apart at no cost, this
reads every weight, which at the Original size takes several times as long as a warm load, so
it is computed once per model where a decision needs it (:func:`model_digest`).
"""

import hashlib
import threading
import weakref

import torch
from torch import nn

from ..model.token_encoder import legacy_name


def weights_digest(module: nn.Module) -> str:
    """A SHA-256 (hex) of ``module``'s state: each tensor's name, dtype, shape and value bytes, by name.

    The token encoder's tensors are named as before its rename (``char_cnn.*``), so that stores and
    decisions recorded then still name the same weights."""
    digest = hashlib.sha256()
    state = {legacy_name(name): tensor for name, tensor in module.state_dict().items()}
    for name, tensor in sorted(state.items()):
        array = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{array.dtype}:{tuple(array.shape)};".encode("utf8"))
        if array.numel():
            digest.update(memoryview(array.view(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()


_digests: "weakref.WeakKeyDictionary[nn.Module, str]" = weakref.WeakKeyDictionary()
_digests_lock = threading.Lock()


def model_digest(module: nn.Module) -> str:
    """:func:`weights_digest` of ``module``'s weights at the first call for it, kept for the module's life.

    Not recomputed when the weights change later (a fine-tuning step would otherwise pay a full
    read of the weights): a decision made for a model stays that model's. A copy (``deepcopy``,
    or a pickled copy in another process) is digested anew at its first call.
    """
    with _digests_lock:
        found = _digests.get(module)
        if found is None:
            found = _digests[module] = weights_digest(module)
        return found
