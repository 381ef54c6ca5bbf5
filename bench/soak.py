"""Soak test of scheduled use: many small runs back to back, readers querying the catalog the whole time,
runs killed (kill -9, some SIGTERM) at random moments. Afterwards every run must be recorded with the
right status, no earlier package changed, the views consistent with the runs table, and no reader error.

    .venv/bin/python bench/soak.py                       # 48 runs of 4 specs, 2 readers -> latest.parquet
    .venv/bin/python bench/soak.py --runs 10 --no-record --json

Readers: one holds ``duckdb.connect(catalog, read_only=True)`` the way a notebook does (reconnecting
between queries), the other goes through ``Catalog.query`` the way ``dcaudit query`` does (which rebuilds
the catalog itself whenever it is out of date). The figures go to bench/results/latest.parquet
(benchmark ``soak``, and ``catalog_refresh`` for the rebuild time at the final package count).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent

READER = r"""
import json, os, sys, time
import duckdb
mode, home, stop, out = sys.argv[1:5]
queries = errors = 0
messages = []
checks = [
    "SELECT count(*) FROM runs",
    "SELECT count(*), sum(n_candidates) FROM summary",
    "SELECT count(*) FROM fibers WHERE status = 'ambiguous'",
    "SELECT typeof(min_support) FROM summary LIMIT 1",
    # consistency inside one snapshot: every row the views serve belongs to a succeeded run
    "SELECT count(*) FROM (SELECT DISTINCT run_id FROM summary) s ANTI JOIN "
    "(SELECT run_id FROM runs WHERE status = 'succeeded') r USING (run_id)",
]
if mode == "cli":
    from dcaudit.catalog import Catalog
    from dcaudit.config import load_settings
    catalog = Catalog(load_settings(), notify=lambda m: None)
while not os.path.exists(stop):
    for sql in checks:
        try:
            if mode == "duckdb":
                con = duckdb.connect(os.path.join(home, "catalog.duckdb"), read_only=True)
                try:
                    rows = con.execute(sql).fetchall()
                finally:
                    con.close()
            else:
                rows = [tuple(r.values()) for r in catalog.query(sql).to_pylist()]
            queries += 1
            if sql.startswith("SELECT typeof") and rows and rows[0][0] != "BIGINT":
                raise AssertionError(f"min_support read as {rows[0][0]}")
            if "ANTI JOIN" in sql and rows[0][0] != 0:
                raise AssertionError(f"{rows[0][0]} run(s) in summary that are not succeeded runs")
        except Exception as exc:
            errors += 1
            messages.append(f"{type(exc).__name__}: {exc}"[:300])
    time.sleep(0.2)
