import math

import torch

from spacy_elmo.bilm import LSTMState
from spacy_elmo.bilm.model.token_encoder import SENTENCE_END as E
from spacy_elmo.bilm.model.token_encoder import SENTENCE_START as S
from spacy_elmo.pretraining import lm
from spacy_elmo.pretraining.evaluate import heldout_perplexity
from spacy_elmo.pretraining.lm import BiLMLoss
from spacy_elmo.pretraining.stream import WindowBatch
from spacy_elmo.pretraining.vocab import BOS, EOS, Vocabulary

from ..helpers import assert_float32_close, random_bilm, record_own_precision


def _batch(forward, backward, vocab):
    """A one-row batch over the given streams (window = len - 1)."""
    targets = torch.stack([vocab.ids(forward[1:]), vocab.ids(backward[1:])]).unsqueeze(1)
    scored = torch.stack([targets[0] != BOS, targets[1] != EOS])
    return WindowBatch(([forward[:-1]], [backward[:-1]]), targets, scored)


def test_training_windows_see_exactly_what_bilm_forward_sees():
    """A document read as a window from zero state gives the BiLM's own top layer."""
    bilm = random_bilm()
    sentence = ["the", "cat", "sat"]
    vocab = Vocabulary(sentence)
    loss = BiLMLoss(bilm, len(vocab))
    forward = [S, *sentence, E, S]
    backward = [E, *reversed(sentence), S, E]
    with torch.no_grad():
        top, final = loss.top_layer(_batch(forward, backward, vocab), loss.zero_state(1))
        expected = bilm([sentence]).layers[-1][0]  # (time, 2P) with boundaries
    P = bilm.options.projection_dim
    assert_float32_close(top[0, 0], expected[:, :P])
    assert_float32_close(top[1, 0], expected.flip(0)[:, P:])


def test_carried_state_continues_the_stream_exactly():
    """Two windows with the carried state equal one window over the same tokens."""
    bilm = random_bilm()
    vocab = Vocabulary(["a", "b", "c"])
    loss = BiLMLoss(bilm, len(vocab))
    forward = [S, "a", "b", E, S, "c", "a", E, S]
    backward = [E, "b", "a", S, E, "a", "c", S, E]
    with torch.no_grad():
        whole, _ = loss.top_layer(_batch(forward, backward, vocab), loss.zero_state(1))
        first, state = loss.top_layer(_batch(forward[:5], backward[:5], vocab), loss.zero_state(1))
        carried = LSTMState(state.hidden.detach(), state.memory.detach())
        second, _ = loss.top_layer(_batch(forward[4:], backward[4:], vocab), carried)
    assert_float32_close(torch.cat([first, second], dim=2), whole)


def test_loss_counts_and_sums_scored_targets():
    bilm = random_bilm()
    vocab = Vocabulary(["a", "b"])
    loss = BiLMLoss(bilm, len(vocab))
    batch = _batch([S, "a", E, S, "b"], [E, "a", S, E, "b"], vocab)
    sums, counts, _ = loss(batch, loss.zero_state(1))
    assert counts.tolist() == [3, 3]  # E -> S and S -> E are not scored
    with torch.no_grad():
        top, _ = loss.top_layer(batch, loss.zero_state(1))
        expected = [
            loss.softmax.full_nll(top[d, 0][batch.scored[d, 0]], batch.targets[d, 0][batch.scored[d, 0]]).sum()
            for d in (0, 1)
        ]
    assert torch.allclose(sums, torch.stack(expected), atol=1e-5)


