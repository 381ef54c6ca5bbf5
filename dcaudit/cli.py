"""The ``dcaudit`` command line. Settings come from DCAUDIT_* variables; flags override them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pyarrow as pa

from dcaudit.config import Settings, load_settings
from dcaudit.errors import DcauditError

EPILOG = """\b
Concepts: a *fiber* is all candidates with the same (discretised) evidence; a *claim* is the
deployment action as a boolean expression; a candidate is *certified* when its fiber is pure
(and has at least --min-support members), *ambiguous* when its fiber is mixed.
Results are Parquet under $DCAUDIT_HOME/runs/<run_id>/ and views in $DCAUDIT_HOME/catalog.duckdb.
"""


class _Group(click.Group):
    """Turns DcauditError into a one-line message and its exit code (no traceback)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except DcauditError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group, epilog=EPILOG)
@click.option("--home", type=click.Path(path_type=Path), help="Workspace (default $DCAUDIT_HOME or ./workspace).")
@click.option("--mirror", type=click.Path(path_type=Path), help="Offline mirror laid out like shared/data "
              "(default $DCAUDIT_MIRROR).")
@click.option("--memory-limit", help="DuckDB memory limit, e.g. 8GB (default $DCAUDIT_MEMORY_LIMIT or 8GB).")
@click.option("--threads", type=int, help="DuckDB threads (default: all cores).")
@click.version_option(package_name="dcaudit")
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
    settings = load_settings().with_overrides(
        home=home.resolve() if home else None, mirror=mirror.resolve() if mirror else None,
        memory_limit=memory_limit, threads=threads)
    ctx.obj = settings


def _compose(*decorators: Callable) -> Callable:
    """Apply click decorators in reading order (top first), so commands share one definition per option."""
    def apply(fn: Callable) -> Callable:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply


_FILE = click.argument("file", type=click.Path(path_type=Path))
_CLAIM = click.option("--claim", required=True,
                      help="Claim, e.g. '\"SR-p53\" = 1' or 'gap > 1.0'. Quote names with - or spaces.")
_ID = click.option("--id", "id_column", help="Candidate id column (default: a row number).")
_MISSING = click.option("--missing", type=click.Choice(["drop", "as-value"]), default="drop", show_default=True,
                        help="Missing evidence: drop (complete cases, reported as excluded) or a value of its own.")
_ENGINE = click.option("--engine", type=click.Choice(["duckdb", "spark"]), default="duckdb", show_default=True,
                       help="duckdb: this machine (spills to disk beyond --memory-limit); spark: local or cluster "
                            "Spark (needs dcaudit[spark]; see docs/scale.md).")
_SPLITS = _compose(
    click.option("--seeds", type=click.IntRange(min=1), default=100, show_default=True, help="Calibration/test splits."),
    click.option("--seed-offset", type=int, default=0, show_default=True,
                 help="First seed (seeds are offset … offset+S-1)."),
    click.option("--calibration-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.5,
                 show_default=True, help="Share of candidates in the calibration half (hash of id and seed)."),
)
_PACKAGE = _compose(
    click.option("--out", type=click.Path(path_type=Path), help="Write the package here instead of the workspace."),
    click.option("--force", is_flag=True,
                 help="Replace an existing --out directory (only once the new one is complete)."),
    click.option("--quiet", is_flag=True, help="Print only the output directory."),
)


def _evidence(help_text: str = "Evidence column(s), comma-separated.") -> Callable:
    return click.option("--evidence", required=True, help=help_text)


def _fiber_rule(help_text: str = "exact | quantile:K | width:W.") -> Callable:
    return click.option("--fiber-rule", default="exact", show_default=True, help=help_text)


def _print_table(table: pa.Table, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(table.to_pylist(), default=str, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    out = Table(show_lines=False)
    for name in table.column_names:
        out.add_column(name)
    for row in table.to_pylist():
        out.add_row(*["" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v)) for v in row.values()])
    Console(width=None if sys.stdout.isatty() else 160).print(out)  # logs: wide enough to read