json.dump({"mode": mode, "queries": queries, "errors": errors, "messages": messages[:20]}, open(out, "w"))
"""


def make_specs(base: Path, n_specs: int, rows: int, seed: int) -> list[Path]:
    """Small generated benchmarks, each in its own folder with a spec naming it by a relative path."""
    rng = np.random.default_rng(seed)
    specs = []
    for k in range(n_specs):
        folder = base / f"bench{k}"
        folder.mkdir(parents=True, exist_ok=True)
        n = rows * (k + 1)
        e1, e2 = rng.integers(0, 6 + k, n), rng.integers(0, 3, n)
        y = np.where(e1 == 0, 0, np.where(e1 == 5, 1, rng.integers(0, 2, n)))
        pl.DataFrame({"cid": [f"c{i}" for i in range(n)], "e1": e1, "e2": e2, "y": y}).write_csv(folder / "data.csv")
        spec = folder / "spec.toml"
        spec.write_text(f'name = "soak{k}"\n[source]\npath = "data.csv"\nid = "cid"\n'
                        '[[audits]]\nid = "a"\nclaim = "y = 1"\nevidence = ["e1", "e2"]\n'
                        f'[[audits]]\nid = "b"\nclaim = "y = 1"\nevidence = ["e1"]\nmin_support = {k + 2}\n')
        specs.append(spec)
    return specs


def package_digest(run_dir: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(run_dir.iterdir()):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def record_ids(home: Path) -> set[str]:
    records = home / "records"
    return {p.stem for p in records.glob("*.json") if not p.name.startswith(".")} if records.exists() else set()


def soak(home: Path, *, runs: int = 48, n_specs: int = 4, rows: int = 2000, kill_every: float = 0.25,
         readers: int = 2, seed: int = 13, max_seconds: float = 900.0) -> dict:
    """Run the soak in ``home``; returns the figures and every problem found (``problems`` empty = pass)."""
    rng = random.Random(seed)
    home.mkdir(parents=True, exist_ok=True)
    specs = make_specs(home.parent / "specs", n_specs, rows, seed)
    env = {**os.environ, "DCAUDIT_HOME": str(home), "DCAUDIT_OFFLINE": "1", "DCAUDIT_THREADS": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "dcaudit.cli"]
    started = time.monotonic()
    problems: list[str] = []
    expected: dict[str, set[str]] = {}       # run id -> statuses it may end with
    digests: dict[str, str] = {}             # succeeded run id -> digest of its package files
    kills = {"SIGKILL": 0, "SIGTERM": 0}
    first = subprocess.run([*cmd, "run", str(specs[0]), "--quiet"], env=env, capture_output=True, text=True)
    if first.returncode != 0:
        raise RuntimeError(f"first run failed: {first.stderr}")
    expected[first.stdout.strip()] = {"succeeded"}
    stop = home.parent / "stop-readers"
    reader_procs = []
    for i in range(readers):
        out = home.parent / f"reader{i}.json"
        mode = "duckdb" if i % 2 == 0 else "cli"
        reader_procs.append((subprocess.Popen([sys.executable, "-c", READER, mode, str(home), str(stop), str(out)],
                                              env=env), out))
    done = 0
    for i in range(runs - 1):
        if time.monotonic() - started > max_seconds:
            problems.append(f"time bound reached after {done + 1} runs")
            break
        spec = specs[i % len(specs)]
        force = rng.random() < 0.8
        before = record_ids(home)
        proc = subprocess.Popen([*cmd, "run", str(spec), "--quiet", *(["--force"] if force else [])], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killed = None
        if rng.random() < kill_every:
            if rng.random() < 0.25:     # early: while the process starts or takes the lock
                time.sleep(rng.uniform(0.2, 2.0))
            else:                       # mid-run: once its record says running, at a random moment after
                deadline = time.monotonic() + 120
                while proc.poll() is None and not (record_ids(home) - before) and time.monotonic() < deadline:
                    time.sleep(0.02)
                time.sleep(rng.uniform(0.0, 1.5))
            if proc.poll() is None:
                killed = signal.SIGKILL if rng.random() < 0.7 else signal.SIGTERM
                proc.send_signal(killed)
        out, err = proc.communicate(timeout=300)
        done += 1
        new = sorted(record_ids(home) - before)
        if killed is not None and proc.returncode != 0:
            kills[killed.name] += 1
            for run_id in new:   # killed before, during or after recording: failed, unless it had finished
                expected[run_id] = {"failed", "succeeded", "reused"}
            if killed == signal.SIGTERM:   # SIGTERM: the run must be marked failed by itself, at once
                for run_id in new:
                    rec = json.loads((home / "records" / f"{run_id}.json").read_text())
                    if rec["status"] not in ("failed", "succeeded", "reused"):
                        problems.append(f"{run_id}: SIGTERM left status {rec['status']!r}")
            continue
        if proc.returncode != 0:
            problems.append(f"run {i} of {spec.parent.name} exited {proc.returncode}: {err.strip()[-300:]}")
            continue
        run_id = out.strip()
        if new != [run_id]:
            problems.append(f"run {i}: printed {run_id!r} but recorded {new}")
        expected[run_id] = {"succeeded"} if force else {"succeeded", "reused"}
        run_dir = home / "runs" / run_id
        if run_dir.is_dir():
            digests[run_id] = package_digest(run_dir)
    stop.touch()
    reader_figures = []
    for proc, out in reader_procs:
        proc.wait(timeout=120)
        reader_figures.append(json.loads(out.read_text()) if out.exists() else
                              {"queries": 0, "errors": 1, "messages": ["reader wrote no figures"]})
    # afterwards: the catalog (refreshed by this command) against what happened
    sys.path.insert(0, str(ROOT))
    from dcaudit.catalog import Catalog
    from dcaudit.config import load_settings

    os.environ["DCAUDIT_HOME"] = str(home)
    catalog = Catalog(load_settings(), notify=lambda m: None)
    rows_ = {r["run_id"]: r for r in catalog.query("SELECT run_id, status, error FROM runs").to_pylist()}
    for run_id, allowed in expected.items():
        status = rows_.get(run_id, {}).get("status")
        if status not in allowed:
            problems.append(f"{run_id}: status {status!r}, expected one of {sorted(allowed)}")
    unexplained = set(rows_) - set(expected)
    if unexplained:
        problems.append(f"runs nobody started: {sorted(unexplained)}")
    if any(r["status"] == "running" for r in rows_.values()):
        problems.append("runs still 'running' after every process ended")
    for run_id, digest in digests.items():
        if package_digest(home / "runs" / run_id) != digest:
            problems.append(f"package of {run_id} changed")
    succeeded = {r for r, v in rows_.items() if v["status"] == "succeeded"}
    served = {r["run_id"] for r in catalog.query("SELECT DISTINCT run_id FROM summary").to_pylist()}
    if served != succeeded:
        problems.append(f"views serve {len(served)} run(s), {len(succeeded)} succeeded")
    types = {r["t"] for r in catalog.query("SELECT DISTINCT typeof(min_support) AS t FROM summary").to_pylist()}
    if types != {"BIGINT"}:
        problems.append(f"min_support types {types}")
    checked, damaged = catalog.check()
    problems += damaged
    cold = catalog.rebuild()
    warm = catalog.rebuild()
    for fig in reader_figures:
        problems += [f"reader ({fig.get('mode')}): {m}" for m in fig.get("messages", [])]
    statuses: dict[str, int] = {}
    for r in rows_.values():
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {
        "runs": done + 1, "specs": n_specs, "kills_sigkill": kills["SIGKILL"], "kills_sigterm": kills["SIGTERM"],
        "statuses": statuses, "packages": len(succeeded), "packages_checked": checked,
        "packages_changed": sum(1 for r, d in digests.items() if package_digest(home / "runs" / r) != d),
        "reader_queries": sum(f["queries"] for f in reader_figures),
        "reader_errors": sum(f["errors"] for f in reader_figures),
        "refresh_seconds_warm": warm.seconds, "refresh_seconds_after_check": cold.seconds,
        "kills_recorded_failed": sum(1 for r, allowed in expected.items() if "failed" in allowed
                                     and rows_.get(r, {}).get("status") == "failed"),
        "seconds": round(time.monotonic() - started, 1), "problems": problems,
    }


def refresh_figures(home: Path, packages: int, seed: int = 13) -> dict:
    """Catalog build time at ``packages`` packages: cold (no verification cache), warm (cache valid), the
    no-op check a reading command makes when nothing changed, and one query through Catalog.query."""
    sys.path.insert(0, str(ROOT))
    from dcaudit.catalog import Catalog
    from dcaudit.config import Settings
    from dcaudit.storage import write_package

    rng = np.random.default_rng(seed)
    settings = Settings(home, None, "2GB", 1, True)
    catalog = Catalog(settings, notify=lambda m: None)
    n = 2000
    import pyarrow as pa

    for i in range(packages):
        run_id = f"refresh-{i:05d}"
        fibers = pa.table({"source": ["g"] * 6, "audit_id": ["a"] * 6, "fiber_key": list(range(6)),
                           "n": rng.integers(1, 500, 6), "n_true": rng.integers(0, 2, 6), "status": ["ambiguous"] * 6})
        summary = pa.table({"source": ["g"], "audit_id": ["a"], "claim": ["y = 1"], "min_support": [1 + i % 5],
                            "n_candidates": [n], "certified_fraction": [float(rng.random())]})
        candidates = pa.table({"candidate_id": [f"c{j}" for j in range(n)], "fiber_key": rng.integers(0, 6, n),
                               "status": ["ambiguous"] * n})
        catalog.start_run(run_id, spec=f"g{i % 4}", spec_hash="x", input_hashes={}, package_version="0",
                          git_sha=None, run_dir=settings.runs_dir / run_id)
        write_package(settings.runs_dir / run_id, run_id, {"summary": summary, "fibers": fibers,
                                                            "candidates": candidates}, {"spec": f"g{i % 4}"})
        catalog.finish_run(run_id, status="succeeded", seconds=0.0, refresh=False)
    cold = catalog.rebuild()
    warm = catalog.rebuild()
    started = time.monotonic()
    assert catalog.refresh() is None
    noop = time.monotonic() - started
    started = time.monotonic()
    count = catalog.query("SELECT count(*) AS n FROM summary").to_pylist()[0]["n"]
    query = time.monotonic() - started
    assert count == packages and not cold.left_out
    return {"packages": packages, "rebuild_cold_seconds": cold.seconds, "files_hashed_cold": cold.hashed,
            "rebuild_warm_seconds": warm.seconds, "files_hashed_warm": warm.hashed,
            "noop_check_seconds": round(noop, 3), "query_seconds": round(query, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=48)
    parser.add_argument("--specs", type=int, default=4)
    parser.add_argument("--rows", type=int, default=2000, help="rows of the smallest generated benchmark")
    parser.add_argument("--kill-every", type=float, default=0.25, help="share of runs killed at a random moment")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--max-seconds", type=float, default=1800)
    parser.add_argument("--refresh-packages", type=int, default=500,
                        help="also time catalog builds over this many generated packages (0: skip)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--no-record", action="store_true", help="do not append to bench/results/latest.parquet")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="dcaudit-soak-") as tmp:
        figures = soak(Path(tmp) / "home", runs=args.runs, n_specs=args.specs, rows=args.rows,
                       kill_every=args.kill_every, seed=args.seed, max_seconds=args.max_seconds) if args.runs else {}
        refresh = refresh_figures(Path(tmp) / "refresh-home", args.refresh_packages) if args.refresh_packages else {}
    if refresh:
        figures["refresh_at_scale"] = refresh
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        for key, value in figures.items():
            print(f"{key:28s} {value}")
    if not args.no_record:
        sys.path.insert(0, str(ROOT / "bench"))
        from results_table import append_results

        rows = []
        if "runs" in figures:
            settings = json.dumps({k: v for k, v in figures.items() if k not in ("seconds", "refresh_at_scale")},
                                  default=str)
            rows += [{"benchmark": "soak", "engine": "duckdb", "n_rows": figures["runs"],
                      "seconds": figures["seconds"], "load_avg": load, "settings": settings},
                     {"benchmark": "catalog_refresh:warm", "engine": "duckdb", "n_rows": figures["packages"],
                      "seconds": figures["refresh_seconds_warm"], "load_avg": load,
                      "settings": json.dumps({"after_full_check_seconds": figures["refresh_seconds_after_check"]})}]
        if refresh:
            for kind in ("cold", "warm"):
                rows.append({"benchmark": f"catalog_refresh:{kind}", "engine": "duckdb", "n_rows": refresh["packages"],
                             "seconds": refresh[f"rebuild_{kind}_seconds"], "load_avg": load,
                             "settings": json.dumps(refresh)})
        append_results(rows)
    sys.exit(1 if figures.get("problems") else 0)


if __name__ == "__main__":
    main()
