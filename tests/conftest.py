"""Shared fixtures: a fresh workspace per test, the real-data mirror from DCAUDIT_MIRROR."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dcaudit.config import Settings, load_settings

MIRROR = Path(os.environ["DCAUDIT_MIRROR"]).resolve() if os.environ.get("DCAUDIT_MIRROR") else None


def mirror_path(rel: str) -> Path:
    """A file of the real-data mirror; the test fails (not skips) when the mirror is missing."""
    if MIRROR is None:
        pytest.fail("DCAUDIT_MIRROR is not set: tests read the real data through it (make test sets it)")
    path = MIRROR / rel
    if not path.exists():
        pytest.fail(f"mirror file missing: {path}")
    return path


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings with a private DCAUDIT_HOME, offline (CI cannot download), mirror as configured."""
    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DCAUDIT_OFFLINE", "1")
    return load_settings()


@pytest.fixture(scope="session")
def tox21_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One normalised Tox21 table shared by the tests of a session (RDKit parsing takes a few seconds)."""
    mirror_path("tox21/tox21.csv")
    home = tmp_path_factory.mktemp("tox21-home")
    base = load_settings()
    return Settings(home=home, mirror=MIRROR, memory_limit=base.memory_limit, threads=base.threads, offline=True)


def small_spec_table(folder: Path, seed: int, *, model: bool = False) -> Path:
    """A 40-row CSV for spec and section checks: ids, binary and ternary evidence, a numeric prediction x and
    its reference, a claim column y, a probe p1 and, with ``model``, a model column of two values."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    n = 40
    x = rng.uniform(0, 10, n).round(2)
    columns = {"cid": [f"c{i:03d}" for i in range(n)], "e1": rng.integers(0, 2, n), "e2": rng.integers(0, 3, n),
               "x": x, "ref": (x + rng.normal(0, 0.8, n)).round(2), "y": rng.integers(0, 2, n),
               "p1": rng.integers(0, 2, n)}
    if model:
        columns["model"] = [f"m{i % 2}" for i in range(n)]
    path = folder / "small.csv"
    pl.DataFrame(columns).write_csv(path)
    return path

