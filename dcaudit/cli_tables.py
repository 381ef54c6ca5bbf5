"""The commands that audit a table a user brings: ``audit``, ``replay``, ``complete``, ``sensitivity``.

Each parses its options, calls the Python API (``dcaudit.api``, ``record=True``) and prints; defaults come
from :mod:`dcaudit.defaults`, the same place the API and specs read them from.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dcaudit import defaults
from dcaudit.cli_common import ENGINE as _ENGINE
from dcaudit.cli_common import GATES as _GATES
from dcaudit.cli_common import NO_REPORT as _NO_REPORT
from dcaudit.cli_common import SQL_HELP, input_name, one_output, table_source
from dcaudit.cli_common import apply_gates as _apply_gates
from dcaudit.cli_common import check_gates as _check_gates
from dcaudit.cli_common import compose as _compose
from dcaudit.cli_common import evidence_arg as _evidence
from dcaudit.cli_common import given as _given
from dcaudit.cli_common import show_result as _show
from dcaudit.config import Settings

if TYPE_CHECKING:
    from dcaudit.source_query import SourceQuery

CLAIM_HELP = ("Claim: a boolean expression of column names (double-quote names with - or spaces: "
              "'\"SR-p53\" = 1'), numbers, 'strings', true/false, = != < <= > >=, + - * /, and/or/not, "
              "parentheses; nothing else (no functions, no SQL comments). Division by zero or NaN makes "
              "it undefined: the candidate is excluded (claim_undefined), never true.")

_TABLE = _compose(
    click.argument("file", type=click.Path(path_type=Path), required=False),
    click.option("--sql", help=SQL_HELP),
    click.option("--evidence", required=True, multiple=True,
                 help="Evidence column(s), comma-separated (or repeat the option); double-quote a name that holds a "
                      "comma or surrounding spaces: --evidence '\"b,c\",d'."),
    click.option("--claim", required=True, help=CLAIM_HELP),
    click.option("--id", "id_column", help="Candidate id column (default: the 1-based data row). Empty or "
                 "repeated ids are an error unless --duplicates keep."),
    click.option("--duplicates", type=click.Choice(defaults.DUPLICATES_CHOICES), default=defaults.DUPLICATES,
                 show_default=True, help="Repeated candidate ids: an error, or keep every row and list them "
                 "in findings.parquet (disagreeing copies marked)."),
)
_RULE = click.option("--fiber-rule", default=defaults.FIBER_RULE, show_default=True,
                     help="exact | quantile:K (K equal-count bins) | width:W (bins of width W).")
_MISSING = click.option("--missing", type=click.Choice(defaults.MISSING_CHOICES), default=defaults.MISSING,
                        show_default=True, help="Missing, NaN or infinite evidence: drop (complete cases; the "
                        "rest excluded with a reason) or a value (a fiber) of its own.")
_SPLITS = _compose(
    click.option("--seeds", type=click.IntRange(min=1), help=f"Calibration/test splits, 1 to {defaults.MAX_SEEDS} "
                 f"(default {defaults.REPLAY_SEEDS}; bounded by memory for tolerance windows)."),
    click.option("--seed-offset", type=int, help=f"First seed (seeds are offset … offset+S-1), within "
                 f"±2^{defaults.MAX_SEED_OFFSET.bit_length() - 1} (default {defaults.SEED_OFFSET})."),
    click.option("--calibration-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True),
                 help=f"Share of candidates in the calibration half (hash of id and seed; default "
                      f"{defaults.CALIBRATION_FRACTION})."),
)
_PACKAGE = _compose(
    click.option("--out", type=click.Path(path_type=Path), help="Write the package to this directory instead "
                 "of the workspace."),
    click.option("--force", is_flag=True, help="Replace an existing --out directory (only once the new one is "
                 "complete)."),
    click.option("--quiet", is_flag=True, callback=one_output, help="Print only the package directory."),
    click.option("--json", "as_json", is_flag=True, callback=one_output, help="JSON on stdout: run_id, status, package_dir, summary."),
    _NO_REPORT,
)


@click.command()
@_TABLE
@_RULE
@_MISSING
@click.option("--min-support", type=click.IntRange(min=1, max=defaults.MAX_SUPPORT), default=defaults.MIN_SUPPORT, show_default=True,
              help="Pure fibers smaller than this are 'unsupported' rather than certified.")
@_PACKAGE
@_ENGINE
@_GATES
@click.pass_obj
@table_source
def audit(settings: Settings, data: Path | SourceQuery, evidence: tuple[str, ...], claim: str, id_column: str | None,
          duplicates: str, fiber_rule: str, missing: str, min_support: int, out: Path | None, force: bool,
          quiet: bool, as_json: bool, no_report: bool, engine: str, fail_if: tuple[str, ...]) -> None:
    """Audit any table FILE (CSV, CSV.gz, TSV or Parquet) or --sql query: does EVIDENCE decide CLAIM?

    \b
    Writes summary.parquet, fibers.parquet, candidates.parquet (every candidate with its status, and
    excluded ones with a reason) and manifest.json, and records the run in the catalog.
    Examples:
      dcaudit audit tox21.csv --id mol_id --claim '"SR-p53" = 1' \\
        --evidence NR-AR,NR-AR-LBD,NR-AhR,NR-Aromatase,NR-ER,NR-ER-LBD,NR-PPAR-gamma
      dcaudit audit --sql "SELECT * FROM 'preds.parquet' JOIN 'dft.csv' USING (id)" --id id \\
        --evidence pred --fiber-rule quantile:20 --claim 'gap > 1.0'
    """
    from dcaudit import api

    _check_gates(fail_if)
    result = api.audit(data, evidence=_evidence(evidence), claim=claim, id=id_column, fiber_rule=fiber_rule,
                       min_support=min_support, missing=missing, duplicates=duplicates,  # type: ignore[arg-type]
                       settings=settings, report=not no_report, record=True, out=out, force=force, quiet=quiet or as_json,
                       engine=engine)
    _show(result, f"{input_name(data)}: {result.run_id}", quiet=quiet, as_json=as_json)
    if not (quiet or as_json):
        click.echo(f"evidence package -> {result.package_dir}")
    sys.exit(_apply_gates(result.arrow("summary"), fail_if))


@click.command()
@_TABLE
@_RULE
@_MISSING
@_SPLITS
@click.option("--min-support", type=click.IntRange(min=1, max=defaults.MAX_SUPPORT), help="Calibration members a fiber (or window) needs "
              f"before it can certify (default {defaults.MIN_SUPPORT_FIBERS} for fibers, "
              f"{defaults.MIN_SUPPORT_WINDOWS} for --tolerance windows).")
@click.option("--mode", type=click.Choice(defaults.REPLAY_MODES), help="exact (default): pure "
              "calibration fiber; calibrated: Clopper-Pearson bound on each fiber's minority rate <= epsilon; "
              "familywise: Holm across fibers, P(any certified fiber's rate > epsilon) <= delta.")
@click.option("--epsilon", type=float, help=f"Risk level of --mode calibrated (default {defaults.EPSILON}).")
@click.option("--delta", type=float, help=f"The bound holds with confidence 1 - delta (default {defaults.DELTA}).")
@click.option("--tolerance", help="Error-window certification on one numeric evidence column: a width (0.04), "
              "'mae' or 'q80' (per seed, from calibration errors against --reference).")
@click.option("--reference", help="Reference column for --tolerance mae / qNN (the true value the evidence "
              "predicts).")
@_ENGINE
@_PACKAGE
@_GATES
@click.pass_obj
@table_source
def replay(settings: Settings, data: Path | SourceQuery, evidence: tuple[str, ...], claim: str, id_column: str | None,
           duplicates: str, fiber_rule: str, missing: str, seeds: int | None, seed_offset: int | None,
           calibration_fraction: float | None, min_support: int | None, mode: str | None, epsilon: float | None,
           delta: float | None, tolerance: str | None, reference: str | None, engine: str, out: Path | None,
           force: bool, quiet: bool, as_json: bool, no_report: bool, fail_if: tuple[str, ...]) -> None:
    """Held-out certify-then-acquire replay on any table FILE (or --sql query): what would acting on EVIDENCE cost?

    \b
    Splits candidates into calibration and test SEEDS times, certifies fibers on calibration only and
    replays four policies on test: fiber_majority (benchmark-only), global_majority, certified_only,
    certify_then_acquire. Writes replay.parquet (per seed, plus a summary row per policy with seed NULL)
    next to the audit's summary/fibers/candidates.
    Example:
      dcaudit replay tox21.csv --id mol_id --claim '"SR-p53" = 1' \\
        --evidence NR-AR,NR-AR-LBD,NR-AhR,NR-Aromatase,NR-ER,NR-ER-LBD,NR-PPAR-gamma
    """
    from dcaudit import api
    print_replay = api.console_views().print_replay

    _check_gates(fail_if)
    result = api.replay(data, evidence=_evidence(evidence), claim=claim, id=id_column, fiber_rule=fiber_rule,
                        missing=missing, min_support=min_support, tolerance=tolerance, reference=reference,
                        duplicates=duplicates, settings=settings, report=not no_report, record=True, out=out,  # type: ignore[arg-type]
                        force=force, quiet=quiet or as_json, engine=engine,
                        **_given(seeds=seeds, seed_offset=seed_offset, calibration_fraction=calibration_fraction,
                                 mode=mode, epsilon=epsilon, delta=delta))
    _show(result, f"{input_name(data)}: {result.run_id}", quiet=quiet, as_json=as_json)
    if not (quiet or as_json):
        print_replay(result.arrow("replay"))
        click.echo(f"evidence package -> {result.package_dir}")
    sys.exit(_apply_gates(result.arrow("summary"), fail_if))


@click.command()
@_TABLE
@click.option("--probes", required=True, multiple=True, help="Probe columns that could be measured next, "
              "comma-separated (or repeat the option; double-quote a name that holds a comma).")
@_RULE
@_SPLITS
@click.option("--min-support", type=click.IntRange(min=1, max=defaults.MAX_SUPPORT), help="Calibration members a pure fiber needs before "
              f"it certifies (default {defaults.COMPLETION_MIN_SUPPORT}).")
@click.option("--policies", help=f"Probe-selection policies, comma-separated (default: all of "
              f"{', '.join(defaults.COMPLETION_POLICIES)}).")
@click.option("--random-draws", type=click.IntRange(min=1), help="Random probe orders per seed for the random "
              f"policy, 1 to {defaults.MAX_SEEDS} (default {defaults.RANDOM_DRAWS}).")
@click.option("--refinement", type=click.Choice(defaults.REFINEMENTS), help="mixed (default): certified decisions "
              "are kept, only mixed fibers are refined; full: every fiber recomputed after each probe (the "
              "paper's script).")
@click.option("--tie-break", type=click.Choice(defaults.TIE_BREAKS), help="Among probes certifying "
              "equally on calibration: least residual label entropy (default), or the first / last listed.")
@click.option("--costs", help="Price of every probe, e.g. 'SR-MMP=2,SR-HSE=2,SR-ARE=1,SR-ATAD5=1' (each above 0, at "
              f"most {defaults.MAX_COST:g}): curves against cumulative cost, the cost_gain policy and the next probe "
              "by certified gain per unit cost.")
@click.option("--budget", type=float, help="The budgeted plan (frozen on calibration) stops before its cumulative "
              f"cost exceeds this (above 0, at most {defaults.MAX_BUDGET:g}).")
@_PACKAGE
@click.pass_obj
@table_source
def complete(settings: Settings, data: Path | SourceQuery, evidence: tuple[str, ...], claim: str, id_column: str | None,
             duplicates: str, probes: tuple[str, ...], fiber_rule: str, seeds: int | None, seed_offset: int | None,
             calibration_fraction: float | None, min_support: int | None, policies: str | None,
             random_draws: int | None, refinement: str | None, tie_break: str | None, costs: str | None,
             budget: float | None, out: Path | None, force: bool, quiet: bool, as_json: bool, no_report: bool) -> None:
    """Completion curves on any table FILE (or --sql query): which of PROBES to measure next, and what each one certifies.

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
    from dcaudit import api
    print_completion = api.console_views().print_completion

    result = api.complete(data, evidence=_evidence(evidence), claim=claim, probes=_evidence(probes), id=id_column,
                          fiber_rule=fiber_rule, duplicates=duplicates, settings=settings, report=not no_report,  # type: ignore[arg-type]
                          record=True, out=out, force=force, quiet=quiet or as_json,
                          **_given(seeds=seeds, seed_offset=seed_offset, calibration_fraction=calibration_fraction,
                                   min_support=min_support, random_draws=random_draws, refinement=refinement,
                                   tie_break=tie_break, costs=costs, budget=budget,
                                   policies=policies.split(",") if policies is not None else None))
    _show(result, f"{input_name(data)}: {result.run_id}", quiet=quiet, as_json=as_json)
    if not (quiet or as_json):
        print_completion(result.arrow("completion"), seeds or defaults.COMPLETION_SEEDS)
        click.echo(f"evidence package -> {result.package_dir}")


