"""Pairwise distance matrices ``D[m, k] = d(x[m], y[k])`` (M, K) of the residual distances of
:mod:`rawrcl.losses.distances`, without a Python loop over pairs: each distance is ``g(e(a), e(b))`` with a
per-tensor embedding ``e`` computed once and a cheap pair function ``g`` evaluated in row chunks."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from rawrcl.errors import RawrclError
from rawrcl.losses.distances import (
    DEFAULT_BANDWIDTHS,
    _bd_from_moments,
    _binned_embed,
    _bw,
    _emd_embed_pair,
    _flat,
    _kernel_mean,
    _moments,
    _subsample_index,
    bhattacharyya,
    emd,
    mmd,
)


class PairwiseDistance:
    """A distance with a loop-free (M, K) pairwise implementation.

    Calling the object is the batched row-wise form ``d(a, b) -> (B,)``; :meth:`matrix` gives
    ``(M, K)``. Keyword options are bound at construction (``PairwiseDistance.with_options``).
    """

    def __init__(self, name: str, rowwise: Callable, matrix: Callable, **options) -> None:
        self.name = name
        self._rowwise = rowwise
        self._matrix = matrix
        self.options = options

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self._rowwise(a, b, **self.options)

    def matrix(self, x: torch.Tensor, y: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
        return self._matrix(x, y, chunk=chunk, **self.options)

    def with_options(self, **options) -> PairwiseDistance:
        return PairwiseDistance(self.name, self._rowwise, self._matrix, **{**self.options, **options})

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"PairwiseDistance({self.name!r}{', ' if opts else ''}{opts})"


def _chunk_rows(m: int, k: int, length: int, chunk: int | None, budget: int = 2**25) -> int:
    """Rows of x per chunk so that the chunk's (rows, K, length) work buffer holds ≤ ``budget`` values."""
    if chunk is not None:
        return max(1, int(chunk))
    return max(1, min(m, budget // max(1, k * length)))


def _l1_matrix(ex: torch.Tensor, ey: torch.Tensor, chunk: int | None) -> torch.Tensor:
    """(M, K) Σ_l |ex[m, l] − ey[k, l]|, in row chunks (torch.cdist p=1 allocates rows·K·L in backward)."""
    rows = _chunk_rows(ex.shape[0], ey.shape[0], ex.shape[1], chunk)
    parts = [
        torch.cdist(ex[s : s + rows].unsqueeze(0), ey.unsqueeze(0), p=1.0)[0]
        for s in range(0, ex.shape[0], rows)
    ]
    return torch.cat(parts, dim=0)


def _emd_matrix(x, y, *, chunk=None, per_channel=False, quantiles=None):
    ex, ey = _emd_embed_pair(x, y, per_channel, quantiles)
    return _l1_matrix(ex, ey, chunk)


def _bd_matrix(x, y, *, chunk=None, eps=1e-12, unbiased=True):
    mp, vp = _moments(x, unbiased)
    mq, vq = _moments(y, unbiased)
    return _bd_from_moments(mp[:, None], vp[:, None], mq[None, :], vq[None, :], eps)


def _mmd_matrix(
    x,
    y,
    *,
    chunk=None,
    bandwidths=DEFAULT_BANDWIDTHS,
    estimator="binned",
    max_bins=2048,
    samples=1024,
    unbiased=False,
    generator=None,
):
    bws = _bw(bandwidths)
    fx, fy = _flat(x, "x"), _flat(y, "y")
    if estimator == "binned":
        (hx, hy), k = _binned_embed([fx, fy], bws, int(max_bins))
        kx, ky = hx @ k, hy @ k
        sq = (kx * hx).sum(1)[:, None] + (ky * hy).sum(1)[None, :] - 2.0 * kx @ hy.T
        return sq.clamp_min(0.0)
    if estimator == "subsample":
        n, m = fx.shape[1], fy.shape[1]
        ia = _subsample_index(n, int(samples), generator, fx.device)
        ib = ia if m == n else _subsample_index(m, int(samples), generator, fy.device)
        xs, ys = fx.index_select(1, ia), fy.index_select(1, ib)
        kxx = _kernel_mean(xs, xs, bws, unbiased)
        kyy = _kernel_mean(ys, ys, bws, unbiased)
        rows = _chunk_rows(xs.shape[0], ys.shape[0], xs.shape[1] * ys.shape[1], chunk, budget=2**23)
        kxy = []
        for s in range(0, xs.shape[0], rows):
            xc = xs[s : s + rows]
            d2 = (xc[:, None, :, None] - ys[None, :, None, :]) ** 2
            kxy.append((sum(torch.exp(-d2 / (2.0 * b * b)) for b in bws) / len(bws)).mean(dim=(2, 3)))
        return kxx[:, None] + kyy[None, :] - 2.0 * torch.cat(kxy, dim=0)
    raise RawrclError(f"unknown MMD estimator {estimator!r}; expected 'binned' or 'subsample'")


def _generic_matrix(distance: Callable, x: torch.Tensor, y: torch.Tensor, chunk: int | None) -> torch.Tensor:
    """(M, K) for any row-wise distance: pairs are expanded by indexing, evaluated in chunks."""
    m, k = x.shape[0], y.shape[0]
    length = max(x[0].numel(), y[0].numel())
    rows = _chunk_rows(m, k, length, chunk)
    out = []
    for s in range(0, m, rows):
        xc = x[s : s + rows]
        r = xc.shape[0]
        xa = xc.repeat_interleave(k, dim=0)
        yb = y.repeat(r, *([1] * (y.ndim - 1)))
        out.append(distance(xa, yb).reshape(r, k))
    return torch.cat(out, dim=0)


DISTANCES: dict[str, PairwiseDistance] = {
    "emd": PairwiseDistance("emd", emd, _emd_matrix),
    "bhattacharyya": PairwiseDistance("bhattacharyya", bhattacharyya, _bd_matrix),
    "bd": PairwiseDistance("bhattacharyya", bhattacharyya, _bd_matrix),
    "mmd": PairwiseDistance("mmd", mmd, _mmd_matrix),
}
"""Registry name → distance. Each entry is callable as ``d(a, b) -> (B,)`` and has ``.matrix(x, y)``."""


def get_distance(distance: str | Callable, **options) -> PairwiseDistance | Callable:
    """Resolve a registry name (with options bound) or pass a callable through."""
    if isinstance(distance, str):
        key = distance.lower()
        if key not in DISTANCES:
            raise RawrclError(
                f"unknown distance {distance!r}; expected one of {', '.join(sorted(DISTANCES))}"
            )
        return DISTANCES[key].with_options(**options) if options else DISTANCES[key]
    if isinstance(distance, PairwiseDistance):
        return distance.with_options(**options) if options else distance
    if callable(distance):
        return partial(distance, **options) if options else distance
    raise RawrclError(f"distance must be a name or a callable, got {type(distance).__name__}")


def pairwise(
    x: torch.Tensor, y: torch.Tensor, distance: str | Callable = "emd", *, chunk: int | None = None, **options
) -> torch.Tensor:
    """Matrix of distances D[m, k] = d(x[m], y[k]).

    Parameters
    ----------
    x : (M, ...), y : (K, ...) float tensors (trailing sizes may differ where the distance allows).
    distance : a :data:`DISTANCES` name, a :class:`PairwiseDistance`, or any row-wise callable
        ``d(a, b) -> (B,)`` (evaluated on index-expanded pairs in chunks, still without a Python loop
        over pairs).
    chunk : rows of x per chunk (default: sized to keep each chunk's work buffer ≈ 2²⁵ values).
    options : keyword options of the distance (e.g. ``quantiles=1024`` for EMD).

    Returns
    -------
    (M, K) tensor, differentiable. For EMD each tensor is sorted once and the matrix is the L1
    distance between sorted vectors divided by n (exactly W1 for equal sizes; quantile-matched
    weighted vectors otherwise).
    """
    d = get_distance(distance, **options)
    if isinstance(d, PairwiseDistance):
        return d.matrix(x, y, chunk=chunk)
    return _generic_matrix(d, x, y, chunk)
