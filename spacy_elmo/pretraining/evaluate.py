"""Held-out perplexity of both language models, always with the full softmax.

Every document is read alone, as :meth:`BiLM.forward` reads a sentence: ``<S> w1 ... wn </S>``.
The forward LM is scored on w1 ... wn </S> (from positions 0 .. n), the backward LM on
<S> w1 ... wn (from positions 1 .. n + 1): n + 1 targets each, exactly those training scores.
Perplexity is exp(mean NLL per target) for each direction; ``average`` is exp of the mean of
the two mean NLLs (their geometric mean), bilm-tf's convention.

``initial`` chooses the LSTM state each document starts from: ``"zero"``, ``"warm"`` (the
biLM's stored warm start) or ``"carry"`` (documents run as ``batch_size`` streams, row r
reading documents r, r + batch_size, ...; each starts where the previous one of its row ended,
like ``BiLM(state="carry")``; the first ones start from zero). The biLM runs on a runtime made
for the evaluation (pretraining makes one per evaluation): what it caches goes with it.
"""

import math
from typing import Dict, Sequence

import torch

from ..bilm.model.states import STATE_MODES, StateMode
from ..bilm.runtime import BiLMRuntime
from .softmax import SharedSoftmax
from .vocab import BOS, EOS, Vocabulary


def heldout_perplexity(
    runtime: BiLMRuntime,
    softmax: SharedSoftmax,
    vocab: Vocabulary,
    documents: Sequence[Sequence[str]],
    initial: StateMode = "zero",
    batch_size: int = 32,
) -> Dict[str, float]:
    """Perplexities ``forward``, ``backward``, ``average`` and the number of ``targets``.

    The products run at the runtime's precision for inference (:attr:`.BiLMRuntime.resolved_precision`),
    the softmax's too.
    """
    if initial not in STATE_MODES:
        raise ValueError(f"initial state must be one of {STATE_MODES}, got {initial!r}")
    if not documents:
        raise ValueError("held-out perplexity needs at least one document")
    was_training = runtime.model.training
    runtime.eval()
    nll = torch.zeros(2, dtype=torch.float64)  # [forward, backward]
    count = 0  # targets per direction
    carried = runtime.initial_state(batch_size, "zero")  # what "carry" continues from: zeros at first
    try:
        with torch.no_grad():
            dtype = runtime.resolved_precision.dtype  # inference's, without gradients
            for start in range(0, len(documents), batch_size):
                batch = documents[start : start + batch_size]
                output = runtime(batch, state=runtime.initial_state(len(batch), initial, carried))
                carried, top = output.state, output.layers[-1]  # top: (batch, time, 2P), boundaries included
                ids = torch.full(top.shape[:2], BOS, dtype=torch.int64)  # (batch, time): <S> w1 .. wn </S>
                for row, document in enumerate(batch):
                    ids[row, 1 : len(document) + 2] = torch.cat([vocab.ids(document), torch.tensor([EOS])])
                ids, dim = ids.to(top.device), top.shape[-1] // 2
                valid = torch.arange(top.shape[1] - 1, device=top.device) < (output.lengths.unsqueeze(1) - 1)
                forward = softmax.full_nll(top[:, :-1, :dim][valid], ids[:, 1:][valid], dtype)
                backward = softmax.full_nll(top[:, 1:, dim:][valid], ids[:, :-1][valid], dtype)
                nll += torch.stack([forward.double().sum(), backward.double().sum()]).cpu()
                count += int(valid.sum())
    finally:
        runtime.train(was_training)
    mean = nll / count
    return {
        "forward": math.exp(mean[0]),
        "backward": math.exp(mean[1]),
        "average": math.exp(mean.mean()),
        "targets": count,
    }
