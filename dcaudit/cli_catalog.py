"""``dcaudit catalog rebuild`` and ``dcaudit catalog check``: the derived catalog and the packages behind it."""

from __future__ import annotations

import json
import sys

import click

from dcaudit.config import Settings


@click.group()
def catalog() -> None:
    """catalog.duckdb is derived from the run records and packages: rebuild it, or check the packages.

    \b
    A run adds itself to the catalog when it ends, and every command that reads the catalog rebuilds it
    when it is missing, truncated, corrupt or out of date, so `rebuild` is rarely needed; `check` hashes
    every package file against its manifest.
    """


@catalog.command()
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout: runs, packages, left out, seconds.")
@click.pass_obj
def rebuild(settings: Settings, as_json: bool) -> None:
    """Rebuild catalog.duckdb from $DCAUDIT_HOME/records and runs/ (renamed over the old file: open
    readers keep their snapshot). Damaged packages are left out of the views and named."""
    from dcaudit.catalog import Catalog

    cat = Catalog(settings)
    report = cat.rebuild()
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    if as_json:
        click.echo(json.dumps({"catalog": str(report.path), "runs": report.runs, "packages": report.packages,
                               "left_out": report.left_out, "seconds": report.seconds}, indent=1))
    else:
        for run_id, problems in sorted(report.left_out.items()):
            for problem in problems:
                click.echo(f"left out: {run_id}: {problem}", err=True)
        click.echo(f"{report.path}: {report.runs} run(s), {report.packages} package(s) in the views, "
                   f"{len(report.left_out)} left out; built in {report.seconds:.2f} s")
    cat.close()


@catalog.command()
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout: packages checked and problems.")
@click.pass_obj
def check(settings: Settings, as_json: bool) -> None:
    """Hash every package file against the sha256s in its manifest.json.

    Exit status 0 when every package is intact, 2 when any file is damaged, missing or modified (each
    one is named)."""
    from dcaudit.catalog import Catalog

    cat = Catalog(settings)
    checked, problems = cat.check()
    if as_json:
        click.echo(json.dumps({"packages": checked, "problems": problems}, indent=1))
    else:
        for problem in problems:
            click.echo(f"damaged: {problem}", err=True)
        click.echo(f"{checked} package(s) checked, {len(problems)} damaged file(s)")
    with_refresh = cat.try_refresh()
    if with_refresh:
        click.echo(f"note: {with_refresh}", err=True)
    cat.close()
    sys.exit(2 if problems else 0)
