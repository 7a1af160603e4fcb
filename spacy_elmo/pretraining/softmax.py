"""One softmax shared by the forward and backward language models (as in bilm-tf).

Full softmax scores every word. Sampled softmax (Jean et al. 2015) scores the target against
``n_negatives`` words drawn once per batch, for every row, from a log-uniform (Zipfian)
distribution over ids, and subtracts log Q(w) = log(expected count of w) from each negative's
logit: the sum of the corrected exponentials is an importance-sampling estimate of the
partition function without the target, so the loss estimates the full-softmax NLL (its value
approaches the full loss as negatives grow). The target's own logit is left uncorrected
(TensorFlow's ``sampled_softmax_loss`` corrects it too, which shifts the loss value by the
target's log expected count). Perplexity on held-out text is always measured with the full
softmax.

The logits' product may run in bf16 (``dtype``, see :mod:`spacy_elmo.bilm.precision.resolved`); the
bias, the log-sum-exp and the loss are float32.
"""

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..bilm.memory.weight_copies import WeightCopies

LOGITS_PER_CHUNK = 2**24


class SharedSoftmax(nn.Module):
    """Output layer over the vocabulary: ``weight`` (vocab, dim), ``bias`` (vocab,)."""

    def __init__(self, vocab_size: int, dim: int, chunk_logits: int = LOGITS_PER_CHUNK) -> None:
        super().__init__()
        self.chunk_logits = chunk_logits
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.weight, 0.0, 1.0 / math.sqrt(dim))
        self.low_precision = WeightCopies()

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[0]

    def full_nll(self, hidden: Tensor, targets: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Negative log-likelihood of each target under the full softmax, the logits' product in ``dtype``.

        Shapes: ``hidden`` (n, dim), ``targets`` (n,) int64 -> (n,). Rows go through in chunks of
        ``chunk_logits / vocab_size`` (``chunk_logits``: the constructor's), so that without autograd
        (held-out evaluation) the logits never take more than 64 MB by default, whatever the vocabulary size.
        """
        rows = max(1, self.chunk_logits // self.vocab_size)
        weight: Tensor = self.weight
        if dtype != torch.float32:
            weight = self.low_precision.cast("weight", dtype, [self.weight], lambda: self.weight)
        chunks = zip(hidden.split(rows), targets.split(rows))
        return torch.cat([F.cross_entropy(_logits(h, weight, self.bias), t, reduction="none") for h, t in chunks])

    def sampled_nll(
        self, hidden: Tensor, targets: Tensor, negatives: Tensor, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """Sampled-softmax loss of each target against shared ``negatives`` (s,) int64 ids.

        Shapes: ``hidden`` (n, dim), ``targets`` (n,) -> (n,). A negative equal to a row's
        target is masked out of that row ("accidental hit"), as TensorFlow does. The negatives'
        logits come from a product in ``dtype``; the targets' (one dot product per row) stay
        float32.
        """
        # log(n_negatives * P(k)) for every id k: the sampled-softmax correction.
        log_q = torch.log(log_uniform_probs(self.vocab_size, hidden.device) * negatives.numel())
        true_logits = (hidden * self.weight[targets]).sum(-1) + self.bias[targets]
        neg_logits = _logits(hidden, self.weight[negatives].to(dtype), self.bias[negatives]) - log_q[negatives]
        neg_logits = neg_logits.masked_fill(targets.unsqueeze(1) == negatives.unsqueeze(0), float("-inf"))
        logits = torch.cat([true_logits.unsqueeze(1), neg_logits], dim=1)
        return torch.logsumexp(logits, dim=1) - true_logits


def _logits(hidden: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``hidden @ weight.T + bias`` in float32, the product in ``weight``'s dtype.

    Shapes: ``hidden`` (n, dim) float32, ``weight`` (v, dim), ``bias`` (v,) float32 -> (n, v).
    """
    if weight.dtype == torch.float32:
        return F.linear(hidden, weight, bias)
    return F.linear(hidden.to(weight.dtype), weight).float() + bias


def log_uniform_probs(vocab_size: int, device: torch.device) -> Tensor:
    """P(k) = (log(k + 2) - log(k + 1)) / log(vocab_size + 1) for ids k; (vocab_size,) float32."""
    k = torch.arange(vocab_size, device=device, dtype=torch.float64)
    return ((torch.log(k + 2) - torch.log(k + 1)) / math.log(vocab_size + 1)).float()


def sample_log_uniform(vocab_size: int, n_samples: int, device: torch.device) -> Tensor:
    """Draw ``n_samples`` ids with replacement from the log-uniform distribution. (n,) int64.

    Inverse-CDF sampling: floor(exp(u * log(V + 1))) - 1 for u ~ U[0, 1). Uses the global
    torch RNG, which checkpoints save and restore.
    """
    u = torch.rand(n_samples, dtype=torch.float64)
    ids = torch.floor(torch.exp(u * math.log(vocab_size + 1))).long() - 1
    return ids.clamp_(0, vocab_size - 1).to(device)
