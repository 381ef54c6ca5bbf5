"""Whole commands, timed as a user times them: ``dcaudit audit`` / ``replay`` against plain pandas and
polars scripts doing the same work (bench/peers/), each a fresh process under ``/usr/bin/time -v``
(wall, user + system CPU, peak RSS). Rows go to bench/results/latest.parquet with engine
``dcaudit-cli`` / ``pandas-script`` / ``polars-script`` / ``duckdb-script``; ``ratio_vs_pandas`` is the pandas script's
wall time over this row's, and settings carry CPU seconds, the CPU ratio and the command.

    .venv/bin/python bench/whole.py                 # Tox21 audit, replay, completion; JARVIS replay; 1e6, 1e7 audits and replays
    .venv/bin/python bench/whole.py --only tox21_audit --repeat 5

Python byte-code must be cached for fair start-up numbers (a user's installed package has it):
the script unsets PYTHONDONTWRITEBYTECODE and runs every command once before timing it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from data import EVIDENCE, dataset  # noqa: E402

TOX21_NR = "NR-AR,NR-AR-LBD,NR-AhR,NR-Aromatase,NR-ER,NR-ER-LBD,NR-PPAR-gamma"
PY = sys.executable
DCAUDIT = str(Path(sys.executable).with_name("dcaudit"))


def tox21_csv() -> str:
    mirror = os.environ.get("DCAUDIT_MIRROR")
    if not mirror:
        raise SystemExit("set DCAUDIT_MIRROR (the Tox21 CSV is read from the mirror)")
    return str(Path(mirror) / "tox21" / "tox21.csv")


TOX21_PROBES = "SR-ARE,SR-ATAD5,SR-HSE,SR-MMP"
JARVIS_X, JARVIS_REF, JARVIS_LABEL = "pred_formation_energy_peratom", "formation_energy_peratom", "optb88vdw_bandgap"


def jarvis_spec(out: Path) -> tuple[str, str]:
    """(spec path, table path): the JARVIS error-window replay alone (15 models x 50 seeds) as a spec file
    over the connector's audit table, which the pandas script reads too."""
    from jarvis_replay import jarvis_table

    table = str(jarvis_table())
    spec = out / "jarvis-replay.toml"
    spec.write_text(f"""name = "bench-jarvis-replay"
[source]
path = {json.dumps(table)}
id = "jid"
[[audits]]
id = "fe-gap"
claim = "{JARVIS_LABEL} > 1.0"
evidence = "{JARVIS_X}"
fiber_rule = "quantile:20"
min_support = 5
per = "model"
[replay]
audits = ["fe-gap"]
seeds = 50
calibration_fraction = 0.5
min_support = 5
tolerance = "mae"
reference = "{JARVIS_REF}"
model_column = "model"
""")
    return str(spec), table