EXIT_CODES = """\b
Exit status (for schedulers):
  0   every run succeeded (or reused an unchanged earlier result)
  1   an audit failed while running (the catalog records it as failed)
  2   bad input: an unknown or invalid spec, a tampered or missing source file
  75  locked: another run of the spec (or another batch) is in progress; retry later
With several specs the most serious status wins (1, then 2, then 75); a spec whose source is
not available offline (e.g. matbench-discovery without the WBM summary) is reported as skipped
and does not fail a batch (run alone, it exits 2).
"""


@cli.command(epilog=EXIT_CODES)
@click.argument("spec", metavar="SPEC...", nargs=-1)
@click.option("--all", "run_all", is_flag=True, help="Run every built-in spec (dcaudit specs lists them).")
@click.option("--force", is_flag=True, help="Recompute even when spec, inputs and code are unchanged.")
@click.option("--quiet", is_flag=True, help="Print only the run id(s); no progress.")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout: run_id, status, package_dir, summary rows "
              "(one object; a list with --all or several specs).")
@click.pass_obj
def run(settings: Settings, spec: tuple[str, ...], run_all: bool, force: bool, quiet: bool, as_json: bool) -> None:
    """Run pipeline SPECs: built-in names (tox21, …) or paths to .toml specs.

    The evidence package (Parquet tables, manifest.json, report.html) lands in
    $DCAUDIT_HOME/runs/<run_id>/ and the run is recorded in the catalog. An unchanged rerun (same spec,
    input sha256s, dcaudit version and code) reuses the earlier results and says so; --force recomputes.
    With --all or several specs each one runs in turn, a failing one does not stop the others, and a
    batch lock keeps two scheduled batches from overlapping.
    """
    from dcaudit.spec import builtin_specs

    names = list(spec) + ([s for s in builtin_specs() if s not in spec] if run_all else [])
    if not names:
        raise click.UsageError("give a SPEC (dcaudit specs lists the built-in ones) or --all")
    batch = run_all or len(names) > 1
    if not batch:
        outcome = _run_one(settings, names[0], force=force, quiet=quiet or as_json)
        _show_outcome(outcome, quiet=quiet, as_json=as_json)
        sys.exit(outcome["exit_code"])
    from dcaudit.catalog import file_lock

    with file_lock(settings.home / "locks" / "batch.lock", wait=0.0, what="a batch of runs (dcaudit run --all)"):
        outcomes = []
        for name in names:
            outcome = _run_one(settings, name, force=force, quiet=quiet or as_json)
            if not as_json:
                _show_outcome(outcome, quiet=quiet, as_json=False)
            outcomes.append(outcome)
    code = _batch_exit_code([o["exit_code"] for o in outcomes if o["status"] != "skipped"])
    if as_json:
        click.echo(json.dumps(outcomes, default=str, indent=1))
    elif not quiet:
        recap = pa.Table.from_pylist([{k: o[k] for k in ("spec", "status", "run_id", "seconds", "error")}
                                      for o in outcomes])
        _print_table(recap, as_json=False)
        skipped = sum(o["status"] == "skipped" for o in outcomes)
        click.echo(f"{sum(o['exit_code'] == 0 for o in outcomes)} of {len(outcomes)} spec(s) ok"
                   + (f", {skipped} skipped (source not available offline)" if skipped else "")
                   + f"; exit status {code}")
    sys.exit(code)


def _rows(table: pa.Table | None) -> list[dict]:
    if table is None:
        return []
    return table.drop([c for c in ("run_id",) if c in table.column_names]).to_pylist()


def _batch_exit_code(codes: list[int]) -> int:
    for code in (1, 2, 75):
        if code in codes:
            return code
    return 0


