"""The ``dcaudit`` command line: it parses options, calls the Python API (dcaudit.api) and prints.

Settings come from DCAUDIT_* variables; flags override them. No SQL and no spec building lives here:
the API builds the spec from the same config objects a spec file or a notebook uses (dcaudit.defaults).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

import dcaudit
from dcaudit import defaults
from dcaudit.cli_common import ENGINE as _ENGINE
from dcaudit.cli_common import GATES as _GATES
from dcaudit.cli_common import NO_REPORT as _NO_REPORT
from dcaudit.cli_common import apply_gates as _apply_gates
from dcaudit.cli_common import check_gates as _check_gates
from dcaudit.cli_common import one_output
from dcaudit.cli_tables import COMMANDS
from dcaudit.config import Settings, load_settings
from dcaudit.errors import DcauditError, RunInterrupted, RunLockedError, SpecError, one_line

if TYPE_CHECKING:
    from dcaudit.pipelines.batch import Outcome

EPILOG = """\b
Concepts: a *fiber* is all candidates with the same (discretised) evidence; a *claim* is the
deployment action as a boolean expression; a candidate is *certified* when its fiber is pure
(and has at least --min-support members), *ambiguous* when its fiber is mixed, *excluded*
(with a reason) when its evidence is missing, NaN or infinite or its claim is undefined.
Results are Parquet under $DCAUDIT_HOME/runs/<run_id>/ and views in $DCAUDIT_HOME/catalog.duckdb.
Python: import dcaudit; dcaudit.audit(frame_or_path, evidence=[...], claim="...").
"""

class _Group(click.Group):
    """Every error is one line and an exit status; never a traceback (DCAUDIT_DEBUG=1 shows one)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _refuse_repeated_options(self, args, ctx, until_argument=True)   # dcaudit --home a --home b …
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not isinstance(command, click.Group):
            _refuse_repeated_options(command, rest, click.Context(command, info_name=name, parent=ctx))
        return name, command, rest

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except DcauditError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except RunInterrupted as exc:  # SIGTERM / SIGINT during a run, already recorded as failed
            click.secho(f"interrupted: {exc}", fg="red", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.secho("interrupted", fg="red", err=True)
            sys.exit(130)
        except BrokenPipeError:  # the reader went away (dcaudit query … | head): nothing left to say
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            sys.exit(141)  # 128 + SIGPIPE, as a shell tool killed by the closed pipe
        except Exception as exc:  # a bug or an environment failure: one line, and how to see more
            if os.environ.get("DCAUDIT_DEBUG"):
                raise
            click.secho(f"error: {type(exc).__name__}: {one_line(exc)} (internal error; DCAUDIT_DEBUG=1 shows the "
                        "traceback)", fg="red", err=True)
            sys.exit(1)


def _refuse_repeated_options(command: click.Command, args: list[str], ctx: click.Context, *,
                             until_argument: bool = False) -> None:
    """A usage error for an option given twice that takes one value (click keeps the last, so
    ``--claim "y = 1" --claim "y = 0"`` would audit y = 0 without a word), or a flag and its opposite.
    Words are read as click reads them: an option's value is skipped (``--evidence --claim`` gives
    ``--claim`` as the evidence). ``until_argument``: stop at the first argument (a group's command name)."""
    options = {opt: param for param in command.params if isinstance(param, click.Option)
               for opt in (*param.opts, *param.secondary_opts)}
    seen: dict[str, str] = {}
    words = iter(args)
    for word in words:
        if word == "--":   # the rest are arguments
            break
        param = options.get(word.split("=", 1)[0]) if word.startswith("-") else None
        if param is None:
            if until_argument and not word.startswith("-"):
                break
            continue
        if not param.is_flag and "=" not in word:
            for _ in range(max(param.nargs, 1)):   # its value, whatever it looks like
                next(words, None)
        if param.multiple or param.count:
            continue
        opt = word.split("=", 1)[0]
        if param.name in seen:
            twice = f"{opt} is given twice" if seen[param.name] == opt else f"{seen[param.name]} and {opt} are one option"
            raise click.UsageError(f"{twice}; give it once (the last would win without a word)", ctx)
        seen[str(param.name)] = opt


@click.group(cls=_Group, epilog=EPILOG)
@click.option("--home", type=click.Path(path_type=Path), help="Workspace (default $DCAUDIT_HOME or ./workspace).")
@click.option("--mirror", type=click.Path(path_type=Path), help="Offline mirror laid out like shared/data "
              "(default $DCAUDIT_MIRROR).")
@click.option("--memory-limit", help=f"DuckDB memory limit, e.g. 8GB, at most {defaults.MAX_MEMORY_LIMIT_TEXT} "
              f"(default $DCAUDIT_MEMORY_LIMIT or {defaults.MEMORY_LIMIT}).")
@click.option("--threads", type=int, help=f"DuckDB threads, 1 to {defaults.MAX_THREADS} (default $DCAUDIT_THREADS "
              "or all cores).")
@click.version_option(version=dcaudit.__version__, package_name="dcaudit")  # no metadata lookup (0.13 s)
@click.pass_context
def cli(ctx: click.Context, home: Path | None, mirror: Path | None, memory_limit: str | None,
        threads: int | None) -> None:
    """dcaudit — does benchmark evidence decide the deployment action?

    \b
    Examples:
      dcaudit run tox21                      the built-in Tox21 audit
      dcaudit audit preds.csv --evidence pred --fiber-rule quantile:20 --claim "gap > 1.0"
      dcaudit query "select claim, certified_fraction from summary"
    """
    ctx.obj = load_settings().with_overrides(
        home=home.resolve() if home else None, mirror=mirror.resolve() if mirror else None,
        memory_limit=memory_limit, threads=threads)


EXIT_CODES = """\b
Exit status (for schedulers):
  0   every run succeeded (or reused an unchanged earlier result)
  1   an audit failed while running, or ran out of memory or disk (recorded as failed)
  2   bad input: an unknown or invalid spec (nothing recorded), a tampered or missing
      source file, data the run cannot use (recorded as failed)
  75  locked: another run of the spec (or another batch) is in progress; retry later
  130, 143  interrupted by SIGINT / SIGTERM (recorded as failed)
With several specs the most serious status wins (1, then 2, then 75); a spec whose source is
not available offline (e.g. matbench-discovery without the WBM summary) is reported as skipped
and does not fail a batch (run alone, it exits 2).
"""


@cli.command(epilog=EXIT_CODES)
@click.argument("spec", metavar="SPEC...", nargs=-1)
@click.option("--all", "run_all", is_flag=True, help="Run every built-in spec (dcaudit specs lists them); with "
              "SPECs too, those first and then the built-in ones not among them.")
@click.option("--force", is_flag=True, help="Recompute even when spec, inputs and code are unchanged.")
@click.option("--quiet", is_flag=True, callback=one_output, help="Print only the run id(s); no progress.")
@click.option("--json", "as_json", is_flag=True, callback=one_output, help="JSON on stdout: run_id, status, package_dir, summary rows "
              "(one object; a list with --all or several specs).")
@_ENGINE
@_NO_REPORT
@_GATES
@click.pass_obj
def run(settings: Settings, spec: tuple[str, ...], run_all: bool, force: bool, quiet: bool, as_json: bool,
        engine: str, no_report: bool, fail_if: tuple[str, ...]) -> None:
    """Run pipeline SPECs: built-in names (tox21, …) or paths to .toml specs.

    The evidence package (Parquet tables, manifest.json, report.html) lands in
    $DCAUDIT_HOME/runs/<run_id>/ and the run is recorded in the catalog. An unchanged rerun (same spec,
    input sha256s, dcaudit version and code) reuses the earlier results and says so; --force recomputes.
    With --all or several specs each one runs in turn, a failing one does not stop the others, and a
    batch lock keeps two scheduled batches from overlapping.
    """
    from dcaudit.pipelines.batch import batch_exit_code, run_batch, run_one

    names = list(spec) + ([s for s in _builtin() if s not in spec] if run_all else [])
    if not names:
        raise click.UsageError("give a SPEC (dcaudit specs lists the built-in ones) or --all")
    _check_gates(fail_if)

    def gated(o: Outcome) -> int:
        return o.exit_code or (_apply_gates(o.result.arrow("summary"), fail_if) if o.result is not None else 0)

    if not (run_all or len(names) > 1):
        outcome = run_one(settings, names[0], force=force, quiet=quiet or as_json, engine=engine,
                          report=not no_report)
        _show_outcome(outcome, quiet=quiet, as_json=as_json)
        sys.exit(gated(outcome))
    try:
        outcomes = run_batch(settings, names, force=force, quiet=quiet or as_json, engine=engine,
                             report=not no_report,
                             each=None if as_json else lambda o: _show_outcome(o, quiet=quiet, as_json=False))
    except RunLockedError as exc:  # another batch holds the lock: with --json, still one JSON answer per spec
        if not as_json:
            raise
        from dcaudit.pipelines.batch import Outcome as Locked

        click.echo(json.dumps([Locked(n, "locked", exc.exit_code, error=str(exc)).as_dict() for n in names],
                              default=str, indent=1))
        sys.exit(exc.exit_code)
    code = batch_exit_code(outcomes) or max((gated(o) for o in outcomes if o.exit_code == 0), default=0)
    if as_json:
        click.echo(json.dumps([o.as_dict() for o in outcomes], default=str, indent=1))
    elif not quiet:
        from dcaudit.reports.console import print_rows
        from dcaudit.storage import arrow_table

        keys = ("spec", "status", "run_id", "seconds", "error")
        print_rows(arrow_table({k: [o.as_dict()[k] for o in outcomes] for k in keys},
                               {"seconds": "float64", "error": "string", "run_id": "string"}))
        skipped = sum(o.status == "skipped" for o in outcomes)
        click.echo(f"{sum(o.exit_code == 0 for o in outcomes)} of {len(outcomes)} spec(s) ok"
                   + (f", {skipped} skipped (source not available offline)" if skipped else "")
                   + f"; exit status {code}")
    sys.exit(code)


def _builtin() -> list[str]:
    from dcaudit.spec import builtin_specs

    return builtin_specs()


def _show_outcome(outcome: Outcome, *, quiet: bool, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(outcome.as_dict(), default=str, indent=1))
        return
    # a spec's own errors already start with its name (the spec file): not twice
    error = str(outcome.error or "")
    said = error if error.startswith(f"{outcome.spec}:") else f"{outcome.spec}: {error}"
    if outcome.status == "skipped":
        click.secho(f"skipped: {said}", fg="yellow", err=True)
        return
    if outcome.exit_code != 0:
        click.secho(f"error: {said}", fg="red", err=True)
        return
    if quiet:
        click.echo(outcome.run_id)
        return
    from dcaudit.cli_common import print_result

    result = outcome.result
    if result is not None and "summary" in result.tables:
        print_result(result, f"{outcome.spec}: {outcome.run_id}", with_replay=True)
    if outcome.reused_from:
        click.echo(f"run {outcome.run_id}: unchanged, reused run {outcome.reused_from} -> {outcome.package_dir}")
    else:
        click.echo(f"run {outcome.run_id} succeeded in {outcome.seconds:.1f}s -> {outcome.package_dir}")
        if Path(f"{outcome.package_dir}/report.html").is_file():
            click.echo(f"report: {outcome.package_dir}/report.html")
        click.echo(f"query it: dcaudit query \"select * from summary where run_id = '{outcome.run_id}'\"")


@cli.command()
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1, max=2**31 - 1),
              help="How many recent runs to list.")
