"""Reliability under faults: kill -9 mid-run, overlapping runs, damaged workspace tables, package files and
mirror files, unchanged reruns, batches, and fuzzed specs and claims that must never reach DuckDB unvalidated."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from dcaudit.audits.evidence import EvidenceMap, parse_fiber_rule
from dcaudit.audits.fibers import AuditLabels, audit_fibers
from dcaudit.catalog import Catalog, file_lock
from dcaudit.claims import parse_claim, quote_identifier
from dcaudit.cli import cli
from dcaudit.config import Settings
from dcaudit.connectors.base import SourceFile, fetch, sha256_file
from dcaudit.errors import ClaimError, DcauditError, IntegrityError
from dcaudit.pipelines.runner import run_spec
from dcaudit.spec import load_spec, spec_from_dict
from dcaudit.storage import verify_package
from tests.conftest import MIRROR, mirror_path

# A `dcaudit` process that stops after writing the first package table until PAUSE_RELEASE exists:
# the package is then half-written and the spec lock held, deterministically.
PAUSED_DCAUDIT = """
import os, sys, time
import dcaudit.storage as package
real, calls = package.pq.write_table, [0]
def paused(*args, **kwargs):
    real(*args, **kwargs)
    calls[0] += 1
    if calls[0] == 1:
        open(os.environ["PAUSE_MARKER"], "w").close()
        deadline = time.time() + 120
        while not os.path.exists(os.environ["PAUSE_RELEASE"]) and time.time() < deadline:
            time.sleep(0.05)
package.pq.write_table = paused
from dcaudit.cli import main
sys.argv = ["dcaudit", *sys.argv[1:]]
main()
"""


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {"DCAUDIT_HOME": str(home), "DCAUDIT_OFFLINE": "1", "DCAUDIT_THREADS": "1", **extra}


def invoke(home: Path, *args: str):  # noqa: ANN201
    return CliRunner().invoke(cli, list(args), env=_env(home))


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    """A generated benchmark: two discrete evidence columns, a claim that some fibers decide."""
    rng = np.random.default_rng(7)
    n = 3000
    e1, e2 = rng.integers(0, 6, n), rng.integers(0, 3, n)
    y = np.where(e1 == 0, 0, np.where(e1 == 5, 1, rng.integers(0, 2, n)))
    path = tmp_path / "bench.csv"
    pl.DataFrame({"cid": [f"c{i}" for i in range(n)], "e1": e1, "e2": e2, "y": y}).write_csv(path)
    return path


def spec_file(tmp_path: Path, csv: Path, name: str = "bench", claim: str = "y = 1") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'name = "{name}"\n[source]\npath = "{csv}"\nid = "cid"\n'
                    f"[[audits]]\nid = \"a\"\nclaim = '{claim}'\nevidence = [\"e1\", \"e2\"]\n")
    return path


def start_paused(home: Path, tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    marker, release = tmp_path / "paused", tmp_path / "release"
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_DCAUDIT, *args],
                            env={**os.environ, **_env(home, PAUSE_MARKER=str(marker), PAUSE_RELEASE=str(release))},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"dcaudit exited before pausing: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("dcaudit did not reach the package write")
        time.sleep(0.05)
    return proc, release


@pytest.fixture
def tox21_home(tox21_settings: Settings) -> Settings:
    """The session's workspace with Tox21 normalised (RDKit runs once per session, shared with test_runner)."""
    from dcaudit.connectors import get_connector

    get_connector("tox21").prepare(tox21_settings)
    return tox21_settings


def statuses(home: Path) -> list[tuple[str, str]]:
    rows = Catalog(Settings(home, None, "1GB", 1, True)).query(
        "SELECT run_id, status FROM runs ORDER BY started_at, run_id").to_pylist()
    return [(r["run_id"], r["status"]) for r in rows]