def _run_one(settings: Settings, name: str, *, force: bool, quiet: bool) -> dict:
    """Run one spec; never raises: the outcome says what happened and which exit code it maps to."""
    import traceback

    from dcaudit.errors import MissingSourceError, RunLockedError
    from dcaudit.pipelines.runner import run_spec
    from dcaudit.spec import load_spec

    outcome: dict = {"spec": name, "status": "failed", "exit_code": 1, "run_id": None, "package_dir": None,
                     "reused_from": None, "seconds": None, "error": None, "summary": [], "notes": []}
    try:
        result = run_spec(load_spec(name), settings, reuse=not force, quiet=quiet)
    except RunLockedError as exc:
        outcome.update(status="locked", exit_code=exc.exit_code, error=str(exc))
    except MissingSourceError as exc:
        outcome.update(status="skipped", exit_code=exc.exit_code, error=str(exc))
    except DcauditError as exc:
        outcome.update(status="invalid", exit_code=exc.exit_code, error=str(exc))
    except Exception as exc:  # a bug or an environment failure: the run is marked failed in the catalog
        outcome.update(error=f"{type(exc).__name__}: {exc}")
        traceback.print_exc(file=sys.stderr)
    else:
        summary = result.tables.get("summary")
        outcome.update(status="reused" if result.reused_from else "succeeded", exit_code=0, run_id=result.run_id,
                       package_dir=str(result.run_dir), reused_from=result.reused_from,
                       seconds=round(result.seconds, 3), notes=list(result.notes),
                       summary=_rows(summary))
        outcome["_result"] = result
    return outcome


def _show_outcome(outcome: dict, *, quiet: bool, as_json: bool) -> None:
    result = outcome.pop("_result", None)
    if as_json:
        click.echo(json.dumps(outcome, default=str, indent=1))
        return
    if outcome["status"] == "skipped":
        click.secho(f"skipped: {outcome['spec']}: {outcome['error']}", fg="yellow", err=True)
        return
    if outcome["exit_code"] != 0:
        click.secho(f"error: {outcome['spec']}: {outcome['error']}", fg="red", err=True)
        return
    if quiet:
        click.echo(outcome["run_id"])
        return
    from dcaudit.pipelines.runner import log_notes
    from dcaudit.reports.console import print_replay, print_summary

    if result is not None and "summary" in result.tables:
        print_summary(result.tables["summary"], f"{outcome['spec']}: {outcome['run_id']}")
        if "replay" in result.tables:
            print_replay(result.tables["replay"])
        log_notes(result)
    if outcome["reused_from"]:
        click.echo(f"run {outcome['run_id']}: unchanged, reused run {outcome['reused_from']} -> "
                   f"{outcome['package_dir']}")
    else:
        click.echo(f"run {outcome['run_id']} succeeded in {outcome['seconds']:.1f}s -> {outcome['package_dir']}")
        click.echo(f"report: {outcome['package_dir']}/report.html")
        click.echo(f"query it: dcaudit query \"select * from summary where run_id = '{outcome['run_id']}'\"")


@cli.command()
@_FILE
@_evidence()
@_CLAIM
@_ID
@_fiber_rule()
@_MISSING
@click.option("--min-support", type=int, default=1, show_default=True,
              help="Pure fibers smaller than this are 'unsupported' rather than certified.")
@_PACKAGE
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout: run_id, status, package_dir, summary rows.")
@_ENGINE
@click.pass_obj
def audit(settings: Settings, file: Path, evidence: str, claim: str, id_column: str | None, fiber_rule: str,
          missing: str, min_support: int, out: Path | None, force: bool, quiet: bool, as_json: bool,
          engine: str = "duckdb") -> None:
    """Audit any table FILE (CSV, CSV.gz or Parquet): does EVIDENCE decide CLAIM?

    \b
    Writes summary.parquet, fibers.parquet, candidates.parquet and manifest.json.
    Example:
      dcaudit audit tox21.csv --id mol_id --claim '"SR-p53" = 1' \\
        --evidence NR-AR,NR-AR-LBD,NR-AhR,NR-Aromatase,NR-ER,NR-ER-LBD,NR-PPAR-gamma
    """
    from dcaudit.pipelines.runner import log_notes
    from dcaudit.reports.console import print_summary

    result = _adhoc_run(settings, file, evidence, claim, id_column, fiber_rule, missing, min_support, out, force,
                        quiet=quiet or as_json, engine=engine)
    if as_json:
        click.echo(json.dumps({"run_id": result.run_id, "status": "succeeded", "package_dir": str(result.run_dir),
                               "summary": _rows(result.tables["summary"])},
                              default=str, indent=1))
        return
    if quiet:
        click.echo(str(result.run_dir))
        return
    print_summary(result.tables["summary"], f"{file.name}: {result.run_id}")
    log_notes(result)
    click.echo(f"evidence package -> {result.run_dir}")


