"""dcaudit next to deepchecks' ConflictingLabels, the closest check a data scientist would reach for: the
share of samples whose features (the evidence) appear with more than one label (the claim) is the audit's
ambiguous fraction. Both are run on the same complete cases, must agree exactly, and are timed as whole
processes (``/usr/bin/time -v``: wall, CPU, peak RSS) and in process (the check alone; dcaudit's fibers stage
from its manifest).

deepchecks runs in an environment of its own, because its pins (numpy < 2, pandas < 2.3, scikit-learn < 1.6,
setuptools' pkg_resources) conflict with dcaudit's lock: ``make bench-deepchecks`` builds it from
bench/peers/deepchecks.lock in ``$DCAUDIT_HOME/bench/deepchecks-venv`` and runs this script.

    .venv/bin/python bench/deepchecks_peer.py [--sizes tox21,1e6] [--repeat 3] [--python PATH] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from data import EVIDENCE, cache_dir, dataset  # noqa: E402
from whole import DCAUDIT, TOX21_NR, timed, tox21_csv  # noqa: E402


def default_python() -> Path:
    return cache_dir() / "deepchecks-venv" / "bin" / "python"


def cases(sizes: list[str]) -> dict[str, tuple[str, str, str, int | None]]:
    """name -> (file, evidence, claim column, n_rows)."""
    out = {}
    for size in sizes:
        if size == "tox21":
            out["tox21"] = (tox21_csv(), TOX21_NR, "SR-p53", None)
        else:
            n = int(float(size))
            out[f"{n:.0e}".replace("+0", "").replace("+", "")] = (str(dataset(n)), ",".join(EVIDENCE), "y", n)
    return out


def best(argv: list[str], env: dict, repeat: int) -> tuple[dict, str]:
    """The fastest of ``repeat`` runs by CPU (after one untimed run that warms byte-code and page cache),
    with the stdout of the last run."""
    subprocess.run(argv, capture_output=True, env=env, check=True)
    runs = []
    for _ in range(repeat):
        runs.append(timed(argv, env))
    last = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    return min(runs, key=lambda r: r["cpu"]), last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="tox21,1e6", help="tox21 and/or synthetic candidate counts")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", type=Path, default=None, help="the deepchecks environment's interpreter")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    python = args.python or default_python()
    if not python.exists():
        raise SystemExit(f"no deepchecks environment at {python}: `make bench-deepchecks` builds it "
                         "(bench/peers/deepchecks.lock), or pass --python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env.setdefault("DCAUDIT_HOME", str(Path(tmp) / "home"))
        for name, (file, evidence, claim, n) in cases(args.sizes.split(",")).items():
            out = Path(tmp) / f"pkg-{name}"
            ours_argv = [DCAUDIT, "audit", file, "--evidence", evidence, "--claim", f'"{claim}" = 1', "--out", str(out),
                         "--force", "--no-report", "--json"]
            peer_argv = [str(python), str(HERE / "peers" / "conflicts_deepchecks.py"), file, "--evidence", evidence,
                         "--claim-column", claim]
            load = os.getloadavg()[0]
            ours, ours_out = best(ours_argv, env, args.repeat)
            peer, peer_out = best(peer_argv, env, args.repeat)
            summary = json.loads(ours_out)["summary"][0]
            found = json.loads(peer_out.strip().splitlines()[-1])
            audited = summary["n_candidates"]  # the audited ones; n_excluded are apart
            # the same complete cases, the same conflicting members: exact agreement or no figure
            if (found["n"], found["conflicting"]) != (audited, summary["ambiguous"]):
                raise SystemExit(f"{name}: deepchecks found {found['conflicting']} of {found['n']} conflicting, "
                                 f"dcaudit {summary['ambiguous']} of {audited} ambiguous")
            fibers_seconds = json.loads((out / "manifest.json").read_text())["timings"]["fibers"]
            bench = f"conflicting_labels:{name}"
            checks = {"audited": audited, "ambiguous": summary["ambiguous"],
                      "ambiguous_fraction": summary["ambiguous"] / audited}
            for engine, r in (("dcaudit-cli", ours), ("deepchecks-script", peer)):
                rows.append({"benchmark": f"whole:{bench}", "engine": engine, "n_rows": n, "seconds": r["seconds"],
                             "peak_rss_mb": r["rss"], "load_avg": load,
                             "settings": json.dumps({"cpu_seconds": r["cpu"], "repeat": args.repeat, **checks})})
            rows.append({"benchmark": bench, "engine": "duckdb", "n_rows": n, "seconds": fibers_seconds,
                         "load_avg": load, "settings": json.dumps({"what": "dcaudit's fibers stage (manifest)",
                                                                   **checks})})
            rows.append({"benchmark": bench, "engine": "deepchecks", "n_rows": n, "seconds": found["check_seconds"],
                         "load_avg": load, "settings": json.dumps({"what": "ConflictingLabels.run, after the read",
                                                                   **checks})})
            print(f"{name:6s} agree: {summary['ambiguous']} of {audited} ambiguous ({checks['ambiguous_fraction']:.2%})\n"
                  f"  whole process  dcaudit {ours['seconds']:6.2f} s wall ({ours['cpu']:.2f} CPU, {ours['rss']:.0f} MB)"
                  f"   deepchecks {peer['seconds']:6.2f} s wall ({peer['cpu']:.2f} CPU, {peer['rss']:.0f} MB)"
                  f"   ratio {peer['seconds'] / ours['seconds']:.1f}x wall, {peer['cpu'] / ours['cpu']:.1f}x CPU\n"
                  f"  in process     dcaudit fibers stage {fibers_seconds:.3f} s   ConflictingLabels "
                  f"{found['check_seconds']:.3f} s   ratio {found['check_seconds'] / fibers_seconds:.1f}x", flush=True)
    if not args.no_record:
        from results_table import append_results

        print(f"appended {len(rows)} rows to {append_results(rows)}")


if __name__ == "__main__":
    main()
