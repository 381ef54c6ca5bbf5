"""The array helpers agree with the numpy or pyarrow call they stand in for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit import arrays


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 1 << 26), st.lists(st.integers(0, 1 << 40), max_size=300), st.integers(0, 2))
def test_unique_codes_is_np_unique_with_its_inverse(size: int, raw: list[int], spread: int) -> None:
    # keys packed into small ranges (the dense path), wide ones (np.unique), and the boundary between them
    size = [size, 1 << 16, 64 * max(len(raw), 1)][spread]
    keys = np.array([r % size for r in raw], dtype=np.int64)
    uniq, inverse = arrays.unique_codes(keys, size)
    want_uniq, want_inverse = np.unique(keys, return_inverse=True)
    assert np.array_equal(uniq, want_uniq) and np.array_equal(inverse, want_inverse)
    assert inverse.dtype == np.int64 and inverse.shape == keys.shape


def test_count_pairs_are_numbered_without_a_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """The (k, n) pairs of a replay's windows: ~125,000 keys in a range of ~2 million, numbered without np.unique."""
    rng = np.random.default_rng(7)
    k, n = rng.integers(0, 640, 125_000), rng.integers(0, 2880, 125_000)
    keys = k * 2880 + n
    want_uniq, want_inverse = np.unique(keys, return_inverse=True)

    def no_sort(*args: object, **kwargs: object) -> None:
        raise AssertionError("np.unique was called")

    monkeypatch.setattr(np, "unique", no_sort)
    uniq, inverse = arrays.unique_codes(keys, 640 * 2880)
    assert np.array_equal(uniq, want_uniq) and np.array_equal(inverse, want_inverse)


def test_rising_reads_parts_in_turn_and_says_where_it_stopped() -> None:
    import pyarrow as pa

    from dcaudit.arrays import rising

    parts = pa.chunked_array([[-5, -2, 0], [], [3, 9]])
    assert rising(parts) == (True, 9)
    assert rising(pa.array([10, 11], pa.int64()), after=9) == (True, 11)
    assert rising(pa.array([9, 12], pa.int64()), after=9)[0] is False   # not above the part before
    assert rising(pa.array([1, 1], pa.int64()))[0] is False             # ties do not rise
    assert rising(pa.array([], pa.int64()), after=4) == (True, 4)
