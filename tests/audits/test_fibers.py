"""The SQL fiber audit against a plain-Python reference, and the invariants of docs/reference.md."""

from __future__ import annotations

from collections import defaultdict

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit.audits.evidence import EvidenceMap, parse_fiber_rule
from dcaudit.audits.fibers import AuditLabels, audit_fibers
from dcaudit.claims import parse_claim
from dcaudit.errors import ClaimError, SpecError

LABELS = AuditLabels("test", "a")


def reference_audit(rows: list[dict], evidence: list[str], min_support: int) -> dict:
    """Plain Python: complete cases, exact fibers, the four statuses."""
    fibers: dict[tuple, list[bool]] = defaultdict(list)
    for r in rows:
        if r["y"] is None or any(r[c] is None for c in evidence):
            continue
        fibers[tuple(r[c] for c in evidence)].append(bool(r["y"]))
    counts = dict.fromkeys(("certified_true", "certified_false", "ambiguous", "unsupported"), 0)
    risk = 0
    for ys in fibers.values():
        n, t = len(ys), sum(ys)
        risk += min(t, n - t)
        if 0 < t < n:
            counts["ambiguous"] += n
        elif n < min_support:
            counts["unsupported"] += n
        else:
            counts["certified_true" if t == n else "certified_false"] += n
    return {**counts, "n_fibers": len(fibers), "n_candidates": sum(len(v) for v in fibers.values()),
            "n_mixed_fibers": sum(0 < sum(v) < len(v) for v in fibers.values()), "benchmark_only_errors": risk}


def run(rows: list[dict], evidence: list[str], min_support: int = 1, rule: str = "exact",
        missing: str = "drop", claim: str = "y = 1") -> dict:
    con = duckdb.connect()
    con.register("t", pa.Table.from_pylist(rows))
    cols = list(rows[0])
    result = audit_fibers(con, "t", id_column="id", evidence=EvidenceMap(tuple(evidence), parse_fiber_rule(rule), missing),
                          claim=parse_claim(claim, cols), min_support=min_support, labels=LABELS)
    return {"summary": result.summary.to_pylist()[0], "fibers": result.fibers.to_pylist(),
            "candidates": result.candidates.to_pylist()}


value = st.one_of(st.none(), st.integers(0, 2))
row_strategy = st.fixed_dictionaries({"e1": value, "e2": value, "e3": st.integers(0, 1),
                                      "y": st.one_of(st.none(), st.integers(0, 1))})
tables = st.lists(row_strategy, min_size=1, max_size=60).map(
    lambda rows: [{"id": i, **r} for i, r in enumerate(rows)])


@settings(max_examples=30, deadline=None)
@given(tables, st.integers(1, 4))
def test_sql_audit_agrees_with_plain_python(rows: list[dict], min_support: int) -> None:
    got = run(rows, ["e1", "e2", "e3"], min_support)["summary"]
    want = reference_audit(rows, ["e1", "e2", "e3"], min_support)
    for key, expected in want.items():
        assert got[key] == expected, key


@settings(max_examples=25, deadline=None)
@given(tables, st.integers(1, 4))
def test_fractions_sum_to_one(rows: list[dict], min_support: int) -> None:
    s = run(rows, ["e1", "e2"], min_support)["summary"]
    if s["n_candidates"] == 0:
        assert s["certified_fraction"] is None
        return
    total = s["certified_fraction"] + s["ambiguous_fraction"] + s["unsupported_fraction"]
    assert total == pytest.approx(1.0)
    assert s["certified_true"] + s["certified_false"] + s["ambiguous"] + s["unsupported"] == s["n_candidates"]


@settings(max_examples=25, deadline=None)
@given(tables)
def test_refining_evidence_never_lowers_the_certified_fraction(rows: list[dict]) -> None:
    # Same candidates on both sides: make the refining column complete.
    rows = [{**r, "e3": r["e3"]} for r in rows]
    coarse = run(rows, ["e1"], missing="as-value")["summary"]
    fine = run(rows, ["e1", "e3"], missing="as-value")["summary"]
    if coarse["n_candidates"]:
        assert fine["certified_fraction"] >= coarse["certified_fraction"] - 1e-12
        assert fine["n_fibers"] >= coarse["n_fibers"]


@settings(max_examples=25, deadline=None)
@given(tables, st.randoms(use_true_random=False))
def test_results_do_not_depend_on_row_order(rows: list[dict], rnd) -> None:  # noqa: ANN001
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    a, b = run(rows, ["e1", "e2", "e3"], 2), run(shuffled, ["e1", "e2", "e3"], 2)
    assert a["summary"] == b["summary"]
    assert a["fibers"] == b["fibers"]
    assert sorted(a["candidates"], key=lambda r: r["candidate_id"]) == \
        sorted(b["candidates"], key=lambda r: r["candidate_id"])


