"""Dropout of whole rows: in training, a row is zeroed with probability ``rate``, else kept and scaled.

``spacy_elmo.ElmoBOWTextCat.v1`` drops the bag of words' scores of a share of the docs in
training, so that those docs are classified by ELMo alone and the ELMo branch keeps learning after
the bag of words has fitted the training set. thinc's ``Dropout`` drops single entries, which for
class scores would drop some classes of a doc and keep others.
"""

from typing import Callable, Tuple

from thinc.api import Model
from thinc.types import Floats2d


def RowDropout(rate: float) -> Model[Floats2d, Floats2d]:
    """Zero each row of a (n_rows, width) array with probability ``rate`` in training (inverted
    dropout: kept rows are scaled by 1 / (1 - rate)); the identity in prediction."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"RowDropout needs 0 <= rate < 1, got {rate}")
    # Not "dropout_rate": spaCy's nlp.update sets every layer's "dropout_rate" to its own drop.
    return Model("row_dropout", forward, attrs={"row_dropout_rate": rate})


def forward(model: Model, X: Floats2d, is_train: bool) -> Tuple[Floats2d, Callable]:
    rate = model.attrs["row_dropout_rate"]
    if not is_train or rate == 0.0:
        return X, lambda dY: dY
    mask = model.ops.get_dropout_mask((X.shape[0], 1), rate)  # (n_rows, 1): 0 or 1 / (1 - rate)
    return X * mask, lambda dY: dY * mask
