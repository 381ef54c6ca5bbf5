"""Label noise vs incompleteness: known fibers, agreement with the fiber audit, real Tox21 InChIKeys."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit.audits.evidence import EvidenceMap
from dcaudit.audits.fibers import AuditLabels, audit_fibers
from dcaudit.audits.label_noise import attach_mixed_kinds, audit_mixed_kinds
from dcaudit.claims import parse_claim
from dcaudit.errors import ClaimError

LABELS = AuditLabels("test", "a")


def _run(table: pa.Table, evidence: tuple[str, ...] = ("e",)):  # noqa: ANN202
    con = duckdb.connect()
    con.register("t", table)
    kinds = audit_mixed_kinds(con, "t", id_column="id", identity_column="key", evidence=EvidenceMap(evidence),
                              claim=parse_claim("y = 1"), labels=LABELS)
    audit = audit_fibers(con, "t", id_column="id", evidence=EvidenceMap(evidence), claim=parse_claim("y = 1"),
                         labels=LABELS)
    return kinds, audit


def test_known_kinds() -> None:
    rows = [  # (id, evidence, entity, claim)
        ("a1", "A", "x", 1), ("a2", "A", "x", 0), ("a3", "A", "y", 1),           # noise: x conflicts, y agrees
        ("b1", "B", "u", 1), ("b2", "B", "v", 0),                                # incomplete: distinct entities
        ("c1", "C", "p", 1), ("c2", "C", "p", 0), ("c3", "C", "q", 1), ("c4", "C", "r", 0),  # both
        ("d1", "D", "s", 1), ("d2", "D", "s", 1),                                # pure: no kind
        ("e1", "E", None, 1), ("e2", "E", None, 0),                              # no identity: incomplete
    ]
    table = pa.table({k: [r[i] for r in rows] for i, k in enumerate(("id", "e", "key", "y"))})
    kinds, audit = _run(table)
    by_fiber = {r["fiber_key"]: r for r in kinds.fibers.to_pylist()}
    evidence = {r["fiber_key"]: r["evidence_key"] for r in audit.fibers.to_pylist()}
    got = {evidence[k]: (r["mixed_kind"], r["n_entities"], r["n_conflicting_entities"]) for k, r in by_fiber.items()}
    assert got == {"A": ("label_noise", 2, 1), "B": ("incomplete", 2, 0), "C": ("both", 3, 1), "D": (None, 1, 0),
                   "E": ("incomplete", 2, 0)}
    s = kinds.summary.to_pylist()[0]
    assert (s["n_label_noise_fibers"], s["n_incomplete_fibers"], s["n_both_fibers"]) == (1, 2, 1)
    assert (s["label_noise_candidates"], s["incomplete_candidates"], s["both_candidates"]) == (3, 4, 4)
    assert s["conflicting_records"] == 4
    merged = attach_mixed_kinds(audit, kinds)
    assert merged.summary["n_incomplete_fibers"].to_pylist() == [2]
    assert merged.fibers["mixed_kind"].to_pylist() == [got[e][0] for e in merged.fibers["evidence_key"].to_pylist()]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(0, 1)), min_size=1, max_size=60))
def test_kinds_partition_the_mixed_fibers(rows: list[tuple[int, int, int]]) -> None:
    table = pa.table({"id": [f"c{i}" for i in range(len(rows))], "e": [r[0] for r in rows],
                      "key": [f"k{r[1]}" for r in rows], "y": [r[2] for r in rows]})
    kinds, audit = _run(table)
    s = kinds.summary.to_pylist()[0]
    a = audit.summary.to_pylist()[0]
    assert s["n_label_noise_fibers"] + s["n_incomplete_fibers"] + s["n_both_fibers"] == a["n_mixed_fibers"]
    assert s["label_noise_candidates"] + s["incomplete_candidates"] + s["both_candidates"] == a["ambiguous"]
    # fiber keys and sizes agree with the fiber audit's
    assert kinds.fibers.select(["fiber_key", "n", "n_true"]).to_pylist() == \
        audit.fibers.select(["fiber_key", "n", "n_true"]).to_pylist()
    # a fiber where every entity has one record can only be incomplete
    for r in kinds.fibers.to_pylist():
        if r["n_entities"] == r["n"] and r["mixed_kind"]:
            assert r["mixed_kind"] == "incomplete"


def test_unknown_identity_column() -> None:
    con = duckdb.connect()
    con.register("t", pa.table({"id": ["a"], "e": [1], "y": [1]}))
    with pytest.raises(ClaimError, match="identity"):
        audit_mixed_kinds(con, "t", id_column="id", identity_column="inchikey", evidence=EvidenceMap(("e",)),
                          claim=parse_claim("y = 1"), labels=LABELS)


def test_tox21_mixed_fibers_are_incomplete_not_label_noise(tox21_settings) -> None:  # noqa: ANN001
    """The 14 mixed NR-pattern fibers of SR-p53: no InChIKey has conflicting SR-p53 records within a fiber."""
    from dcaudit.connectors.tox21 import prepare

    path = prepare(tox21_settings).tables["tox21"]
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
    nr = ("NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma")
    kinds = audit_mixed_kinds(con, "t", id_column="mol_id", identity_column="inchikey", evidence=EvidenceMap(nr),
                              claim=parse_claim('"SR-p53" = 1'), labels=AuditLabels("tox21", "nr7-p53"))
    s = kinds.summary.to_pylist()[0]
    assert (s["n_incomplete_fibers"], s["n_label_noise_fibers"], s["n_both_fibers"]) == (14, 0, 0)
    assert s["incomplete_candidates"] == 4297