@click.option("--diff", "diff_spec", metavar="SPEC", help="Compare the latest two succeeded runs of SPEC: what "
              "moved in the certified and ambiguous fractions, and whether data or code changed.")
@click.option("--json", "as_json", is_flag=True, callback=one_output, help="JSON instead of a table.")
@click.option("--quiet", is_flag=True, callback=one_output, help="Only the run ids, one per line.")
@click.pass_obj
def runs(settings: Settings, limit: int, diff_spec: str | None, as_json: bool, quiet: bool) -> None:
    """List recent runs (id, spec, status, time) from the catalog, or --diff the latest two of a spec.

    Status: running, succeeded, failed (with the error; killed runs are marked failed by the next run
    of their spec) or reused (an unchanged rerun; reused_from names the run whose package it shares).
    """
    from dcaudit.catalog import Catalog
    from dcaudit.reports.console import diff_counts, diff_table, print_rows

    catalog = Catalog(settings)
    if diff_spec is None:
        table = catalog.runs(limit)
        if quiet:
            click.echo("\n".join(table.column("run_id").to_pylist()))
            return
        print_rows(table, as_json=as_json)
        return
    diff = catalog.diff(diff_spec)
    if as_json:
        click.echo(json.dumps(diff.as_dict(), default=str, indent=1))
        return
    data = f"changed ({', '.join(diff.inputs_changed)})" if diff.inputs_changed else "unchanged (same input sha256s)"
    code = f"changed ({', '.join(diff.code_changed)})" if diff.code_changed else "unchanged"
    click.echo(f"{diff_spec}: {diff.before.run_id} -> {diff.after.run_id}\n  data: {data}\n  code/spec: {code}")
    if quiet:
        return
    print_rows(diff_table(diff.audits))
    moved, new, gone, same = diff_counts(diff.audits)
    click.echo(f"{moved} audit row(s) moved, {new} new, {gone} gone, {same} unchanged")


