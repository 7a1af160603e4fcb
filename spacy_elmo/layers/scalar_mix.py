"""The task-specific scalar mix of ELMo layers (Peters et al. 2018, eq. 1).

``ELMo_k = gamma * sum_j softmax(w)_j * h_kj``: one learned weight per layer, normalised by a
softmax, and a scale ``gamma``. Each downstream task owns its own mix, so NER and textcat can
weight the biLM's layers differently while sharing one biLM pass.
"""

from typing import Callable, List, Optional, Sequence, Tuple

from thinc.api import Model
from thinc.types import Floats1d, Floats2d, Floats3d

from .arrays import split_by_lengths
from .listener import size_mismatch

LAYER_NORM_EPS = 1e-12

InT = List[Floats3d]  # per doc: (n_layers, n_tokens, width)
OutT = List[Floats2d]  # per doc: (n_tokens, width)


def ScalarMix(
    n_layers: Optional[int] = None,
    width: Optional[int] = None,
    *,
    layer_norm: bool = False,
    l2: float = 0.0,
    dropout: float = 0.0,
) -> Model[InT, OutT]:
    """Mix each doc's (n_layers, n_tokens, width) layers into (n_tokens, width).

    ``n_layers`` and ``width`` left None are learned at initialization from the first doc of the
    sample (see :func:`infer_layer_sizes`), as thinc layers learn their input width.
    ``layer_norm`` normalises every token vector of every layer to zero mean and unit variance
    before mixing (per token, so a doc's vectors do not depend on its batch). ``l2`` adds
    ``l2 * sum(w ** 2)`` to the loss, pulling the mix towards the plain average. ``dropout``
    applies inverted dropout to the mixed vectors in training.
    """
    if any(size is not None and size < 1 for size in (n_layers, width)):
        raise ValueError(f"ScalarMix needs n_layers >= 1 and width >= 1, got {n_layers} and {width}")
    if l2 < 0 or not 0.0 <= dropout < 1.0:
        raise ValueError(f"ScalarMix needs l2 >= 0 and 0 <= dropout < 1, got {l2} and {dropout}")
    return Model(
        "elmo_scalar_mix",
        forward,
        init=init,
        params={"W": None, "gamma": None},
        dims={"nL": n_layers, "nO": width},
        attrs={"layer_norm": layer_norm, "l2": l2, "mix_dropout": dropout},
    )


def init(model: Model[InT, OutT], X: Optional[InT] = None, Y: Optional[OutT] = None) -> None:
    """Equal layer weights (w = 0, so softmax(w) is the average) and gamma = 1."""
    infer_layer_sizes(model, X, width_dim="nO")
    model.set_param("W", model.ops.alloc1f(model.get_dim("nL")))
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def forward(model: Model[InT, OutT], Xs: InT, is_train: bool) -> Tuple[OutT, Callable[[OutT], InT]]:
    """Each doc's mix, ``gamma * sum_j softmax(w)_j * h_j``, and its backprop to the layers, ``w`` and ``gamma``."""
    ops, xp = model.ops, model.ops.xp
    n_layers, width = model.get_dim("nL"), model.get_dim("nO")
    lengths = [X.shape[1] for X in Xs]
    for X in Xs:
        if X.shape[0] != n_layers or X.shape[2] != width:
            raise size_mismatch((n_layers, width), (X.shape[0], X.shape[2]))
    X = xp.concatenate(Xs, axis=1) if Xs else ops.alloc3f(n_layers, 0, width)  # (L, N, D)
    W, gamma = model.get_param("W"), model.get_param("gamma")
    H, inv_std = _layer_norm(xp, X) if model.attrs["layer_norm"] else (X, None)
    s = ops.softmax(W)  # (L,)
    mixed = xp.tensordot(s, H, axes=1)  # (N, D)
    rate = model.attrs["mix_dropout"] if is_train else 0.0
    mask = ops.get_dropout_mask(mixed.shape, rate) if rate > 0 else None
    Y = gamma[0] * mixed if mask is None else gamma[0] * mixed * mask

    def backprop(dYs: OutT) -> InT:
        dY = xp.concatenate(dYs, axis=0) if dYs else ops.alloc2f(0, width)
        if mask is not None:
            dY = dY * mask
        d_gamma = (dY * mixed).sum()
        d_s = gamma[0] * xp.tensordot(H, dY, axes=([1, 2], [0, 1]))  # (L,)
        d_W = s * (d_s - (s * d_s).sum()) + 2.0 * model.attrs["l2"] * W
        model.inc_grad("W", d_W.astype(W.dtype))
        model.inc_grad("gamma", ops.asarray1f([d_gamma]))
        dH = (gamma[0] * s)[:, None, None] * dY[None]
        if inv_std is not None:  # through the layer norm
            dH = inv_std * (dH - dH.mean(axis=-1, keepdims=True) - H * (dH * H).mean(axis=-1, keepdims=True))
        return split_by_lengths(xp, dH, lengths, axis=1)

    return split_by_lengths(xp, Y, lengths, axis=0), backprop


def infer_layer_sizes(model: Model, X: Optional[Sequence[Floats3d]], width_dim: str) -> None:
    """Set the dims ``nL`` and ``width_dim`` left unset from the sample's (n_layers, n_tokens, width).

    A layer after an ElmoListener learns the biLM's sizes this way, so no config names them. With
    no sample to learn from, unset sizes are an error that says what is missing.
    """
    unset = [dim for dim in ("nL", width_dim) if model.has_dim(dim) is None]
    if not unset:
        return
    if not X:
        missing = " and ".join("n_layers" if dim == "nL" else "width" for dim in unset)
        raise ValueError(
            f"{model.name} has no {missing}: give them, or initialize it on a sample of "
            "(n_layers, n_tokens, width) arrays to learn them from"
        )
    for dim, size in (("nL", X[0].shape[0]), (width_dim, X[0].shape[2])):
        if dim in unset:
            model.set_dim(dim, size)


def _layer_norm(xp, X: Floats3d) -> Tuple[Floats3d, Floats3d]:
    """Normalise over the last axis; returns the result and 1 / std, shape (L, N, 1)."""
    centered = X - X.mean(axis=-1, keepdims=True)
    inv_std = 1.0 / xp.sqrt((centered**2).mean(axis=-1, keepdims=True) + LAYER_NORM_EPS)
    return centered * inv_std, inv_std


def mix_weights(model: Model[InT, OutT]) -> Floats1d:
    """The normalised layer weights softmax(w), for inspection."""
    return model.ops.softmax(model.get_param("W"))
