"""Which biLM layers a task reads, and reading them side by side instead of mixed.

The paper mixes all layers with one scalar weight each (:func:`ScalarMix`) and notes that tasks
differ in the layers they prefer. :func:`SelectLayers` keeps a task's choice of layers;
:func:`ConcatLayers` hands every chosen layer to the task's next layer side by side, so that it
learns its own weighting per feature, not one weight per layer.
"""

from typing import Callable, List, Optional, Sequence, Tuple

from thinc.api import Model
from thinc.types import Floats2d, Floats3d

from .listener import size_mismatch
from .scalar_mix import infer_layer_sizes


def SelectLayers(layers: Sequence[int], n_layers: Optional[int] = None) -> Model[List[Floats3d], List[Floats3d]]:
    """Keep the given layers (0 = the char CNN, 1.. = the LSTM layers) of each doc's
    (n_layers, n_tokens, width) features: (len(layers), n_tokens, width).

    ``n_layers`` (the biLM's) left None is learned at initialization from the sample; the
    layers are checked against it then."""
    chosen = list(layers)
    if n_layers is not None:
        _check_chosen(chosen, n_layers)
    elif not chosen or len(set(chosen)) != len(chosen) or min(chosen) < 0:
        raise ValueError(f"layers must name distinct biLM layers, 0 (the char CNN) or above, got {chosen}")
    return Model("elmo_select_layers", _select_forward, init=_select_init, dims={"nL": n_layers}, attrs={"layers": chosen})


def _check_chosen(chosen: List[int], n_layers: int) -> None:
    """Refuse layers that a biLM with ``n_layers`` output layers does not have, or named twice."""
    if not chosen or len(set(chosen)) != len(chosen) or not all(0 <= i < n_layers for i in chosen):
        raise ValueError(
            f"layers must name distinct biLM layers from 0 to {n_layers - 1} "
            f"(0 is the char CNN, {n_layers - 1} the top LSTM layer), got {chosen}"
        )


def _select_init(model: Model, X: Optional[List[Floats3d]] = None, Y: Optional[object] = None) -> None:
    """Learn ``nL`` from the sample's (n_layers, n_tokens, width) when not given; check the layers."""
    if model.has_dim("nL") is None and X:
        _check_chosen(model.attrs["layers"], X[0].shape[0])
        model.set_dim("nL", X[0].shape[0])


def _select_forward(model: Model, Xs: List[Floats3d], is_train: bool) -> Tuple[List[Floats3d], Callable]:
    chosen, n_layers = model.attrs["layers"], model.get_dim("nL")
    for X in Xs:
        if X.shape[0] != n_layers:
            raise size_mismatch((n_layers, X.shape[2]), (X.shape[0], X.shape[2]))
    index = model.ops.xp.asarray(chosen)
    shapes = [X.shape for X in Xs]

    def backprop(dYs: List[Floats3d]) -> List[Floats3d]:
        dXs = []
        for shape, dY in zip(shapes, dYs):
            dX = model.ops.alloc3f(*shape, dtype=dY.dtype)
            dX[index] = dY
            dXs.append(dX)
        return dXs

    return [X[index] for X in Xs], backprop


def ConcatLayers(n_layers: Optional[int] = None, width: Optional[int] = None) -> Model[List[Floats3d], List[Floats2d]]:
    """Each doc's (n_layers, n_tokens, width) layers side by side: (n_tokens, n_layers * width).

    ``n_layers`` and ``width`` left None are learned at initialization from the sample."""
    n_out = n_layers * width if n_layers is not None and width is not None else None
    return Model(
        "elmo_concat_layers", _concat_forward, init=_concat_init, dims={"nL": n_layers, "nI": width, "nO": n_out}
    )


def _concat_init(model: Model, X: Optional[List[Floats3d]] = None, Y: Optional[object] = None) -> None:
    """Learn ``nL`` and ``nI`` (the width) from the sample when not given; ``nO`` follows."""
    infer_layer_sizes(model, X, width_dim="nI")
    if model.has_dim("nO") is None:
        model.set_dim("nO", model.get_dim("nL") * model.get_dim("nI"))


def _concat_forward(model: Model, Xs: List[Floats3d], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    n_layers, width = model.get_dim("nL"), model.get_dim("nI")
    for X in Xs:
        if X.shape[0] != n_layers or X.shape[2] != width:
            raise size_mismatch((n_layers, width), (X.shape[0], X.shape[2]))
    xp = model.ops.xp
    Ys = [xp.ascontiguousarray(X.transpose(1, 0, 2)).reshape(X.shape[1], n_layers * width) for X in Xs]

    def backprop(dYs: List[Floats2d]) -> List[Floats3d]:
        return [xp.ascontiguousarray(dY.reshape(dY.shape[0], n_layers, width).transpose(1, 0, 2)) for dY in dYs]

    return Ys, backprop
