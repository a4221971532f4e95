"""The three special functions the censored (black-clipped) noise fit needs, on float64 numpy arrays.

They match ``scipy.special.ndtr``, ``gammaln`` and ``gammaincinv`` to ~1e-12 relative (tests compare them)
but are computed with torch, which every command has already imported: ``scipy.special`` costs 0.3–0.4 s
of start-up per command, ≈ 3 % of a 12 MP ``rawrcl jdd``.
"""

from __future__ import annotations

import numpy as np
import torch


def _t(x: np.ndarray | float) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


def ndtr(x: np.ndarray | float) -> np.ndarray:
    """Standard normal cdf Φ(x) = erfc(−x/√2)/2; array like ``x``, float64 (relative accuracy kept in the
    lower tail, where ``torch.special.ndtr`` loses it below x ≈ −8)."""
    return (0.5 * torch.special.erfc(_t(x) * -(0.5**0.5))).numpy()


def gammaln(x: np.ndarray | float) -> np.ndarray:
    """log Γ(x) for x > 0; array like ``x``, float64."""
    return torch.lgamma(_t(x)).numpy()


def gammaincinv(a: np.ndarray | float, q: np.ndarray | float, iters: int = 60) -> np.ndarray:
    """x with P(a, x) = q: the inverse of the regularised lower incomplete gamma function in x.

    ``a`` > 0 (shape), ``q`` in (0, 1), broadcast together; float64 array. Newton's method on t = log x
    (f(t) = P(a, eᵗ) − q, f'(t) = exp(a·t − eᵗ − log Γ(a))) from the Wilson–Hilferty approximation,
    with steps capped at 2 in t; stops when every step is below 1e-13.
    """
    a_t, q_t = torch.broadcast_tensors(_t(a), _t(q))
    z = torch.special.ndtri(q_t)
    c = 1.0 / (9.0 * a_t)
    x0 = a_t * (1.0 - c + z * torch.sqrt(c)) ** 3
    # small shapes: P(a, x) ≈ x^a / Γ(a + 1) near 0 (Wilson–Hilferty goes negative there)
    small = torch.exp((torch.log(q_t) + torch.lgamma(a_t + 1.0)) / a_t)
    t = torch.log(torch.where(x0 > 0, x0, small))
    lg = torch.lgamma(a_t)
    for _ in range(iters):
        x = torch.exp(t)
        f = torch.special.gammainc(a_t, x) - q_t
        df = torch.exp(a_t * t - x - lg)
        step = torch.clamp(f / torch.clamp(df, min=1e-300), -2.0, 2.0)
        t = t - step
        if bool((step.abs() < 1e-13).all()):
            break
    return torch.exp(t).numpy()
