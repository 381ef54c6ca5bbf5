"""Corruption-robustness audit: does an image's clean prediction decide that the model stays right?

Candidates are (split, model, image) triples of a predictions table (its columns: docs/connectors.md,
vision). For each suite of corruptions:

* **evidence** (the paper's; docs/reference.md): the clean predicted class, whether it is correct,
  and the confidence decile — ``pd.qcut(confidence, q=10, duplicates='drop')`` computed per
  split × model over its clean test predictions. In SQL: the decile is the number of distinct
  interior 10 %-quantiles (``quantile_cont``, numpy's linear interpolation) strictly below the
  confidence, which is qcut's bin index including its dropped duplicate edges and closed-right bins;
* **claim** ``robust = true``: correct on the clean image *and* on every corruption of the suite;
* fibers group candidates of one suite × split × model with equal evidence; the status rule is
  :func:`dcaudit.audits.fibers.status_sql` (mixed -> ambiguous; pure and n < min_support ->
  unsupported; else certified). ``min_support = 1`` is the paper's choice (singletons certified).

Everything — deciles, claim, fibers, summaries, rankings — is one grouped DuckDB pass over all
suites × splits × models at once (no per-model Python loop); a test checks it against
:func:`dcaudit.audits.fibers.audit_fibers` on one split × model.

Suites: ``all`` (every corruption in the table), ``each`` (one suite per condition, e.g.
``gaussian_noise@3``), ``severity`` (every corruption at one severity). The suite is the
``audit_id`` (``robust[all]``, ``robust[gaussian_noise@3]``, ``robust[severity=3]``) and its
conditions are listed in the ``corruptions`` column.

Tables (docs/package.md; extra columns named here):

* summary — one row per suite × split × model, plus one per suite × model over all splits
  (``split`` NULL, counts summed); extra: ``split``, ``n_splits``, ``clean_accuracy``,
  ``robust_accuracy`` (= prevalence of the claim), ``corruptions``;
* fibers, candidates — per suite × split × model (``candidate_id`` is the image id; ``split`` column);
* choice — one row per suite × split × model: ``benchmark_metric`` (clean accuracy),
  ``robust_accuracy``, ``certified_fraction``, ``false_decisions`` (benchmark-only errors),
  ``rank_by_benchmark`` / ``rank_by_robustness`` / ``rank_by_certification`` (1 = best, ties
  share a rank) and the three ``chosen_by_*`` flags (as in :mod:`dcaudit.audits.choice`) (ties broken by model order: the protocol's
  order, or alphabetical for a user's table); a model whose every candidate is excluded is ranked and chosen
  by none (NULL ranks, false flags), and a split with no audited model counts in no winner metric;
* metrics — per suite: the spread across split × model rows (the statistics of
  :data:`dcaudit.audits.groups.SPREAD`, all suites in one grouped query),
  the median clean and robust accuracy, and how often the clean-accuracy winner differs from the
  robustness winner and from the certification winner (``value`` = fraction of splits; ``ci_low``/
  ``ci_high`` a 95 % Wilson interval; ``*_tie_aware`` counts a split only when no model wins both).
  ``median_ambiguous_fraction`` also gets a ``*_bootstrap`` row whose interval resamples splits.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from dcaudit import defaults
from dcaudit.audits.fibers import status_sql, summary_columns_sql
from dcaudit.audits.groups import SPREAD
from dcaudit.claims import sql_literal
from dcaudit.errors import SpecError
from dcaudit.spec import check_keys, check_not_blank, check_support, name_list, typed_fields

CLAIM = "robust = true"
EVIDENCE = "predicted,clean_correct,confidence_decile"
SUITE_KINDS = ("all", "each", "severity")
# the summary's per-fiber counts: 0 for a suite × split × model whose every candidate is excluded
_COUNTS = ("n_candidates", "n_fibers", "n_mixed_fibers", "n_unsupported_fibers", "certified_true", "certified_false",
           "ambiguous", "unsupported", "n_true", "benchmark_only_errors")
_counter = itertools.count()


@dataclass(frozen=True)
class Suite:
    audit_id: str
    conditions: tuple[str, ...]


@dataclass(frozen=True)
class VisionAudit:
    summary: pa.Table
    fibers: pa.Table
    candidates: pa.Table | None
    choice: pa.Table
    metrics: pa.Table

    def tables(self) -> dict[str, list[pa.Table]]:
        out = {"summary": [self.summary], "fibers": [self.fibers], "choice": [self.choice],
               "metrics": [self.metrics]}
        if self.candidates is not None:
            out["candidates"] = [self.candidates]
        return out



def build_suites(con: duckdb.DuckDBPyConnection, predictions: str, kinds: Sequence[str],
                 clean: str = "clean") -> list[Suite]:
    """The corruption suites to audit, from the (few) distinct conditions of the table."""
    bad = [k for k in kinds if k not in SUITE_KINDS]
    if bad or not kinds:
        raise SpecError(f"vision suites {list(kinds)}: choose from {', '.join(SUITE_KINDS)}")
    rows = con.execute(f"SELECT condition, any_value(severity) FROM {predictions} WHERE condition <> ? "
                       "GROUP BY condition ORDER BY condition", [clean]).fetchall()
    conditions = tuple(r[0] for r in rows)
    suites: list[Suite] = []
    if "all" in kinds:
        suites.append(Suite("robust[all]", conditions))
    if "severity" in kinds:
        by_severity: dict[int, list[str]] = {}
        for cond, severity in rows:
            if severity is not None:
                by_severity.setdefault(int(severity), []).append(cond)
        suites += [Suite(f"robust[severity={s}]", tuple(c)) for s, c in sorted(by_severity.items())]
    if "each" in kinds:
        suites += [Suite(f"robust[{c}]", (c,)) for c in conditions]
    return suites


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float | None, float | None]:
    """95 % Wilson score interval for k successes in n trials."""
    if n == 0:
        return None, None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 12), round(min(1.0, centre + half), 12)


def audit_predictions(con: duckdb.DuckDBPyConnection, predictions: str, *, source: str,
                      evidence_sql: str, suites: Sequence[Suite], clean: str = "clean",
                      min_support: int = 1, model_order: Sequence[str] | None = None,
                      with_candidates: bool = True, bootstrap: int = 1000, seed: int = 0) -> VisionAudit:
    """Run the robustness audit for every suite × split × model of ``predictions`` in one SQL pass."""
    if min_support < 1:
        raise SpecError(f"min_support must be >= 1, got {min_support}")
    if not suites:
        raise SpecError("no corruption suites to audit")
    tag = next(_counter)
    t = {k: f"_v{k}_{tag}" for k in ("suite", "ev", "rob", "cand", "fib", "sum", "order")}
    suite_rows = pa.table({
        "suite": [s.audit_id for s, _ in ((s, c) for s in suites for c in s.conditions)],
        "condition": [c for s in suites for c in s.conditions],
    })
    models = [r[0] for r in con.execute(f"SELECT DISTINCT model FROM {predictions} ORDER BY 1").fetchall()]
    order = [m for m in (model_order or []) if m in models] + [m for m in models if m not in (model_order or [])]
    con.register(f"{t['suite']}_arrow", suite_rows)
    con.register(f"{t['order']}_arrow", pa.table({"model": order, "model_rank": list(range(len(order)))}))
    status = status_sql("n", "n_true", min_support)
    head = (f"{sql_literal(source)} AS source, s.suite AS audit_id, {sql_literal(CLAIM)} AS claim, {sql_literal(EVIDENCE)} AS evidence, "
            f"{sql_literal('exact')} AS fiber_rule")
    try:
        con.execute(f"CREATE TEMP TABLE {t['suite']} AS SELECT suite, condition FROM {t['suite']}_arrow")
        # evidence per (split, model, image): every triple seen in any condition is a candidate; the
        # caller's SQL (the one the connector's ``images`` table is built with) gives its columns
        con.execute(f"CREATE TEMP TABLE {t['ev']} AS {evidence_sql}")
        con.execute(f"""CREATE TEMP TABLE {t['rob']} AS
            SELECT p.split, p.model, p.image_id, s.suite, count(*) AS n_seen, bool_and(p.predicted = p.label) AS ok
            FROM {predictions} p JOIN {t['suite']} s ON p.condition = s.condition GROUP BY ALL""")
        # claim: three-valued — a wrong clean or corrupted prediction decides FALSE even if some are missing
        con.execute(f"""CREATE TEMP TABLE {t['cand']} AS
            WITH sz AS (SELECT suite, count(*) AS n_conditions FROM {t['suite']} GROUP BY suite)
            SELECT e.*, sz.suite, sz.n_conditions,
                   CASE WHEN e.clean_correct = FALSE OR r.ok = FALSE THEN FALSE
                        WHEN e.clean_correct AND r.n_seen = sz.n_conditions THEN r.ok END AS y,
                   CASE WHEN e.predicted IS NULL THEN 'evidence missing (no clean prediction)'
                        WHEN NOT coalesce(e.clean_correct = FALSE OR r.ok = FALSE, FALSE)
                             AND coalesce(r.n_seen, 0) < sz.n_conditions
                        THEN 'claim missing (' || coalesce(r.n_seen, 0) || ' of ' || sz.n_conditions
                             || ' corrupted predictions)' END AS reason
            FROM {t['ev']} e CROSS JOIN sz LEFT JOIN {t['rob']} r USING (split, model, image_id, suite)""")
        con.execute(f"""CREATE TEMP TABLE {t['fib']} AS
            SELECT *, CAST(row_number() OVER (PARTITION BY suite, split, model
                           ORDER BY predicted, clean_correct, confidence_decile) - 1 AS BIGINT) AS fiber_key,
                   {status} AS status
            FROM (SELECT suite, split, model, predicted, clean_correct, confidence_decile, count(*) AS n,
                         CAST(count_if(y) AS BIGINT) AS n_true, min(confidence) AS lo, max(confidence) AS hi
                  FROM {t['cand']} WHERE reason IS NULL GROUP BY ALL)""")
        con.execute(f"""CREATE TEMP TABLE {t['sum']} AS
            WITH f AS (SELECT suite, split, model,
                    sum(n) AS n_candidates, count(*) AS n_fibers,
                    count_if(status = 'ambiguous') AS n_mixed_fibers,
                    count_if(status = 'unsupported') AS n_unsupported_fibers,
                    coalesce(sum(n) FILTER (WHERE status = 'certified_true'), 0) AS certified_true,
                    coalesce(sum(n) FILTER (WHERE status = 'certified_false'), 0) AS certified_false,
                    coalesce(sum(n) FILTER (WHERE status = 'ambiguous'), 0) AS ambiguous,
                    coalesce(sum(n) FILTER (WHERE status = 'unsupported'), 0) AS unsupported,
                    sum(n_true) AS n_true, sum(least(n_true, n - n_true)) AS benchmark_only_errors,
                    median(n) AS median_fiber_size
                FROM {t['fib']} GROUP BY GROUPING SETS ((suite, split, model), (suite, model))),
            c AS (SELECT suite, split, model, count_if(reason IS NOT NULL) AS n_excluded,
                         count(DISTINCT split) AS n_splits,
                         avg(CAST(clean_correct AS DOUBLE)) AS clean_accuracy
                  FROM {t['cand']} GROUP BY GROUPING SETS ((suite, split, model), (suite, model)))
            -- every suite × split × model with a candidate has its row, also when all of them are excluded
            SELECT c.suite, c.split, c.model, {', '.join(f"coalesce(f.{k}, 0) AS {k}" for k in _COUNTS)},
                   f.median_fiber_size, c.n_splits, c.n_excluded, c.clean_accuracy
            FROM c LEFT JOIN f ON f.suite = c.suite AND f.model = c.model AND f.split IS NOT DISTINCT FROM c.split""")
        corruptions = f"(SELECT string_agg(condition, ',' ORDER BY condition) FROM {t['suite']} x WHERE x.suite = s.suite)"
        summary = con.sql(f"""SELECT {head}, s.model, CAST(s.split AS INTEGER) AS split, {int(min_support)} AS min_support,
                {summary_columns_sql()},
                CAST(n_splits AS BIGINT) AS n_splits, clean_accuracy,
                n_true / nullif(n_candidates, 0) AS robust_accuracy, {corruptions} AS corruptions
            FROM {t['sum']} s JOIN {t['order']}_arrow o USING (model)
            ORDER BY s.suite, s.split NULLS LAST, o.model_rank""").to_arrow_table()
        fibers = con.sql(f"""SELECT {head}, s.model, CAST(s.split AS INTEGER) AS split, fiber_key,
                predicted || ',' || CAST(clean_correct AS VARCHAR) || ',' || CAST(confidence_decile AS VARCHAR)
                    AS evidence_key,
                predicted, clean_correct, CAST(confidence_decile AS INTEGER) AS confidence_decile,
                lo AS evidence_lo, hi AS evidence_hi, CAST(n AS BIGINT) AS n, n_true, status
            FROM {t['fib']} s ORDER BY s.suite, s.split, s.model, fiber_key""").to_arrow_table()
        candidates = None
        if with_candidates:
            candidates = con.sql(f"""SELECT {head}, s.model, CAST(s.split AS INTEGER) AS split,
                    s.image_id AS candidate_id, f.fiber_key, s.y AS claim_value,
                    coalesce(f.status, 'excluded') AS status, s.reason AS excluded_reason
                FROM {t['cand']} s LEFT JOIN {t['fib']} f
                  ON s.reason IS NULL AND f.suite = s.suite AND f.split = s.split AND f.model = s.model
                 AND f.predicted = s.predicted AND f.clean_correct = s.clean_correct
                 AND f.confidence_decile = s.confidence_decile""").to_arrow_table()
        # a model whose every candidate is excluded has no audited evidence: ranked apart (its ranks NULL) and
        # never chosen, also not on its clean accuracy, which counts the excluded candidates
        choice = con.sql(f"""WITH r AS (
                SELECT s.*, o.model_rank, s.n_candidates > 0 AS audited
                FROM {t['sum']} s JOIN {t['order']}_arrow o USING (model)
                WHERE s.split IS NOT NULL),
            w AS (SELECT *, n_true / nullif(n_candidates, 0) AS robust_accuracy,
                         (certified_true + certified_false) / nullif(n_candidates, 0) AS certified_fraction,
                         CASE WHEN audited THEN rank() OVER (PARTITION BY suite, split, audited
                                                             ORDER BY clean_accuracy DESC) END AS rank_by_benchmark,
                         CASE WHEN audited THEN rank() OVER (PARTITION BY suite, split, audited
                                                             ORDER BY n_true / nullif(n_candidates, 0) DESC) END
                             AS rank_by_robustness,
                         CASE WHEN audited THEN rank() OVER (PARTITION BY suite, split, audited
                             ORDER BY (certified_true + certified_false) / nullif(n_candidates, 0) DESC) END
                             AS rank_by_certification,
                         audited AND row_number() OVER (PARTITION BY suite, split, audited
                                                        ORDER BY clean_accuracy DESC, model_rank) = 1
                             AS chosen_by_benchmark,
                         audited AND row_number() OVER (PARTITION BY suite, split, audited
                                                        ORDER BY n_true / nullif(n_candidates, 0) DESC, model_rank) = 1
                             AS chosen_by_robustness,
                         audited AND row_number() OVER (PARTITION BY suite, split, audited
                             ORDER BY (certified_true + certified_false) / nullif(n_candidates, 0) DESC, model_rank) = 1
                             AS chosen_by_certification
                  FROM r)
            SELECT {sql_literal(source)} AS source, suite AS audit_id, {sql_literal(CLAIM)} AS claim, model,
                   CAST(split AS INTEGER) AS split, 'clean_accuracy' AS benchmark_metric_name,
                   clean_accuracy AS benchmark_metric, robust_accuracy, certified_fraction,
                   ambiguous / nullif(n_candidates, 0) AS ambiguous_fraction,
                   CAST(benchmark_only_errors AS BIGINT) AS false_decisions,
                   CAST(n_candidates AS BIGINT) AS n_candidates,
                   CAST(rank_by_benchmark AS BIGINT) AS rank_by_benchmark,
                   CAST(rank_by_robustness AS BIGINT) AS rank_by_robustness,
                   CAST(rank_by_certification AS BIGINT) AS rank_by_certification,
                   chosen_by_benchmark, chosen_by_robustness, chosen_by_certification
            FROM w ORDER BY suite, split, model_rank""").to_arrow_table()
        per_split = summary.filter(pa.compute.is_valid(summary["split"]))
        metrics = _metrics(con, source, suites, per_split, choice, bootstrap=bootstrap, seed=seed)
    finally:
        for name in ("suite", "ev", "rob", "cand", "fib", "sum"):
            con.execute(f"DROP TABLE IF EXISTS {t[name]}")
        con.unregister(f"{t['suite']}_arrow")
        con.unregister(f"{t['order']}_arrow")
    return VisionAudit(summary, fibers, candidates, choice, metrics)


def _metric_row(source: str, suite: str, metric: str, value: float | None, lo: float | None = None,
                hi: float | None = None, min_support: int = 1) -> dict:
    return {"source": source, "experiment": suite, "claim": CLAIM, "fiber_rule": "exact",
            "min_support": min_support, "metric": metric, "value": value, "ci_low": lo, "ci_high": hi}


def _metrics(con: duckdb.DuckDBPyConnection, source: str, suites: Sequence[Suite], per_split: pa.Table,
             choice: pa.Table, *, bootstrap: int, seed: int) -> pa.Table:
    """Per suite: the spread across split × model rows and how often the winners disagree (grouped SQL)."""
    if per_split.num_rows == 0:
        return pa.Table.from_pylist([], schema=_METRIC_SCHEMA)
    con.register("_vis_per_split", per_split)
    con.register("_vis_choice", choice)
    try:
        names = [name for name, _ in SPREAD] + ["median_clean_accuracy", "median_robust_accuracy", "n_splits"]
        aggs = [agg for _, agg in SPREAD] + ["median(clean_accuracy)", "median(robust_accuracy)",
                                             "count(DISTINCT split)"]
        cols = ", ".join(f"CAST({agg} AS DOUBLE) AS {name}" for name, agg in zip(names, aggs, strict=True))
        spread = con.sql(f"""SELECT {sql_literal(source)} AS source, audit_id AS experiment, {sql_literal(CLAIM)} AS claim,
                'exact' AS fiber_rule, CAST(any_value(min_support) AS INTEGER) AS min_support, metric, value,
                NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high
            FROM (SELECT audit_id, any_value(min_support) AS min_support, {cols} FROM _vis_per_split GROUP BY audit_id)
            UNPIVOT (value FOR metric IN ({', '.join(names)}))
            GROUP BY audit_id, metric, value ORDER BY audit_id""").to_arrow_table()
        # per suite × split: does the clean-accuracy winner also win robustness / certification?
        winners = con.sql("""SELECT audit_id, count(*) AS n_splits,
                count_if(NOT both_robust) AS differs_robust, count_if(NOT tie_robust) AS tie_robust,
                count_if(NOT both_cert) AS differs_cert, count_if(NOT tie_cert) AS tie_cert
            FROM (SELECT audit_id, split,
                    bool_or(chosen_by_benchmark AND chosen_by_robustness) AS both_robust,
                    bool_or(rank_by_benchmark = 1 AND rank_by_robustness = 1) AS tie_robust,
                    bool_or(chosen_by_benchmark AND chosen_by_certification) AS both_cert,
                    bool_or(rank_by_benchmark = 1 AND rank_by_certification = 1) AS tie_cert
                  FROM _vis_choice WHERE n_candidates > 0 GROUP BY audit_id, split)  -- a split without winners: none
            GROUP BY audit_id ORDER BY audit_id""").fetchall()
    finally:
        con.unregister("_vis_per_split")
        con.unregister("_vis_choice")
    ms = int(per_split["min_support"][0].as_py())
    rows: list[dict] = []
    for audit_id, n, d_rob, t_rob, d_cert, t_cert in winners:  # one row per suite
        for metric, k in (("clean_winner_differs_from_robust_winner", d_rob),
                          ("clean_winner_differs_from_robust_winner_tie_aware", t_rob),
                          ("clean_winner_differs_from_certification_winner", d_cert),
                          ("clean_winner_differs_from_certification_winner_tie_aware", t_cert)):
            rows.append(_metric_row(source, audit_id, metric, k / n, *wilson(k, n), min_support=ms))
    if bootstrap:
        rows += _bootstrap_rows(source, per_split, bootstrap=bootstrap, seed=seed, min_support=ms)
    return pa.concat_tables([spread, pa.Table.from_pylist(rows, schema=_METRIC_SCHEMA)])


_METRIC_SCHEMA = pa.schema([
    ("source", pa.string()), ("experiment", pa.string()), ("claim", pa.string()), ("fiber_rule", pa.string()),
    ("min_support", pa.int32()), ("metric", pa.string()), ("value", pa.float64()), ("ci_low", pa.float64()),
    ("ci_high", pa.float64()),
])


_BOOTSTRAP_BLOCK = 1 << 22  # resampled grid cells per block of draws (32 MB of doubles)


def _bootstrap_rows(source: str, per_split: pa.Table, *, bootstrap: int, seed: int, min_support: int) -> list[dict]:
    """Median ambiguous fraction with a percentile interval from resampling whole splits.

    Models within a split share their test images, so splits (not split × model rows) are resampled:
    a split × model matrix per suite, draws as index rows, one nanmedian per draw.
    """
    audit = np.asarray(per_split["audit_id"].to_pylist())
    split = np.asarray(per_split["split"].to_pylist())
    model = np.asarray(per_split["model"].to_pylist())
    amb = np.asarray(per_split["ambiguous_fraction"].to_pylist(), dtype=float)
    rng = np.random.default_rng(seed)
    rows = []
    for audit_id in np.unique(audit):  # one per suite
        sel = audit == audit_id
        splits, models = np.unique(split[sel]), np.unique(model[sel])
        if len(splits) < 2:
            continue
        grid = np.full((len(splits), len(models)), np.nan)
        grid[np.searchsorted(splits, split[sel]), np.searchsorted(models, model[sel])] = amb[sel]
        draws = rng.integers(0, len(splits), size=(bootstrap, len(splits)))  # drawn always: later suites' stay
        if np.isnan(grid).all():  # no split × model with an audited candidate: no median (as without bootstrap)
            continue
        # the medians a block of draws at a time: the resampled grids of every draw at once would need
        # bootstrap × splits × models doubles (10,000 × 1,000 × 8: 640 MB); the draws, hence the numbers, are the same
        step = max(1, _BOOTSTRAP_BLOCK // grid.size)
        with warnings.catch_warnings():  # a draw of splits without audited candidates has no median: left out
            warnings.simplefilter("ignore", RuntimeWarning)
            meds = np.concatenate([np.nanmedian(grid[draws[b:b + step]].reshape(len(draws[b:b + step]), -1), axis=1)
                                   for b in range(0, bootstrap, step)])
        meds = meds[~np.isnan(meds)]
        lo: float | None = None
        hi: float | None = None
        if meds.size:
            lo, hi = (float(q) for q in np.percentile(meds, [2.5, 97.5]))
        rows.append(_metric_row(source, str(audit_id), "median_ambiguous_fraction_bootstrap",
                                float(np.nanmedian(grid)), lo, hi, min_support))
    return rows


# ---------------------------------------------------------------------------------------------- stage

SOURCE_NAMES = {"digits": "vision-digits", "mnist-c": "vision-mnist-c"}
_SECTION_KEYS = {"suites", "confidence_bins", "min_support", "clean", "conditions", "candidates", "bootstrap",
                 "model_order", "confidence"}
_NAME_KEYS = ("suites", "conditions", "model_order")  # lists of names (or one comma-separated string)
# each bin is one quantile in the evidence SQL: beyond this the query text alone grows without bound, and
# qcut drops bins that hold no distinct confidence anyway
MAX_CONFIDENCE_BINS = 1000
# resamples of splits: 10,000 pin the 95 % percentile interval far below its own width (the paper uses 1,000),
# and their draws (resamples × splits integers) stay small even at the protocol's 1,000 splits
MAX_BOOTSTRAP = 10_000


@dataclass(frozen=True)
class VisionConfig:
    """The ``[vision]`` section of a spec; every value checked on construction."""

    suites: tuple[str, ...] = ("all", "severity", "each")
    confidence_bins: int = 10
    min_support: int = 1
    clean: str = "clean"
    conditions: tuple[str, ...] | None = None   # declared corruption names (a user's table is checked against them)
    candidates: bool = True
    bootstrap: int = 1000   # 0: no bootstrap interval
    model_order: tuple[str, ...] | None = None
    confidence: str = defaults.CONFIDENCE   # "score" (any finite number) or "probability" (also in [0, 1])

    def __post_init__(self) -> None:
        where = "[vision]"
        bad = [k for k in self.suites if k not in SUITE_KINDS]
        if bad or not self.suites:
            raise SpecError(f"{where} suites = {list(self.suites)}: choose from {', '.join(SUITE_KINDS)}")
        if not 2 <= self.confidence_bins <= MAX_CONFIDENCE_BINS:
            raise SpecError(f"{where}: confidence_bins must be from 2 to {MAX_CONFIDENCE_BINS}, "
                            f"got {self.confidence_bins}")
        check_support(self.min_support, where)
        if not 0 <= self.bootstrap <= MAX_BOOTSTRAP:
            raise SpecError(f"{where}: bootstrap must be from 0 (no interval) to {MAX_BOOTSTRAP}, got {self.bootstrap}")
        check_not_blank(self.clean, f"{where} clean")
        if self.confidence not in defaults.CONFIDENCE_KINDS:
            raise SpecError(f"{where} confidence = {self.confidence!r}: use "
                            f"{' or '.join(map(repr, defaults.CONFIDENCE_KINDS))} "
                            "(a probability is checked to be in [0, 1])")
        if self.conditions is not None and self.clean in self.conditions:
            raise SpecError(f"{where}: conditions declares the corruptions; {self.clean!r} is the clean condition "
                            "(clean = ...), leave it out of them")

    @classmethod
    def from_section(cls, section: Mapping[str, object]) -> VisionConfig:
        """The section as written in a spec: names as lists or comma-separated strings, every other value of its
        field's type (``confidence_bins = 2.5`` or ``candidates = "false"`` is an error, never 2 or true)."""
        where = "[vision]"
        if not isinstance(section, Mapping):
            raise SpecError(f"{where} must be a table of settings")
        check_keys(section, _SECTION_KEYS, where)
        names: dict[str, Any] = {k: name_list(section[k], f"{where} {k}") for k in _NAME_KEYS if k in section}
        scalars = typed_fields(cls, {k: v for k, v in section.items() if k not in _NAME_KEYS}, where)
        return cls(**names, **scalars)


def headline_notes(source: str, result: VisionAudit) -> list[str]:
    """One console line per dataset: the 'all corruptions' suite's headline numbers."""
    m = {(r["experiment"], r["metric"]): r for r in result.metrics.to_pylist()}
    key = "robust[all]"
    if (key, "median_ambiguous_fraction") not in m:
        return []

    def pct(metric: str) -> str:
        r = m.get((key, metric))
        if r is None or r["value"] is None:
            return "n/a"
        ci = f" [{r['ci_low']:.0%}, {r['ci_high']:.0%}]" if r.get("ci_low") is not None else ""
        return f"{r['value']:.1%}{ci}"

    boot = (key, "median_ambiguous_fraction_bootstrap") in m
    amb = pct("median_ambiguous_fraction_bootstrap" if boot else "median_ambiguous_fraction")
    return [f"{source}: median ambiguous {amb}; median clean accuracy {pct('median_clean_accuracy')}, "
            f"robust {pct('median_robust_accuracy')}; clean winner ≠ robustness winner in "
            f"{pct('clean_winner_differs_from_robust_winner')} of splits, ≠ certification winner in "
            f"{pct('clean_winner_differs_from_certification_winner')}"]