def test_known_answer_with_statuses_and_exclusions() -> None:
    rows = [
        {"id": 1, "e": 0, "y": 0}, {"id": 2, "e": 0, "y": 1},            # mixed
        {"id": 3, "e": 1, "y": 1}, {"id": 4, "e": 1, "y": 1},            # pure true, n=2
        {"id": 5, "e": 2, "y": 0},                                        # pure false, n=1
        {"id": 6, "e": None, "y": 0}, {"id": 7, "e": 2, "y": None},      # excluded
    ]
    out = run(rows, ["e"], min_support=2)
    s = out["summary"]
    assert (s["n_candidates"], s["n_excluded"], s["n_fibers"], s["n_mixed_fibers"]) == (5, 2, 3, 1)
    assert (s["certified_true"], s["certified_false"], s["ambiguous"], s["unsupported"]) == (2, 0, 2, 1)
    assert s["benchmark_only_errors"] == 1 and s["prevalence"] == pytest.approx(3 / 5)
    status = {c["candidate_id"]: (c["status"], c["excluded_reason"]) for c in out["candidates"]}
    assert status["6"] == ("excluded", "evidence_missing") and status["7"] == ("excluded", "claim_missing")
    assert status["5"] == ("unsupported", None) and status["1"] == ("ambiguous", None)


def test_missing_as_value_makes_missing_a_fiber() -> None:
    rows = [{"id": 1, "e": None, "y": 0}, {"id": 2, "e": None, "y": 0}, {"id": 3, "e": 1, "y": 1}]
    s = run(rows, ["e"], missing="as-value")["summary"]
    assert (s["n_candidates"], s["n_fibers"], s["certified_false"], s["n_excluded"]) == (3, 2, 2, 0)


def test_quantile_bins_are_equal_count_and_keep_ties_together() -> None:
    rows = [{"id": i, "x": float(i // 2), "y": i % 2} for i in range(40)]  # every value twice
    fibers = run(rows, ["x"], rule="quantile:4")["fibers"]
    assert [f["n"] for f in fibers] == [10, 10, 10, 10]
    # a tie never straddles two bins: each bin's range is disjoint from the next
    assert all(a["evidence_hi"] < b["evidence_lo"] for a, b in zip(fibers, fibers[1:], strict=False))


def test_width_bins() -> None:
    rows = [{"id": i, "x": x, "y": 0} for i, x in enumerate([0.1, 0.4, 0.6, 1.4, -0.2])]
    fibers = run(rows, ["x"], rule="width:0.5")["fibers"]
    assert sorted(f["n"] for f in fibers) == [1, 1, 1, 2]


@pytest.mark.parametrize("rule", ["quantile:2", "width:0.5", "exact"])
def test_nan_and_infinite_fibers_read_as_such_in_the_evidence_key(rule: str) -> None:
    """Under missing = "as-value" NaN, +inf and -inf are fibers of their own. A binned rule keys them by
    codes past its bins; their evidence_key reads nan / inf / -inf (as an exact key does), never as one more
    bin number that a reader would take for a bin of finite values."""
    xs = [0.1, 0.3, 0.5, 0.9, float("nan"), float("inf"), float("-inf"), None]
    rows = [{"id": i, "x": x, "y": i % 2} for i, x in enumerate(xs)]
    fibers = run(rows, ["x"], rule=rule, missing="as-value")["fibers"]
    keys = {f["evidence_key"] for f in fibers}
    assert {"nan", "inf", "-inf", "NA"} <= keys
    assert all(f["n"] == 1 for f in fibers if f["evidence_key"] in ("nan", "inf", "-inf", "NA"))
    finite = keys - {"nan", "inf", "-inf", "NA"}
    if rule == "quantile:2":
        assert finite == {"0", "1"}      # two bins, nothing else numbered
    elif rule == "width:0.5":
        assert finite == {"0", "1"}      # [0, 0.5) and [0.5, 1)
    else:
        assert finite == {"0.1", "0.3", "0.5", "0.9"}


def test_errors_name_the_problem() -> None:
    rows = [{"id": 1, "e": 0, "y": 1}]
    with pytest.raises(ClaimError, match="available columns"):
        run(rows, ["nope"])
    with pytest.raises(ClaimError, match="'z'"):
        run(rows, ["e"], claim="z = 1")
    with pytest.raises(SpecError):
        run(rows, ["e"], min_support=0)
    with pytest.raises(SpecError, match="window"):
        run(rows, ["e"], rule="knn:5")
    with pytest.raises(ClaimError, match="text, not true/false"):
        run([{"id": 1, "e": 0, "y": "abc"}], ["e"], claim="y")  # a text column is not a claim
