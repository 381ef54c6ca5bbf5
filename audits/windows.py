"""Tolerance windows on sorted evidence: which values lie within ``tol`` of a centre, exactly.

A window is every value ``v`` with ``|v - c| <= tol``. Searching the sorted values for ``c - tol`` and
``c + tol`` is fast but rounds twice: ``0.04 + 0.1`` is not ``0.14`` in binary, so 0.14 could fall outside
the window of 0.04 while 0.04 lies inside the window of 0.14 (the difference is 0.1 exactly in floating
point). :func:`window_bounds` starts from those searches and moves each bound over whole blocks of equal
values until the comparison of the difference itself holds — symmetric, since ``a - b`` is ``-(b - a)``
exactly. The bounds move by a value or two, so the fix-up costs a few vectorised passes over the entries
whose bound moves.
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def window_bounds(values: np.ndarray, centres: np.ndarray, tol: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi): for each centre, the sorted ``values[lo:hi]`` are exactly those with ``|v - c| <= tol``.

    ``values`` ascending (NaN last); a NaN or infinite centre or width keeps the plain searches' bounds
    (inf ∓ inf is NaN there, as in SQL)."""
    values = np.asarray(values, dtype=float)
    centres = np.asarray(centres, dtype=float)
    tol = np.broadcast_to(np.asarray(tol, dtype=float), centres.shape)
    n = len(values)
    with np.errstate(invalid="ignore"):
        lo, hi = _searches(values, centres - tol, centres + tol)
        if n == 0:
            return lo, hi
        exact = np.isfinite(centres) & np.isfinite(tol)

        def step(bound: np.ndarray, at: np.ndarray, move: np.ndarray, side: Literal["left", "right"]) -> bool:
            idx = np.nonzero(move)[0]
            if len(idx):
                bound[idx] = np.searchsorted(values, values[at[idx]], side=side)
            return bool(len(idx))

        for _ in range(64):  # each pass moves a bound over one block of equal values; one or two suffice
            k = np.clip(hi - 1, 0, n - 1)
            moved = step(hi, k, exact & (hi > 0) & (values[k] - centres > tol), "left")  # last one is outside
            k = np.clip(hi, 0, n - 1)
            moved |= step(hi, k, exact & (hi < n) & (values[k] - centres <= tol), "right")  # next one is inside
            k = np.clip(lo - 1, 0, n - 1)
            moved |= step(lo, k, exact & (lo > 0) & (centres - values[k] <= tol), "left")  # previous is inside
            k = np.clip(lo, 0, n - 1)
            moved |= step(lo, k, exact & (lo < n) & (centres - values[k] > tol), "right")  # first is outside
            if not moved:
                break
    return lo, np.maximum(hi, lo)


_THREADED_SEARCH = 1 << 16  # centres from which the two searches run on two threads


def _searches(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``searchsorted`` of ``low`` (left) and ``high`` (right) in ``values``; the second on a thread of its own
    for many centres (numpy's binary search holds no lock: ~0.1 s of the JARVIS window replay)."""
    if len(low) < _THREADED_SEARCH:
        return np.searchsorted(values, low, side="left"), np.searchsorted(values, high, side="right")
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        upper = pool.submit(np.searchsorted, values, high, side="right")
        lower = np.searchsorted(values, low, side="left")
        return lower, upper.result()
