"""`dcaudit audit` on a table a user brings: the package it writes and the errors it gives."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from dcaudit.cli import cli


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}


@pytest.fixture
def bench_csv(tmp_path: Path) -> Path:
    path = tmp_path / "my-benchmark.csv"
    pl.DataFrame({
        "compound": [f"c{i}" for i in range(8)],
        "score bin": [0, 0, 0, 1, 1, 2, 2, None],
        "pred": [0.1, 0.2, 0.3, 0.5, 0.55, 0.9, 0.95, 0.7],
        "active": [0, 0, 0, 1, 0, 1, 1, 1],
    }).write_csv(path)
    return path


def invoke(env: dict[str, str], *args: str):  # noqa: ANN201
    return CliRunner().invoke(cli, list(args), env=env)


def test_audit_writes_the_package_to_out(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = invoke(env, "audit", str(bench_csv), "--id", "compound", "--evidence", "score bin",
                    "--claim", "active = 1", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == {"summary.parquet", "fibers.parquet", "candidates.parquet",
                                               "manifest.json", "report.html"}
    s = pq.read_table(out / "summary.parquet").to_pylist()[0]
    assert (s["n_candidates"], s["n_excluded"], s["certified_false"], s["certified_true"], s["ambiguous"]) == \
        (7, 1, 3, 2, 2)
    assert s["source"] == "my-benchmark.csv"
    cands = pq.read_table(out / "candidates.parquet").to_pylist()
    assert {c["candidate_id"]: c["status"] for c in cands}["c7"] == "excluded"


def test_audit_quantile_rule_and_row_ids_on_gzip(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    gz = tmp_path / "b.csv.gz"
    gz.write_bytes(gzip.compress(bench_csv.read_bytes()))
    out = tmp_path / "q"
    result = invoke(env, "audit", str(gz), "--evidence", "pred", "--fiber-rule", "quantile:2",
                    "--claim", "active = 1", "--min-support", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    s = pq.read_table(out / "summary.parquet").to_pylist()[0]
    assert s["fiber_rule"] == "quantile:2" and s["n_fibers"] == 2 and s["n_candidates"] == 8
    ids = pq.read_table(out / "candidates.parquet").column("candidate_id").to_pylist()
    assert sorted(ids, key=int) == [str(i) for i in range(1, 9)]  # 1-based data rows when there is no --id


def test_existing_out_needs_force_and_survives_a_failed_run(env: dict[str, str], bench_csv: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "report"
    args = ["audit", str(bench_csv), "--id", "compound", "--evidence", "score bin", "--claim", "active = 1",
            "--out", str(out)]
    assert invoke(env, *args).exit_code == 0
    before = (out / "summary.parquet").read_bytes()
    again = invoke(env, *args)
    assert again.exit_code == 2 and "--force" in again.output
    bad = invoke(env, *args[:-4], "--claim", "nope = 1", "--out", str(out), "--force")
    assert bad.exit_code == 2
    assert (out / "summary.parquet").read_bytes() == before
    assert invoke(env, *args, "--force").exit_code == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--evidence", "score bin", "--claim", "active = 1"], "file not found"),
        (["--evidence", "nope", "--claim", "active = 1"], "available columns"),
        (["--evidence", "score bin", "--claim", "1=1; DROP TABLE summary"], "unexpected character ';'"),
        (["--evidence", "score bin", "--claim", "activ = 1"], "did you mean 'active'"),
        (["--evidence", "score bin", "--claim", "active = 1", "--fiber-rule", "quantile:x"], "whole number"),
    ],
)
def test_bad_input_exits_2_with_a_message(env: dict[str, str], bench_csv: Path, args: list[str],
                                          message: str) -> None:
    target = bench_csv.with_name("absent.csv") if message == "file not found" else bench_csv
    result = invoke(env, "audit", str(target), *args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_empty_file_is_named(env: dict[str, str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    result = invoke(env, "audit", str(empty), "--evidence", "a", "--claim", "b = 1")
    assert result.exit_code == 2 and "empty.csv" in result.output and "empty" in result.output


def test_help_teaches_the_vocabulary() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0 and "fiber" in result.output and "certified" in result.output
    audit_help = CliRunner().invoke(cli, ["audit", "--help"])
    assert "quantile:K" in audit_help.output and "--min-support" in audit_help.output


def test_fail_if_gates_exit_1_and_bad_gates_exit_2(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    args = ["audit", str(bench_csv), "--id", "compound", "--evidence", "score bin", "--claim", "active = 1",
            "--quiet"]
    ok = invoke(env, *args, "--fail-if", "ambiguous_fraction > 0.5")
    assert ok.exit_code == 0, ok.output
    failed = invoke(env, *args, "--fail-if", "ambiguous_fraction > 0.2", "--fail-if", "n_candidates < 2")
    assert failed.exit_code == 1 and "ambiguous_fraction > 0.2" in failed.output
    bad = invoke(env, *args, "--fail-if", "ambiguous_fraction >")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_export_benchcert(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    assert invoke(env, "audit", str(bench_csv), "--id", "compound", "--evidence", "score bin", "--claim",
                  "active = 1", "--out", str(out)).exit_code == 0
    exported = invoke(env, "export", str(out), "--out", str(tmp_path / "bc"))
    assert exported.exit_code == 0, exported.output
    assert {p.name for p in (tmp_path / "bc").iterdir()} == {"summary.json", "fiber_table.csv",
                                                             "ambiguous_cases.csv", "report.html"}


def test_no_report_leaves_report_html_for_later(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "fast"
    result = invoke(env, "audit", str(bench_csv), "--id", "compound", "--evidence", "score bin", "--claim",
                    "active = 1", "--out", str(out), "--no-report")
    assert result.exit_code == 0, result.output
    assert not (out / "report.html").exists() and (out / "summary.parquet").is_file()
    rendered = invoke(env, "report", str(out))
    assert rendered.exit_code == 0 and (out / "report.html").is_file()


@pytest.mark.parametrize("command", ["audit", "audit+report", "audit+json", "replay", "complete"])
def test_whole_commands_import_neither_pandas_nor_polars(tmp_path: Path, command: str) -> None:
    """pyarrow imports pandas (~0.3 s of a command) when it converts Python or numpy values or reads
    pandas metadata, and polars costs ~0.3 s to import; the audit, replay and completion commands read the
    CSV, build, print and record their tables without either, and so does the default audit's report.html
    (``audit+report``: DuckDB queries and matplotlib charts). The console script ends with os._exit, so
    the modules are listed by an atexit handler (which main() runs first) and the exit status is checked."""
    import subprocess
    import sys

    csv = tmp_path / "t.csv"
    csv.write_text("id,a,b,p,y\n" + "".join(f"{i},{i % 2},{i % 3},{i % 7 % 2},{int(i % 5 == 0)}\n"
                                          for i in range(200)))
    name, _, variant = command.partition("+")
    report, as_json = variant == "report", variant == "json"   # --json printed the summary through polars
    extra = {"audit": [], "replay": ["--seeds", "3", "--min-support", "5"],
             "complete": ["--probes", "p", "--seeds", "2", "--min-support", "5"]}[name]
    args = [name, str(csv), "--id", "id", "--evidence", "a,b", "--claim", "y = 1", "--out", str(tmp_path / "p"),
            *([] if report else ["--no-report"]), *(["--json"] if as_json else []), *extra]
    code = ("import atexit, sys\nfrom dcaudit.cli import main\nsys.argv = ['dcaudit', *sys.argv[1:]]\n"
            "atexit.register(lambda: print('LOADED', [m for m in ('pandas', 'polars') if m in sys.modules], "
            "file=sys.stderr))\nmain()\n")
    env = {**os.environ, "DCAUDIT_HOME": str(tmp_path / "home")}
    env.pop("DCAUDIT_DEBUG", None)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == "LOADED []"
    assert (tmp_path / "p" / "summary.parquet").is_file()
    assert (tmp_path / "p" / "report.html").is_file() == bool(report)


def test_a_quantile_audit_without_nulls_does_not_load_numpy_ma(tmp_path: Path) -> None:
    """numpy loads numpy.ma lazily (~12 ms) and DuckDB loads it only for a result holding NULLs: the quantile
    audit reads its fetched columns' NULLs without it (arrays.fetched_nulls), so a file without NULLs never
    loads it."""
    import subprocess
    import sys

    csv = tmp_path / "q.csv"
    csv.write_text("id,x,y\n" + "".join(f"{i},{(i * 37) % 101 / 7},{int(i % 3 == 0)}\n" for i in range(300)))
    code = ("import atexit, sys\nfrom dcaudit.cli import main\nsys.argv = ['dcaudit', *sys.argv[1:]]\n"
            "atexit.register(lambda: print('LOADED', 'numpy.ma' in sys.modules, file=sys.stderr))\nmain()\n")
    env = {**os.environ, "DCAUDIT_HOME": str(tmp_path / "home")}
    env.pop("DCAUDIT_DEBUG", None)
    out = subprocess.run([sys.executable, "-c", code, "audit", str(csv), "--id", "id", "--evidence", "x",
                          "--fiber-rule", "quantile:4", "--claim", "y = 1", "--out", str(tmp_path / "p"), "--no-report"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == "LOADED False"


@pytest.mark.parametrize("as_json", [False, True])
def test_the_main_job_on_cached_tables_imports_neither_pandas_nor_polars(tox21_settings, tmp_path: Path,  # noqa: ANN001
                                                                          as_json: bool) -> None:
    """``dcaudit run tox21`` once its tables are normalised (every scheduled run): the connector, the label-noise
    split, the replay's metrics and the findings line build their tables without pandas or polars (and with
    ``--json`` the summary rows, which went through polars)."""
    import shutil
    import subprocess
    import sys

    from dcaudit.connectors import get_connector

    get_connector("tox21").prepare(tox21_settings)
    home = tmp_path / "home"
    shutil.copytree(tox21_settings.tables_dir, home / "tables")
    code = ("import atexit, sys\nfrom dcaudit.cli import main\nsys.argv = ['dcaudit', *sys.argv[1:]]\n"
            "atexit.register(lambda: print('LOADED', [m for m in ('pandas', 'polars') if m in sys.modules], "
            "file=sys.stderr))\nmain()\n")
    env = {**os.environ, "DCAUDIT_HOME": str(home), "DCAUDIT_OFFLINE": "1"}
    env.pop("DCAUDIT_DEBUG", None)
    out = subprocess.run([sys.executable, "-c", code, "run", "tox21", "--no-report", *(["--json"] if as_json else [])],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == "LOADED []"


def test_console_script_exit_status_and_output(tmp_path: Path) -> None:
    """main() ends the process with os._exit: the status of a failing command (2 for bad input) and the
    whole of its output still reach the caller."""
    import subprocess
    import sys

    env = {**os.environ, "DCAUDIT_HOME": str(tmp_path / "home")}
    env.pop("DCAUDIT_DEBUG", None)
    code = "import sys\nfrom dcaudit.cli import main\nsys.argv = ['dcaudit', *sys.argv[1:]]\nmain()\n"
    missing = subprocess.run([sys.executable, "-c", code, "audit", str(tmp_path / "nope.csv"), "--evidence", "a",
                              "--claim", "y = 1"], capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode == 2
    assert "nope.csv" in missing.stderr and "not found" in missing.stderr
    helped = subprocess.run([sys.executable, "-c", code, "audit", "--help"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert helped.returncode == 0 and "--evidence" in helped.stdout and helped.stdout.endswith("\n")



@pytest.mark.parametrize("where", ["import", "parse", "exit"])
def test_an_interrupt_while_loading_or_exiting_is_one_line_and_status_130(tmp_path: Path, where: str) -> None:
    """Ctrl-C while the console script imports the CLI (its first ~0.3 s), while click parses the command
    line (click alone would say "Aborted!", status 1), or after the command while the process waits for
    threads and runs its exit handlers: the line "interrupted" and status 130, as during a command, never a
    traceback. The interrupt is raised deterministically by the child itself."""
    import subprocess
    import sys

    import dcaudit

    env = {**os.environ, "DCAUDIT_HOME": str(tmp_path / "home")}
    env.pop("DCAUDIT_DEBUG", None)
    if where == "import":  # the KeyboardInterrupt arrives while dcaudit.cli_tables is being imported
        code = ("import sys, importlib.abc\n"
                "class Stop(importlib.abc.MetaPathFinder):\n"
                "    def find_spec(self, name, path=None, target=None):\n"
                "        if name == 'dcaudit.cli_tables':\n"
                "            raise KeyboardInterrupt\n"
                "sys.meta_path.insert(0, Stop())\n"
                "from dcaudit.launch import main\nsys.argv = ['dcaudit', '--version']\nmain()\n")
    elif where == "parse":  # ... while click parses the options of the command
        code = ("import sys, click\n"
                "def stop(self, ctx, args):\n    raise KeyboardInterrupt\n"
                "click.Command.parse_args = stop\n"
                "from dcaudit.launch import main\nsys.argv = ['dcaudit', 'runs', '--limit', '3']\nmain()\n")
    else:  # ... while the exit handlers run, after the command printed its output
        code = ("import atexit, os, signal, sys, time\nfrom dcaudit.launch import main\n"
                "def stop():\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(5)\n"
                "atexit.register(stop)\nsys.argv = ['dcaudit', '--version']\nmain()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 130, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == "interrupted"
    if where == "exit":
        assert dcaudit.__version__ in out.stdout  # the command's own output came first

# ---------------------------------------------------------------------------------------------------
# What a failed or mistaken command must never do: lose what the user had, crash on a damaged package,
# pass a CI gate it could not evaluate.

def _audit(env: dict[str, str], csv: Path, *extra: str):  # noqa: ANN202
    return invoke(env, "audit", str(csv), "--id", "compound", "--evidence", "score bin", "--claim", "active = 1",
                  "--no-report", *extra)


def test_out_never_replaces_the_workspace_or_what_it_keeps(env: dict[str, str], bench_csv: Path,
                                                           tmp_path: Path) -> None:
    home = Path(env["DCAUDIT_HOME"])
    first = _audit(env, bench_csv)
    assert first.exit_code == 0, first.output
    runs = sorted((home / "runs").iterdir())
    package = next(p for p in runs if not p.name.startswith("."))
    for out in (home, tmp_path, home / "runs", package, home / "records" / "x"):
        result = _audit(env, bench_csv, "--out", str(out), "--force")
        assert result.exit_code == 2, (out, result.output)
        assert "workspace" in result.output
    assert sorted((home / "runs").iterdir()) == runs and (home / "records").is_dir()
    assert invoke(env, "runs").exit_code == 0


def test_report_out_never_overwrites_a_package_file(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    assert _audit(env, bench_csv).exit_code == 0
    package = next(p for p in (Path(env["DCAUDIT_HOME"]) / "runs").iterdir() if not p.name.startswith("."))
    before = (package / "summary.parquet").read_bytes()
    for target in (package / "summary.parquet", package / "manifest.json", tmp_path):
        result = invoke(env, "report", str(package), "--out", str(target))
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert (package / "summary.parquet").read_bytes() == before
    nested = tmp_path / "new" / "dir" / "r.html"  # a missing parent is made, as for --out packages
    assert invoke(env, "report", str(package), "--out", str(nested)).exit_code == 0 and nested.is_file()


@pytest.mark.parametrize("manifest", ['{"files": 5}', "[]"])
def test_a_manifest_of_the_wrong_shape_is_a_damaged_package_not_a_crash(env: dict[str, str], bench_csv: Path,
                                                                        manifest: str) -> None:
    assert _audit(env, bench_csv).exit_code == 0
    package = next(p for p in (Path(env["DCAUDIT_HOME"]) / "runs").iterdir() if not p.name.startswith("."))
    (package / "manifest.json").write_text(manifest)
    listed = invoke(env, "runs")
    assert listed.exit_code == 0 and "internal error" not in listed.output, listed.output
    checked = invoke(env, "catalog", "check")
    assert "manifest.json" in checked.output and "internal error" not in checked.output, checked.output


def test_a_gate_that_cannot_be_evaluated_fails(env: dict[str, str], tmp_path: Path) -> None:
    f = tmp_path / "allmissing.csv"
    f.write_text("compound,score bin,active\na,,1\nb,,0\n")
    result = _audit(env, f, "--fail-if", "certified_fraction < 0.5")
    assert result.exit_code == 1 and "is undefined for audit 'audit'" in result.output, result.output


def test_run_names_spec_mistakes_in_one_line(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    spec = tmp_path / "t.toml"
    base = f'name = "t"\n[source]\npath = "{bench_csv}"\nid = "compound"\n[[audits]]\nclaim = "active = 1"\n' \
           'evidence = ["score bin"]\n'
    for extra, needle in [('table = "nosuch"\n', "table = 'nosuch'"),
                          ('[completion]\nprobes = ["pred"]\nclaim = 5\n', "claim = 5"),
                          ('[completion]\nprobes = ["pred"]\nseeds = 100001\n', "seeds must be from 1 to 100000"),
                          ('[replay]\nseeds = 2.5\n', "seeds must be an integer, got 2.5")]:
        spec.write_text(base + extra)
        result = invoke(env, "run", str(spec), "--no-report")
        assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output, result.output
    spec.write_bytes(b"\xff\xfe")
    result = invoke(env, "run", str(spec))
    assert result.exit_code == 2 and "not UTF-8" in result.output, result.output


def test_source_keys_of_a_path_spec_are_checked(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    tail = '[[audits]]\nclaim = "active = 1"\nevidence = ["score bin"]\n'
    for source, needle in [(f'path = "{bench_csv}"\nid = "compound"\nduplicate = "keep"\n', "did you mean 'duplicates'"),
                           (f'path = "{bench_csv}"\nconnector = "tox21"\n', "both connector and path"),
                           (f'path = "{bench_csv}"\n', "a spec without [source] id reads the ids from 'candidate_id'")]:
        spec.write_text(f'name = "s"\n[source]\n{source}{tail}')
        result = invoke(env, "run", str(spec), "--no-report")
        assert result.exit_code == 2 and needle in result.output, result.output
        assert result.output.count("s.toml:") == 1, result.output  # the spec is named once


def test_runs_limit_is_a_positive_count(env: dict[str, str]) -> None:
    result = invoke(env, "runs", "--limit", "-1")
    assert result.exit_code == 2 and "--limit" in result.output


def test_a_probe_of_lists_is_ranked_not_cast(env: dict[str, str], tmp_path: Path) -> None:
    f = tmp_path / "odd.parquet"
    pl.DataFrame({"id": [1, 2, 3, 4], "lst": [[1], [2], [1], [2]], "e": [1, 0, 1, 1],
                  "y": [True, False, True, True]}).write_parquet(f)
    result = invoke(env, "complete", str(f), "--id", "id", "--evidence", "e", "--probes", "lst", "--claim", "y",
                    "--seeds", "2", "--no-report")
    assert result.exit_code == 0 and "recommended next probe: lst" in result.output, result.output


def test_report_of_a_failed_run_says_it_failed(env: dict[str, str], tmp_path: Path) -> None:
    f = tmp_path / "dup.csv"
    f.write_text("compound,score bin,active\nc1,1,1\nc1,1,0\n")
    assert _audit(env, f).exit_code == 2
    run_id = invoke(env, "query", "select run_id from runs", "--quiet").output.split()[0]
    result = invoke(env, "report", run_id)
    assert result.exit_code == 2 and "failed: InputError: 1 repeated candidate id" in result.output, result.output
    assert "no evidence package" in result.output and "damaged" not in result.output


def test_a_workspace_path_with_a_quote_works(bench_csv: Path, tmp_path: Path) -> None:
    env = {"DCAUDIT_HOME": str(tmp_path / "O'Brien; home"), "DCAUDIT_OFFLINE": "1"}
    result = _audit(env, bench_csv)
    assert result.exit_code == 0, result.output


def test_a_held_batch_lock_still_answers_json(env: dict[str, str]) -> None:
    import fcntl
    import json

    lock = Path(env["DCAUDIT_HOME"]) / "locks" / "batch.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = invoke(env, "run", "tox21", "jarvis", "--json")
    assert result.exit_code == 75
    answers = json.loads(result.stdout)
    assert [(a["spec"], a["status"]) for a in answers] == [("tox21", "locked"), ("jarvis", "locked")]


def test_a_closed_stderr_pipe_silences_the_console_without_ending_the_run() -> None:
    from dcaudit.progress import StderrConsole

    console = StderrConsole()
    console.on_broken_pipe()  # rich's default raises SystemExit: the run was recorded as failed
    assert console.quiet


@pytest.mark.parametrize("command", ["audit", "replay", "complete", "sensitivity"])
def test_a_min_support_beyond_any_count_names_the_option(env: dict[str, str], bench_csv: Path, command: str) -> None:
    """--min-support above 2^53 (a typo, not a count) is the option's usage error, not the Python API's wording
    (``dcaudit.audit(): audits[0]: ...``) that a command-line user never wrote."""
    extra = ["--probes", "pred"] if command == "complete" else []
    evidence = "pred" if command == "sensitivity" else "score bin"
    result = invoke(env, command, str(bench_csv), "--id", "compound", "--evidence", evidence, "--claim", "active = 1",
                    "--min-support", str(2**53 + 1), *extra)
    assert result.exit_code == 2
    assert "'--min-support'" in result.output and "audits[0]" not in result.output


def test_a_gate_that_could_never_hold_stops_before_the_run(env: dict[str, str], bench_csv: Path, tmp_path: Path) -> None:
    """--fail-if comparing a text column with a number is found when parsed: exit 2 and no run recorded
    (it was found on the summary after the run, which was then recorded as succeeded)."""
    result = invoke(env, "audit", str(bench_csv), "--id", "compound", "--evidence", "score bin", "--claim",
                    "active = 1", "--no-report", "--fail-if", "claim > 1")
    assert result.exit_code == 2 and "compares column 'claim' (text) with the literal '1'" in result.output
    home = tmp_path / "home"
    assert not (home / "records").exists() or not any((home / "records").iterdir())
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
