"""What the command-line modules share: option composition, gates and how a table command ends."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dcaudit import defaults


def one_output(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """Callback of --quiet and --json: two output formats, so giving both is a usage error (whichever of
    the two click reads second sees the first in ``ctx.params``)."""
    other = "as_json" if param.name == "quiet" else "quiet"
    if value and ctx.params.get(other):
        raise click.UsageError("--quiet and --json are two output formats: give one")
    return value

if TYPE_CHECKING:
    import pyarrow as pa

    from dcaudit.api import Result
    from dcaudit.source_query import SourceQuery


def compose(*decorators: Callable) -> Callable:
    """Apply click decorators in reading order (top first), so commands share one definition per option."""
    def apply(fn: Callable) -> Callable:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply


SQL_HELP = ("A DuckDB SELECT whose result is the table to audit, instead of FILE: e.g. \"SELECT * FROM "
            "'preds.parquet' JOIN 'truth.csv' USING (id)\". One statement that only reads; files are read by DuckDB "
            "(relative names from the working directory); the result then meets the same checks as a file.")


def table_source(command: Callable) -> Callable:
    """Turn a table command's FILE argument and --sql option into one ``data`` keyword: the path, or a
    :class:`dcaudit.source_query.SourceQuery` (checked here: one SELECT, else a usage error naming --sql)."""
    @functools.wraps(command)
    def run(*args: Any, file: Path | None, sql: str | None, **kwargs: Any) -> Any:
        return command(*args, data=table_input(file, sql), **kwargs)
    return run


def table_input(file: Path | None, sql: str | None) -> Path | SourceQuery:
    if (file is None) == (sql is None):
        raise click.UsageError("give the table to audit: a FILE or --sql 'SELECT …' (one of the two)")
    if file is not None:
        from dcaudit.digests import start_sha256

        # the run keys its record on the file's sha256: hashed on a thread while the engine's modules load
        start_sha256(file)
        return file
    from dcaudit.source_query import SourceQuery  # DuckDB loads only for a query

    return SourceQuery(str(sql), origin="--sql")


def input_name(data: Path | SourceQuery) -> str:
    """How a table command's title names its input: the file's name, or 'SQL query'."""
    return data.name if isinstance(data, Path) else "SQL query"


GATES = click.option("--fail-if", "fail_if", multiple=True, metavar="EXPR",
                      help="Gate for CI: exit 1 when EXPR holds for an audit's summary row, e.g. "
                      "'ambiguous_fraction > 0.2' (the claim grammar over summary columns; repeatable).")


NO_REPORT = click.option("--no-report", "no_report", is_flag=True, help="Leave report.html out of the package "
                         "(its charts are most of a small audit's time); `dcaudit report RUN` renders it later.")


ENGINE = click.option(
    "--engine", type=click.Choice(defaults.ENGINES), default=defaults.ENGINE, show_default=True,
    help="duckdb: this machine (spills to disk beyond --memory-limit); spark: the fiber audit's and replay's "
         "passes over candidates on Spark (the configured cluster, else local mode), other stages on DuckDB "
         "with a note (needs dcaudit[spark]; docs/scale.md).")


def given(**options: Any) -> dict[str, Any]:
    """Options the user gave (None = not given: the API's config objects supply the default)."""
    return {k: v for k, v in options.items() if v is not None}


def check_gates(fail_if: tuple[str, ...]) -> None:
    """Parse --fail-if before any work: a malformed gate is bad input (exit 2), not a failed run."""
    if fail_if:
        from dcaudit.gates import parse_gates

        parse_gates(list(fail_if))


def apply_gates(summary: pa.Table, fail_if: tuple[str, ...]) -> int:
    """Exit status 1 when a gate holds for a summary row (each failure named on stderr), else 0."""
    if not fail_if:
        return 0
    from dcaudit.gates import evaluate_gates, gate_exit_status, parse_gates, undefined_gates

    gates = parse_gates(list(fail_if), summary.column_names)
    failures = evaluate_gates(summary, gates)
    for failure in failures:
        click.secho(failure.message, fg="red", err=True)
    # A gate that cannot be evaluated (no candidates: a NULL fraction; a division by zero) has not passed:
    # a CI check must not go green because there was nothing to check.
    undefined = undefined_gates(summary, gates)
    for audit_id, text in undefined:
        click.secho(f"gate {text!r} is undefined for audit {audit_id!r} (a value it reads is NULL, e.g. no "
                    "candidates, or it divides by zero): counted as failed", fg="red", err=True)
    return max(gate_exit_status(failures), 1 if undefined else 0)


def evidence_arg(values: tuple[str, ...]) -> list[str]:
    """Every value of a repeatable name option (--evidence, --probes), each comma-separated, in order; a name
    in double quotes keeps its commas and spaces (``--evidence '"b,c"'``)."""
    from dcaudit.spec import split_names

    return [name for value in values for name in split_names(value)]


def show_result(result: Result, title: str, *, quiet: bool, as_json: bool) -> None:
    """How audit, replay, complete and sensitivity end: the package directory, JSON, or the summary."""
    if as_json:
        click.echo(json.dumps({"run_id": result.run_id, "status": "succeeded",
                               "package_dir": str(result.package_dir),
                               "summary": result.summary_rows()}, default=str, indent=1))
        return
    if quiet:
        click.echo(str(result.package_dir))
        return
    print_result(result, title)


def print_result(result: Result, title: str, *, with_replay: bool = False) -> None:
    """The summary (and excluded counts), the replay table when asked, findings and notes on the console."""
    from dcaudit import api

    views = api.console_views()
    # Arrow straight from the result (no polars round trip), and only the columns the console reads.
    candidates = result.arrow("candidates")
    if candidates is not None:
        candidates = candidates.select([c for c in ("audit_id", "model", "excluded_reason")
                                        if c in candidates.column_names])
    views.print_summary(result.arrow("summary"), title, candidates)
    replay = result.arrow("replay")
    if with_replay and replay is not None:
        views.print_replay(replay)
    findings = result.arrow("findings")
    if findings is not None:
        views.print_findings(findings)
    views.print_notes(result.notes)
