"""Costed probes: cumulative cost, the cost_gain policy, the budgeted plan and its validation."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from dcaudit.audits.completion import CompletionConfig, completion_curves, parse_costs
from dcaudit.audits.evidence import EvidenceMap
from dcaudit.claims import parse_claim
from dcaudit.errors import SpecError


def _table(n: int = 600) -> pa.Table:
    """e: two mixed fibers. B decides the claim alone (the best probe); H decides it on half the
    candidates (where H = 1, y = e); N is noise."""
    i = np.arange(n)
    rng = np.random.default_rng(3)
    e = i % 2
    y = (i // 2) % 2
    h = (i // 4) % 2
    y = np.where(h == 1, e, y)
    return pa.table({"id": [f"c{k}" for k in i], "e": e, "y": y, "B": y, "H": h,
                     "N": (rng.random(n) < 0.5).astype(int)})


def _run(**config: object):  # noqa: ANN202
    con = duckdb.connect()
    con.register("t", _table())
    cfg = CompletionConfig(probes=("B", "H", "N"), seeds=6, min_support=5,
                           policies=("response_rank", "cost_gain", "random"), random_draws=4, **config)
    return completion_curves(con, "t", id_column="id", evidence=EvidenceMap(("e",)), claim=parse_claim("y = 1"),
                             config=cfg, source="test")


def _mean(table: pa.Table, policy: str) -> list[dict]:
    return sorted((r for r in table.to_pylist() if r["policy"] == policy and r["seed"] is None),
                  key=lambda r: r["step"])


def test_unit_costs_make_cumulative_cost_the_step_and_cost_gain_follow_gain() -> None:
    result = _run()
    for policy in ("response_rank", "cost_gain", "random"):
        assert [r["cumulative_cost"] for r in _mean(result.table, policy)] == [0.0, 1.0, 2.0, 3.0]
    # with equal prices, cost_gain maximises the calibration certified gain, i.e. chooses as response_rank does
    assert _mean(result.table, "cost_gain")[1]["probe_added"] == _mean(result.table, "response_rank")[1]["probe_added"]
    assert result.recommended_by_cost == "B"
    assert result.table["within_budget"].null_count == result.table.num_rows  # no budget given


def test_an_expensive_best_probe_loses_to_a_cheap_partial_one() -> None:
    # B certifies everything (gain ~1), H about half (gain ~0.5): at 4x the price of H, B's gain per cost is lower
    result = _run(costs=(("B", 4.0), ("H", 1.0), ("N", 0.5)), budget=5.0)
    cg = _mean(result.table, "cost_gain")
    assert cg[1]["probe_added"] == "H" and cg[1]["cumulative_cost"] == 1.0
    assert result.recommended_by_cost == "H"
    assert _mean(result.table, "response_rank")[1]["probe_added"] == "B"
    assert result.plan[0] == ("H", 1.0) and all(c <= 5.0 for _, c in result.plan)
    assert [p for p, _ in result.plan][:2] == ["H", "B"]
    assert result.plan_certified_fraction == pytest.approx(
        max(r["certified_fraction"] for r in cg if r["within_budget"]), abs=0.05)
    rows = [r for r in result.table.to_pylist() if r["seed"] is not None and r["policy"] == "cost_gain"]
    assert all(r["within_budget"] == (r["cumulative_cost"] <= 5.0) for r in rows)
    assert any("budgeted plan within 5" in n for n in result.notes)
    # cumulative cost never falls along a curve
    for policy in ("response_rank", "cost_gain", "random"):
        costs = [r["cumulative_cost"] for r in _mean(result.table, policy)]
        assert costs == sorted(costs)


def test_budget_below_every_price_plans_nothing() -> None:
    result = _run(costs=(("B", 4.0), ("H", 2.0), ("N", 3.0)), budget=1.0)
    assert result.plan == ()
    assert result.plan_certified_fraction == pytest.approx(_mean(result.table, "cost_gain")[0]["certified_fraction"])


@pytest.mark.parametrize("costs, match", [
    ((("B", 1.0),), "every probe"),
    ((("B", 1.0), ("H", 1.0), ("N", 0.0)), "above 0"),
    ((("B", 1.0), ("H", 1.0), ("N", 1.0), ("Z", 1.0)), "not probes"),
])
def test_cost_validation(costs: tuple, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        CompletionConfig(probes=("B", "H", "N"), costs=costs)


def test_parse_costs_from_spec_and_cli() -> None:
    assert parse_costs({"SR-MMP": 2, "SR-ARE": 1}) == (("SR-MMP", 2.0), ("SR-ARE", 1.0))
    assert parse_costs("SR-MMP=2, SR-ARE=1") == (("SR-MMP", 2.0), ("SR-ARE", 1.0))
    with pytest.raises(SpecError, match="probe=price"):
        parse_costs("SR-MMP")
    with pytest.raises(SpecError, match="number"):
        parse_costs({"SR-MMP": "cheap"})
