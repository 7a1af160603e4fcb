"""The matrix-product FLOP of one token through the biLM, counted from its options.

``auto`` leaves models below a FLOP count unmeasured (:mod:`.autotune`); ``spacy-elmo bench``
sets the biLM's rate against the machine's (:mod:`spacy_elmo.bilm.precision.roofline`).
"""

from dataclasses import dataclass

from ..model.options import ElmoOptions


@dataclass(frozen=True)
class FlopCount:
    """FLOP of one token's matrix products (a multiply-add counts 2), by part; see :func:`flops_per_token`."""

    char_cnn: int
    highway: int
    projection: int
    lstm_input: int
    lstm_recurrent: int
    lstm_projection: int

    @property
    def lstm(self) -> int:
        return self.lstm_input + self.lstm_recurrent + self.lstm_projection

    @property
    def total(self) -> int:
        return self.char_cnn + self.highway + self.projection + self.lstm

    def describe(self) -> str:
        """One line, in MFLOP: the total and its parts."""
        m = 1e6
        return (
            f"{self.total / m:.1f} MFLOP per token = char CNN {self.char_cnn / m:.1f} + highway {self.highway / m:.1f} "
            f"+ projection {self.projection / m:.1f} + LSTM {self.lstm / m:.1f} (input {self.lstm_input / m:.1f}, "
            f"recurrent {self.lstm_recurrent / m:.1f}, projection {self.lstm_projection / m:.1f})"
        )


def flops_per_token(options: ElmoOptions) -> FlopCount:
    """The matrix-product FLOP of one token through the biLM, counted from its options.

    A product of an (m x k) and a (k x n) matrix counts ``2 m k n`` (a multiply and an add per
    term). Per token, with W = ``max_characters_per_token``, d = ``char_embedding_dim``,
    F = ``n_filters`` (the sum of the filter counts), P = ``projection_dim``, H = ``lstm_dim``,
    L = ``n_layers``:

    - char CNN: each filter of width w and count n at every one of the W - w + 1 positions of the
      padded token: sum over filters of ``2 (W - w + 1) w d n``;
    - highway: per layer two products, transform and carry, of width F: ``n_highway * 2 * 2 F^2``;
    - projection of the filters to the LSTM's width: ``2 F P``;
    - LSTM, for each of the 2 directions of each of the L layers: the input product ``2 P 4H``,
      the recurrent product ``2 P 4H`` (the previous output, of width P, to the four gates) and
      the output projection ``2 H P``: ``2 L (2 * 2 P 4H + 2 H P)``.

    A nominal cost per word, as tokens/s counts them (204.3 M at the Original size). Left out:
    element-wise work (biases, gate nonlinearities, clipping, max-pooling, highway gating: a few
    FLOP per value, not per product term). What the biLM computes differs both ways: more in the
    LSTM and highways (the two boundary tokens of every sentence), less in the char CNN (once per
    distinct token of a batch, over the characters its longest token needs rather than all W).
    """
    width = options.max_characters_per_token
    conv = sum(2 * (width - w + 1) * w * options.char_embedding_dim * n for w, n in options.filters)
    gates = 4 * options.lstm_dim
    directions = 2 * options.n_layers
    return FlopCount(
        char_cnn=conv,
        highway=options.n_highway * 2 * 2 * options.n_filters**2,
        projection=2 * options.n_filters * options.projection_dim,
        lstm_input=directions * 2 * options.projection_dim * gates,
        lstm_recurrent=directions * 2 * options.projection_dim * gates,
        lstm_projection=directions * 2 * options.lstm_dim * options.projection_dim,
    )
