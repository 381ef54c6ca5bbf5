"""BenchCert export: the four files from an evidence package, consistent with its tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dcaudit.errors import InputError
from dcaudit.reports.export_benchcert import FILES, export_benchcert


def _csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(4)
    n = 500
    e = rng.integers(0, 4, n)
    p = rng.integers(0, 2, n)
    y = np.where(e == 0, 0, np.where(e == 1, 1, np.where(p == 1, e % 2, rng.integers(0, 2, n))))
    path = tmp_path / "toy.csv"
    path.write_text("cid,e,p,y\n" + "".join(f"c{i},{e[i]},{p[i]},{y[i]}\n" for i in range(n)))
    return path


def _package(settings, tmp_path: Path, *, with_candidates: bool = True) -> Path:  # noqa: ANN001
    from dcaudit.pipelines.runner import run_spec
    from dcaudit.spec import spec_from_dict

    spec = spec_from_dict({
        "name": "toy", "source": {"path": str(_csv(tmp_path)), "id": "cid"},
        "audits": [{"id": "e-y", "claim": "y = 1", "evidence": ["e"], "min_support": 5}],
        "replay": {"seeds": 4, "min_support": 10},
        "completion": {"probes": ["p"], "seeds": 4, "min_support": 5, "policies": ["response_rank", "cost_gain"],
                       "costs": {"p": 2.0}},
    })
    return run_spec(spec, settings, with_candidates=with_candidates).run_dir


def test_export_writes_four_consistent_files(settings, tmp_path: Path) -> None:  # noqa: ANN001
    run_dir = _package(settings, tmp_path)
    paths = export_benchcert(run_dir, tmp_path / "bc")
    assert [p.name for p in paths] == list(FILES) and all(p.exists() for p in paths)
    summary = json.loads((tmp_path / "bc" / "summary.json").read_text())
    row = pq.read_table(run_dir / "summary.parquet").to_pylist()[0]
    assert summary["format"] == "benchcert" and summary["audit_id"] == "e-y"
    assert summary["certifiable_fraction"] == pytest.approx(row["certified_fraction"])
    assert summary["ambiguous_fraction"] == pytest.approx(row["ambiguous_fraction"])
    assert summary["mixed_evidence_fibers"] == row["n_mixed_fibers"]
    assert summary["benchmark_only_decision_risk"] == pytest.approx(row["benchmark_only_risk"])
    assert summary["recommended_next_probe"] == "p" and summary["recommended_next_probe_by_cost"] == "p"
    assert {c["policy"] for c in summary["completion_curve"]} == {"response_rank", "cost_gain"}
    assert max(c["cumulative_cost"] for c in summary["completion_curve"]) == 2.0
    assert {c["policy"] for c in summary["replay_costs"]} >= {"price_aware", "certify_then_acquire"}
    fibers = pacsv.read_csv(tmp_path / "bc" / "fiber_table.csv")
    assert fibers.num_rows == pq.read_metadata(run_dir / "fibers.parquet").num_rows
    assert sum(fibers["n"].to_pylist()) == row["n_candidates"]
    ambiguous = pacsv.read_csv(tmp_path / "bc" / "ambiguous_cases.csv")
    assert ambiguous.num_rows == row["ambiguous"]
    assert (tmp_path / "bc" / "report.html").read_bytes() == (run_dir / "report.html").read_bytes()
    assert "NaN" not in (tmp_path / "bc" / "summary.json").read_text()


def test_export_without_candidates_says_so(settings, tmp_path: Path) -> None:  # noqa: ANN001
    run_dir = _package(settings, tmp_path, with_candidates=False)
    export_benchcert(run_dir, tmp_path / "bc")
    summary = json.loads((tmp_path / "bc" / "summary.json").read_text())
    assert summary["ambiguous_cases_listed"] is False and "without candidates" in summary["note"]
    assert pacsv.read_csv(tmp_path / "bc" / "ambiguous_cases.csv").num_rows == 0


def test_damaged_package_is_not_exported(settings, tmp_path: Path) -> None:  # noqa: ANN001
    run_dir = _package(settings, tmp_path)
    (run_dir / "fibers.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match="fibers.parquet"):
        export_benchcert(run_dir, tmp_path / "bc")