def test_kill_9_mid_write_then_rerun_loses_nothing(tmp_path: Path, bench: Path) -> None:
    home, spec = tmp_path / "home", spec_file(tmp_path, bench)
    first = invoke(home, "run", str(spec), "--json")
    assert first.exit_code == 0, first.output
    earlier = json.loads(first.output)
    assert earlier["status"] == "succeeded" and earlier["summary"][0]["n_candidates"] == 3000

    proc, _ = start_paused(home, tmp_path, "run", str(spec), "--force")
    killed_id = next(r for r, s in statuses(home) if s == "running")
    # the overlapping run of the same spec does not wait forever nor write: it exits 75 (EX_TEMPFAIL)
    overlap = invoke(home, "run", str(spec), "--force")
    assert overlap.exit_code == 75 and "in progress" in overlap.output
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    (partial,) = (home / "runs" / ".partial").glob(f"{killed_id}.*.tmp")   # storage.staging_dir's name
    assert partial.is_dir() and not (home / "runs" / killed_id).exists()   # half-written, never published
    catalog = Catalog(Settings(home, None, "1GB", 1, True))
    assert catalog.query("SELECT count(*) FROM summary").column(0)[0].as_py() == 1   # views see only run 1

    again = invoke(home, "run", str(spec), "--json")   # unchanged spec, inputs and code: reused, said so
    assert again.exit_code == 0, again.output
    reused = json.loads(again.output)
    assert reused["status"] == "reused" and reused["reused_from"] == earlier["run_id"]
    assert reused["summary"] == earlier["summary"]
    assert not partial.exists()                                 # the killed run's leftovers are cleaned up
    forced = invoke(home, "run", str(spec), "--force", "--quiet")
    assert forced.exit_code == 0
    runs = statuses(home)
    assert [s for _, s in runs] == ["succeeded", "failed", "reused", "succeeded"]
    assert dict(runs)[killed_id] == "failed"
    assert "interrupted" in catalog.query(f"SELECT error FROM runs WHERE run_id = '{killed_id}'").column(0)[0].as_py()
    assert catalog.query("SELECT count(DISTINCT run_id) FROM summary").column(0)[0].as_py() == 2
    assert all(verify_package(p) == [] for p in (home / "runs").glob("bench-*"))
    assert catalog.damaged_packages() == []