def _adhoc_run(settings: Settings, file: Path, evidence: str, claim: str, id_column: str | None,
               fiber_rule: str, missing: str, min_support: int, out: Path | None, force: bool,
               extra_sections: dict | None = None, quiet: bool = False,
               engine: str = "duckdb"):  # noqa: ANN202 - RunResult
    from dcaudit.pipelines.runner import run_spec
    from dcaudit.spec import spec_from_dict

    raw = {
        "name": _adhoc_name(file),
        "source": {"path": str(file.resolve()), **({"id": id_column} if id_column else {"id": "__row"})},
        "audits": [{"id": "audit", "claim": claim, "evidence": evidence, "fiber_rule": fiber_rule,
                    "missing": missing, "min_support": min_support}],
        **(extra_sections or {}),
    }
    spec = spec_from_dict(raw, origin="command line")
    if out is not None and out.exists() and any(out.iterdir()) and not force:
        raise DcauditError(f"{out} exists and is not empty; pass --force to replace it "
                           "(the old package is kept until the new one is complete)")
    if engine == "spark":
        from dcaudit.audits.spark_engine import run_spec_spark

        return run_spec_spark(spec, settings, out_dir=out, replace_existing=force, quiet=quiet)
    return run_spec(spec, settings, out_dir=out, replace_existing=force, quiet=quiet)