@click.command()
@_TABLE
@click.option("--rules", help="Fiber rules to compare, comma-separated (default: "
              f"{','.join(defaults.SENSITIVITY_RULES)}).")
@click.option("--tolerances", help="Tolerance windows too, comma-separated: widths (0.05), 'mae' or 'q80' "
              "(against --reference).")
@click.option("--reference", help="Reference column for mae / qNN tolerances.")
@click.option("--min-support", type=click.IntRange(min=1, max=defaults.MAX_SUPPORT), default=defaults.MIN_SUPPORT, show_default=True,
              help="Members a pure fiber (or window) needs to be certified.")
@_PACKAGE
@click.pass_obj
@table_source
def sensitivity(settings: Settings, data: Path | SourceQuery, evidence: tuple[str, ...], claim: str, id_column: str | None,
                duplicates: str, rules: str | None, tolerances: str | None, reference: str | None,
                min_support: int, out: Path | None, force: bool, quiet: bool, as_json: bool, no_report: bool) -> None:
    """How the audit of one numeric EVIDENCE column moves with the fiber resolution.

    \b
    Quantile bins (quantile:K), k-nearest-neighbour windows (knn:K) and fixed windows (window:T) in sorted
    evidence, and tolerance windows from calibration errors; writes sensitivity.parquet (one row per rule).
    Example:
      dcaudit sensitivity preds.csv --evidence pred --claim "gap > 1.0" --tolerances mae --reference dft
    """
    from dcaudit import api
    print_rows = api.console_views().print_rows
    sensitivity_table = api.console_views().sensitivity_table

    result = api.sensitivity(data, evidence=_evidence(evidence), claim=claim, id=id_column,  # type: ignore[arg-type]
                             rules=rules.split(",") if rules is not None else None,
                             tolerances=tolerances.split(",") if tolerances is not None else None, reference=reference,
                             min_support=min_support, duplicates=duplicates, settings=settings, report=not no_report,  # type: ignore[arg-type]
                             record=True, out=out, force=force, quiet=quiet or as_json)
    _show(result, f"{input_name(data)}: {result.run_id}", quiet=quiet, as_json=as_json)
    if not (quiet or as_json):
        print_rows(sensitivity_table(result.arrow("sensitivity")))
        click.echo(f"evidence package -> {result.package_dir}")


COMMANDS = (audit, replay, complete, sensitivity)
