"""Start a new biLM's token encoder from static word vectors (MIMICK, Pinter et al. 2017).

ELMo's char CNN learns what a word means only from the contexts the language model sees it in.
On a few million tokens that teaches it spelling far better than meaning: a linear probe tells
news topics apart from a small biLM's layer 0 far worse than from word2vec trained on the same
text (project/docs/lab-notebook.md, "What the features carry"). Static vectors learn meaning
from the same text much faster, so before the language model trains, :func:`fit_init_tokens` fits
the char CNN, its highways and projection (layer 0) to reproduce them: a linear head maps
layer 0 to the vectors' width and the loss is one minus the cosine to the vector, centred (their
shared direction removed, else matching it alone scores a high cosine) and of unit length. The
head is not part of the biLM's files. Language-model training then pulls layer 0 towards what
predicts the next word and can wash the vectors' knowledge out; a run may keep the same distance
as a second, weighted loss (``init_tokens_weight``, see :mod:`.lm`).
"""

from pathlib import Path
from typing import Callable, List, Optional, Tuple

import numpy
import torch
from torch import Tensor, nn

from ..bilm import BiLM
from ..fileio import PathLike

BATCH_WORDS = 256
LEARNING_RATE = 1e-3


def load_static_vectors(path: PathLike) -> Tuple[List[str], numpy.ndarray]:
    """The words and vectors, (n_words, width) float32, of a spaCy pipeline's static vectors (e.g.
    ``spacy init vectors``'s output)."""
    import spacy
    from thinc.api import NumpyOps

    if not Path(path).is_dir():
        raise ValueError(
            f"{path} is not a spaCy pipeline directory: make one from word2vec text with `spacy init vectors`"
        )
    vectors = spacy.load(path).vocab.vectors
    vectors.to_ops(NumpyOps())
    known = [(vectors.strings[key], row) for key, row in vectors.key2row.items() if key in vectors.strings]
    if not known:
        raise ValueError(f"the pipeline at {path} has no static vectors with known words (floret vectors have none)")
    words, rows = zip(*known)
    return list(words), numpy.ascontiguousarray(vectors.data[list(rows)], dtype=numpy.float32)


def unit_targets(vectors: numpy.ndarray) -> Tensor:
    """Centred, unit-length copies of ``vectors`` (n_words, width); all-zero rows stay zero."""
    centred = vectors - vectors.mean(axis=0, keepdims=True)
    norms = numpy.linalg.norm(centred, axis=1, keepdims=True)
    return torch.from_numpy(centred / numpy.maximum(norms, 1e-12)).float()


class InitTokens(nn.Module):
    """How far layer 0 of a biLM is from static vectors: 1 - cosine after a learned linear map.

    ``words`` (n_words) and ``vectors`` (n_words, width) are the static vectors; the targets are
    their centred unit copies (see :func:`unit_targets`), kept on the head's device, not in the
    state dict. The head is the module's only parameter.
    """

    targets: Tensor  # (n_words, width) float32, a buffer

    def __init__(self, words: List[str], vectors: numpy.ndarray, projection_dim: int) -> None:
        super().__init__()
        if len(words) != len(vectors):
            raise ValueError(f"{len(words)} words but {len(vectors)} vectors")
        self.words = words
        self.vectors = vectors  # as given: what an export writes, so that a continued run keeps the same targets
        self.register_buffer("targets", unit_targets(vectors), persistent=False)
        self.head = nn.Linear(projection_dim, vectors.shape[1])

    def forward(self, bilm: BiLM, rows: Tensor) -> Tensor:
        """Mean 1 - cosine over the words at ``rows`` (n,) int64; a scalar float32 tensor."""
        predicted = self.head(bilm.runtime.embed_tokens([self.words[i] for i in rows.tolist()]).float())
        similarity = nn.functional.cosine_similarity(predicted, self.targets[rows.to(self.targets.device)])
        return 1.0 - similarity.mean()

    def sample(self, n: int = BATCH_WORDS) -> Tensor:
        """``n`` word rows drawn uniformly with the global random state: (n,) int64."""
        return torch.randint(len(self.words), (n,))


def fit_init_tokens(
    bilm: BiLM,
    init_tokens: InitTokens,
    epochs: int,
    seed: int = 0,
    on_epoch: Optional[Callable[[int, float], None]] = None,
) -> float:
    """Fit ``bilm``'s token encoder and ``init_tokens``'s head for ``epochs`` passes over its words.

    ``init_tokens`` must be new (its head is initialised here, from ``seed``). Adam with a fixed learning
    rate, batches of ``BATCH_WORDS`` words in a seeded order; the global random state is left as it
    was. ``on_epoch(epoch, mean_cosine)`` is called after each pass. Returns the last pass's mean
    cosine to the targets.
    """
    n_words = len(init_tokens.words)
    cosine = 0.0
    with torch.random.fork_rng(devices=[bilm.device] if bilm.device.type == "cuda" else []):
        torch.manual_seed(seed)
        init_tokens.head.reset_parameters()
        trained = [*bilm.token_encoder.parameters(), *init_tokens.head.parameters()]
        optimizer = torch.optim.Adam(trained, lr=LEARNING_RATE)
        for epoch in range(epochs):
            total = 0.0
            for rows in torch.randperm(n_words).split(BATCH_WORDS):
                distance = init_tokens(bilm, rows)
                optimizer.zero_grad()
                distance.backward()
                optimizer.step()
                total += (1.0 - distance.item()) * len(rows)
            cosine = total / n_words
            if on_epoch is not None:
                on_epoch(epoch, cosine)
    return cosine
