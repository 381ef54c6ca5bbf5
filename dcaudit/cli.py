"""The ``dcaudit`` command line. Settings come from DCAUDIT_* variables; flags override them."""

from __future__ import annotations

import json
import sys
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
    Console().print(out)


@cli.command()
@click.argument("spec", metavar="SPEC")
@click.option("--quiet", is_flag=True, help="Print only the run id.")
@click.pass_obj
def run(settings: Settings, spec: str, quiet: bool) -> None:
    """Run a pipeline SPEC: a built-in name (tox21, …) or a path to a .toml spec.

    The evidence package lands in $DCAUDIT_HOME/runs/<run_id>/ and the run is recorded in the catalog.
    """
    from dcaudit.pipelines.runner import log_notes, run_spec
    from dcaudit.reports.console import print_summary
    from dcaudit.spec import load_spec

    result = run_spec(load_spec(spec), settings)
    if quiet:
        click.echo(result.run_id)
        return
    print_summary(result.tables["summary"], f"{spec}: {result.run_id}")
    log_notes(result)
    click.echo(f"run {result.run_id} succeeded in {result.seconds:.1f}s -> {result.run_dir}")
    click.echo(f"query it: dcaudit query \"select * from summary where run_id = '{result.run_id}'\"")


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--evidence", required=True, help="Evidence column(s), comma-separated.")
@click.option("--claim", required=True, help="Claim, e.g. '\"SR-p53\" = 1' or 'gap > 1.0'. Quote names with - or spaces.")
@click.option("--id", "id_column", help="Candidate id column (default: a row number).")
@click.option("--fiber-rule", default="exact", show_default=True, help="exact | quantile:K | width:W.")
@click.option("--missing", type=click.Choice(["drop", "as-value"]), default="drop", show_default=True,
              help="Missing evidence: drop (complete cases, reported as excluded) or a value of its own.")
@click.option("--min-support", type=int, default=1, show_default=True,
              help="Pure fibers smaller than this are 'unsupported' rather than certified.")
@click.option("--out", type=click.Path(path_type=Path), help="Write the package here instead of the workspace.")
@click.option("--force", is_flag=True, help="Replace an existing --out directory (only once the new one is complete).")
@click.option("--quiet", is_flag=True, help="Print only the output directory.")
@click.pass_obj
def audit(settings: Settings, file: Path, evidence: str, claim: str, id_column: str | None, fiber_rule: str,
          missing: str, min_support: int, out: Path | None, force: bool, quiet: bool) -> None:
    """Audit any table FILE (CSV, CSV.gz or Parquet): does EVIDENCE decide CLAIM?

    \b
    Writes summary.parquet, fibers.parquet, candidates.parquet and manifest.json.
    Example:
      dcaudit audit tox21.csv --id mol_id --claim '"SR-p53" = 1' \\
        --evidence NR-AR,NR-AR-LBD,NR-AhR,NR-Aromatase,NR-ER,NR-ER-LBD,NR-PPAR-gamma
    """
    from dcaudit.pipelines.runner import log_notes
    from dcaudit.reports.console import print_summary

    result = _adhoc_run(settings, file, evidence, claim, id_column, fiber_rule, missing, min_support, out, force)
    if quiet:
        click.echo(str(result.run_dir))
        return
    print_summary(result.tables["summary"], f"{file.name}: {result.run_id}")
    log_notes(result)
    click.echo(f"evidence package -> {result.run_dir}")


def _adhoc_run(settings: Settings, file: Path, evidence: str, claim: str, id_column: str | None,
               fiber_rule: str, missing: str, min_support: int, out: Path | None, force: bool,
               extra_sections: dict | None = None):  # noqa: ANN202 - RunResult
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
    return run_spec(spec, settings, out_dir=out, replace_existing=force)


def _adhoc_name(file: Path) -> str:
    name = file.name
    for suffix in (".csv.gz", ".parquet", ".csv", ".tsv", ".pq"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or name
    return name


@cli.command()
@click.option("--limit", default=20, show_default=True, help="How many recent runs to list.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.pass_obj
def runs(settings: Settings, limit: int, as_json: bool) -> None:
    """List recent runs (id, spec, status, time) from the catalog."""
    from dcaudit.catalog import Catalog

    _print_table(Catalog(settings).runs(limit), as_json)


@cli.command()
@click.argument("sql")
@click.option("--json", "as_json", is_flag=True, help="JSON rows instead of a table.")
@click.pass_obj
def query(settings: Settings, sql: str, as_json: bool) -> None:
    """Run SQL against the catalog (views: runs, summary, fibers, candidates, replay, completion, …)."""
    from dcaudit.catalog import Catalog

    _print_table(Catalog(settings).query(sql), as_json)


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
@click.option("--quiet", is_flag=True, help="Print only the run id.")
@click.pass_obj
def simulate(settings: Settings, experiment: str, seeds: int | None, quiet: bool) -> None:
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

    result = run_simulation(settings, experiment, seeds)
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


def main() -> None:
    cli(prog_name="dcaudit")


if __name__ == "__main__":
    main()
