"""report.html of a large package: its size, the time to render it, and the time to first paint in
headless Chromium.

A synthetic package (pyarrow, written by dcaudit's package writer): 1e6 candidates in 15 000 exact fibers
over 14 binary evidence columns, 10 000 of them mixed (sizes skewed like real audits: a few fibers of
thousands, many of a handful), ids like ``CAND-0001234``; a source table with a SMILES per candidate (so
the first pages get depictions when RDKit is installed), a replay table with cost curves and a completion
table with bands. The report is rendered once (seconds, peak RSS); Chromium then opens it ``--repeat``
times and the page records its own first contentful paint (the Paint Timing API) and the moment the
explorer has drawn its first page (``performance.now()``); the wall time of a Chromium run on the report
and on a blank page (the floor of this machine) are printed too. Results are printed and appended to bench/results/latest.parquet.

    .venv/bin/python bench/report_size.py                       # 1e6 candidates, 1e4 mixed fibers
    .venv/bin/python bench/report_size.py --candidates 1e5 --mixed 1e3 --no-record
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
N_BITS = 14
SMILES = ("CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CN1CCC[C@H]1c1cccnc1", "O=C(O)c1ccccc1OC(C)=O",
          "CC(C)Cc1ccc(C(C)C(=O)O)cc1", "Clc1ccc(Cl)c(Cl)c1", "CCN(CC)CCOC(=O)c1ccc(N)cc1")
HEAD = {"source": "synthetic", "audit_id": "big", "claim": "y = 1",
        "evidence": ",".join(f"e{j}" for j in range(N_BITS)), "fiber_rule": "exact"}


def fiber_sizes(n_candidates: int, n_fibers: int, rng: np.random.Generator) -> np.ndarray:
    """Skewed sizes (Zipf-like weights) that sum to n_candidates, every fiber at least 2."""
    w = 1.0 / np.arange(1, n_fibers + 1) ** 0.9
    sizes = np.maximum(2, np.floor(w / w.sum() * n_candidates)).astype(np.int64)
    sizes[0] += n_candidates - sizes.sum()
    return rng.permutation(sizes)


def make_package(target: Path, n_candidates: int, n_mixed: int, n_pure: int, seed: int = 7) -> Path:
    from dcaudit.reports.package import write_package

    rng = np.random.default_rng(seed)
    n_fibers = n_mixed + n_pure
    sizes = fiber_sizes(n_candidates, n_fibers, rng)
    mixed = np.zeros(n_fibers, bool)
    mixed[rng.choice(n_fibers, n_mixed, replace=False)] = True
    # mixed: 1..n-1 true (mostly few); pure: all false or (one in ten) all true
    n_true = np.where(mixed, np.clip(np.ceil(sizes * rng.beta(0.6, 6, n_fibers)), 1, sizes - 1),
                      np.where(rng.random(n_fibers) < 0.1, sizes, 0)).astype(np.int64)
    status = np.where(mixed, "ambiguous", np.where(n_true == sizes, "certified_true", "certified_false"))
    keys = [",".join(str((i >> j) & 1) for j in range(N_BITS)) for i in range(n_fibers)]
    fibers = pa.table({**{k: [v] * n_fibers for k, v in HEAD.items()}, "fiber_key": np.arange(n_fibers),
                       "evidence_key": keys, "evidence_lo": pa.nulls(n_fibers, pa.float64()),
                       "evidence_hi": pa.nulls(n_fibers, pa.float64()), "n": sizes, "n_true": n_true,
                       "status": status})
    fk = np.repeat(np.arange(n_fibers), sizes)
    rank = np.arange(n_candidates) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    claim = rank < np.repeat(n_true, sizes)
    order = rng.permutation(n_candidates)               # ids not in fiber order
    ids = pa.array([f"CAND-{i:07d}" for i in order], pa.string())
    cand_status = np.repeat(status, sizes)
    candidates = pa.table({**{k: pa.array([v] * n_candidates) for k, v in HEAD.items()}, "candidate_id": ids,
                           "fiber_key": fk, "claim_value": claim, "status": cand_status,
                           "excluded_reason": pa.nulls(n_candidates, pa.string())})
    n_amb = int(sizes[mixed].sum())
    cert = int(sizes[~mixed].sum())
    summary = pa.table({**{k: [v] for k, v in HEAD.items()}, "model": pa.nulls(1, pa.string()), "min_support": [1],
                        "n_candidates": [n_candidates], "n_excluded": [0], "n_fibers": [n_fibers],
                        "n_mixed_fibers": [n_mixed], "certified_true": [int(sizes[status == "certified_true"].sum())],
                        "certified_false": [int(sizes[status == "certified_false"].sum())], "ambiguous": [n_amb],
                        "unsupported": [0], "certified_fraction": [cert / n_candidates],
                        "ambiguous_fraction": [n_amb / n_candidates], "unsupported_fraction": [0.0],
                        "mixed_fiber_fraction": [n_mixed / n_fibers], "prevalence": [float(claim.mean())],
                        "benchmark_only_risk": [float(np.minimum(n_true, sizes - n_true).sum() / n_candidates)]})
    prices = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5]
    policies = ["fiber_majority", "global_majority", "certified_only", "certify_then_acquire"]
    replay = pa.table({**{k: [v] * 4 for k, v in HEAD.items()}, "policy": policies, "seed": pa.nulls(4, pa.int64()),
                       "n_seeds": [20] * 4, "certified_fraction": [1.0, 1.0, 0.3, 0.3],
                       "false_decision_rate": [0.03, 0.04, 0.001, 0.001],
                       "false_decision_rate_p10": [0.025, 0.035, 0.0, 0.0],
                       "false_decision_rate_p90": [0.035, 0.045, 0.002, 0.002],
                       "prices": [prices] * 4,
                       "total_cost": [[30.0] * 8, [40.0] * 8, None, [1 + 700 * p for p in prices]]})
    steps = list(range(6))
    completion = pa.table({"audit_id": ["big"] * 12, "policy": ["response_rank"] * 6 + ["random"] * 6,
                           "step": steps * 2, "seed": pa.nulls(12, pa.int64()),
                           "certified_fraction": [0.3 + 0.05 * s for s in steps] + [0.3 + 0.02 * s for s in steps],
                           "certified_fraction_p10": [0.28 + 0.04 * s for s in steps] * 2,
                           "certified_fraction_p90": [0.32 + 0.06 * s for s in steps] * 2})
    source = target.parent / "synthetic-source.parquet"
    source.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"candidate_id": ids, "smiles": pa.array([SMILES[i % len(SMILES)] for i in order])}),
                   source)
    manifest = {"spec": "report-size", "source": "synthetic",
                "sources": [{"table": "synthetic", "path": str(source)}],
                "notes": [f"synthetic: {n_candidates} candidates, {n_fibers} fibers, {n_mixed} mixed"]}
    return write_package(target, "report-size", {"summary": summary, "fibers": fibers, "candidates": candidates,
                                                 "replay": replay, "completion": completion}, manifest,
                         replace_existing=True)


def chromium_paint(url: str, profile: Path) -> dict:
    """One headless load: wall seconds, first contentful paint and explorer-drawn times (ms) from the page."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    start = time.perf_counter()
    out = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--no-first-run",
                          f"--user-data-dir={profile}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=300).stdout
    wall = time.perf_counter() - start
    found = dict(re.findall(r'data-(first-contentful-paint|explorer-ms)="([\d.]+)"', out))
    return {"wall_s": wall, "fcp_ms": float(found.get("first-contentful-paint", "nan")),
            "explorer_ms": float(found.get("explorer-ms", "nan")), "members_in_dom": out.count('<li class="member')}