@cli.command()
@click.argument("sql")
@click.option("--json", "as_json", is_flag=True, callback=one_output, help="JSON rows instead of a table (NaN and ±inf as the strings "
              "\"NaN\", \"Infinity\", \"-Infinity\": strict JSON; decimals as numbers with their exact "
              "digits; blobs and intervals as DuckDB's text for them).")
@click.option("--quiet", is_flag=True, callback=one_output, help="Tab-separated rows without a header (for shell scripts); a tab, newline "
              "or backslash inside a value is written \\t, \\n, \\\\, and NULL as \\N.")
@click.pass_obj
def query(settings: Settings, sql: str, as_json: bool, quiet: bool) -> None:
    """Run SQL against the catalog (views: runs, summary, fibers, candidates, replay, completion, …).
    With several statements separated by ;, the last one's rows are printed."""
    from dcaudit.catalog import Catalog
    from dcaudit.reports.console import print_rows

    if not sql.replace(";", " ").strip():
        raise click.UsageError("the SQL is empty: give a statement, e.g. 'SELECT * FROM summary'")
    print_rows(Catalog(settings).query(sql), as_json=as_json, tsv=quiet)


@cli.command()
@click.argument("run", metavar="RUN")
@click.option("--out", type=click.Path(path_type=Path), help="Write the HTML here instead of <package>/report.html.")
@click.option("--compare", "compare_to", metavar="RUN_B",
              help="Instead, write what moved from RUN to RUN_B (per audit, fibers that changed status, replay) "
                   "to --out or <package>/compare-<RUN_B run id>.html.")
