"""The calibration/test split every held-out stage shares (replays, completion curves, model choice).

A candidate is in the calibration half at seed ``s`` when ``hash(hash(CAST(id AS VARCHAR)), s) % SPLIT_BUCKETS``
is below ``fraction * SPLIT_BUCKETS``: no random state, every seed is a column rather than a loop, and one
seed splits the candidates identically in replay.parquet and completion.parquet. (The fiber replay also
computes the same split in numpy, ``dcaudit.audits.replay.split_counts``, checked against DuckDB before use.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

SPLIT_BUCKETS = 1_000_000


class SplitDesign(Protocol):
    """Which splits a held-out pass draws: seeds ``seed_offset .. seed_offset + seeds - 1`` and the calibration
    ``threshold`` in buckets (``dcaudit.audits.replay.ReplayConfig`` is one)."""

    @property
    def seeds(self) -> int: ...

    @property
    def seed_offset(self) -> int: ...

    @property
    def threshold(self) -> int: ...


def split_threshold(fraction: float) -> int:
    """The bucket below which a candidate is in calibration, for a calibration ``fraction``."""
    return int(round(fraction * SPLIT_BUCKETS))


def check_calibration_fraction(fraction: float, where: str) -> None:
    """A SpecError unless ``fraction`` leaves both halves some of the split's buckets: 0.9999999 lies in (0, 1)
    but rounds to every bucket, so the test half would be empty and every held-out number undefined."""
    from dcaudit.errors import SpecError

    if not 0.0 < fraction < 1.0:
        raise SpecError(f"{where}: calibration_fraction must lie in (0, 1), got {fraction}")
    if not 0 < split_threshold(fraction) < SPLIT_BUCKETS:
        half = "test" if split_threshold(fraction) >= SPLIT_BUCKETS else "calibration"
        raise SpecError(f"{where}: calibration_fraction {fraction} leaves the {half} half empty (the split has "
                        f"{SPLIT_BUCKETS:,} buckets); use a value from {1 / SPLIT_BUCKETS:g} to "
                        f"{1 - 1 / SPLIT_BUCKETS:g}")


def split_sql(hash_sql: str, seed_sql: str, threshold: int) -> str:
    """DuckDB SQL, TRUE for calibration: ``hash_sql`` is the candidate's ``hash(CAST(id AS VARCHAR))``,
    ``seed_sql`` a BIGINT seed."""
    return f"(hash({hash_sql}, {seed_sql}) % {SPLIT_BUCKETS}) < {threshold}"


def exact_seeds(values: Any) -> np.ndarray:
    """Seeds as an int64 array for a table's ``seed`` column. Seeds reach ±2^62 and a double holds integers
    exactly only up to 2^53, so seeds that went through a float array are refused, not written rounded."""
    import numpy as np

    seeds = np.asarray(values)
    if seeds.dtype.kind != "i":  # a bug upstream (a float or object array), never the user's input
        raise AssertionError(f"seeds must be an integer array, got {seeds.dtype}")
    return seeds.astype(np.int64, copy=False)