def worker(package: str, out: str) -> None:
    sys.path.insert(0, str(HERE))
    from results_table import peak_rss_mb

    from dcaudit.reports.html import write_report

    start = time.perf_counter()
    write_report(Path(package), Path(out))
    print(json.dumps({"render_s": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", type=float, default=1e6)
    ap.add_argument("--mixed", type=float, default=1e4)
    ap.add_argument("--pure", type=float, default=5e3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-record", action="store_true", help="print only; do not append to latest.parquet")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    sys.path.insert(0, str(HERE))
    from results_table import append_results

    n, n_mixed, n_pure = int(args.candidates), int(args.mixed), int(args.pure)
    with tempfile.TemporaryDirectory(prefix="dcaudit-report-size-") as tmp:
        tmp_path = Path(tmp)
        start = time.perf_counter()
        package = make_package(tmp_path / "runs" / "report-size", n, n_mixed, n_pure)
        print(f"package: {n} candidates, {n_mixed + n_pure} fibers ({n_mixed} mixed) in "
              f"{time.perf_counter() - start:.1f} s")
        load = os.getloadavg()[0]
        report = tmp_path / "report.html"
        res = subprocess.run([sys.executable, __file__, "--worker", str(package), str(report)],
                             capture_output=True, text=True, check=True)
        rendered = json.loads(res.stdout.strip().splitlines()[-1])
        size = report.stat().st_size
        html = report.read_text()
        data = re.search(r'id="dc-explorer-data">(.*?)</script>', html, re.S)
        explorer_bytes = len(data.group(1)) if data else 0
        blank = tmp_path / "blank.html"
        blank.write_text("<!DOCTYPE html><html><body><p>blank</p></body></html>")
        runs = [chromium_paint(report.as_uri(), tmp_path / "profile") for _ in range(args.repeat)]
        floor = [chromium_paint(blank.as_uri(), tmp_path / "profile") for _ in range(max(2, args.repeat // 2))]
    fcp = statistics.median(r["fcp_ms"] for r in runs)
    ready = statistics.median(r["explorer_ms"] for r in runs)
    blank_wall = statistics.median(r["wall_s"] for r in floor)
    figures = {"candidates": n, "mixed_fibers": n_mixed, "fibers": n_mixed + n_pure, "report_mb": size / 1e6,
               "explorer_data_mb": explorer_bytes / 1e6, "render_s": rendered["render_s"],
               "render_peak_rss_mb": rendered["peak_rss_mb"], "first_contentful_paint_ms_median": fcp,
               "first_contentful_paint_ms_all": [r["fcp_ms"] for r in runs],
               "explorer_drawn_ms_median": ready, "blank_page_chromium_wall_s_median": blank_wall,
               "chromium_wall_s_median": statistics.median(r["wall_s"] for r in runs),
               "members_on_first_page": runs[0]["members_in_dom"], "budget_mb": 5.0, "budget_first_paint_ms": 2000,
               "within_budget": size < 5e6 and fcp < 2000}
    print(json.dumps(figures, indent=1))
    if not args.no_record:
        base = {"engine": "chromium-headless", "n_rows": n, "load_avg": load, "settings": json.dumps(figures)}
        append_results([{**base, "benchmark": "report_html:render", "engine": "python", "seconds": rendered["render_s"],
                         "peak_rss_mb": rendered["peak_rss_mb"]},
                        {**base, "benchmark": "report_html:first_contentful_paint", "seconds": fcp / 1000},
                        {**base, "benchmark": "report_html:explorer_drawn", "seconds": ready / 1000}])
        print("recorded in bench/results/latest.parquet")


if __name__ == "__main__":
    main()
