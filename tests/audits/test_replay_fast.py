"""The replay's split counts in numpy (no candidate × seed rows) against the SQL pass that defines them."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dcaudit.audits import replay as rp
from dcaudit.audits.evidence import EvidenceMap, evidence_select, parse_fiber_rule
from dcaudit.audits.fibers import AuditLabels
from dcaudit.claims import parse_claim

LABELS = AuditLabels("test", "a")


def test_hash_formula_matches_duckdb() -> None:
    con = duckdb.connect()
    assert rp._hash_matches(con)
    got = con.execute("SELECT hash(CAST(i AS VARCHAR)) AS h, hash(hash(CAST(i AS VARCHAR)), i % 101 - 50) AS hs, "
                      "i % 101 - 50 AS s FROM range(5000) t(i)").fetchnumpy()
    assert np.array_equal(rp._split_hashes(np.asarray(got["h"]), np.asarray(got["s"])), np.asarray(got["hs"]))


def _counts(counts: dict) -> dict:
    """(seed, fiber-members signature, half) -> (n, t), fiber numbers replaced by what they hold."""
    out: dict = {}
    for s, f, c, n, t in zip(*(np.asarray(counts[k]).tolist() for k in ("seed_index", "f", "cal", "n", "t")),
                             strict=True):
        if n:
            out[(s, f, bool(c))] = (n, t)
    return out


def _both(table: pa.Table, evidence: EvidenceMap, claim: str, cfg: rp.ReplayConfig) -> tuple[list, list]:
    con = duckdb.connect()
    con.register("t", table)
    c = parse_claim(claim)
    ev = evidence_select(con, "t", "id", evidence, c, table.column_names)
    fast = rp._fiber_split_counts(con, "t", ev, evidence, c, cfg)
    sql = rp._fiber_split_counts_sql(con, "t", ev, c, cfg)
    return _canonical(fast), _canonical(sql)


def _canonical(counts: dict) -> list:
    """Per seed, the multiset of (cal n, cal t, test n, test t) over fibers, and the excluded count."""
    seed, f, cal = (np.asarray(counts[k]) for k in ("seed_index", "f", "cal"))
    n, t = np.asarray(counts["n"], dtype=np.int64), np.asarray(counts["t"], dtype=np.int64)
    out = [int(n[seed < 0].sum())]
    keep = seed >= 0
    cells: dict = {}
    for s_, f_, c_, n_, t_ in zip(seed[keep].tolist(), f[keep].tolist(), cal[keep].tolist(), n[keep].tolist(),
                                  t[keep].tolist(), strict=True):
        cell = cells.setdefault((s_, f_), [0, 0, 0, 0])
        cell[0 if c_ else 2] += n_
        cell[1 if c_ else 3] += t_
    for s_ in sorted({k[0] for k in cells}):
        out.append(sorted(tuple(v) for k, v in cells.items() if k[0] == s_))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 120), seeds=st.integers(1, 7), offset=st.integers(-5, 5),
       fraction=st.sampled_from([0.5, 0.3, 0.77]), rule=st.sampled_from(["exact", "quantile:4", "width:0.5"]),
       missing=st.sampled_from(["drop", "as-value"]), data=st.data())
def test_fast_split_counts_equal_sql(n: int, seeds: int, offset: int, fraction: float, rule: str, missing: str,
                                     data: st.DataObject) -> None:
    a = data.draw(st.lists(st.sampled_from([0, 1, 2, None]), min_size=n, max_size=n))
    x = data.draw(st.lists(st.sampled_from([0.1, 0.7, 1.3, 2.2, float("nan"), float("inf"), None]),
                           min_size=n, max_size=n))
    y = data.draw(st.lists(st.sampled_from([0, 1, None]), min_size=n, max_size=n))
    ids = data.draw(st.sampled_from(["int", "text"]))
    table = pa.table({"id": list(range(n)) if ids == "int" else [f"c{i}" for i in range(n)],
                      "a": pa.array(a, pa.int64()), "x": pa.array(x, pa.float64()), "y": pa.array(y, pa.int64())})
    cols = ("a", "x") if rule == "exact" else ("x",)
    evidence = EvidenceMap(cols, parse_fiber_rule(rule), missing=missing)
    cfg = rp.ReplayConfig(seeds=seeds, seed_offset=offset, calibration_fraction=fraction, min_support=1)
    fast, sql = _both(table, evidence, "y = 1", cfg)
    assert fast[0] == sql[0]
    # SQL leaves out empty halves; the fast path writes them as zeros: compare per seed
    assert fast[1:] == sql[1:] or (not sql[1:] and all(not s for s in fast[1:]))


def test_replay_tables_identical_to_sql_path(monkeypatch) -> None:  # noqa: ANN001
    rng = np.random.default_rng(3)
    n = 5000
    table = pa.table({"id": [f"m{i}" for i in range(n)], "e0": rng.integers(0, 2, n), "e1": rng.integers(0, 3, n),
                      "y": (rng.random(n) < 0.2).astype(np.int64)})
    con = duckdb.connect()
    con.register("t", table)

    def run() -> rp.ReplayResult:
        return rp.fiber_replay(con, "t", id_column="id", evidence=EvidenceMap(("e0", "e1")),
                               claim=parse_claim("y = 1"), config=rp.ReplayConfig(seeds=20, min_support=30),
                               labels=LABELS)

    fast = run()
    monkeypatch.setattr(rp, "_hash_matches", lambda con: False)
    slow = run()
    assert fast.replay.equals(slow.replay)
    assert fast.costs.equals(slow.costs)


def test_split_counts_blocks_and_threads_agree() -> None:
    rng = np.random.default_rng(7)
    h = rng.integers(0, 2**63, 50_000).astype(np.uint64)
    group = rng.integers(0, 37, 50_000)
    seeds = np.arange(3, 40)
    one = rp.split_counts(h, group, 37, seeds, 500_000, threads=1)
    two = rp.split_counts(h, group, 37, seeds, 500_000, threads=2)
    assert np.array_equal(one, two)
    direct = (rp._split_hashes(np.repeat(h, len(seeds)), np.tile(seeds, len(h))) % np.uint64(rp.SPLIT_BUCKETS)
              < np.uint64(500_000)).reshape(len(h), len(seeds))
    want = np.stack([np.bincount(group, weights=direct[:, s], minlength=37) for s in range(len(seeds))])
    assert np.array_equal(one, want.astype(np.int64))


def test_large_tables_beyond_the_memory_limit_take_the_sql_pass(monkeypatch) -> None:  # noqa: ANN001
    con = duckdb.connect()
    con.register("t", pa.table({"id": list(range(1000)), "e": [i % 3 for i in range(1000)]}))
    assert rp._fits_in_memory(con, "t")
    con.execute("SET memory_limit = '1GB'")
    monkeypatch.setattr(rp, "_FAST_BYTES_PER_CANDIDATE", 2 * 10**6)  # 1000 candidates "need" 2 GB
    assert not rp._fits_in_memory(con, "t")


def test_an_empty_half_is_the_same_error_on_the_numpy_and_the_sql_pass(monkeypatch) -> None:  # noqa: ANN001
    """The split counts of either pass are checked per seed: the first seed whose calibration or test half is
    empty (here a later one, found from the SQL split itself) stops both with the same error."""
    import pytest

    from dcaudit.errors import InputError

    table = pa.table({"id": [f"k{i}" for i in range(4)], "e": [0, 1, 0, 1], "y": [0, 1, 1, 0]})
    con = duckdb.connect()
    con.register("t", table)
    cfg = rp.ReplayConfig(seeds=30, seed_offset=2, min_support=1)
    members = rp.calibration_members(con, "t", id_column="id", config=cfg).to_pylist()
    cal = [sum(r["calibration"] for r in members if r["seed"] == s) for s in range(2, 32)]
    first = next(i for i, c in enumerate(cal) if c in (0, 4))
    assert first > 0  # seed 2 itself splits both ways: the check reads every seed, not the first
    message = (f"^seed {first + 2}: the 4 complete cases give {cal[first]} calibration and {4 - cal[first]} test "
               "candidates; both splits need candidates")

    def run() -> None:
        rp.fiber_replay(con, "t", id_column="id", evidence=EvidenceMap(("e",)), claim=parse_claim("y = 1"),
                        config=cfg, labels=LABELS)

    with pytest.raises(InputError, match=message):
        run()
    monkeypatch.setattr(rp, "_hash_matches", lambda con: False)  # the SQL pass over candidates × seeds
    with pytest.raises(InputError, match=message):
        run()


def _outcome(run) -> object:  # noqa: ANN001 - a thunk returning a ReplayResult
    """A replay's tables, or the message of the InputError it stops with (an empty half)."""
    from dcaudit.errors import InputError

    try:
        result = run()
    except InputError as exc:
        return str(exc)
    return result.replay, result.costs