@click.pass_obj
def report(settings: Settings, run: str, out: Path | None, compare_to: str | None) -> None:
    """Re-render report.html for RUN (a run id, a spec name for its latest run, or a package directory).

    The report is self-contained (inline SVG charts and one inline script, nothing loaded from anywhere)
    and opens offline. A damaged package file is named (its sha256 differs from the one manifest.json
    recorded) and the exit status is 2. A spec name whose latest run failed, is running or has a damaged
    package is refused the same way (exit 2), with the run id of the previous run that has a package:
    give that run id to report it. Prints the path of the report.
    """
    from dcaudit.catalog import Catalog
    from dcaudit.reports.html import write_report

    catalog = Catalog(settings)   # built on first use: a package directory needs none
    run_dir = catalog.package_dir(run)
    if out is not None:
        from dcaudit.storage import check_out_file

        check_out_file(out, settings.home, may_replace=lambda n: n == "report.html" or n.startswith("compare-"))
        out.expanduser().parent.mkdir(parents=True, exist_ok=True)
    if compare_to:
        from dcaudit.reports.compare import write_comparison

        try:
            other = catalog.package_dir(compare_to)
        except DcauditError as exc:   # which of the two names it is about
            raise SpecError(f"--compare {compare_to}: {exc}") from None
        click.echo(str(write_comparison(run_dir, other, out or run_dir / f"compare-{other.name}.html")))
        return
    click.echo(str(write_report(run_dir, out)))


@cli.command()
@click.argument("run", metavar="RUN")
@click.option("--format", "fmt", type=click.Choice(["benchcert"]), default="benchcert", show_default=True,
              help="benchcert: summary.json, fiber_table.csv, ambiguous_cases.csv, report.html.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Directory to write the files to.")
@click.option("--force", is_flag=True, help="Replace export files already in --out (never an evidence package's).")
@click.pass_obj
def export(settings: Settings, run: str, fmt: str, out: Path, force: bool) -> None:
    """Export RUN (a run id, a spec name for its latest run, or a package directory) for another tool."""
    from dcaudit.catalog import Catalog
    from dcaudit.reports.export_benchcert import FILES, export_benchcert
    from dcaudit.storage import check_out_file

    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {out} is a file; give a directory for the exported files")
    for name in FILES:   # each file the export writes: never into a package or the workspace's own places
        check_out_file(out / name, settings.home, may_replace=lambda n: False)
    there = [name for name in FILES if (out / name).exists()]
    if there and not force:
        raise SpecError(f"--out {out} already holds {', '.join(there)}; pass --force to replace them")
    for written in export_benchcert(Catalog(settings).package_dir(run), out):
        click.echo(str(written))