def cases(out: Path, only: set[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """benchmark -> engine -> argv; every engine does the same work on the same file."""
    tox = tox21_csv()
    m6 = str(dataset(1_000_000))
    ev = ",".join(EVIDENCE)
    peers = HERE / "peers"
    table: dict[str, dict[str, list[str]]] = {
        "whole:version": {"dcaudit-cli": [DCAUDIT, "--version"]},
        "whole:tox21_audit": {
            "dcaudit-cli": [DCAUDIT, "audit", tox, "--id", "mol_id", "--evidence", TOX21_NR, "--claim", '"SR-p53" = 1',
                            "--out", str(out / "d"), "--force", "--no-report"],
            "pandas-script": [PY, str(peers / "audit_pandas.py"), tox, "--id", "mol_id", "--evidence", TOX21_NR,
                              "--claim-column", "SR-p53", "--out", str(out / "p")],
            "polars-script": [PY, str(peers / "audit_polars.py"), tox, "--id", "mol_id", "--evidence", TOX21_NR,
                              "--claim-column", "SR-p53", "--out", str(out / "l")],
            # the floor on DuckDB: the audit with nothing around it (no input contract, findings or catalog)
            "duckdb-script": [PY, str(peers / "audit_duckdb.py"), tox, "--id", "mol_id", "--evidence", TOX21_NR,
                              "--claim-column", "SR-p53", "--out", str(out / "k")]},
        "whole:tox21_replay:100": {
            "dcaudit-cli": [DCAUDIT, "replay", tox, "--id", "mol_id", "--evidence", TOX21_NR, "--claim", '"SR-p53" = 1',
                            "--seeds", "100", "--min-support", "50", "--out", str(out / "dr"), "--force", "--no-report"],
            "pandas-script": [PY, str(peers / "replay_pandas.py"), tox, "--evidence", TOX21_NR, "--claim-column",
                              "SR-p53", "--seeds", "100", "--min-support", "50"],
            "polars-script": [PY, str(peers / "replay_polars.py"), tox, "--evidence", TOX21_NR, "--claim-column",
                              "SR-p53", "--seeds", "100", "--min-support", "50"]},
        "whole:audit_exact_1e6": {
            "dcaudit-cli": [DCAUDIT, "audit", m6, "--id", "candidate_id", "--evidence", ev, "--claim", "y = 1",
                            "--out", str(out / "de"), "--force", "--no-report"],
            "pandas-script": [PY, str(peers / "audit_pandas.py"), m6, "--id", "candidate_id", "--evidence", ev,
                              "--claim-column", "y", "--out", str(out / "pe")],
            "polars-script": [PY, str(peers / "audit_polars.py"), m6, "--id", "candidate_id", "--evidence", ev,
                              "--claim-column", "y", "--out", str(out / "le")],
            "duckdb-script": [PY, str(peers / "audit_duckdb.py"), m6, "--id", "candidate_id", "--evidence", ev,
                              "--claim-column", "y", "--out", str(out / "ke")]},
        "whole:audit_quantile20_1e6": {
            "dcaudit-cli": [DCAUDIT, "audit", m6, "--id", "candidate_id", "--evidence", "x", "--fiber-rule",
                            "quantile:20", "--claim", "r > 1.0", "--out", str(out / "dq"), "--force", "--no-report"],
            "pandas-script": [PY, str(peers / "audit_pandas.py"), m6, "--id", "candidate_id", "--evidence", "x",
                              "--claim-column", "r", "--claim-gt", "1.0", "--quantile", "20", "--out", str(out / "pq")],
            "polars-script": [PY, str(peers / "audit_polars.py"), m6, "--id", "candidate_id", "--evidence", "x",
                              "--claim-column", "r", "--claim-gt", "1.0", "--quantile", "20", "--out", str(out / "lq")],
            "duckdb-script": [PY, str(peers / "audit_duckdb.py"), m6, "--id", "candidate_id", "--evidence", "x",
                              "--claim-column", "r", "--claim-gt", "1.0", "--quantile", "20", "--out", str(out / "kq")]},
        "whole:replay:10_1e6": {
            "dcaudit-cli": [DCAUDIT, "replay", m6, "--id", "candidate_id", "--evidence", ev, "--claim", "y = 1",
                            "--seeds", "10", "--min-support", "50", "--out", str(out / "dr6"), "--force", "--no-report"],
            "pandas-script": [PY, str(peers / "replay_pandas.py"), m6, "--evidence", ev, "--claim-column", "y",
                              "--seeds", "10", "--min-support", "50"],
            "polars-script": [PY, str(peers / "replay_polars.py"), m6, "--evidence", ev, "--claim-column", "y",
                              "--seeds", "10", "--min-support", "50"]},
        # The default command writes report.html too (three matplotlib charts, ~0.75 s in all): timed on its own.
        "whole:tox21_audit:report": {
            "dcaudit-cli": [DCAUDIT, "audit", tox, "--id", "mol_id", "--evidence", TOX21_NR, "--claim", '"SR-p53" = 1',
                            "--out", str(out / "dh"), "--force"]},
        # The main job (`make audit-tox21`): the built-in spec's audits, label-noise split, replay and completion
        # on the connector's cached tables (the untimed first run normalises them), without and with its report.
        "whole:run_tox21": {"dcaudit-cli": [DCAUDIT, "run", "tox21", "--force", "--no-report"]},
        "whole:run_tox21:report": {"dcaudit-cli": [DCAUDIT, "run", "tox21", "--force"]},
        # The paper's probe-acquisition protocol (six policies, every fiber recomputed per probe), 20 of its 200 seeds:
        # the pandas loop takes ~2 s a seed (bench/completion.py times all 200 in process).
        "whole:tox21_completion:20": {
            "dcaudit-cli": [DCAUDIT, "complete", tox, "--id", "mol_id", "--evidence", TOX21_NR, "--claim",
                            '"SR-p53" = 1', "--probes", TOX21_PROBES, "--seeds", "20", "--min-support", "50",
                            "--refinement", "full", "--tie-break", "last", "--no-report", "--out", str(out / "dc"),
                            "--force"],
            "pandas-script": [PY, str(peers / "complete_pandas.py"), tox, "--evidence", TOX21_NR, "--claim-column",
                              "SR-p53", "--probes", TOX21_PROBES, "--seeds", "20", "--min-support", "50"]},
    }
    # Ten times the rows: the fixed costs (imports, the catalog) fade, writing the candidates table dominates.
    if only is None or "whole:audit_exact_1e7" in only:
        m7 = str(dataset(10_000_000))
        table["whole:audit_exact_1e7"] = {
            "dcaudit-cli": [DCAUDIT, "audit", m7, "--id", "candidate_id", "--evidence", ev, "--claim", "y = 1",
                            "--out", str(out / "de7"), "--force", "--no-report"],
            "pandas-script": [PY, str(peers / "audit_pandas.py"), m7, "--id", "candidate_id", "--evidence", ev,
                              "--claim-column", "y", "--out", str(out / "pe7")],
            "polars-script": [PY, str(peers / "audit_polars.py"), m7, "--id", "candidate_id", "--evidence", ev,
                              "--claim-column", "y", "--out", str(out / "le7")]}
    if only is None or "whole:replay:10_1e7" in only:
        m7 = str(dataset(10_000_000))
        table["whole:replay:10_1e7"] = {
            "dcaudit-cli": [DCAUDIT, "replay", m7, "--id", "candidate_id", "--evidence", ev, "--claim", "y = 1",
                            "--seeds", "10", "--min-support", "50", "--out", str(out / "dr7"), "--force", "--no-report"],
            "pandas-script": [PY, str(peers / "replay_pandas.py"), m7, "--evidence", ev, "--claim-column", "y",
                              "--seeds", "10", "--min-support", "50"],
            "polars-script": [PY, str(peers / "replay_polars.py"), m7, "--evidence", ev, "--claim-column", "y",
                              "--seeds", "10", "--min-support", "50"]}
    if only is None or "whole:jarvis_replay:50" in only:
        spec, jarvis = jarvis_spec(out)
        window_args = [jarvis, "--x", JARVIS_X, "--reference", JARVIS_REF, "--label-column", JARVIS_LABEL,
                       "--label-gt", "1.0", "--model-column", "model", "--seeds", "50", "--min-support", "5"]
        table["whole:jarvis_replay:50"] = {
            "dcaudit-cli": [DCAUDIT, "run", spec, "--force", "--no-report"],
            "pandas-script": [PY, str(peers / "window_replay_pandas.py"), *window_args],
            "polars-script": [PY, str(peers / "window_replay_polars.py"), *window_args]}
    return table


def timed(argv: list[str], env: dict) -> dict:
    out = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{argv} failed:\n{out.stderr[-2000:]}")
    err = out.stderr

    def field(name: str) -> str:
        return re.search(rf"{re.escape(name)}: (.*)", err).group(1).strip()  # type: ignore[union-attr]

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")
    seconds = sum(float(part) * 60 ** i for i, part in enumerate(reversed(wall)))
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    return {"seconds": seconds, "cpu": cpu, "rss": int(field("Maximum resident set size (kbytes)")) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated benchmark names (without the whole: prefix)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; the fastest (by CPU) is kept")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env.setdefault("DCAUDIT_HOME", str(Path(tmp) / "home"))
        wanted = {f"whole:{b}" for b in args.only.split(",")} if args.only else None
        table = cases(Path(tmp), wanted)
        only = wanted or set(table)
        for bench, engines in table.items():
            if bench not in only:
                continue
            results = {}
            for engine, argv in engines.items():
                load = os.getloadavg()[0]
                warm = timed(argv, env)  # warms byte-code and page cache; a long run (> 20 s) is its own measure
                runs = [warm] if warm["seconds"] > 20 else [timed(argv, env) for _ in range(args.repeat)]
                best = min(runs, key=lambda r: r["cpu"])
                results[engine] = best | {"load": load, "argv": argv}
            base = results.get("pandas-script")
            for engine, r in results.items():
                ratio = base["seconds"] / r["seconds"] if base and engine != "pandas-script" else None
                cpu_ratio = base["cpu"] / r["cpu"] if base and engine != "pandas-script" else None
                rows.append({"benchmark": bench, "engine": engine, "n_rows": None, "seconds": r["seconds"],
                             "peak_rss_mb": r["rss"], "ratio_vs_pandas": ratio, "load_avg": r["load"],
                             "settings": json.dumps({"cpu_seconds": r["cpu"], "cpu_ratio_vs_pandas": cpu_ratio,
                                                     "repeat": args.repeat,
                                                     "command": " ".join(Path(a).name if "/" in a else a
                                                                         for a in r["argv"])})})
                print(f"{bench:28s} {engine:14s} wall {r['seconds']:6.2f}s  cpu {r['cpu']:6.2f}s  "
                      f"rss {r['rss']:6.0f} MB" + (f"  pandas/this: wall {ratio:4.1f}x cpu {cpu_ratio:4.1f}x"
                                                  if ratio else "") + f"  load {r['load']:.1f}", flush=True)
    if not args.no_record:
        from results_table import append_results

        print(f"appended {len(rows)} rows to {append_results(rows)}")


if __name__ == "__main__":
    main()