def _same(a: object, b: object) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a[0].equals(b[0]) and a[1].equals(b[1])  # type: ignore[index]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 150), seeds=st.integers(1, 6), rule=st.sampled_from(["exact", "quantile:3", "width:0.5"]),
       missing=st.sampled_from(["drop", "as-value"]), ids=st.sampled_from(["int", "text"]), data=st.data())
def test_the_replay_from_the_audits_candidates_is_the_replay(n: int, seeds: int, rule: str, missing: str, ids: str,
                                                             data: st.DataObject) -> None:
    """The stage hands the fiber audit's candidates to the replay, whose split pass then reads their ids, fibers
    and claim values instead of the relation: every table is identical, bit for bit, to the replay's own pass in
    numpy and to the SQL pass that defines the split (fibers numbered alike on all three, NULL keys last)."""
    from unittest import mock

    from dcaudit.audits.fibers import audit_fibers

    a = data.draw(st.lists(st.sampled_from([-3, 0, 2, None]), min_size=n, max_size=n))
    b = data.draw(st.lists(st.sampled_from([5, 7, None]), min_size=n, max_size=n))
    x = data.draw(st.lists(st.sampled_from([0.1, 0.7, 1.3, 2.2, None]), min_size=n, max_size=n))
    y = data.draw(st.lists(st.sampled_from([0, 1, 1, None]), min_size=n, max_size=n))
    table = pa.table({"id": list(range(n)) if ids == "int" else [f"c{i}" for i in range(n)],
                      "a": pa.array(a, pa.int64()), "b": pa.array(b, pa.int64()), "x": pa.array(x, pa.float64()),
                      "y": pa.array(y, pa.int64())})
    evidence = EvidenceMap(("a", "b") if rule == "exact" else ("x",), parse_fiber_rule(rule), missing=missing)
    claim = parse_claim("y = 1")
    con = duckdb.connect()
    con.register("t", table)
    cfg = rp.ReplayConfig(seeds=seeds, min_support=2, prices=(0.01, 0.2))
    audit = audit_fibers(con, "t", id_column="id", evidence=evidence, claim=claim, labels=LABELS)

    def replay(candidates: pa.Table | None = None) -> object:
        return _outcome(lambda: rp.fiber_replays(con, "t", id_column="id", evidence=evidence, claim=claim,
                                                 configs=(cfg,), labels=LABELS, candidates=candidates)[0])

    reused, own = replay(audit.candidates), replay()
    with mock.patch.object(rp, "_hash_matches", lambda con: False):
        sql = replay()
    assert _same(reused, own) and _same(own, sql)


