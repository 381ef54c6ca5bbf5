"""The catalog is derived from run records and never blocks a run; damage is named; a query cannot change
a package; workspace faults are one-line errors; a copied workspace works on its own; the soak."""

from __future__ import annotations

import builtins
import errno
import importlib.util
import io
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
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from dcaudit.catalog import Catalog
from dcaudit.cli import cli
from dcaudit.config import Settings
from dcaudit.errors import SpecError
from dcaudit.spec import load_spec, spec_from_dict
from dcaudit.storage import TABLE_SCHEMAS, sha256_file, verify_package, write_package
from tests.conftest import MIRROR

ROOT = Path(__file__).resolve().parent.parent


def _env(home: Path) -> dict[str, str]:
    return {"DCAUDIT_HOME": str(home), "DCAUDIT_OFFLINE": "1", "DCAUDIT_THREADS": "1"}


def invoke(home: Path, *args: str):  # noqa: ANN201
    return CliRunner().invoke(cli, list(args), env=_env(home))


def catalog_of(home: Path) -> Catalog:
    return Catalog(Settings(home, None, "1GB", 1, True), notify=lambda m: None)


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    n = 800
    e1, e2 = rng.integers(0, 6, n), rng.integers(0, 3, n)
    y = np.where(e1 == 0, 0, np.where(e1 == 5, 1, rng.integers(0, 2, n)))
    path = tmp_path / "data" / "bench.csv"
    path.parent.mkdir()
    pl.DataFrame({"cid": [f"c{i}" for i in range(n)], "e1": e1, "e2": e2, "y": y}).write_csv(path)
    return path


def spec_file(csv: Path, name: str = "bench", relative: bool = False) -> Path:
    path = csv.parent / f"{name}.toml"
    source = csv.name if relative else str(csv)
    path.write_text(f'name = "{name}"\n[source]\npath = "{source}"\nid = "cid"\n'
                    "[[audits]]\nid = \"a\"\nclaim = 'y = 1'\nevidence = [\"e1\", \"e2\"]\n")
    return path


