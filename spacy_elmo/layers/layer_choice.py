"""Which biLM layers a task reads.

The paper mixes all layers with one scalar weight each (:func:`ScalarMix`) and notes that tasks
differ in the layers they prefer. :func:`SelectLayers` keeps a task's choice of layers, before
its mix (``spacy_elmo.ScalarMix.v1``'s ``layers``).
"""

from typing import Callable, List, Optional, Sequence, Tuple

from thinc.api import Model
from thinc.types import Floats3d

from .listener import size_mismatch

InT = List[Floats3d]  # per doc: (n_layers, n_tokens, width)
OutT = List[Floats3d]  # per doc: (len(layers), n_tokens, width)


def SelectLayers(layers: Sequence[int], n_layers: Optional[int] = None) -> Model[InT, OutT]:
    """Keep the given layers (0 = the char CNN, 1.. = the LSTM layers) of each doc's
    (n_layers, n_tokens, width) features: (len(layers), n_tokens, width).

    ``n_layers`` (the biLM's) left None is learned at initialization from the sample; the
    layers are checked against it then."""
    chosen = list(layers)
    if n_layers is not None:
        _check_chosen(chosen, n_layers)
    elif not chosen or len(set(chosen)) != len(chosen) or min(chosen) < 0:
        raise ValueError(f"layers must name distinct biLM layers, 0 (the char CNN) or above, got {chosen}")
    return Model(
        "elmo_select_layers", _select_forward, init=_select_init, dims={"nL": n_layers}, attrs={"layers": chosen}
    )


def _check_chosen(chosen: List[int], n_layers: int) -> None:
    if not chosen or len(set(chosen)) != len(chosen) or not all(0 <= i < n_layers for i in chosen):
        raise ValueError(
            f"layers must name distinct biLM layers from 0 to {n_layers - 1} "
            f"(0 is the char CNN, {n_layers - 1} the top LSTM layer), got {chosen}"
        )


def _select_init(model: Model[InT, OutT], X: Optional[InT] = None, Y: Optional[OutT] = None) -> None:
    """Learn ``nL`` from the sample's (n_layers, n_tokens, width) when not given; check the layers."""
    if model.has_dim("nL") is None and X:
        _check_chosen(model.attrs["layers"], X[0].shape[0])
        model.set_dim("nL", X[0].shape[0])


def _select_forward(model: Model[InT, OutT], Xs: InT, is_train: bool) -> Tuple[OutT, Callable[[OutT], InT]]:
    """The chosen layers of each doc; their gradients go back to those layers, the others get zeros."""
    chosen, n_layers = model.attrs["layers"], model.get_dim("nL")
    for X in Xs:
        if X.shape[0] != n_layers:
            raise size_mismatch((n_layers, X.shape[2]), (X.shape[0], X.shape[2]))
    index = model.ops.xp.asarray(chosen)
    shapes = [X.shape for X in Xs]

    def backprop(dYs: OutT) -> InT:
        dXs = []
        for shape, dY in zip(shapes, dYs):
            dX = model.ops.alloc3f(*shape, dtype=dY.dtype)
            dX[index] = dY
            dXs.append(dX)
        return dXs

    return [X[index] for X in Xs], backprop
