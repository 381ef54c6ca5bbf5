"""What a long-lived workspace costs every command: the catalog refresh and a whole `dcaudit audit` at N runs.

A scheduled workspace keeps every run (records/ and runs/), and every command that records a run refreshes
catalog.duckdb from all of them. This builds workspaces of N runs by cloning one real Tox21 audit run (its
record under a new run id, its package files copied, so every package verifies), then times:

* ``catalog:refresh_after_a_run``: ``Catalog.refresh()`` in process after one more run's record and package
  appear (a full refresh: what each command paid at its end before runs extended the catalog, and what a
  reader pays after a change no run made), best of ``--repeat``;
* ``catalog:append_a_run``: ``Catalog.try_refresh(run_id)`` for one more run, as the runner calls it at the
  end of every command: the catalog extended by that run alone (checked current afterwards), best of
  ``--repeat``;
* ``catalog:audit_command``: the whole ``dcaudit audit`` of Tox21 (``--no-report``) as a process, best of
  ``--repeat``; settings carry the seconds per run beyond the empty workspace.

    .venv/bin/python bench/catalog_scale.py                  # N = 0, 250, 1000, 4000
    .venv/bin/python bench/catalog_scale.py --runs 0,1000 --repeat 5

Needs DCAUDIT_MIRROR (the Tox21 CSV). The workspaces live in a temporary directory, removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TOX21_NR = "NR-AR,NR-AR-LBD,NR-AhR,NR-Aromatase,NR-ER,NR-ER-LBD,NR-PPAR-gamma"
DCAUDIT = str(Path(sys.executable).with_name("dcaudit"))


def audit_args(csv: str) -> list[str]:
    return [DCAUDIT, "audit", csv, "--id", "mol_id", "--evidence", TOX21_NR, "--claim", '"SR-p53" = 1', "--no-report"]


def clone_runs(home: Path, template: str, n: int, start: int) -> None:
    """``n`` more runs like ``template`` (a run id in ``home``): its record and package under new ids."""
    record = json.loads((home / "records" / f"{template}.json").read_text())
    source = home / "runs" / template
    for i in range(start, start + n):
        run_id = f"clone-{i:06d}"
        shutil.copytree(source, home / "runs" / run_id)
        (home / "records" / f"{run_id}.json").write_text(
            json.dumps({**record, "run_id": run_id, "run_dir": f"runs/{run_id}"}))


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="0,250,1000,4000", help="workspace sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    mirror = os.environ.get("DCAUDIT_MIRROR")
    if not mirror:
        raise SystemExit("set DCAUDIT_MIRROR (the Tox21 CSV is read from the mirror)")
    csv = str(Path(mirror) / "tox21" / "tox21.csv")
    sizes = sorted({int(x) for x in args.runs.split(",")})
    from results_table import append_results

    from dcaudit.catalog import Catalog
    from dcaudit.config import load_settings

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dcaudit-catalog-scale-") as tmp:
        home = Path(tmp) / "home"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(DCAUDIT_HOME=str(home))
        timed(audit_args(csv), env)   # the template run (and byte-code compiled)
        template = next(p.stem for p in (home / "records").glob("*.json"))
        have, empty = 1, None
        for n in sizes:
            if n > have:
                clone_runs(home, template, n - have, have)
                have = n
            os.environ["DCAUDIT_HOME"] = str(home)
            Catalog(load_settings()).refresh()   # hashes the clones once, as the first command after them would
            refresh = []
            for r in range(args.repeat):
                clone_runs(home, template, 1, 10**6 + n * 10 + r)   # one more run, as a command leaves it
                catalog = Catalog(load_settings())
                started = time.perf_counter()
                catalog.refresh()
                refresh.append(time.perf_counter() - started)
            have += args.repeat
            append = []
            for r in range(args.repeat):
                run_id = f"clone-{10**6 + n * 10 + args.repeat + r:06d}"
                clone_runs(home, template, 1, 10**6 + n * 10 + args.repeat + r)
                catalog = Catalog(load_settings())
                started = time.perf_counter()
                note = catalog.try_refresh(run_id)
                append.append(time.perf_counter() - started)
                stamp = (home / ".catalog.duckdb.fingerprint").read_text().split("\n")[1]
                if note is not None or stamp != catalog.fingerprint():
                    raise SystemExit(f"the catalog was not extended by {run_id}: {note}")
            have += args.repeat
            command = min(timed(audit_args(csv), env) for _ in range(args.repeat))
            have += args.repeat
            empty = command if empty is None else empty
            per_run = (command - empty) / have * 1000 if have > 1 + 3 * args.repeat else None
            print(f"{have:6d} runs: refresh {min(refresh):.3f} s, append a run {min(append):.3f} s, "
                  f"dcaudit audit {command:.3f} s"
                  + (f" ({per_run:.3f} ms a run beyond the first)" if per_run is not None else ""), flush=True)
            settings = json.dumps({"runs_in_workspace": have, "repeat": args.repeat})
            load = os.getloadavg()[0]
            rows.append({"benchmark": "catalog:refresh_after_a_run", "engine": "dcaudit", "n_rows": have,
                         "seconds": round(min(refresh), 4), "load_avg": load, "settings": settings})
            rows.append({"benchmark": "catalog:append_a_run", "engine": "dcaudit", "n_rows": have,
                         "seconds": round(min(append), 4), "load_avg": load, "settings": settings})
            rows.append({"benchmark": "catalog:audit_command", "engine": "dcaudit-cli", "n_rows": have,
                         "seconds": round(command, 4), "load_avg": load,
                         "settings": json.dumps({"runs_in_workspace": have, "repeat": args.repeat,
                                                 "ms_per_run": None if per_run is None else round(per_run, 4)})})
    print(f"recorded in {append_results(rows)}")


if __name__ == "__main__":
    main()