def test_fast_pass_numbers_fibers_as_the_audit_does() -> None:
    """Fiber f of the numpy pass is the audit's fiber_key f (and dense_rank − 1 of the SQL pass): key parts in
    order, the first part first, NULL after every value."""
    table = pa.table({"id": list(range(12)), "a": [1, None, -2, 1, None, -2, 1, 0, 0, None, 1, -2],
                      "b": [3, 3, None, 4, 4, 3, None, 3, 4, None, 3, 3], "y": [1, 0] * 6})
    con = duckdb.connect()
    con.register("t", table)
    evidence, claim = EvidenceMap(("a", "b"), missing="as-value"), parse_claim("y = 1")
    from dcaudit.audits.fibers import audit_fibers

    cands = audit_fibers(con, "t", id_column="id", evidence=evidence, claim=claim, labels=LABELS).candidates
    ev = evidence_select(con, "t", "id", evidence, claim, table.column_names)
    fast = rp._fiber_split_counts(con, "t", ev, evidence, claim, rp.ReplayConfig(seeds=1, min_support=1))
    # seed 0, both halves: members per fiber number
    keep = np.asarray(fast["seed_index"]) == 0
    members = np.bincount(np.asarray(fast["f"])[keep], weights=np.asarray(fast["n"])[keep])
    assert members.tolist() == np.bincount(cands["fiber_key"].to_numpy()).tolist()
    # (-2, 3), (-2, NULL), (0, 3), (0, 4), (1, 3), (1, 4), (1, NULL), (NULL, 3), (NULL, 4), (NULL, NULL)
    assert members.tolist() == [2, 1, 1, 1, 2, 1, 1, 1, 1, 1]