def test_overlapping_runs_one_exits_75_the_other_finishes(tmp_path: Path, bench: Path) -> None:
    home, spec = tmp_path / "home", spec_file(tmp_path, bench)
    proc, release = start_paused(home, tmp_path, "run", str(spec), "--quiet")
    second = subprocess.run([sys.executable, "-m", "dcaudit.cli", "run", str(spec)], env={**os.environ, **_env(home)},
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 75 and "another run of 'bench' is in progress" in second.stderr
    release.touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert [s for _, s in statuses(home)] == ["succeeded"]     # the locked run never registered or wrote
    assert out.strip() == statuses(home)[0][0]


def test_batch_lock_exits_75(tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    with file_lock(home / "locks" / "batch.lock", wait=0):
        result = invoke(home, "run", str(spec_file(tmp_path, bench)), str(spec_file(tmp_path, bench, "b2")))
    assert result.exit_code == 75 and "batch" in result.output


def test_run_all_continues_past_a_bad_spec(tmp_path: Path, bench: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dcaudit.spec

    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[source]\npath = "x.csv"\n[[audits]]\nclaim = "y = 1"\nevidence = "e1"\nbogus = 1\n')
    good = spec_file(tmp_path, bench, "good")
    monkeypatch.setattr(dcaudit.spec, "builtin_specs", lambda: [str(bad), str(good)])
    result = CliRunner().invoke(cli, ["run", "--all", "--json"], env=_env(tmp_path / "home"))
    assert result.exit_code == 2, result.output   # 2: bad input; the good spec still ran
    outcomes = json.loads(result.output)
    assert [(o["status"], o["exit_code"]) for o in outcomes] == [("invalid", 2), ("succeeded", 0)]
    assert "bogus" in outcomes[0]["error"] and outcomes[1]["summary"][0]["n_candidates"] == 3000
    assert Path(outcomes[1]["package_dir"], "report.html").is_file()


def test_changed_data_recomputes_and_diff_says_what_moved(tmp_path: Path, bench: Path) -> None:
    home, spec = tmp_path / "home", spec_file(tmp_path, bench)
    assert invoke(home, "run", str(spec), "--quiet").exit_code == 0
    assert "reused run" in invoke(home, "run", str(spec)).output
    df = pl.read_csv(bench)
    # half of the pure e1 = 0 fibers' candidates turn active: those fibers become mixed
    df.with_columns(pl.when((pl.col("e1") == 0) & (pl.int_range(pl.len()) % 2 == 0)).then(1)
                    .otherwise(pl.col("y")).alias("y")).write_csv(bench)
    changed = invoke(home, "run", str(spec), "--json")
    assert json.loads(changed.output)["status"] == "succeeded"     # new input sha256: recomputed
    diff = invoke(home, "runs", "--diff", "bench", "--json")
    assert diff.exit_code == 0, diff.output
    d = json.loads(diff.output)
    assert d["data_changed"] and d["inputs_changed"] == ["bench.csv"] and d["code_changed"] == []
    (row,) = d["audits"]
    assert row["certified_change"] != 0 and abs(row["certified_change"] + row["ambiguous_change"]) < 1e-12
    text = invoke(home, "runs", "--diff", "bench")
    assert "data: changed (bench.csv)" in text.output and "code/spec: unchanged" in text.output
    # a spec change is a code/spec change, not a data change
    spec.write_text(spec.read_text().replace('evidence = ["e1", "e2"]', 'evidence = ["e1"]'))
    assert invoke(home, "run", str(spec), "--quiet").exit_code == 0
    d = json.loads(invoke(home, "runs", "--diff", "bench", "--json").output)
    assert not d["data_changed"] and d["code_changed"] == ["spec_hash"]


def test_a_package_without_report_is_not_reused_by_a_run_that_wants_one(tmp_path: Path, bench: Path) -> None:
    """`run --no-report` then `run`: the second run reused the first package and so silently had no report."""
    home, spec = tmp_path / "home", spec_file(tmp_path, bench)
    bare = json.loads(invoke(home, "run", str(spec), "--json", "--no-report").output)
    assert not (Path(bare["package_dir"]) / "report.html").exists()
    full = json.loads(invoke(home, "run", str(spec), "--json").output)
    assert full["status"] == "succeeded" and (Path(full["package_dir"]) / "report.html").is_file()
    again = json.loads(invoke(home, "run", str(spec), "--json").output)
    assert again["status"] == "reused" and again["package_dir"] == full["package_dir"]
    assert json.loads(invoke(home, "run", str(spec), "--json", "--no-report").output)["status"] == "reused"


def test_damaged_package_file_is_named_and_not_reused(tmp_path: Path, bench: Path) -> None:
    home, spec = tmp_path / "home", spec_file(tmp_path, bench)
    first = json.loads(invoke(home, "run", str(spec), "--json").output)
    damaged = Path(first["package_dir"]) / "fibers.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-40] + b"\0" * 40)
    result = invoke(home, "report", first["run_id"])
    assert result.exit_code == 2 and str(damaged) in result.output, result.output
    # a query is answered from the intact packages only; the damaged one is left out and named
    result = invoke(home, "query", "--json", "SELECT count(*) AS n FROM fibers")
    assert result.exit_code == 0 and str(damaged) in result.stderr and "left out" in result.stderr, result.output
    assert json.loads(result.stdout) == [{"n": 0}]
    rerun = invoke(home, "run", str(spec), "--json")
    assert rerun.exit_code == 0, rerun.output
    assert json.loads(rerun.output)["status"] == "succeeded"       # damaged earlier package: recomputed
    catalog = Catalog(Settings(home, None, "1GB", 1, True))
    # the views leave the damaged package out (instead of failing for every run) and the catalog says why
    assert catalog.query("SELECT count(DISTINCT run_id) FROM fibers").column(0)[0].as_py() == 1
    row = catalog.query(f"SELECT status, error FROM runs WHERE run_id = '{first['run_id']}'").to_pylist()[0]
    assert row["status"] == "damaged" and str(damaged) in row["error"]


def test_corrupt_workspace_table_is_rederived(tox21_home: Settings, tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = Settings(home, MIRROR, "2GB", 1, True)
    spec = spec_from_dict({"name": "tox21-fibers", "source": {"connector": "tox21", "id": "mol_id"},
                           "audits": [{"id": "nr7-p53", "claim": '"SR-p53" = 1', "evidence": [
                               "NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
                               "NR-PPAR-gamma"]}]})
    shutil.copytree(tox21_home.tables_dir, settings.tables_dir)   # start from the session's normalised table
    assert any("reused" in n for n in run_spec(spec, settings, quiet=True).notes)
    table = settings.tables_dir / "tox21" / "tox21.parquet"
    table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])     # a torn write / bad disk block
    result = run_spec(spec, settings, quiet=True)
    assert any("normalised" in n for n in result.notes)                     # re-derived, not trusted
    row = result.tables["summary"].to_pylist()[0]
    assert (row["n_candidates"], row["ambiguous"]) == (4391, 4297)
    assert duckdb.sql(f"SELECT count(*) FROM '{table}'").fetchall() == [(7831,)]


@pytest.mark.parametrize("damage", ["truncated", "tampered"])
def test_damaged_mirror_file_is_refused_and_earlier_data_kept(tox21_home: Settings, tmp_path: Path,
                                                              damage: str) -> None:
    home = tmp_path / "home"
    shutil.copytree(tox21_home.tables_dir, home / "tables")
    spec = tmp_path / "t.toml"
    spec.write_text('name = "t"\n[source]\nconnector = "tox21"\nid = "mol_id"\n[[audits]]\n'
                    "claim = '\"SR-p53\" = 1'\nevidence = [\"NR-AR\", \"NR-AhR\"]\n")
    ok = CliRunner().invoke(cli, ["--mirror", str(MIRROR), "run", str(spec), "--json"], env=_env(home))
    assert ok.exit_code == 0, ok.output
    table = home / "tables" / "tox21" / "tox21.parquet"
    before = sha256_file(table)
    lines = mirror_path("tox21/tox21.csv").read_text().splitlines(keepends=True)
    if damage == "truncated":
        lines = lines[:4000]
    else:   # flip one assay label of the first compound
        first = lines[1].split(",")
        first[0] = "1" if first[0] in ("0", "") else "0"
        lines[1] = ",".join(first)
    bad_mirror = tmp_path / "mirror"
    (bad_mirror / "tox21").mkdir(parents=True)
    (bad_mirror / "tox21" / "tox21.csv").write_text("".join(lines))
    result = CliRunner().invoke(cli, ["--mirror", str(bad_mirror), "run", str(spec), "--force"], env=_env(home))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert ("rows, expected 7831" if damage == "truncated" else "fingerprint") in result.output
    assert sha256_file(table) == before                                  # earlier normalised data kept
    failed = Catalog(Settings(home, None, "1GB", 1, True)).query(
        "SELECT status, error FROM runs ORDER BY started_at").to_pylist()[-1]
    assert failed["status"] == "failed" and "IntegrityError" in failed["error"]   # a scheduler's log sees it
    package = Path(json.loads(ok.output)["package_dir"])
    assert verify_package(package) == []


def test_mirror_bytes_with_a_known_sha256_are_verified(tmp_path: Path) -> None:
    (tmp_path / "m" / "src").mkdir(parents=True)
    good = b"id,value\n1,2\n"
    source = SourceFile("f.csv", "https://example.invalid/f.csv", ("src/f.csv",),
                        sha256=__import__("hashlib").sha256(good).hexdigest())
    settings = Settings(tmp_path / "home", tmp_path / "m", "1GB", 1, True)
    (tmp_path / "m" / "src" / "f.csv").write_bytes(good)
    assert fetch(source, settings).sha256 == source.sha256
    (tmp_path / "m" / "src" / "f.csv").write_bytes(good[:-3])
    with pytest.raises(IntegrityError, match="truncated or modified"):
        fetch(source, settings)


# ---------------------------------------------------------------- fuzzing

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 60), st.floats(allow_nan=True), st.text(max_size=10),
                    st.sampled_from(['"SR-p53" = 1', "a > 1", "quantile:5", "knn:3", "width:0", "drop", "all",
                                     "1=1; DROP TABLE t", "model", "a\"; DROP TABLE t; --"]))