@cli.command("specs")
def specs() -> None:
    """List the built-in pipeline specs."""
    from dcaudit.spec import load_spec

    for name in _builtin():
        click.echo(f"{name:12s} {load_spec(name).description}")


@cli.command()
@click.argument("experiment", type=click.Choice(["conformal", "leaderboard", "acquisition"]))
@click.option("--seeds", type=int, help="Seeds per setting (conformal, leaderboard; paper: 50) "
              f"or random-order trials (acquisition; paper: 200), 1 to {defaults.MAX_SEEDS}. Default: the paper's.")
@click.option("--geometries", type=int, help="acquisition only: also re-draw the geometry this "
              f"many times (0 to {defaults.MAX_SEEDS}) and report the spread of the curves (not in the paper).")
@click.option("--quiet", is_flag=True, callback=one_output, help="Print only the run id.")
@click.pass_obj
def simulate(settings: Settings, experiment: str, seeds: int | None, geometries: int | None, quiet: bool) -> None:
    """Controlled linear response-space experiments (no data needed; docs/controlled.md).

    \b
    conformal    benchmark-calibrated conformal coverage vs its transfer to the deployment
                 channel vs the response-rank interval ŷ ± 2g   -> metrics.parquet
    leaderboard  five models of span rank 3…8: the best-MAE model certifies least of its top 100
                 (structured and equal-noise settings)        -> choice.parquet, metrics.parquet
    acquisition  residual-greedy vs uncertainty / diversity / benchmark-aligned / random probe
                 choice                                        -> completion.parquet, metrics.parquet
    """
    from dcaudit.pipelines.simulate import run_simulation
    from dcaudit.reports.console import print_notes, print_rows, simulation_table

    result = run_simulation(settings, experiment, seeds, geometries)
    if quiet:
        click.echo(result.run_id)
        return
    print_rows(simulation_table(result.tables, experiment))
    print_notes(result.notes)
    click.echo(f"run {result.run_id} succeeded in {result.seconds:.1f}s -> {result.run_dir}")


for _command in COMMANDS:
    cli.add_command(_command)


from dcaudit.cli_catalog import catalog as _catalog_group  # noqa: E402, I001
cli.add_command(_catalog_group)


def main() -> None:
    """The console script. Once the command is done — output written, files closed, ``atexit`` handlers
    run — the process ends with ``os._exit``: tearing the interpreter down (joining DuckDB's and Arrow's
    thread pools, freeing every module's objects) takes 0.1–0.5 s after the work and changes nothing a
    user can see. ``DCAUDIT_DEBUG=1`` keeps the normal exit (for tools that hook interpreter shutdown), and so
    does a process that loaded joblib's process pools."""
    from dcaudit.launch import interrupted

    try:
        # not standalone: click would turn a Ctrl-C while it parses the command line into "Aborted!", status 1
        returned = cli.main(prog_name="dcaudit", standalone_mode=False)
        code = returned if isinstance(returned, int) else 0  # an int only from ctx.exit(code): --help, --version
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            interrupted()
        click.echo("Aborted!", err=True)  # end of input at a prompt
        code = 1
    except click.ClickException as exc:  # a usage error: click's message and status 2
        exc.show()
        code = exc.exit_code
    except SystemExit as exc:
        code = _exit_status(exc.code)
    except KeyboardInterrupt:  # outside a command
        interrupted()
    try:
        _finish(code)
    except KeyboardInterrupt:  # while waiting for threads or running exit handlers: the work is done
        interrupted()


def _finish(code: int) -> None:
    """End the process with ``code`` once output is flushed (see :func:`main`)."""
    # joblib's process pools (loky: the vision and matbench models) shut down from interpreter teardown,
    # which the fast exit skips: the process would hang after a finished run. Those commands take seconds
    # to minutes, so they keep the normal exit.
    if os.environ.get("DCAUDIT_DEBUG") or any(m in sys.modules for m in ("joblib", "loky")):
        sys.exit(code)
    import atexit
    import signal
    import threading

    from dcaudit.launch import interrupted

    # The command is done and its output written: Ctrl-C from here (a thread still finishing, an exit
    # handler) ends the process at once as interrupted, not with "Exception ignored in atexit callback"
    signal.signal(signal.SIGINT, lambda signum, frame: interrupted())
    for thread in threading.enumerate():  # as the interpreter does before atexit: wait for non-daemon threads
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (dcaudit … | head): nothing to write to
            stream.flush()
    os._exit(code)


def _exit_status(code: object) -> int:
    """What ``sys.exit(code)`` would make the status: None 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    main()
