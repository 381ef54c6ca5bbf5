"""Per-group audits (``per = "model"``): auditing each group from one copy of the columns it reads gives
the tables that auditing it through a filtered view of the input gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dcaudit.audits.groups as groups
from dcaudit.config import Settings, load_settings
from dcaudit.pipelines.runner import run_spec
from dcaudit.spec import spec_from_dict

PROVENANCE = ("run_id",)


def _leaderboard(seed: int, n: int = 600) -> pa.Table:
    rng = np.random.default_rng(seed)
    pred = rng.normal(size=n)
    pred[rng.random(n) < 0.03] = np.nan
    truth = (pred + rng.normal(scale=0.7, size=n) > 0).astype(np.int64).astype(float)
    truth[rng.random(n) < 0.03] = np.nan  # undefined claims: excluded, with their reason
    return pa.table({"model": pa.array([f"m{i % 3}" for i in rng.permutation(n)]),
                     "cid": pa.array([f"c{i:04d}" for i in range(n)]),
                     "pred": pa.array(pred), "bit": pa.array(rng.integers(0, 2, size=n)),
                     "truth": pa.array(truth, mask=np.isnan(truth)), "unused": pa.array(rng.random(n))})


def _tables(tmp_path: Path, path: Path, rule: str, evidence: str) -> dict[str, pa.Table]:
    base = load_settings()
    settings = Settings(home=tmp_path / "home", mirror=None, memory_limit=base.memory_limit, threads=base.threads,
                        offline=True)
    spec = spec_from_dict({"name": "lb", "source": {"path": str(path), "id": "cid"}, "audits": [
        {"id": "a", "claim": "truth = 1", "evidence": evidence, "fiber_rule": rule, "per": "model"}]})
    tables = run_spec(spec, settings).tables
    return {name: t.drop_columns([c for c in PROVENANCE if c in t.column_names]) for name, t in tables.items()}


@pytest.mark.parametrize(("seed", "rule", "evidence"), [(1, "quantile:5", "pred"), (2, "exact", "bit"),
                                                        (3, "quantile:3", "pred")])
def test_a_copy_per_group_gives_the_filtered_views_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          seed: int, rule: str, evidence: str) -> None:
    path = tmp_path / "lb.parquet"
    pq.write_table(_leaderboard(seed), path)
    made = []

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - records whether the copy was made
        table = original(*args, **kwargs)
        made.append(table)
        return table

    original = groups._group_source
    monkeypatch.setattr(groups, "_group_source", spy)
    copied = _tables(tmp_path / "copy", path, rule, evidence)
    monkeypatch.setattr(groups, "_group_source", lambda *args, **kwargs: None)
    viewed = _tables(tmp_path / "view", path, rule, evidence)
    assert made and made[0] is not None  # the copy path ran
    assert sorted(copied) == sorted(viewed)
    for name in copied:
        assert copied[name].equals(viewed[name]), name
    assert copied["candidates"].num_rows == 600
    assert set(copied["summary"]["model"].to_pylist()) == {"m0", "m1", "m2"}


def test_no_copy_when_a_column_is_missing_so_the_error_names_the_whole_input(tmp_path: Path) -> None:
    path = tmp_path / "lb.parquet"
    pq.write_table(_leaderboard(4, 60), path)
    with pytest.raises(Exception, match="preds") as info:
        _tables(tmp_path, path, "quantile:3", "preds")
    assert "unused" in str(info.value)  # the message lists the input's columns, not the copy's