def _adhoc_name(file: Path) -> str:
    name = file.name
    for suffix in (".csv.gz", ".parquet", ".csv", ".tsv", ".pq"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or name
    return name


@cli.command()
@click.option("--limit", default=20, show_default=True, help="How many recent runs to list.")
@click.option("--diff", "diff_spec", metavar="SPEC", help="Compare the latest two succeeded runs of SPEC: what "
              "moved in the certified and ambiguous fractions, and whether data or code changed.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.option("--quiet", is_flag=True, help="Only the run ids, one per line.")
@click.pass_obj
def runs(settings: Settings, limit: int, diff_spec: str | None, as_json: bool, quiet: bool) -> None:
    """List recent runs (id, spec, status, time) from the catalog, or --diff the latest two of a spec.

    Status: running, succeeded, failed (with the error; killed runs are marked failed by the next run
    of their spec) or reused (an unchanged rerun; reused_from names the run whose package it shares).
    """
    from dcaudit.catalog import Catalog

    catalog = Catalog(settings)
    if diff_spec is None:
        table = catalog.runs(limit)
        if quiet:
            click.echo("\n".join(table.column("run_id").to_pylist()))
            return
        _print_table(table, as_json)
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
    import duckdb

    con = duckdb.connect()
    con.register("d", diff.audits)
    keys = [c for c in ("audit_id", "model", "fiber_rule", "min_support") if c in diff.audits.column_names
            and diff.audits.column(c).null_count < diff.audits.num_rows]
    shown = con.sql(f"SELECT {', '.join(keys)}, round(100 * certified_before, 3) AS \"cert % before\", "
                    "round(100 * certified_after, 3) AS \"cert % after\", round(100 * certified_change, 3) AS "
                    "\"Δ cert pp\", round(100 * ambiguous_before, 3) AS \"amb % before\", round(100 * "
                    "ambiguous_after, 3) AS \"amb % after\", round(100 * ambiguous_change, 3) AS \"Δ amb pp\", "
                    "n_before, n_after FROM d").to_arrow_table()
    _print_table(shown, as_json=False)
    moved, new, gone = con.sql(
        "SELECT count(*) FILTER (abs(certified_change) > 1e-12 OR abs(ambiguous_change) > 1e-12), "
        "count(*) FILTER (n_before IS NULL), count(*) FILTER (n_after IS NULL) FROM d").fetchall()[0]
    click.echo(f"{moved} audit row(s) moved, {new} new, {gone} gone, "
               f"{diff.audits.num_rows - moved - new - gone} unchanged")


@cli.command()
@click.argument("sql")
@click.option("--json", "as_json", is_flag=True, help="JSON rows instead of a table.")
@click.option("--quiet", is_flag=True, help="Tab-separated rows without a header (for shell scripts).")
@click.pass_obj
def query(settings: Settings, sql: str, as_json: bool, quiet: bool) -> None:
    """Run SQL against the catalog (views: runs, summary, fibers, candidates, replay, completion, …)."""
    from dcaudit.catalog import Catalog

    table = Catalog(settings).query(sql)
    if quiet:
        for row in table.to_pylist():
            click.echo("\t".join("" if v is None else str(v) for v in row.values()))
        return
    _print_table(table, as_json)


@cli.command()
@click.argument("run", metavar="RUN")
@click.option("--out", type=click.Path(path_type=Path), help="Write the HTML here instead of <package>/report.html.")
@click.pass_obj
def report(settings: Settings, run: str, out: Path | None) -> None:
    """Re-render report.html for RUN (a run id, a spec name for its latest run, or a package directory).

    The report is self-contained (inline SVG, no scripts or external URLs) and opens offline. A damaged
    package file is named (its sha256 differs from the one manifest.json recorded) and the exit status is 2.
    Prints the path of the report.
    """
    from dcaudit.catalog import Catalog
    from dcaudit.reports.html import write_report

    path = Path(run)
    run_dir = path if (path / "manifest.json").is_file() else Catalog(settings).run_dir(run)
    click.echo(str(write_report(run_dir, out)))


@cli.command("specs")
def specs() -> None:
    """List the built-in pipeline specs."""
    from dcaudit.spec import builtin_specs, load_spec

    for name in builtin_specs():
        click.echo(f"{name:12s} {load_spec(name).description}")


@cli.command()
@click.argument("experiment", type=click.Choice(["conformal", "leaderboard", "acquisition"]))
@click.option("--seeds", type=click.IntRange(min=1), help="Seeds per setting (conformal, leaderboard; paper: 50) "
              "or random-order trials (acquisition; paper: 200). Default: the paper's.")
@click.option("--geometries", type=click.IntRange(min=0), help="acquisition only: also re-draw the geometry this "
              "many times and report the spread of the curves (not in the paper).")
@click.option("--quiet", is_flag=True, help="Print only the run id.")
@click.pass_obj
def simulate(settings: Settings, experiment: str, seeds: int | None, geometries: int | None, quiet: bool) -> None:
    """Controlled linear response-space experiments (no data needed; DESIGN §6).

    \b
    conformal    benchmark-calibrated conformal coverage vs its transfer to the deployment
                 channel vs the response-rank interval ŷ ± 2g   -> metrics.parquet
    leaderboard  five models of span rank 3…8: the best-MAE model certifies least of its top 100
                 (structured and equal-noise settings)        -> choice.parquet, metrics.parquet
    acquisition  residual-greedy vs uncertainty / diversity / benchmark-aligned / random probe
                 choice                                        -> completion.parquet, metrics.parquet
    """
    from dcaudit.pipelines.runner import log_notes
    from dcaudit.pipelines.simulate import run_simulation

    result = run_simulation(settings, experiment, seeds, geometries)
    if quiet:
        click.echo(result.run_id)
        return
    import duckdb

    con = duckdb.connect()
    for name, table in result.tables.items():
        con.register(name, table)
    if experiment == "acquisition":   # the completion curve: mean certified fraction per policy and step
        shown = con.sql("PIVOT (SELECT policy, step, round(certified_fraction, 4) AS c FROM completion "
                        "WHERE seed IS NULL AND step <= 4) ON step USING first(c) ORDER BY policy")
    else:
        shown = con.sql("SELECT setting, metric, round(value, 4) AS value, round(ci_low, 4) AS "
                        "ci_low, round(ci_high, 4) AS ci_high, round(min, 4) AS min, round(max, 4) AS max "
                        "FROM metrics")
    _print_table(shown.to_arrow_table(), as_json=False)
    log_notes(result)
    click.echo(f"run {result.run_id} succeeded in {result.seconds:.1f}s -> {result.run_dir}")


@cli.command()
@_FILE
@_evidence()
@_CLAIM
@_ID
@_fiber_rule()
@_MISSING
@_SPLITS
@click.option("--min-support", type=click.IntRange(min=1), default=50, show_default=True,
              help="Calibration members a fiber (or window) needs before it can certify.")
@click.option("--mode", type=click.Choice(["exact", "calibrated"]), default="exact", show_default=True,
              help="exact: pure calibration fiber; calibrated: Clopper-Pearson bound on the minority rate <= epsilon.")
@click.option("--epsilon", type=float, default=0.05, show_default=True, help="Risk level of --mode calibrated.")
@click.option("--delta", type=float, default=0.05, show_default=True, help="The bound holds with confidence 1 - delta.")
@click.option("--tolerance", help="Error-window certification on one numeric evidence column: a width (0.04), "
              "'mae' or 'q80' (per seed, from calibration errors against --reference).")
@click.option("--reference", help="Reference column for --tolerance mae / qNN (e.g. the true value the evidence predicts).")
@_ENGINE
@_PACKAGE
@click.pass_obj
def replay(settings: Settings, file: Path, evidence: str, claim: str, id_column: str | None, fiber_rule: str,
           missing: str, seeds: int, seed_offset: int, calibration_fraction: float, min_support: int, mode: str,
           epsilon: float, delta: float, tolerance: str | None, reference: str | None, out: Path | None,
           force: bool, quiet: bool, engine: str = "duckdb") -> None:
    """Held-out certify-then-acquire replay on any table FILE: what would acting on EVIDENCE cost?

    \b
    Splits candidates into calibration and test SEEDS times, certifies fibers on calibration only and
    replays four policies on test: fiber_majority (benchmark-only), global_majority, certified_only,
    certify_then_acquire. Writes replay.parquet (per seed, plus a summary row per policy with seed NULL)
    next to the audit's summary/fibers/candidates.
    Example:
      dcaudit replay tox21.csv --id mol_id --claim '"SR-p53" = 1' --min-support 50 \\
        --evidence NR-AR,NR-AR-LBD,NR-AhR,NR-Aromatase,NR-ER,NR-ER-LBD,NR-PPAR-gamma
    """
    from dcaudit.pipelines.runner import log_notes

    section: dict[str, object] = {"seeds": seeds, "seed_offset": seed_offset,
                                  "calibration_fraction": calibration_fraction, "min_support": min_support,
                                  "mode": mode, "epsilon": epsilon, "delta": delta}
    if tolerance is not None:
        section["tolerance"] = tolerance
    if reference is not None:
        section["reference"] = reference
    result = _adhoc_run(settings, file, evidence, claim, id_column, fiber_rule, missing, min_support, out, force,
                        extra_sections={"replay": section}, engine=engine)
    if quiet:
        click.echo(str(result.run_dir))
        return
    import pyarrow.compute as pc

    table = result.tables["replay"]

    def pct(v: float | None) -> str:
        return "" if v is None else f"{100 * v:.3g}%"

    rows = table.filter(pc.is_null(table["seed"])).to_pylist()
    shown = pa.Table.from_pylist([{
        "policy": r["policy"], "certified": pct(r["certified_fraction"]),
        "false (all)": f"{pct(r['false_decision_rate'])} [{pct(r['false_decision_rate_p10'])}, "
                       f"{pct(r['false_decision_rate_p90'])}]",
        "false (certified)": pct(r["false_rate_certified"]), "CP bound": pct(r["risk_bound"]),
        "acquired": pct(r["acquired_fraction"]),
        "break-even λ*": "" if r["break_even_price"] is None else f"{r['break_even_price']:.4g}",
    } for r in rows])
    click.echo(f"{rows[0]['n_seeds'] if rows else 0} seeds; false (all) shows the mean [p10, p90] over seeds")
    _print_table(shown, as_json=False)
    log_notes(result)
    click.echo(f"evidence package -> {result.run_dir}")


@cli.command()
@_FILE
@_evidence("Base evidence column(s), comma-separated.")
@_CLAIM
@click.option("--probes", required=True, help="Probe columns that could be measured next, comma-separated.")
@_ID
@_fiber_rule("exact | quantile:K | width:W (applied to evidence and probes).")
@_SPLITS
@click.option("--min-support", type=click.IntRange(min=1), default=1, show_default=True,
              help="Calibration members a pure fiber needs before it certifies.")
@click.option("--policies", default=",".join(("response_rank", "uncertainty", "diversity", "benchmark_aligned",
                                                "random", "oracle")), show_default=True,
              help="Probe-selection policies, comma-separated.")
@click.option("--random-draws", type=click.IntRange(min=1), default=100, show_default=True,
              help="Random probe orders per seed for the random policy.")
@click.option("--refinement", type=click.Choice(["mixed", "full"]), default="mixed", show_default=True,
              help="mixed: certified decisions are kept, only mixed fibers are refined; full: every fiber "
                   "recomputed after each probe (the paper's script).")
@click.option("--tie-break", type=click.Choice(["entropy", "first", "last"]), default="entropy", show_default=True,
              help="Among probes certifying equally on calibration: least residual label entropy, or the "
                   "first / last listed.")
@_PACKAGE
@click.pass_obj
def complete(settings: Settings, file: Path, evidence: str, claim: str, probes: str, id_column: str | None,
             fiber_rule: str, seeds: int, seed_offset: int, calibration_fraction: float, min_support: int,
             policies: str, random_draws: int, refinement: str, tie_break: str, out: Path | None, force: bool,
             quiet: bool) -> None:
    """Completion curves on any table FILE: which of PROBES to measure next, and what each one certifies.

    \b
    Each policy (response_rank, uncertainty, diversity, benchmark_aligned, random, oracle) adds probes
    one at a time, chosen on a calibration split and scored on the held-out test split, SEEDS times.
    Writes completion.parquet (per policy × step × seed, plus mean rows with seed NULL and p10/p90)
    next to the audit's summary/fibers/candidates, and prints the recommended next probe.
    Example:
      dcaudit complete tox21.csv --id mol_id --claim '"SR-p53" = 1' --min-support 50 --seeds 200 \\
        --evidence NR-AR,NR-AR-LBD,NR-AhR,NR-Aromatase,NR-ER,NR-ER-LBD,NR-PPAR-gamma \\
        --probes SR-ARE,SR-ATAD5,SR-HSE,SR-MMP
    """
    from dcaudit.pipelines.runner import log_notes

    section: dict[str, object] = {
        "probes": probes, "seeds": seeds, "seed_offset": seed_offset, "calibration_fraction": calibration_fraction,
        "min_support": min_support, "policies": policies, "random_draws": random_draws,
        "refinement": refinement, "tie_break": tie_break}
    result = _adhoc_run(settings, file, evidence, claim, id_column, fiber_rule, "drop", min_support, out, force,
                        extra_sections={"completion": section})
    if quiet:
        click.echo(str(result.run_dir))
        return
    import duckdb

    con = duckdb.connect()
    con.register("completion", result.tables["completion"])
    shown = con.sql(
        "SELECT policy, step, probe_added AS probe, round(100 * probe_added_share) AS \"chosen %\", "
        "round(100 * certified_fraction, 2) AS \"certified %\", round(100 * certified_fraction_p10, 2) AS p10, "
        "round(100 * certified_fraction_p90, 2) AS p90, round(100 * certified_fraction_se, 2) AS se, "
        "round(100 * false_decision_rate, 3) AS \"false %\" FROM completion WHERE seed IS NULL "
        "ORDER BY list_position(['response_rank', 'uncertainty', 'diversity', 'benchmark_aligned', 'random', "
        "'oracle'], policy), step").to_arrow_table()
    _print_table(shown, as_json=False)
    first = con.sql("SELECT probe_added, probe_added_share FROM completion WHERE seed IS NULL AND step = 1 "
                    "AND policy = 'response_rank'").fetchall()
    log_notes(result)
    if first:
        click.echo(f"recommended next probe: {first[0][0]} (response_rank's first choice in "
                   f"{100 * first[0][1]:.0f}% of {seeds} seeds)")
    click.echo(f"evidence package -> {result.run_dir}")


from dcaudit.cli_catalog import catalog as _catalog_group  # noqa: E402, I001
cli.add_command(_catalog_group)


def main() -> None:
    cli(prog_name="dcaudit")


if __name__ == "__main__":
    main()