def run_json(home: Path, *args: str) -> dict:
    result = invoke(home, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


HOLDER = r"""
import sys, duckdb
path, mode = sys.argv[1], sys.argv[2]
con = duckdb.connect(path, read_only=(mode == "ro"))
count = lambda c: c.execute("SELECT count(*) FROM runs").fetchall()[0][0]
print(count(con), flush=True)
sys.stdin.readline()
print(count(con), flush=True)          # still its snapshot
con.close()
con = duckdb.connect(path, read_only=True)
print(count(con), flush=True)          # after reconnecting: the new runs
"""


def hold_catalog(home: Path, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(home / "catalog.duckdb"), mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_an_open_reader_never_blocks_a_run(tmp_path: Path, bench: Path, mode: str) -> None:
    home = tmp_path / "home"
    spec = spec_file(bench)
    first = run_json(home, "run", str(spec))
    holder = hold_catalog(home, mode)     # rw: the DuckDB shell without -readonly holds an exclusive lock
    assert holder.stdout.readline().strip() == "1"
    forced = invoke(home, "run", str(spec), "--force", "--json")
    audited = invoke(home, "audit", str(bench), "--id", "cid", "--evidence", "e1", "--claim", "y = 1", "--json")
    assert forced.exit_code == 0 and "lock" not in forced.output, forced.output
    assert audited.exit_code == 0, audited.output
    out, err = holder.communicate("\n", timeout=60)
    assert holder.returncode == 0, err
    assert out.split() == ["1", "3"]     # its snapshot, then all three runs after reconnecting
    rows = catalog_of(home).query("SELECT run_id, status FROM runs ORDER BY started_at").to_pylist()
    assert [r["status"] for r in rows] == ["succeeded"] * 3 and rows[0]["run_id"] == first["run_id"]


def test_tox21_run_and_audit_succeed_while_a_reader_holds_the_catalog(tox21_settings: Settings,
                                                                     tmp_path: Path) -> None:
    from dcaudit.connectors import get_connector

    get_connector("tox21").prepare(tox21_settings)
    home = tmp_path / "home"
    shutil.copytree(tox21_settings.tables_dir, home / "tables")
    env = {**_env(home), "DCAUDIT_MIRROR": str(MIRROR)}
    assert CliRunner().invoke(cli, ["run", "tox21", "--quiet"], env=env).exit_code == 0
    holder = hold_catalog(home, "ro")
    assert holder.stdout.readline().strip() == "1"
    forced = CliRunner().invoke(cli, ["run", "tox21", "--force", "--quiet"], env=env)
    assert forced.exit_code == 0, forced.output
    csv = tmp_path / "t.csv"
    pl.DataFrame({"x": [0, 0, 1, 1], "y": [0, 0, 1, 0]}).write_csv(csv)
    audited = CliRunner().invoke(cli, ["audit", str(csv), "--evidence", "x", "--claim", "y = 1"], env=env)
    assert audited.exit_code == 0, audited.output
    out, err = holder.communicate("\n", timeout=60)
    assert out.split() == ["1", "3"], err   # its snapshot, then the new runs after reconnecting


def test_truncated_catalog_is_rebuilt_with_a_note(tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    runs = [run_json(home, "run", str(spec_file(bench, f"s{i}")))["run_id"] for i in range(2)]
    catalog = home / "catalog.duckdb"
    with open(catalog, "r+b") as fh:
        fh.truncate(catalog.stat().st_size // 3)
    result = invoke(home, "runs", "--json")
    assert result.exit_code == 0, result.output
    assert "catalog.duckdb was unreadable" in result.stderr and "rebuilt" in result.stderr
    assert sorted(r["run_id"] for r in json.loads(result.stdout)) == sorted(runs)
    served = catalog_of(home).query("SELECT DISTINCT run_id FROM summary").column(0).to_pylist()
    assert sorted(served) == sorted(runs)
    catalog.write_bytes(b"not a database at all" * 100)      # corrupt, not just short
    assert "rebuilt" in invoke(home, "query", "SELECT 1").stderr
    catalog.unlink()                                        # missing
    again = invoke(home, "query", "--json", "SELECT count(*) AS n FROM summary")
    assert "missing" in again.stderr and json.loads(again.stdout) == [{"n": 2}]
    rebuilt = invoke(home, "catalog", "rebuild")
    assert rebuilt.exit_code == 0 and "2 run(s), 2 package(s) in the views" in rebuilt.stdout


def _damage_a_data_page(path: Path) -> None:
    """Overwrite bytes inside the first column chunk's data pages; the footer stays intact."""
    meta = pq.ParquetFile(path).metadata
    col = meta.row_group(0).column(meta.schema.names.index("n"))
    start = col.data_page_offset + col.total_compressed_size // 2
    with open(path, "r+b") as fh:
        fh.seek(start)
        fh.write(b"\xff" * 16)
    pq.read_metadata(path)  # footer still reads


def test_damaged_data_page_marks_the_run_damaged_and_names_the_file(tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    bad = run_json(home, "run", str(spec_file(bench, "one")))
    good = run_json(home, "run", str(spec_file(bench, "two")))
    fibers = Path(bad["package_dir"]) / "fibers.parquet"
    _damage_a_data_page(fibers)
    listed = invoke(home, "runs", "--json")
    rows = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert rows[bad["run_id"]]["status"] == "damaged" and str(fibers) in rows[bad["run_id"]]["error"]
    assert rows[good["run_id"]]["status"] == "succeeded"
    served = invoke(home, "query", "--json", "SELECT DISTINCT run_id FROM fibers")
    assert served.exit_code == 0 and json.loads(served.stdout) == [{"run_id": good["run_id"]}]
    assert str(fibers) in served.stderr                      # named whenever the views leave it out
    checked = invoke(home, "catalog", "check")
    assert checked.exit_code == 2 and str(fibers) in checked.output and "Traceback" not in checked.output
    report = invoke(home, "report", bad["run_id"])
    assert report.exit_code == 2 and str(fibers) in report.output


def test_verification_verdicts_are_cached_by_size_and_mtime(tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    run = run_json(home, "run", str(spec_file(bench)))
    catalog = catalog_of(home)
    assert catalog.rebuild().hashed == 0              # the run's own refresh hashed its files already
    summary = Path(run["package_dir"]) / "summary.parquet"
    os.utime(summary, ns=(time.time_ns(), time.time_ns() + 10**9))     # same bytes, new mtime: hashed again
    report = catalog.rebuild()
    assert report.hashed == 1 and report.left_out == {}


def test_an_unchanged_package_is_not_verified_again(tmp_path: Path, bench: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh answers an unchanged package from its cached verdict (one directory listing): no manifest
    read, no hash. A file touched, or a verdict from ``catalog check``, sends it through verification again."""
    import dcaudit.catalog as catalog_module

    home = tmp_path / "home"
    first = run_json(home, "run", str(spec_file(bench, "one")))
    second = run_json(home, "run", str(spec_file(bench, "two")))
    verified: list[Path] = []
    real = catalog_module.verify_package
    monkeypatch.setattr(catalog_module, "verify_package", lambda d, **kw: verified.append(Path(d)) or real(d, **kw))
    catalog = catalog_of(home)
    assert catalog.rebuild().packages == 2 and verified == []
    summary = Path(first["package_dir"]) / "summary.parquet"
    os.utime(summary, ns=(time.time_ns(), time.time_ns() + 10**9))     # same bytes, new mtime
    report = catalog.rebuild()
    assert verified == [Path(first["package_dir"])] and report.hashed == 1 and report.packages == 2
    # bytes changed behind the cache (same size, mtime put back): the listing cannot see it, a check does
    fibers = Path(second["package_dir"]) / "fibers.parquet"
    st = fibers.stat()
    _damage_a_data_page(fibers)
    os.utime(fibers, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert catalog.rebuild().left_out == {}
    checked, problems = catalog.check()
    assert checked == 2 and any(str(fibers) in p for p in problems)
    report = catalog.rebuild()
    assert set(report.left_out) == {second["run_id"]} and report.packages == 1
    cache = json.loads((home / ".catalog-cache.json").read_text())
    assert cache["format"] == 2 and set(cache["packages"]) == {first["package_dir"], second["package_dir"]}


def test_a_cache_of_the_earlier_layout_is_read_and_entries_of_other_workspaces_dropped(
        tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    run = run_json(home, "run", str(spec_file(bench)))
    cache_path = home / ".catalog-cache.json"
    grouped = json.loads(cache_path.read_text())["packages"]
    # the layout before format 2: one entry per file path, schemas inline
    flat = {f"{d}/{name}": {k: v for k, v in entry.items() if k != "schema"}
            for d, package in grouped.items() for name, entry in package["files"].items()}
    flat["/elsewhere/runs/x/summary.parquet"] = {"stat": [1, 1], "sha256": "0" * 64, "ok": True}
    cache_path.write_text(json.dumps(flat, indent=1))
    report = catalog_of(home).rebuild()
    assert report.hashed == 0 and report.packages == 1      # the verdicts carried over: nothing hashed again
    again = json.loads(cache_path.read_text())
    assert set(again["packages"]) == {run["package_dir"]}   # only this workspace's packages are kept
    assert "\n" not in cache_path.read_text().strip()       # compact, not indented


def test_a_copied_workspace_reports_and_reruns_inside_the_copy(tmp_path: Path, bench: Path) -> None:
    original = tmp_path / "home"
    spec = spec_file(bench)
    run = run_json(original, "run", str(spec))
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    before = {p: p.stat().st_mtime_ns for p in original.rglob("*")}
    listed = json.loads(invoke(copy, "runs", "--json").stdout)
    # the records store run directories relative to DCAUDIT_HOME
    record = json.loads((copy / "records" / f"{run['run_id']}.json").read_text())
    assert record["run_dir"] == f"runs/{run['run_id']}"
    assert catalog_of(copy).run_dir(listed[0]["run_id"]) == copy / "runs" / run["run_id"]
    report = invoke(copy, "report", run["run_id"])
    assert report.exit_code == 0 and report.stdout.strip() == str(copy / "runs" / run["run_id"] / "report.html")
    reused = run_json(copy, "run", str(spec))
    assert reused["status"] == "reused" and Path(reused["package_dir"]) == copy / "runs" / run["run_id"]
    forced = run_json(copy, "run", str(spec), "--force")
    assert Path(forced["package_dir"]).parent == copy / "runs"
    served = catalog_of(copy).query("SELECT DISTINCT run_id FROM summary ORDER BY 1").column(0).to_pylist()
    assert served == sorted([run["run_id"], forced["run_id"]])
    assert {p: p.stat().st_mtime_ns for p in original.rglob("*")} == before     # the original is untouched


def test_a_query_cannot_write_into_the_workspace(tmp_path: Path, bench: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    run = run_json(home, "run", str(spec_file(bench)))
    target = Path(run["package_dir"]) / "summary.parquet"
    digest = sha256_file(target)
    attempts = [f"COPY (SELECT * FROM summary) TO '{target}'",
                f"COPY (SELECT 1 AS x) TO '{home}/new.csv'",
                f"SET enable_external_access = true; COPY (SELECT 1) TO '{target}'",
                f"ATTACH '{home}/other.duckdb' AS o",
                f"EXPORT DATABASE '{home}/export'"]
    for sql in attempts:
        result = invoke(home, "query", sql)
        assert result.exit_code == 2, (sql, result.output)
        assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1, result.output
        assert "Traceback" not in result.output
    assert sha256_file(target) == digest and not (home / "new.csv").exists() and not (home / "other.duckdb").exists()
    assert verify_package(target.parent) == []
    # reading other files stays allowed, and writing outside the workspace too
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    read = invoke(home, "query", "--json", f"SELECT count(*) AS n FROM read_csv('{bench}')")
    assert json.loads(read.stdout) == [{"n": 800}]
    exported = invoke(home, "query", "COPY (SELECT run_id, n_candidates FROM summary) TO 'out.csv'")
    assert exported.exit_code == 0, exported.output
    assert (elsewhere / "out.csv").read_text().splitlines()[1] == f"{run['run_id']},800"


def test_declared_schema_holds_and_older_packages_cast_or_are_named(tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    runs = [run_json(home, "run", str(spec_file(bench, f"s{i}")))["run_id"] for i in range(3)]

    def rewrite(run_id: str, column: str, values: pa.Array) -> Path:   # as an older dcaudit might have written it
        path = home / "runs" / run_id / "summary.parquet"
        table = pq.read_table(path)
        table = table.set_column(table.column_names.index(column), column, values)
        pq.write_table(table, path)
        manifest = json.loads((path.parent / "manifest.json").read_text())
        manifest["files"]["summary.parquet"] = sha256_file(path)
        (path.parent / "manifest.json").write_text(json.dumps(manifest))
        return path

    rewrite(runs[1], "min_support", pa.array([1.0], pa.float64()))        # a DOUBLE that fits BIGINT
    odd = rewrite(runs[2], "min_support", pa.array(["one"], pa.string()))  # text that does not
    catalog = catalog_of(home)
    report = catalog.rebuild()
    assert list(report.left_out) == [runs[2]] and str(odd) in report.left_out[runs[2]][0]
    types = catalog.query("SELECT DISTINCT typeof(min_support) AS t FROM summary").to_pylist()
    assert types == [{"t": "BIGINT"}]
    rows = catalog.query("SELECT run_id, min_support FROM summary ORDER BY run_id").to_pylist()
    assert rows == [{"run_id": r, "min_support": 1} for r in sorted(runs[:2])]
    status = catalog.query(f"SELECT status, error FROM runs WHERE run_id = '{runs[2]}'").to_pylist()[0]
    assert status["status"] == "incompatible" and "min_support" in status["error"]
    described = {r["column_name"]: r["column_type"] for r in catalog.query("DESCRIBE fibers").to_pylist()}
    assert {c: described[c] for c in TABLE_SCHEMAS["fibers"]} == TABLE_SCHEMAS["fibers"]
    assert catalog.query("SELECT count(*) AS n FROM replay").to_pylist() == [{"n": 0}]   # empty, typed, there


def test_packages_are_written_with_the_declared_schema(tmp_path: Path) -> None:
    summary = pa.table({"audit_id": ["a"], "min_support": pa.array([5], pa.int32()), "n_candidates": [3]})
    write_package(tmp_path / "p", "r1", {"summary": summary}, {})
    assert pq.read_schema(tmp_path / "p" / "summary.parquet").field("min_support").type == pa.int64()
    with pytest.raises(ValueError, match="min_support"):
        write_package(tmp_path / "q", "r2", {"summary": summary.set_column(1, "min_support", pa.array(["x"]))}, {})
    assert not (tmp_path / "q").exists()


def test_a_failed_catalog_refresh_does_not_fail_the_run(tmp_path: Path, bench: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("simulated catalog failure")

    monkeypatch.setattr(Catalog, "_write_catalog", broken)
    result = invoke(home, "run", str(spec_file(bench)), "--json")
    assert result.exit_code == 0, result.output
    assert "could not be refreshed" in result.stderr and "next dcaudit command" in result.stderr
    run_id = json.loads(result.stdout)["run_id"]
    monkeypatch.undo()
    listed = json.loads(invoke(home, "runs", "--json").stdout)
    assert [(r["run_id"], r["status"]) for r in listed] == [(run_id, "succeeded")]


def test_a_directory_at_catalog_duckdb_is_named_once_and_queries_still_answer(tmp_path: Path, bench: Path) -> None:
    """The note said "the next dcaudit command refreshes it" (none could: the directory stays) and was printed
    twice, once by the runner and once with the run's notes."""
    home = tmp_path / "home"
    assert invoke(home, "run", str(spec_file(bench))).exit_code == 0
    (home / "catalog.duckdb").unlink()
    (home / "catalog.duckdb").mkdir()
    result = invoke(home, "run", str(spec_file(bench)), "--force")
    assert result.exit_code == 0, result.output
    said = [line for line in result.output.splitlines() if "could not be refreshed" in line]
    assert len(said) == 1 and "catalog.duckdb is a directory, not a file" in said[0], result.output
    assert "next dcaudit command" not in said[0]
    answered = invoke(home, "query", "--quiet", "SELECT count(*) FROM runs")
    assert answered.exit_code == 0 and answered.stdout.strip() == "2"
    assert (home / "catalog.duckdb").is_dir() and not list(home.glob(".catalog.duckdb.*.tmp"))


def test_a_run_whose_process_died_after_the_catalog_was_built_is_shown_failed(tmp_path: Path, bench: Path) -> None:
    """A catalog built while a run's process was alive shows it running. When that process then dies by
    SIGKILL, its record does not change, so the files' fingerprint alone kept the catalog "current": the run
    showed as running forever (the soak test met it when a reader refreshed the catalog mid-run)."""
    home = tmp_path / "home"
    assert invoke(home, "run", str(spec_file(bench))).exit_code == 0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    catalog = catalog_of(home)
    catalog.start_run("bench-killed", spec="bench", spec_hash="x", input_hashes={}, package_version="0",
                      git_sha=None, run_dir=catalog.settings.runs_dir / "bench-killed")
    record = home / "records" / "bench-killed.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "pid": child.pid}))
    status = "SELECT status FROM runs WHERE run_id = 'bench-killed'"
    assert catalog.query(status).to_pylist() == [{"status": "running"}]
    child.kill()
    child.wait()
    assert catalog_of(home).query(status).to_pylist() == [{"status": "failed"}]


def test_lost_records_are_recovered_from_packages_and_older_catalogs_imported(tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    run = run_json(home, "run", str(spec_file(bench)))
    shutil.rmtree(home / "records")
    (home / "catalog.duckdb").unlink()
    # a catalog as dcaudit wrote it before run records: one runs table, here with a failed run
    con = duckdb.connect(str(home / "catalog.duckdb"))
    con.execute("CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, spec VARCHAR, spec_hash VARCHAR, input_hashes "
                "VARCHAR, status VARCHAR, started_at TIMESTAMP, finished_at TIMESTAMP, seconds DOUBLE, "
                "package_version VARCHAR, git_sha VARCHAR, run_dir VARCHAR, error VARCHAR)")
    con.execute(f"INSERT INTO runs VALUES ('old-1', 'old', 'x', '{{}}', 'failed', now(), now(), 1, '0', NULL, "
                f"'{home}/runs/old-1', 'boom')")
    con.close()
    result = invoke(home, "runs", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["run_id"]: r["status"] for r in json.loads(result.stdout)}
    assert rows == {run["run_id"]: "succeeded", "old-1": "failed"}
    assert "older dcaudit" in result.stderr and (home / "records" / "old-1.json").is_file()
    assert (home / "records" / f"{run['run_id']}.json").is_file()    # recovered from its manifest


# ---------------------------------------------------------------- workspace faults

def test_full_disk_is_one_line_recorded_failed_and_loses_nothing(tmp_path: Path, bench: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    spec = spec_file(bench)
    earlier = run_json(home, "run", str(spec))
    real = pq.write_table

    def full(table: pa.Table, where: object, *args: object, **kwargs: object) -> None:
        if str(where).startswith(str(home / "runs")):
            raise OSError(errno.ENOSPC, "No space left on device", str(where))
        real(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", full)
    result = invoke(home, "run", str(spec), "--force")
    monkeypatch.undo()
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "no space left" in error and "recorded as failed" in error and "earlier packages are intact" in error
    rows = catalog_of(home).query("SELECT run_id, status, error FROM runs ORDER BY started_at").to_pylist()
    assert rows[0]["status"] == "succeeded" and rows[1]["status"] == "failed" and "space" in rows[1]["error"]
    assert verify_package(Path(earlier["package_dir"])) == []
    assert not list((home / "runs" / ".partial").glob("*"))


def test_duckdb_out_of_memory_is_one_line_about_the_limit_recorded_failed(tmp_path: Path, bench: Path) -> None:
    """A memory limit too small for the work (DuckDB's OutOfMemoryException) stops the run with one line that
    names the limit and what to change, exit 1, the run recorded failed — not an internal error, and not
    "cannot evaluate the claim" as if the input were at fault. The Python API raises the same ResourceError."""
    import dcaudit
    from dcaudit.errors import ResourceError

    home = tmp_path / "home"
    spec = spec_file(bench)
    earlier = run_json(home, "run", str(spec))
    result = CliRunner().invoke(cli, ["--memory-limit", "1MB", "run", str(spec), "--force"], env=_env(home))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "ran out of memory within its memory limit 1MB" in error and "--memory-limit" in error
    assert "internal error" not in error and "cannot evaluate" not in error
    rows = catalog_of(home).query("SELECT status FROM runs ORDER BY started_at").to_pylist()
    assert [r["status"] for r in rows] == ["succeeded", "failed"]
    assert verify_package(Path(earlier["package_dir"])) == []
    with pytest.raises(ResourceError, match="ran out of memory"):
        dcaudit.audit(bench, id="cid", evidence=["e1", "e2"], claim="y = 1",
                      settings=Settings(tmp_path / "api", None, "1MB", 1, True))


def _read_only(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Every write under ``home`` fails as on a read-only mount (portable: root ignores chmod)."""
    real = builtins.open

    def guarded(file: object, mode: str = "r", *args: object, **kwargs: object):  # noqa: ANN202
        if isinstance(file, str | os.PathLike) and any(c in mode for c in "wax+") \
                and Path(file).absolute().is_relative_to(home):
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    monkeypatch.setattr(io, "open", guarded)


def test_read_only_home_runs_fail_in_one_line_and_reads_work(tmp_path: Path, bench: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    spec = spec_file(bench)
    run = run_json(home, "run", str(spec))
    _read_only(monkeypatch, home)
    result = invoke(home, "run", str(spec), "--force")
    assert result.exit_code == 1 and "not writable" in result.output and "Traceback" not in result.output
    listed = invoke(home, "runs", "--json")
    assert listed.exit_code == 0 and [r["run_id"] for r in json.loads(listed.stdout)] == [run["run_id"]]
    monkeypatch.undo()
    (home / "catalog.duckdb").unlink()   # a stale or missing catalog on a read-only home: built privately
    _read_only(monkeypatch, home)
    queried = invoke(home, "query", "--json", "SELECT count(*) AS n FROM summary")
    assert queried.exit_code == 0, queried.output
    assert json.loads(queried.stdout) == [{"n": 1}] and "not writable" in queried.stderr
    monkeypatch.undo()
    assert not (home / "catalog.duckdb").exists()


PAUSED = """
import os, sys, time
import pyarrow.parquet as pq
real, calls = pq.write_table, [0]
def paused(*args, **kwargs):
    real(*args, **kwargs)
    calls[0] += 1
    if calls[0] == 1:
        open(os.environ["PAUSE_MARKER"], "w").close()
        deadline = time.time() + 120
        while time.time() < deadline:
            time.sleep(0.05)
pq.write_table = paused
from dcaudit.cli import main
sys.argv = ["dcaudit", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_mark_the_run_failed_at_once(tmp_path: Path, bench: Path, sig: signal.Signals) -> None:
    home, marker = tmp_path / "home", tmp_path / "paused"
    spec = spec_file(bench)
    proc = subprocess.Popen([sys.executable, "-c", PAUSED, "run", str(spec)],
                            env={**os.environ, **_env(home), "PAUSE_MARKER": str(marker)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), proc.stderr.read() if proc.poll() is not None else "did not pause"
    (record,) = (home / "records").glob("*.json")
    assert json.loads(record.read_text())["status"] == "running"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert f"interrupted by {sig.name}" in err
    rec = json.loads(record.read_text())           # failed without waiting for the next run of the spec
    assert rec["status"] == "failed" and rec["error"] == f"interrupted by {sig.name}"
    assert not list((home / "runs").glob(".partial/*")) and not list((home / "runs").glob("bench-*"))
    rows = catalog_of(home).query("SELECT status FROM runs").to_pylist()
    assert rows == [{"status": "failed"}]


@pytest.mark.parametrize("name", [".", "..", ".partial", "a\nb", "x" * 101, " lead", "a/b", "", "trail "])
def test_unsafe_spec_names_are_refused(name: str) -> None:
    raw = {"name": name, "source": {"path": "x.csv"}, "audits": [{"claim": "y = 1", "evidence": "e"}]}
    with pytest.raises(SpecError, match="name"):
        spec_from_dict(raw)


@pytest.mark.parametrize("name", ["tox21", "matbench-discovery", "my bench 2", "x" * 100, "run_1.v2"])
def test_ordinary_spec_names_pass(name: str) -> None:
    raw = {"name": name, "source": {"path": "x.csv"}, "audits": [{"claim": "y = 1", "evidence": "e"}]}
    assert spec_from_dict(raw).name == name


def test_relative_source_path_is_resolved_against_the_spec_folder(tmp_path: Path, bench: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_file(bench, relative=True)
    monkeypatch.chdir(tmp_path)           # not the spec's folder
    assert load_spec(str(spec)).source == str(bench.resolve())
    result = run_json(tmp_path / "home", "run", str(spec))
    assert result["summary"][0]["n_candidates"] == 800


# ---------------------------------------------------------------- soak

@pytest.mark.slow
def test_soak_runs_readers_and_kills(tmp_path: Path) -> None:
    """A short soak: seed 31 kills the second run (kill -9) and the third (SIGTERM) mid-run."""
    loaded = importlib.util.spec_from_file_location("soak", ROOT / "bench" / "soak.py")
    soak = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(soak)
    figures = soak.soak(tmp_path / "home", runs=3, n_specs=2, rows=300, kill_every=0.5, readers=2, seed=31,
                        max_seconds=600)
    assert figures["problems"] == [], figures
    assert figures["reader_errors"] == 0 and figures["reader_queries"] > 0
    assert figures["packages_changed"] == 0 and figures["packages"] >= 1


def test_shared_connections_are_separate_and_audits_keep_their_own_database(tmp_path: Path) -> None:
    """The catalog build, the console and the report share one DuckDB database (a connection costs ~1 ms,
    a database ~30 ms), each on its own connection: temp views do not leak between them, and an audit's
    settings (threads, the NaN optimizer switch) stay in the audit's own database."""
    import dataclasses

    from dcaudit.config import load_settings
    from dcaudit.engine import connect, shared_connection

    a, b = shared_connection(), shared_connection()
    a.execute("CREATE TEMP VIEW summary AS SELECT 1 AS x")
    b.execute("CREATE TEMP VIEW summary AS SELECT 2 AS x")   # no clash: each connection's own
    assert a.execute("SELECT x FROM summary").fetchall() == [(1,)]
    assert b.execute("SELECT x FROM summary").fetchall() == [(2,)]
    shared_threads = a.execute("SELECT current_setting('threads')").fetchall()[0][0]
    audit = connect(dataclasses.replace(load_settings(), home=tmp_path / "home", threads=1))
    audit.execute("SET disabled_optimizers = 'statistics_propagation'")
    audit.execute(f"SET threads = {shared_threads + 1}")
    assert a.execute("SELECT current_setting('disabled_optimizers')").fetchall() == [("",)]
    assert audit.execute("SELECT current_setting('threads')").fetchall() == [(shared_threads + 1,)]
    assert a.execute("SELECT current_setting('threads')").fetchall() == [(shared_threads,)]
    for con in (a, b, audit):
        con.close()


def test_catalog_check_leaves_a_package_changed_behind_the_cache_out_of_the_views(tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    run = run_json(home, "run", str(spec_file(bench)))
    fibers = Path(run["package_dir"]) / "fibers.parquet"
    st = fibers.stat()
    _damage_a_data_page(fibers)
    os.utime(fibers, ns=(st.st_atime_ns, st.st_mtime_ns))       # size and mtime as they were
    assert json.loads(invoke(home, "query", "--json", "SELECT count(*) AS n FROM fibers").stdout)[0]["n"] > 0
    assert invoke(home, "catalog", "check").exit_code == 2
    served = invoke(home, "query", "--json", "SELECT count(*) AS n FROM fibers")
    assert json.loads(served.stdout) == [{"n": 0}] and str(fibers) in served.stderr


def test_a_cache_that_cannot_be_written_does_not_stop_the_catalog(tmp_path: Path, bench: Path) -> None:
    home = tmp_path / "home"
    run_json(home, "run", str(spec_file(bench, "one")))
    cache = home / ".catalog-cache.json"
    cache.unlink()
    cache.mkdir()                                                # not a file: neither read nor written
    second = run_json(home, "run", str(spec_file(bench, "two")))
    listed = invoke(home, "runs", "--json")
    assert listed.exit_code == 0 and "could not be refreshed" not in listed.output
    assert second["run_id"] in {r["run_id"] for r in json.loads(listed.stdout)}


def test_an_unknown_run_or_spec_is_a_spec_error(tmp_path: Path) -> None:
    """They were the DcauditError base class, which a notebook catching SpecError (a bad option) missed."""
    import dcaudit
    from dcaudit.config import Settings
    from dcaudit.errors import SpecError

    settings = Settings(home=tmp_path / "home", mirror=None, memory_limit="2GB", threads=1, offline=True)
    dcaudit.audit(pa_table_of_two(), evidence="x", claim="y = 1", record=True, name="known", settings=settings)
    with pytest.raises(SpecError, match="no run or spec 'unknown'"):
        dcaudit.load("unknown", settings=settings)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="no manifest.json"):
        Catalog(settings).package_dir(str(tmp_path / "empty"))


def pa_table_of_two():  # noqa: ANN201 - a pyarrow table
    import pyarrow as pa

    return pa.table({"x": [0, 1], "y": [0, 1]})


def test_a_table_the_manifest_does_not_list_is_not_served(tmp_path: Path, bench: Path) -> None:
    """A package table copied into a run's folder afterwards (its manifest does not list it, so nothing
    verifies it) was served by the catalog's views as that run's."""
    home = tmp_path / "home"
    run = run_json(home, "run", str(spec_file(bench)))
    package = Path(run["package_dir"])
    assert not (package / "replay.parquet").exists()
    table = pq.read_table(package / "fibers.parquet")
    pq.write_table(table, package / "costs.parquet")   # a package table's name, written by hand
    catalog_of(home).rebuild()
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert "fibers" in views and "costs" not in views
        assert con.execute("SELECT count(*) FROM fibers").fetchall()[0][0] == table.num_rows
    finally:
        con.close()


def test_records_are_parsed_once_across_commands_and_changes_are_seen(tmp_path: Path, bench: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command read and parsed every run record (~0.1 ms each: 0.4 s of each command in a workspace of
    4,000 runs). The records the last build parsed are kept in .records-cache.json; a new build reads only
    the files whose size or modification time changed, and a damaged cache is no cache."""
    home = tmp_path / "home"
    first = run_json(home, "run", str(spec_file(bench, "one")))
    second = run_json(home, "run", str(spec_file(bench, "two")))
    cached = json.loads((home / ".records-cache.json").read_text())
    # the second run added its own record to the catalog (and its line to the cache's journal), without
    # reading the first one's
    journal = [json.loads(line) for line in (home / ".records-cache.json.journal").read_text().splitlines()]
    assert cached["format"] == 1 and {r[2]["run_id"] for r in cached["records"].values()} | {
        line[3]["run_id"] for line in journal} == {first["run_id"], second["run_id"]}
    read: list[str] = []
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (read.append(self.name), real(self, *a, **k))[1])
    record = home / "records" / f"{first['run_id']}.json"
    edited = {**json.loads(real(record)), "spec": "renamed-by-hand"}
    record.write_text(json.dumps(edited))
    catalog_of(home).rebuild()
    assert [n for n in read if n.endswith(".json") and not n.startswith(".")] == [record.name]
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        specs = dict(con.execute("SELECT run_id, spec FROM runs").fetchall())
    finally:
        con.close()
    assert specs == {first["run_id"]: "renamed-by-hand", second["run_id"]: "two"}
    # nothing changed (a stray temporary beside the records included): the cache is not written again
    (home / "records" / ".left-by-a-killed-run.json.1.tmp").write_text("{")
    before = (home / ".records-cache.json").stat().st_mtime_ns
    catalog_of(home).rebuild()
    assert (home / ".records-cache.json").stat().st_mtime_ns == before
    (home / ".records-cache.json").write_text("{not json")
    read.clear()
    assert catalog_of(home).rebuild().runs == 2
    assert sorted(n for n in read if n.endswith(".json") and not n.startswith(".")) == sorted(
        [f"{first['run_id']}.json", f"{second['run_id']}.json"])


def _catalog_state(home: Path) -> dict:
    """Everything a reader of catalog.duckdb sees, but the build time: tables, views (SQL and rows)."""
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        state = {"views": dict(con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal "
                                           "ORDER BY view_name").fetchall()),
                 "info": con.execute("SELECT key, value FROM catalog_info WHERE key <> 'built_at' ORDER BY key"
                                     ).fetchall()}
        for table in ("runs", "left_out"):
            state[table] = con.execute(f"SELECT * FROM {table}").fetchall()
        for table in ("_package_files", "_package_schemas"):   # the build's bookkeeping: order is no matter
            state[table] = sorted(con.execute(f"SELECT * FROM {table}").fetchall())
        for view in state["views"]:
            state[f"rows of {view}"] = sorted(map(repr, con.execute(f"SELECT * FROM {view}").fetchall()))
        return state
    finally:
        con.close()


def _stamped(home: Path) -> str:
    return (home / ".catalog.duckdb.fingerprint").read_text().split("\n")[1]


def test_a_run_extends_the_catalog_as_a_full_build_would(tmp_path: Path, bench: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first build, each run adds its record and package to catalog.duckdb without listing the
    workspace (a full refresh costs ~0.2 s a command at 1,000 runs): the catalog it leaves is the one a full
    build writes — rows, views and their SQL — and is stamped with the workspace's own fingerprint, so
    readers find it current. A change the run did not make leaves it stale: the next reader rebuilds."""
    import dcaudit.catalog as catalog_module

    home = tmp_path / "home"
    builds: list[Path] = []
    real_build = catalog_module.Catalog._build
    monkeypatch.setattr(catalog_module.Catalog, "_build",
                        lambda self, target, *a, **k: builds.append(target) or real_build(self, target, *a, **k))
    first = run_json(home, "run", str(spec_file(bench, "one")))["run_id"]
    assert len(builds) == 1                                # no catalog yet: built in full
    runs = [first]
    runs.append(run_json(home, "run", str(spec_file(bench, "two")))["run_id"])
    runs.append(run_json(home, "run", str(spec_file(bench, "one")))["run_id"])          # reused
    runs.append(run_json(home, "audit", str(bench), "--id", "cid", "--evidence", "e1", "--claim", "y = 1",
                         "--fiber-rule", "quantile:3")["run_id"])
    runs.append(run_json(home, "audit", str(bench), "--id", "cid", "--evidence", "e1", "--claim", "y = 1",
                         "--out", str(tmp_path / "elsewhere"))["run_id"])                 # not served
    failing = bench.parent / "bad.toml"
    failing.write_text(f'name = "bad"\n[source]\npath = "{bench}"\nid = "cid"\n[[audits]]\nid = "a"\n'
                       "claim = 'y = 1'\nevidence = [\"no_such_column\"]\n")
    assert invoke(home, "run", str(failing)).exit_code != 0                              # recorded failed
    assert len(builds) == 1, "each later run extended the catalog instead of rebuilding it"
    catalog = catalog_of(home)
    assert _stamped(home) == catalog.fingerprint()          # current: no reader rebuilds it
    appended = _catalog_state(home)
    statuses = dict((r[0], r[4]) for r in appended["runs"])
    assert [statuses[r] for r in runs] == ["succeeded", "succeeded", "reused", "succeeded", "succeeded"]
    assert sorted(statuses.values()).count("failed") == 1
    # a run that started before the last one (runs overlap): its row goes where a build puts it
    early = f"early-{first}"
    shutil.copytree(home / "runs" / first, home / "runs" / early)
    record = json.loads((home / "records" / f"{first}.json").read_text())
    (home / "records" / f"{early}.json").write_text(json.dumps(
        {**record, "run_id": early, "run_dir": f"runs/{early}", "started_at": "2000-01-01T00:00:00.000000"}))
    assert catalog.try_refresh(early) is None and len(builds) == 1
    assert _stamped(home) == catalog.fingerprint()
    appended = _catalog_state(home)
    assert appended["runs"][0][0] == early
    # an extended catalog keeps its storage version: the DuckDB 1.5 shell reads it
    shell = Path(sys.executable).parent / "duckdb"
    out = subprocess.run([str(shell), "-readonly", "-csv", str(home / "catalog.duckdb"),
                          "select count(*) from runs"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["count_star()", str(len(appended["runs"]))]
    catalog.rebuild()
    assert _catalog_state(home) == appended
    # a change no run made (a record edited by hand): the next run still extends, the catalog reads stale
    record = home / "records" / f"{runs[1]}.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "spec": "renamed"}))
    run_json(home, "run", str(spec_file(bench, "three")))
    assert _stamped(home) != catalog_of(home).fingerprint()
    assert invoke(home, "runs").exit_code == 0                # the reader rebuilds
    assert _stamped(home) == catalog_of(home).fingerprint()
    assert dict((r[0], r[1]) for r in _catalog_state(home)["runs"])[runs[1]] == "renamed"


def test_a_run_reads_no_other_record_of_the_workspace(tmp_path: Path, bench: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Which earlier run of the spec was killed, and which one can be reused, are answered by two notes beside
    the spec's lock instead of every record of the workspace (~0.08 s a command at 4,000 runs). A run killed
    after its record was written is still marked failed by the next run, and a workspace whose spec has no
    note yet (runs of an older dcaudit) is read whole, as before."""
    import dcaudit.catalog as catalog_module

    home = tmp_path / "home"
    spec = spec_file(bench, "one")
    first = run_json(home, "run", str(spec))["run_id"]
    reads: list[int] = []
    real = catalog_module.Catalog._load_records
    monkeypatch.setattr(catalog_module.Catalog, "_load_records", lambda self: reads.append(1) or real(self))
    again = run_json(home, "run", str(spec))
    assert again["status"] == "reused" and again["reused_from"] == first and reads == []
    forced = run_json(home, "run", str(spec), "--force")["run_id"]
    assert reads == []
    # killed after its record was written (as kill -9 leaves it): the next run marks it failed
    catalog = catalog_of(home)
    catalog.start_run("one-killed", spec="one", spec_hash="x", input_hashes={}, package_version="0",
                      git_sha=None, run_dir=home / "runs" / "one-killed")
    result = invoke(home, "run", str(spec), "--force")
    assert result.exit_code == 0 and "were interrupted" in result.output and reads == []
    assert catalog.read_record("one-killed")["status"] == "failed"
    assert run_json(home, "run", str(spec))["reused_from"] not in (None, first, forced)   # the latest one
    # a running record an older dcaudit left (no note): every record is read, and it is marked failed
    (home / "locks" / "one.running").unlink()
    (home / "locks" / "one.reuse.json").unlink()
    catalog.start_run("one-older", spec="one", spec_hash="x", input_hashes={}, package_version="0",
                      git_sha=None, run_dir=home / "runs" / "one-older")
    (home / "locks" / "one.running").unlink()
    result = invoke(home, "run", str(spec))
    assert result.exit_code == 0 and "were interrupted" in result.output and reads
    assert catalog.read_record("one-older")["status"] == "failed"
    latest = run_json(home, "run", str(spec), "--force")["run_id"]   # the reuse note is kept again
    assert latest in json.loads((home / "locks" / "one.reuse.json").read_text()).values()
