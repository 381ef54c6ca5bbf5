"""One dcaudit command, two installations, run alternately: did a change make the command faster?

On a shared machine the speed drifts by 1.5x within an hour, so timing the old code in one sitting and the new
in another compares hours, not code. This script runs the same command with two ``dcaudit`` executables in
turn (old, new, old, new, ...), each in a fresh process with a workspace of its own, after one unrecorded
warm-up round, and prints the median and minimum wall time of each. The old one is usually another checkout
with its own venv:

    git worktree add /tmp/old <commit> && cd /tmp/old && python3 -m venv .venv && \\
        .venv/bin/pip install -q uv && .venv/bin/uv pip install -q --python .venv/bin/python -r requirements.lock && \\
        .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .
    .venv/bin/python bench/ab.py --old /tmp/old/.venv/bin/dcaudit --rounds 8 -- \\
        audit data.parquet --id id --evidence e0,e1 --claim "y = 1" --force --no-report

``--out DIR`` in the command is given a suffix per side (``DIR_old``, ``DIR_new``), so the two packages can be
compared afterwards. Each round's times are appended to bench/results/latest.parquet (benchmark ``ab:`` plus
``--label``, engine ``old`` / ``new``) unless ``--no-record``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _argv(command: list[str], side: str) -> list[str]:
    out = list(command)
    for i, arg in enumerate(out[:-1]):
        if arg == "--out":
            out[i + 1] = f"{out[i + 1]}_{side}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, help="the other installation's dcaudit executable")
    parser.add_argument("--new", default=str(Path(sys.executable).with_name("dcaudit")),
                        help="this installation's dcaudit (default: the one beside this Python)")
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds (each runs old, then new)")
    parser.add_argument("--label", help="what to call the comparison in the results table (default: the command)")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the dcaudit command and its options")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --, e.g. -- audit data.csv --id id --evidence a,b --claim 'y = 1'")
    for option, exe in (("--old", args.old), ("--new", args.new)):
        if not (Path(exe).is_file() and os.access(exe, os.X_OK)):
            raise SystemExit(f"{option} {exe}: not an executable file (give an installation's .venv/bin/dcaudit)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times: dict[str, list[float]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds + 1):   # round 0 warms byte-code and the page cache
            for side, exe in (("old", args.old), ("new", args.new)):
                side_env = dict(env, DCAUDIT_HOME=str(Path(tmp) / side))
                start = time.perf_counter()
                done = subprocess.run([exe, *_argv(command, side)], env=side_env, capture_output=True, text=True)
                seconds = time.perf_counter() - start
                if done.returncode != 0:
                    raise SystemExit(f"{side} ({exe}) exited {done.returncode}:\n{done.stderr[-2000:]}")
                if round_:
                    times[side].append(seconds)
    label = args.label or " ".join(command)[:80]
    for side, values in times.items():
        print(f"{side}: median {statistics.median(values):.3f} s, min {min(values):.3f} s  "
              f"({' '.join(f'{v:.2f}' for v in values)})")
    old, new = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"{label}: new/old median {new / old:.2f}")
    if not args.no_record:
        sys.path.insert(0, str(HERE))
        from results_table import append_results

        load = os.getloadavg()[0]
        rows = [{"benchmark": f"ab:{label}", "engine": side, "n_rows": None, "seconds": statistics.median(values),
                 "load_avg": load, "settings": json.dumps({"rounds": len(values), "min_seconds": min(values),
                                                           "old": args.old, "new": args.new})}
                for side, values in times.items()]
        print(f"appended {len(rows)} rows to {append_results(rows)}")


if __name__ == "__main__":
    main()