_value = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=3),
                                                   st.dictionaries(st.text(max_size=6), c, max_size=3)),
                      max_leaves=6)
_audit = st.fixed_dictionaries(
    {"claim": st.one_of(st.sampled_from(['"SR-p53" = 1', "a > 1", "a", "a; DROP TABLE t"]), _value),
     "evidence": st.one_of(st.sampled_from(["a,b", "a"]), st.lists(st.sampled_from(["a", "b", ""]), max_size=3),
                           _value)},
    optional={k: _value for k in ("id", "fiber_rule", "missing", "min_support", "table", "model", "per", "models",
                                  "nonsense")})
_raw_spec = st.one_of(_value, st.fixed_dictionaries(
    {"name": st.one_of(st.just("x"), _value), "source": st.one_of(st.just({"path": "a.csv"}), _value),
     "audits": st.one_of(st.lists(_audit, max_size=3), _value)},
    optional={k: _value for k in ("description", "replay", "completion", "sensitivity", "choice", "bogus")}))


@hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_raw_spec)
def test_spec_from_random_dicts_raises_only_dcaudit_errors(raw: object) -> None:
    try:
        spec = spec_from_dict(raw)  # type: ignore[arg-type]
    except DcauditError:
        return
    assert spec.audits and all(a.claim.sql for a in spec.audits)


