"""Fiber-audit throughput: DuckDB (dcaudit) against a straightforward pandas groupby.

Synthetic candidates x 8 binary evidence columns and a claim with ~3 % prevalence, written once to
Parquet per size; each engine then audits the same file in a fresh subprocess (so peak RSS is its
own): read, group into fibers, statuses, summary. Results are printed and appended to
bench/results/latest.parquet.

    .venv/bin/python bench/fiber_audit.py                 # 1e6 and 1e7
    .venv/bin/python bench/fiber_audit.py --sizes 1e8 --no-pandas --memory-limit 8GB
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
N_EVIDENCE = 8
EVIDENCE = [f"e{j}" for j in range(N_EVIDENCE)]


def make_table(n: int, path: Path) -> None:
    """Deterministic synthetic candidates, generated and written by DuckDB (no Python loop)."""
    import duckdb

    bits = ", ".join(f"CAST((hash(i * {N_EVIDENCE} + {j}) % 5 = 0) AS TINYINT) AS e{j}" for j in range(N_EVIDENCE))
    con = duckdb.connect()
    con.execute(f"""COPY (SELECT i AS candidate_id, {bits},
                          CAST((hash(i) % 100 < 2) OR (hash(i * {N_EVIDENCE}) % 5 = 0 AND hash(i + 7) % 10 < 1)
                               AS TINYINT) AS y
                          FROM range({n}) t(i))
                    TO '{path}' (FORMAT parquet, COMPRESSION zstd)""")


def run_duckdb(path: Path, memory_limit: str, with_candidates: bool) -> dict:
    from dcaudit.audits.evidence import EvidenceMap
    from dcaudit.audits.fibers import AuditLabels, audit_fibers
    from dcaudit.claims import parse_claim
    from dcaudit.config import load_settings
    from dcaudit.engine import connect

    settings = load_settings().with_overrides(memory_limit=memory_limit, home=Path(tempfile.mkdtemp()))
    con = connect(settings)
    start = time.perf_counter()
    con.execute(f"CREATE VIEW cand AS SELECT * FROM read_parquet('{path}')")
    result = audit_fibers(con, "cand", id_column="candidate_id", evidence=EvidenceMap(tuple(EVIDENCE)),
                          claim=parse_claim("y = 1", EVIDENCE + ["y", "candidate_id"]), min_support=1,
                          labels=AuditLabels("bench", "bench"), with_candidates=with_candidates)
    seconds = time.perf_counter() - start
    s = result.summary.to_pylist()[0]
    return {"seconds": seconds, "certified": s["certified_true"] + s["certified_false"], "n_fibers": s["n_fibers"]}


def run_pandas(path: Path, with_candidates: bool) -> dict:
    """What a user would write: read, groupby the evidence columns, status per fiber, sums."""
    import pandas as pd

    start = time.perf_counter()
    df = pd.read_parquet(path)
    df = df.dropna(subset=EVIDENCE + ["y"])
    fibers = df.groupby(EVIDENCE).agg(n=("y", "size"), n_true=("y", "sum")).reset_index()
    mixed = (fibers.n_true > 0) & (fibers.n_true < fibers.n)
    fibers["status"] = "certified_false"
    fibers.loc[fibers.n_true == fibers.n, "status"] = "certified_true"
    fibers.loc[mixed, "status"] = "ambiguous"
    if with_candidates:
        df = df.merge(fibers[EVIDENCE + ["status"]], on=EVIDENCE, how="left")
    certified = int(fibers.loc[~mixed, "n"].sum())
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "certified": certified, "n_fibers": len(fibers)}


def worker(engine: str, path: str, memory_limit: str, with_candidates: bool) -> None:
    sys.path.insert(0, str(HERE))
    from results_table import peak_rss_mb

    out = (run_duckdb(Path(path), memory_limit, with_candidates) if engine == "duckdb"
           else run_pandas(Path(path), with_candidates))
    out["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(out))


def measure(engine: str, path: Path, memory_limit: str, with_candidates: bool) -> dict:
    cmd = [sys.executable, __file__, "--worker", engine, str(path), "--memory-limit", memory_limit]
    if with_candidates:
        cmd.append("--with-candidates")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1e6,1e7", help="comma-separated candidate counts")
    parser.add_argument("--memory-limit", default="8GB")
    parser.add_argument("--no-pandas", action="store_true", help="skip the pandas baseline (e.g. at 1e8)")
    parser.add_argument("--with-candidates", action="store_true", help="also materialise per-candidate status")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.memory_limit, args.with_candidates)
        return
    sys.path.insert(0, str(HERE))
    from results_table import append_results

    rows = []
    bench = "fiber_audit" + ("+candidates" if args.with_candidates else "")
    with tempfile.TemporaryDirectory(dir=HERE / "results") as tmp:
        for n in (int(float(s)) for s in args.sizes.split(",")):
            path = Path(tmp) / f"cand_{n}.parquet"
            make_table(n, path)
            duck = measure("duckdb", path, args.memory_limit, args.with_candidates)
            line = f"{bench:24s} n={n:>11,}  duckdb {duck['seconds']:7.2f}s  peak {duck['peak_rss_mb']:7.0f} MB"
            ratio = None
            if not args.no_pandas:
                pand = measure("pandas", path, args.memory_limit, args.with_candidates)
                assert pand["certified"] == duck["certified"] and pand["n_fibers"] == duck["n_fibers"], (pand, duck)
                ratio = pand["seconds"] / duck["seconds"]
                line += f"  | pandas {pand['seconds']:7.2f}s  peak {pand['peak_rss_mb']:7.0f} MB  ratio {ratio:5.1f}x"
                rows.append({"benchmark": bench, "engine": "pandas", "n_rows": n, "seconds": pand["seconds"],
                             "peak_rss_mb": pand["peak_rss_mb"]})
            rows.append({"benchmark": bench, "engine": "duckdb", "n_rows": n, "seconds": duck["seconds"],
                         "peak_rss_mb": duck["peak_rss_mb"], "ratio_vs_pandas": ratio})
            print(line, flush=True)
    print(f"appended {len(rows)} rows to {append_results(rows)}")


if __name__ == "__main__":
    main()