def test_heldout_perplexity_equals_a_hand_computed_value():
    """With a zero output weight the softmax ignores the LSTM: p(w) = softmax(bias)(w).

    Documents ["a", "b"] and ["a"]: forward targets a b </S> a </S>, backward targets
    <S> a b <S> a. Perplexity is exp(-mean log p) over each direction's 5 targets.
    """
    bilm = random_bilm()
    vocab = Vocabulary(["a", "b"])  # ids: <S> 0, </S> 1, <UNK> 2, a 3, b 4
    loss = BiLMLoss(bilm, len(vocab))
    probs = torch.tensor([0.1, 0.2, 0.05, 0.4, 0.25])
    with torch.no_grad():
        loss.softmax.weight.zero_()
        loss.softmax.bias.copy_(probs.log())
    result = heldout_perplexity(bilm.runtime, loss.softmax, vocab, [["a", "b"], ["a"]], batch_size=1)
    forward = math.exp(-(math.log(0.4) + math.log(0.25) + math.log(0.2) + math.log(0.4) + math.log(0.2)) / 5)
    backward = math.exp(-(math.log(0.1) + math.log(0.4) + math.log(0.25) + math.log(0.1) + math.log(0.4)) / 5)
    assert math.isclose(result["forward"], forward, rel_tol=1e-5)
    assert math.isclose(result["backward"], backward, rel_tol=1e-5)
    assert math.isclose(result["average"], math.sqrt(forward * backward), rel_tol=1e-5)
    assert result["targets"] == 5


def test_heldout_perplexity_initial_states():
    bilm = random_bilm()
    vocab = Vocabulary(["a", "b"])
    softmax = BiLMLoss(bilm, len(vocab)).softmax
    documents = [["a", "b"], ["b"], ["a", "a", "b"], ["b", "a"]]
    zero = heldout_perplexity(bilm.runtime, softmax, vocab, documents, "zero", batch_size=2)
    carry = heldout_perplexity(bilm.runtime, softmax, vocab, documents, "carry", batch_size=2)
    bilm.warm_up([["b", "a", "b"]])
    warm = heldout_perplexity(bilm.runtime, softmax, vocab, documents, "warm", batch_size=2)
    assert len({zero["average"], carry["average"], warm["average"]}) == 3
    # the first batch of "carry" starts from zero: one document per batch makes it "zero"
    assert math.isclose(
        heldout_perplexity(bilm.runtime, softmax, vocab, documents[:2], "carry", batch_size=2)["forward"],
        heldout_perplexity(bilm.runtime, softmax, vocab, documents[:2], "zero", batch_size=2)["forward"],
    )


def test_lstm_run_reads_a_different_text_in_each_direction():
    """BiLSTMStack.run: direction 0 and direction 1 are independent LMs over their own inputs."""
    bilm = random_bilm()
    first, second = ["a", "b", "c"], ["x", "y", "z"]
    P = bilm.options.projection_dim
    with torch.no_grad():
        tokens = bilm.runtime.embed_tokens([S, *first, E]), bilm.runtime.embed_tokens([S, *second, E])
        x = torch.stack([tokens[0], tokens[1].flip(0)], dim=1).unsqueeze(2)  # (time, 2, batch=1, P)
        layers, _ = bilm.lstm.run(x, torch.tensor([5]), bilm.lstm.zero_state(1, x))
        want_forward = bilm([first]).layers[1:, 0, :, :P]
        want_backward = bilm([second]).layers[1:, 0, :, P:].flip(1)
    for index, layer in enumerate(layers):
        assert_float32_close(layer[:, 0, 0], want_forward[index])
        assert_float32_close(layer[:, 1, 0], want_backward[index])


def test_the_losses_run_at_the_bilms_precision(monkeypatch):
    """BiLMLoss enters own_precision with the biLM's resolved dtype (no TF32 in "fp32" on a GPU)."""
    entered = record_own_precision(monkeypatch, lm)
    vocab = Vocabulary(["a", "b"])
    batch = _batch([S, "a", E, S, "b"], [E, "a", S, E, "b"], vocab)
    for setting, dtype in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        loss = BiLMLoss(random_bilm(precision=setting), len(vocab))
        entered.clear()
        loss(batch, loss.zero_state(1))
        assert entered == [(torch.device("cpu"), dtype)]