_CLAIM_ALPHABET = st.sampled_from(["a", "b", '"SR-p53"', '"x y"', "1", "0.5", "'s'", "=", "!=", "<", ">=", "and",
                                   "or", "not", "(", ")", "+", "-", "*", "/", ";", "--", "DROP", "TABLE", "t",
                                   "SELECT", "true", "'", '"', "`", "\\", "is", "null", ","])


@hsettings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_CLAIM_ALPHABET, min_size=1, max_size=9).map(" ".join))
def test_claims_that_parse_render_only_validated_sql(text: str) -> None:
    try:
        claim = parse_claim(text, ["a", "b", "SR-p53", "x y"])
    except ClaimError:
        return
    assert ";" not in claim.sql and "--" not in claim.sql.replace("- -", "")
    con = duckdb.connect()
    con.execute('CREATE TABLE t AS SELECT 1 AS a, 2.5 AS b, 0 AS "SR-p53", 3 AS "x y"')
    try:
        con.sql(f"SELECT ({claim.sql}) FROM t").fetchall()
    except duckdb.Error as exc:   # typed errors only (e.g. 's' + 1), never a parse error of injected text
        assert not isinstance(exc, duckdb.ParserException), (text, claim.sql)
    assert con.sql("SELECT count(*) FROM duckdb_tables()").fetchall() == [(1,)]   # t is still the only table


@hsettings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(min_size=1, max_size=12).filter(lambda s: "\0" not in s and s.strip() and s.lower() != "y"))
def test_any_evidence_column_name_is_quoted(name: str) -> None:
    con = duckdb.connect()
    con.register("t", pa.table({"id": ["1", "2", "3", "4"], name: [0, 0, 1, 1], "y": [0, 0, 1, 0]}))
    result = audit_fibers(con, "t", id_column="id", evidence=EvidenceMap((name,), parse_fiber_rule("exact")),
                          claim=parse_claim("y = 1"), labels=AuditLabels("fuzz", "a"))
    row = result.summary.to_pylist()[0]
    assert (row["n_fibers"], row["certified_false"], row["ambiguous"]) == (2, 2, 2)
    assert quote_identifier(name).startswith('"')
    assert con.sql("SELECT count(*) FROM t").fetchall() == [(4,)]


def test_builtin_specs_all_validate() -> None:
    from dcaudit.spec import builtin_specs

    assert "tox21" in builtin_specs()
    for name in builtin_specs():
        assert load_spec(name).audits
