import math

import pytest
import torch

from spacy_elmo.bilm.model.token_encoder import SENTENCE_END, SENTENCE_START
from spacy_elmo.pretraining.softmax import SharedSoftmax, log_uniform_probs, sample_log_uniform
from spacy_elmo.pretraining.vocab import BOS, EOS, UNK, Vocabulary

from ..helpers import assert_float32_close


def test_vocabulary_orders_by_count_and_keeps_markers():
    vocab = Vocabulary.build([["b", "a", "b"], ["c", "b", "a"]], max_size=5, min_count=1)
    assert vocab.words == ["b", "a"]
    assert len(vocab) == 5
    assert vocab.ids([SENTENCE_START, "b", "a", "zzz", SENTENCE_END]).tolist() == [BOS, 3, 4, UNK, EOS]


def test_vocabulary_min_count_and_literal_marker_text():
    vocab = Vocabulary.build([["<S>", "<S>", "x"]], max_size=10, min_count=2)
    assert vocab.words == ["<S>"]
    # the text "<S>" is a word like any other, not the sentence-start marker
    assert vocab.ids(["<S>", SENTENCE_START]).tolist() == [3, BOS]


def test_vocabulary_errors():
    with pytest.raises(ValueError, match="must exceed"):
        Vocabulary.build([["a"]], max_size=3)
    with pytest.raises(ValueError, match="empty"):
        Vocabulary.build([], max_size=10)


def test_log_uniform_sampler_matches_its_distribution():
    torch.manual_seed(0)
    vocab_size, n = 20, 200_000
    probs = log_uniform_probs(vocab_size, torch.device("cpu"))
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-5)
    samples = sample_log_uniform(vocab_size, n, torch.device("cpu"))
    assert int(samples.min()) >= 0 and int(samples.max()) < vocab_size
    observed = torch.bincount(samples, minlength=vocab_size).float() / n
    assert torch.allclose(observed, probs, atol=4e-3)


def test_sampled_softmax_estimates_the_full_softmax():
    """With many samples, the log-Q corrected sampled loss approaches the full loss."""
    torch.manual_seed(0)
    softmax = SharedSoftmax(vocab_size=50, dim=4)
    hidden = torch.randn(6, 4)
    targets = torch.tensor([0, 3, 7, 20, 49, 3])
    full = softmax.full_nll(hidden, targets)
    negatives = sample_log_uniform(50, 200_000, torch.device("cpu"))
    sampled = softmax.sampled_nll(hidden, targets, negatives)
    assert torch.allclose(sampled, full, atol=0.03)


def test_sampled_softmax_masks_accidental_hits():
    softmax = SharedSoftmax(vocab_size=10, dim=2)
    hidden = torch.randn(2, 2)
    targets = torch.tensor([4, 5])
    only_targets = softmax.sampled_nll(hidden, targets, torch.tensor([4, 5]))
    # row 0 sees negative 5 only, row 1 negative 4 only: each loss is log(1 + exp(neg - true))
    log_q = torch.log(log_uniform_probs(10, torch.device("cpu")) * 2)
    logits = hidden @ softmax.weight.T + softmax.bias
    corrected = logits - log_q
    expected = torch.stack(
        [
            torch.logaddexp(logits[0, 4], corrected[0, 5]) - logits[0, 4],
            torch.logaddexp(logits[1, 5], corrected[1, 4]) - logits[1, 5],
        ]
    )
    assert_float32_close(only_targets, expected)


def test_full_softmax_in_chunks_is_the_same():
    torch.manual_seed(0)
    softmax = SharedSoftmax(vocab_size=100, dim=4)
    hidden, targets = torch.randn(1000, 4), torch.randint(0, 100, (1000,))
    whole = softmax.full_nll(hidden, targets)
    chunked = SharedSoftmax(vocab_size=100, dim=4, chunk_logits=1024)  # 10 rows per chunk
    chunked.load_state_dict(softmax.state_dict())
    assert torch.allclose(chunked.full_nll(hidden, targets), whole)
    assert chunked.full_nll(hidden[:0], targets[:0]).shape == (0,)
