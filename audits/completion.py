"""Completion curves: which probe to measure next, and how much each measurement certifies.

Given a base evidence map, a claim and a pool of *probes* (responses that could be measured next),
each policy adds probes one at a time. The choice is made on a **calibration** split only and then
frozen; the result is scored on the held-out **test** split:

* a test candidate is *certified* when the calibration fiber of its (evidence + probes) key is pure
  and holds at least ``min_support`` calibration candidates; its decision is that fiber's label;
* a *false decision* is a certified test candidate whose claim value differs from that label;
* test candidates in unseen, unsupported or mixed calibration fibers are ambiguous (not decided).

Policies (docs/package.md): ``response_rank`` (largest calibration certified fraction after adding the
probe), ``uncertainty`` (highest label entropy of the probe on calibration), ``diversity`` (lowest
mean |Pearson r| with the measured columns), ``benchmark_aligned`` (highest mean |r|), ``random``
(``random_draws`` random orders per seed) and ``oracle`` (most correct certified decisions on *test*:
it uses test labels, so ``deployable`` is false). response_rank and oracle break ties by ``tie_break``.
``cost_gain`` (run when named, or by the spec stage when probes have prices) adds the probe with the
largest calibration certified gain per unit cost (``costs``: a price per probe; the cheaper probe on
ties). Every row carries ``cumulative_cost`` (the prices of the probes added so far; the number of
probes when no prices are given); with a ``budget`` the result holds the budgeted plan — cost_gain's
modal probe order over seeds, frozen on calibration, cut before it exceeds the budget — and
``within_budget`` marks the rows whose cumulative cost fits.

Refinement (docs/reference.md): a probe only splits fibers, and the parts of a pure fiber stay pure. With
``refinement = "mixed"`` (the default) a candidate whose fiber is certified keeps its decision —
it needs no further measurement — and every step re-examines only the candidates of mixed
calibration fibers: pure fibers below ``min_support`` only split into smaller pure fibers, unseen
keys into unseen keys, so neither can ever become certified. ``refinement = "full"`` recomputes
every fiber from scratch after each probe, as the paper's script does: a certified fiber may then
split into parts below ``min_support``, and curves can fall.

Everything runs in DuckDB over all seeds at once (seed is a column; the split of a candidate is a
hash of its id and the seed). A *track* is one (policy, seed, random draw) sequence of probes; a
*node* is a probe sequence, numbered densely step by step (a child of (node, probe) takes the next
free number, so any number of steps fits 64 bits), and tracks that share a prefix share its
work. Python loops only over steps.

Cost (measured in ``docs/scale.md``): small-integer key parts (binary flags, bin numbers) are coded
as value - min from one aggregate pass (dense_rank sorts only for other types); the pattern id and
all probe codes are packed into BIGINTs; the candidates × seeds pass only counts calibration / test
candidates per (seed, pattern); each step groups the mixed-fiber pattern rows of every requested
child straight into fiber sums, and builds pattern rows only for the children the tracks move to.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from dcaudit import defaults, splits
from dcaudit.audits.evidence import EvidenceMap, evidence_select, parse_fiber_rule
from dcaudit.claims import Claim, check_columns, parse_claim, sql_literal, value_kind
from dcaudit.engine import machine_limit
from dcaudit.errors import InputError, SpecError
from dcaudit.inputs import ROW, duckdb_message, label_of
from dcaudit.spec import AuditTask, check_keys, coerce_field, name_list, split_names, typed_fields
from dcaudit.stage import StageContext, StageTables

POLICIES = defaults.COMPLETION_POLICIES
# cost_gain (largest calibration certified gain per unit cost) runs when named, or in a spec whose probes
# have prices; POLICIES are the ones run when none are named.
ALL_POLICIES = (*POLICIES, "cost_gain")
DEFAULT_POLICIES = POLICIES
REFINEMENTS = defaults.REFINEMENTS
# How response_rank and oracle choose among probes with equal scores (common on small data: most
# probes leave the calibration certified fraction unchanged): "entropy" prefers the probe that leaves
# the least label entropy H(claim | fiber) in calibration (the residual uncertainty about the
# claim), then the probe listed first; "first" / "last" take the first / last probe as listed.
TIE_BREAKS = defaults.TIE_BREAKS
# Policies whose choice needs the refined fibers of every candidate probe (scored after refining).
_FIBER_SCORED = ("response_rank", "oracle", "cost_gain")
_counter = itertools.count()
# Key parts of these types are coded as value - min (one aggregate pass) when their range is small.
_SMALL_INTEGER_TYPES = frozenset({"BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT",
                                  "UINTEGER"})
_MAX_DIRECT_RANGE = 1 << 16


@dataclass(frozen=True)
class _Code:
    """An integer code of a key part: ``sql`` takes values in ``0 .. size - 1``."""

    sql: str
    size: int


def _packed(parts: list[_Code | None]) -> str | None:
    """Mixed-radix SQL packing the codes into one BIGINT, or None if a part has no code or it may overflow."""
    if any(p is None for p in parts):
        return None
    terms, scale = [], 1
    for p in parts:
        assert p is not None
        terms.append(f"{p.sql} * {scale}")
        scale *= p.size
    return " + ".join(terms) if scale < 2**62 else None


@dataclass(frozen=True)
class CompletionConfig:
    """What to run; validated on construction."""

    probes: tuple[str, ...]
    seeds: int = defaults.COMPLETION_SEEDS
    calibration_fraction: float = defaults.CALIBRATION_FRACTION
    min_support: int = defaults.COMPLETION_MIN_SUPPORT
    policies: tuple[str, ...] = DEFAULT_POLICIES
    random_draws: int = defaults.RANDOM_DRAWS
    seed_offset: int = defaults.SEED_OFFSET
    steps: int | None = None          # default: every probe
    refinement: str = defaults.REFINEMENT
    tie_break: str = defaults.TIE_BREAK
    costs: tuple[tuple[str, float], ...] = ()  # (probe, price) pairs; unnamed probes cost 1 when empty
    budget: float | None = None                # the budgeted plan stops before its cumulative cost exceeds this

    def __post_init__(self) -> None:
        if not self.probes:
            raise SpecError("completion: name at least one probe column")
        if abs(self.seed_offset) > defaults.MAX_SEED_OFFSET:  # seeds are BIGINT in DuckDB and the package
            raise SpecError(f"completion: seed_offset must lie within ±{defaults.MAX_SEED_OFFSET}, got {self.seed_offset}")
        if len(set(self.probes)) != len(self.probes):
            raise SpecError(f"completion: probes repeat: {', '.join(self.probes)}")
        if len(self.probes) > defaults.MAX_PROBES:
            raise SpecError(f"completion: at most {defaults.MAX_PROBES} probes (probe sets are kept as 64-bit masks)")
        if not 1 <= self.seeds <= defaults.MAX_SEEDS:
            raise SpecError(f"completion: seeds must be from 1 to {defaults.MAX_SEEDS}, got {self.seeds}")
        splits.check_calibration_fraction(self.calibration_fraction, "completion")
        if self.min_support < 1:
            raise SpecError(f"completion: min_support must be >= 1, got {self.min_support}")
        unknown = [p for p in self.policies if p not in ALL_POLICIES]
        if unknown or not self.policies:
            raise SpecError(f"completion: unknown policy {unknown or '(none)'}; use {', '.join(ALL_POLICIES)}")
        if not 1 <= self.random_draws <= defaults.MAX_SEEDS:
            raise SpecError(f"completion: random_draws must be from 1 to {defaults.MAX_SEEDS}, got {self.random_draws}")
        if self.seeds * self.random_draws > 10 * defaults.MAX_SEEDS:  # rows per probe step of the random policy
            raise SpecError(f"completion: seeds × random_draws = {self.seeds * self.random_draws:,} random probe "
                            f"orders; at most {10 * defaults.MAX_SEEDS:,} fit a run")
        if self.refinement not in REFINEMENTS:
            raise SpecError(f"completion: refinement = {self.refinement!r}; use 'mixed' or 'full'")
        if self.tie_break not in TIE_BREAKS:
            raise SpecError(f"completion: tie_break = {self.tie_break!r}; use {', '.join(TIE_BREAKS)}")
        if self.steps is not None and not 1 <= self.steps <= len(self.probes):
            raise SpecError(f"completion: steps must be between 1 and {len(self.probes)} (the number of probes)")
        priced = dict(self.costs)
        unknown_probes = [p for p in priced if p not in self.probes]
        if unknown_probes:
            raise SpecError(f"completion: costs name {unknown_probes}, which are not probes ({', '.join(self.probes)})")
        if priced and set(priced) != set(self.probes):
            raise SpecError(f"completion: costs must price every probe; missing "
                            f"{[p for p in self.probes if p not in priced]}")
        bad = [f"{p} = {c!r}" for p, c in priced.items() if not (isinstance(c, int | float) and not isinstance(c, bool)
                                                                and 0 < c <= defaults.MAX_COST)]
        if bad:
            raise SpecError(f"completion: a probe's cost must be a number above 0 and at most {defaults.MAX_COST:g}; "
                            f"got {', '.join(bad)}")
        if self.budget is not None and not (isinstance(self.budget, int | float) and not isinstance(self.budget, bool)
                                            and 0 < self.budget <= defaults.MAX_BUDGET):
            raise SpecError(f"completion: budget must be a number above 0 and at most {defaults.MAX_BUDGET:g} (every "
                            f"probe at the largest cost, {defaults.MAX_COST:g}), got {self.budget!r}")

    def cost_of(self, probe: str) -> float:
        return float(dict(self.costs).get(probe, 1.0))

    @property
    def n_steps(self) -> int:
        return self.steps or len(self.probes)


@dataclass(frozen=True)
class CompletionResult:
    table: pa.Table                       # completion rows (docs/package.md)
    recommended_probe: str | None         # response_rank's modal first choice
    recommended_share: float | None       # in what fraction of seeds it was chosen first
    n_candidates: int                     # complete cases over evidence + probes + claim
    n_excluded: int
    notes: list[str] = field(default_factory=list)
    # cost_gain's modal first choice (largest calibration certified gain per unit cost), when it ran
    recommended_by_cost: str | None = None
    # the budgeted plan: cost_gain's modal probe per step with its cumulative cost, while within budget
    plan: tuple[tuple[str, float], ...] = ()
    plan_certified_fraction: float | None = None  # held-out certified fraction at the end of the plan (mean)


def split_sql(id_sql: str, seed_sql: str, fraction: float) -> str:
    """TRUE for calibration: a hash of (candidate id, seed), so every seed is a column, not a loop.

    The replays' expression (:func:`dcaudit.splits.split_sql`), so a seed splits the candidates identically in
    replay.parquet and completion.parquet.
    """
    return splits.split_sql(f"hash(CAST({id_sql} AS VARCHAR))", f"CAST({seed_sql} AS BIGINT)",
                            splits.split_threshold(fraction))



def _probe_case(m: int, q: str, prefix: str) -> str:
    """The value code of probe ``q`` (an integer column) among ``{prefix}v0 .. v{m-1}``."""
    return "CASE " + " ".join(f"WHEN {q} = {j} THEN {prefix}v{j}" for j in range(m)) + " END"


def completion_curves(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    *,
    id_column: str,
    evidence: EvidenceMap,
    claim: Claim,
    config: CompletionConfig,
    source: str,
    audit_id: str | None = None,
) -> CompletionResult:
    """Every policy's completion curve, per seed and averaged, as one Arrow table."""
    if evidence.rule.is_window:
        raise SpecError(f"completion: fiber rule {evidence.rule} is a window rule; use exact, quantile or width")
    overlap = [p for p in config.probes if p in evidence.columns]
    if overlap:
        raise SpecError(f"completion: probe(s) {overlap} are already evidence columns")
    available = [r[0] for r in con.execute(f"DESCRIBE {relation}").fetchall()]
    check_columns(config.probes, [c for c in available if c != ROW], what="the completion probes")
    e, m, steps = len(evidence.columns), len(config.probes), config.n_steps
    # Complete cases over evidence + probes + claim; probes are binned by the evidence map's rule.
    emap = EvidenceMap(evidence.columns + config.probes, evidence.rule, "drop")
    ev = evidence_select(con, relation, id_column, emap, claim, available)
    t = f"_cmp{next(_counter)}_"
    tables = [f"{t}{x}" for x in ("ev", "cand", "pat", "w", "probes", "sn", "nst", "act", "tracks", "traj", "ent", "cor",
                                  "fib", "own", "pick", "req")]
    try:
        return _run(con, t, ev.sql, ev.key_columns, relation, id_column, evidence, claim, config,
                    source, audit_id, e, m, steps)
    finally:
        con.execute(f"DROP VIEW IF EXISTS {t}candv")
        for name in tables:
            con.execute(f"DROP TABLE IF EXISTS {name}")


def _run(con: duckdb.DuckDBPyConnection, t: str, ev_sql: str, keys: tuple[str, ...], relation: str,
         id_column: str, evidence: EvidenceMap, claim: Claim, config: CompletionConfig, source: str,
         audit_id: str | None, e: int, m: int, steps: int) -> CompletionResult:
    try:
        con.execute(f"CREATE TEMP TABLE {t}ev AS {ev_sql}")
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot evaluate the claim {claim.text!r} or the evidence: {duckdb_message(exc)}",
                         file=label_of(relation)) from None
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {t}ev)").fetchall())
    # Integer-typed key parts (binary flags, bin numbers) are coded as value - min: one aggregate
    # pass instead of a full sort per column (dense_rank); other types fall back to dense_rank.
    small = [k for k in keys if types[k].upper() in _SMALL_INTEGER_TYPES]
    bounds = ", ".join(f"min(CAST({k} AS BIGINT)), max(CAST({k} AS BIGINT))" for k in small)
    row = con.execute(
        f"SELECT count(*) FILTER (WHERE reason IS NULL), count(DISTINCT candidate_id) FILTER (WHERE reason IS NULL), "
        f"count(*) FILTER (WHERE reason IS NOT NULL){', ' + bounds if bounds else ''} FROM {t}ev "
        ).fetchall()[0]
    n_cand, n_distinct, n_excluded = row[:3]
    if n_cand == 0:
        raise InputError("no complete cases over the evidence, probes and claim", file=relation)
    if n_distinct != n_cand:
        dup = con.execute(f"SELECT candidate_id, count(*) FROM {t}ev WHERE reason IS NULL GROUP BY 1 "
                          f"HAVING count(*) > 1 ORDER BY 1 LIMIT 1").fetchall()[0]
        raise InputError(f"candidate id {dup[0]!r} occurs {dup[1]} times; the split needs unique ids",
                         file=relation, column=id_column)
    codes = {k: _Code(f"(CAST({k} AS BIGINT) - {lo})", hi - lo + 1)
             for k, lo, hi in zip(small, row[3::2], row[4::2], strict=True) if hi - lo < _MAX_DIRECT_RANGE}
    # Candidates with the same evidence, probe values and claim value are interchangeable: the work
    # runs over *patterns* (pid) weighted by how many calibration / test candidates each seed puts in
    # them. f = base fiber code, v_j = value code of probe j, vb = all probe codes packed in one
    # integer (when they fit), z_i feed Pearson r (numeric values as they are, other types by rank code).
    zs = []
    for i, k in enumerate(keys):
        numeric = value_kind(types[k]) in ("int", "float", "bool")  # lists, structs, dates, text: by rank
        zs.append(f"CAST({k} AS DOUBLE) AS z{i}" if numeric else
                  f"CAST(dense_rank() OVER (ORDER BY {k}) AS DOUBLE) AS z{i}")
    vs = [f"CAST({codes[k].sql if k in codes else f'dense_rank() OVER (ORDER BY {k}) - 1'} AS BIGINT) AS v{j}"
          for j, k in enumerate(keys[e:])]
    y_code = _Code("CAST(y AS BIGINT)", 2)
    pid = _packed([y_code, *(codes.get(k) for k in keys)]) or f"dense_rank() OVER (ORDER BY y, {', '.join(keys)}) - 1"
    f_sql = (_packed([codes.get(k) for k in keys[:e]]) or f"dense_rank() OVER (ORDER BY {', '.join(keys[:e])}) - 1"
             if e else "0")
    # Without window functions the coded candidates are a view (recomputed by its two readers, cheap
    # arithmetic) rather than a table of ~400 bytes per candidate (5 GB at 1e7).
    windowed = "dense_rank()" in " ".join([*vs, *zs, pid, f_sql])
    kind, cand = ("TABLE", f"{t}cand") if windowed else ("VIEW", f"{t}candv")
    con.execute(
        f"""CREATE TEMP {kind} {cand} AS
        SELECT candidate_id, y, CAST({pid} AS BIGINT) AS pid, CAST({f_sql} AS BIGINT) AS f,
               {', '.join(vs)}, {', '.join(zs)}
        FROM {t}ev WHERE reason IS NULL""")
    if kind == "TABLE":
        con.execute(f"DROP TABLE {t}ev")
    # Radix of the refined key: key * radix + value code is unique within a parent fiber.
    con.execute(f"CREATE TEMP TABLE {t}pat AS SELECT DISTINCT * EXCLUDE (candidate_id) FROM {cand}")
    # one pass over the patterns (every value of a probe is in one): its largest code and its count of values
    stats = con.execute(f"SELECT {', '.join(f'max(v{j}), count(DISTINCT v{j})' for j in range(m))} FROM {t}pat"
                        ).fetchall()[0]
    radix = max(stats[0::2]) + 1
    distinct_probes = [p for p, values in zip(config.probes, stats[1::2], strict=True) if values == n_cand > 1]
    packed_probes = radix ** m < 2**62
    vb = " + ".join(f"v{j} * {radix ** j}" for j in range(m)) if packed_probes else "NULL"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {t}pat AS SELECT *, CAST({vb} AS BIGINT) AS vb FROM {t}pat")
    lo, hi = config.seed_offset, config.seed_offset + config.seeds
    con.execute(
        f"""CREATE TEMP TABLE {t}w AS
        SELECT seed, pid, count_if(cal) AS n_cal, count_if(NOT cal) AS n_test FROM (
          SELECT s.seed, c.pid,  -- BIGINT as range() makes it: offsets reach ±2^62 (dcaudit.defaults)
                 {split_sql('c.candidate_id', 's.seed', config.calibration_fraction)} AS cal
          FROM {cand} c CROSS JOIN (SELECT range AS seed FROM range({lo}, {hi})) s)
        GROUP BY seed, pid""")
    con.execute(f"CREATE TEMP TABLE {t}sn AS SELECT seed, sum(n_cal) AS n_cal, sum(n_test) AS n_test "
                f"FROM {t}w GROUP BY seed")
    short = con.execute(f"SELECT seed, n_cal, n_test FROM {t}sn WHERE n_cal = 0 OR n_test = 0 LIMIT 1").fetchall()
    if short:
        raise InputError(f"seed {short[0][0]}: the {n_cand} complete cases give {short[0][1]} calibration and "
                         f"{short[0][2]} test candidates; both splits need candidates", file=relation)
    # pw = radix ** q: probe q's code in vb is (vb // pw) % radix.
    names = ", ".join(f"({j}, {sql_literal(p)}, {radix ** j if packed_probes else 0}, {config.cost_of(p)!r})"
                      for j, p in enumerate(config.probes))
    con.execute(f"CREATE TEMP TABLE {t}probes AS SELECT CAST(q AS INTEGER) AS q, probe, CAST(pw AS BIGINT) AS pw, "
                f"CAST(cost AS DOUBLE) AS cost FROM (VALUES {names}) v(q, probe, pw, cost)")
    mixed = config.refinement == "mixed"
    ms = int(config.min_support)

    # Step 0: the base evidence map. nst = cumulative statistics of every node computed so far.
    base = (f"SELECT w.seed, CAST(0 AS BIGINT) AS node, w.pid, p.y, p.f AS key, p.vb, w.n_cal, w.n_test "
            f"FROM {t}w w JOIN {t}pat p USING (pid)")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {t}fib AS {_fiber_sums(base)}")
    con.execute(f"CREATE TEMP TABLE {t}nst AS {_own_stats(t, ms)}")
    _next_active(con, t, mixed, radix, base)

    # Probe scores that need no fibers: label entropy and |Pearson r| with every column, on calibration.
    ent_parts = " UNION ALL ".join(
        f"SELECT w.seed, {j} AS q, p.v{j} AS v, sum(w.n_cal) AS k FROM {t}w w JOIN {t}pat p USING (pid) "
        f"WHERE w.n_cal > 0 GROUP BY w.seed, p.v{j}" for j in range(m))
    # Only uncertainty reads the label entropies.
    con.execute(f"""CREATE TEMP TABLE {t}ent AS
        SELECT seed, q, -sum(p * log2(p)) AS score FROM (
          SELECT seed, q, k / sum(k) OVER (PARTITION BY seed, q) AS p FROM ({ent_parts})) GROUP BY seed, q
        {'' if 'uncertainty' in config.policies else 'HAVING FALSE'}""")
    # Only diversity and benchmark_aligned read the correlations (e + m columns, m * (e + m - 1) pairs).
    pairs = [(j, i) for j in range(m) for i in range(e + m) if i != e + j]
    if pairs and {"diversity", "benchmark_aligned"} & set(config.policies):
        # Weighted Pearson r per seed over calibration patterns (two passes: means, then centred sums).
        cols = range(e + m)
        means = ", ".join(f"sum(w.n_cal * p.z{i}) / sum(w.n_cal) AS m{i}" for i in cols)
        dev = ", ".join(f"p.z{i} - mu.m{i} AS d{i}" for i in cols)
        sums = ", ".join([f"sum(wt * d{i} * d{i}) AS s{i}" for i in cols]
                         + [f"sum(wt * d{e + j} * d{i}) AS c_{j}_{i}" for j, i in pairs])
        longs = ", ".join(f"{{'q': {j}, 'col': {i}, 'r': c_{j}_{i} / nullif(sqrt(s{e + j} * s{i}), 0)}}"
                          for j, i in pairs)
        con.execute(f"""CREATE TEMP TABLE {t}cor AS
            WITH mu AS (SELECT w.seed, {means} FROM {t}w w JOIN {t}pat p USING (pid) WHERE w.n_cal > 0
                        GROUP BY w.seed),
            d AS (SELECT w.seed, w.n_cal AS wt, {dev} FROM {t}w w JOIN {t}pat p USING (pid) JOIN mu USING (seed)
                  WHERE w.n_cal > 0),
            s AS (SELECT seed, {sums} FROM d GROUP BY seed)
            SELECT seed, CAST(u.q AS INTEGER) AS q, CAST(u.col AS INTEGER) AS col,
                   coalesce(abs(u.r), 0.0) AS absr  -- a column constant on calibration has no linear relation
            FROM (SELECT seed, unnest([{longs}]) AS u FROM s)""")
    else:
        con.execute(f"CREATE TEMP TABLE {t}cor (seed BIGINT, q INTEGER, col INTEGER, absr DOUBLE)")

    # One track per (policy, seed), random_draws tracks per seed for random.
    track_rows = " UNION ALL ".join(
        f"SELECT {sql_literal(p)} AS policy, seed, CAST(d.range AS INTEGER) AS draw, CAST(0 AS BIGINT) AS node, "
        f"CAST(0 AS BIGINT) AS used FROM {t}sn, range({config.random_draws if p == 'random' else 1}) d"
        for p in config.policies)
    con.execute(f"CREATE TEMP TABLE {t}tracks AS {track_rows}")
    con.execute(f"""CREATE TEMP TABLE {t}traj AS SELECT policy, seed, draw, 0 AS step, CAST(NULL AS INTEGER) AS q,
                    node FROM {t}tracks""")

    next_node = 1  # node 0 is the base evidence map; under "mixed" every refined (node, probe) gets the next free number
    for step in range(1, steps + 1):
        next_node = _step(con, t, step, m, e, radix, mixed, ms, config, next_node, packed_probes,
                          last=step == steps)

    table = _assemble(con, t, evidence, claim, config, source, audit_id, n_cand, n_excluded)
    rec = [r for r in table.to_pylist() if r["policy"] == "response_rank" and r["seed"] is None and r["step"] == 1]
    notes = []
    if rec:
        notes.append(f"completion: recommended next probe {rec[0]['probe_added']} (response_rank's first choice "
                     f"in {100 * rec[0]['probe_added_share']:.0f}% of {config.seeds} seeds)")
    leaked = sorted(set(claim.columns) & set(config.probes))
    if leaked:  # a probe the claim reads decides it by construction: its curve says nothing about measuring
        notes.append(f"completion: the claim reads probe(s) {', '.join(leaked)}: measuring them decides the claim "
                     "by construction (leakage)")
    if id_column in config.probes:  # as the evidence check says for an evidence column
        notes.append(f"completion: the probes include the id column {id_column!r}: measured, every candidate is a "
                     "fiber of its own, so it certifies each by construction")
    for probe in distinct_probes:   # a name, a SMILES, a float measured to full precision: the same, by values
        if probe != id_column:
            notes.append(f"completion: probe {probe!r} takes a different value for every candidate: measured, "
                         "every candidate is a fiber of its own, so it certifies each by construction")
    if n_excluded:
        notes.append(f"completion: {n_excluded} candidates lack evidence, a probe or the claim and are left out "
                     f"(complete cases: {n_cand})")
    by_cost, plan, plan_cert = _cost_plan(con, table, config, notes)
    return CompletionResult(table, rec[0]["probe_added"] if rec else None,
                            rec[0]["probe_added_share"] if rec else None, n_cand, n_excluded, notes,
                            by_cost, plan, plan_cert)


def _cost_plan(con: duckdb.DuckDBPyConnection, table: pa.Table, config: CompletionConfig,
               notes: list[str]) -> tuple[str | None, tuple[tuple[str, float], ...], float | None]:
    """cost_gain's recommendation and budgeted plan, frozen on calibration: the modal probe order over seeds,
    cut where its cumulative cost would exceed the budget; and the mean held-out certified fraction each
    seed's own frozen plan reaches within the budget."""
    if "cost_gain" not in config.policies:
        return None, (), None
    name = f"_cmp_plan{next(_counter)}"
    con.register(name, table)
    try:
        seq = con.execute(f"""
            WITH s AS (SELECT seed, string_agg(probe_added, chr(31) ORDER BY step) AS order_
                       FROM {name} WHERE policy = 'cost_gain' AND seed IS NOT NULL AND step > 0 GROUP BY seed)
            SELECT order_, count(*) AS k FROM s GROUP BY order_ ORDER BY k DESC, order_ LIMIT 1""").fetchall()
        first = con.execute(f"""SELECT probe_added, probe_added_share FROM {name}
                                WHERE policy = 'cost_gain' AND seed IS NULL AND step = 1""").fetchall()
        plan_cert = None
        if config.budget is not None:
            plan_cert = con.execute(f"""
                SELECT avg(c) FROM (SELECT seed, arg_max(certified_fraction, step) AS c FROM {name}
                                    WHERE policy = 'cost_gain' AND seed IS NOT NULL AND within_budget GROUP BY seed)
                """).fetchall()[0][0]
    finally:
        con.unregister(name)
    order = seq[0][0].split(chr(31)) if seq else []
    plan, total = [], 0.0
    for probe in order:  # at most 62 probes
        total += config.cost_of(probe)
        if config.budget is not None and total > config.budget + 1e-12:
            break
        plan.append((probe, total))
    rec = first[0][0] if first else None
    if rec is not None:
        notes.append(f"completion: recommended next probe by certified gain per unit cost {rec} (cost "
                     f"{config.cost_of(rec):g}; cost_gain's first choice in {100 * first[0][1]:.0f}% of "
                     f"{config.seeds} seeds)")
    if config.budget is not None:
        shown = ", ".join(f"{p} (cumulative {c:g})" for p, c in plan) or "no probe"
        notes.append(f"completion: budgeted plan within {config.budget:g}: {shown}; held-out certified fraction "
                     f"at the end of each seed's frozen plan {100 * (plan_cert or 0):.2f}% (mean)")
    return rec, tuple(plan), plan_cert


def _fiber_sums(rows: str) -> str:
    """Fibers of pattern rows (seed, node, key, y, n_cal, n_test): calibration size ``n``, claim-true
    ``nt``, and test candidates with a true (``tt``) / false (``tf``) claim.

    Every statistic of a node is a sum over its fibers, so steps group pattern rows to fibers once
    and never join fiber counts back to pattern rows (except for the children tracks move to).
    """
    return f"""SELECT seed, node, key, CAST(sum(n_cal) AS BIGINT) AS n,
            CAST(sum(CASE WHEN y THEN n_cal ELSE 0 END) AS BIGINT) AS nt,
            CAST(sum(CASE WHEN y THEN n_test ELSE 0 END) AS BIGINT) AS tt,
            CAST(sum(CASE WHEN y THEN 0 ELSE n_test END) AS BIGINT) AS tf
        FROM ({rows}) GROUP BY seed, node, key"""


def _own_stats(t: str, ms: int) -> str:
    """Per (seed, node) counts from ``fib``: calibration certified, test certified, test false decisions."""
    cert = f"((nt = 0 OR nt = n) AND n >= {ms})"

    def total(value: str, cond: str) -> str:
        return f"CAST(coalesce(sum(CASE WHEN {cond} THEN {value} END), 0) AS BIGINT)"

    return f"""SELECT seed, node, {total('n', cert)} AS cal_cert, {total('tt + tf', cert)} AS test_cert,
        {total('tt + tf', cert + ' AND nt = n')} AS test_cert_true,
        -- a false decision: claim true in a fiber labelled false, or false in one labelled true
        {total('CASE WHEN nt = n THEN tf ELSE tt END', cert)} AS test_false,
        -- calibration label entropy left in mixed fibers (bits, summed over candidates)
        coalesce(sum(CASE WHEN 0 < nt AND nt < n THEN
            -(nt * log2(nt / n) + (n - nt) * log2((n - nt) / n)) END), 0.0) AS cal_entropy
        FROM {t}fib GROUP BY seed, node"""


def _next_active(con: duckdb.DuckDBPyConnection, t: str, mixed: bool, radix: int, rows: str) -> None:
    """Pattern rows the next step refines: those in mixed calibration fibers of ``fib`` (all under ``full``).

    ``rows`` gives the pattern rows (seed, node, pid, y, key, vb, n_cal, n_test) of the nodes reached.
    """
    # Under "full" every row is active: ``fib`` was grouped from these very rows, so a join with it would keep
    # them all.
    mixed_fibers = (f"JOIN {t}fib g ON g.seed = r.seed AND g.node = r.node AND g.key = r.key "
                    "WHERE 0 < g.nt AND g.nt < g.n" if mixed else "")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {t}act AS
        SELECT r.seed, r.node, r.pid, r.y, r.key, r.vb, r.n_cal, r.n_test FROM ({rows}) r {mixed_fibers}""")
    top = con.execute(f"SELECT max(key) FROM {t}act").fetchall()[0][0]
    if top is not None and (top + 1) * radix >= 2**62:
        # Re-densify keys per node so key * radix + value cannot overflow, however many steps.
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {t}act AS
            SELECT * REPLACE (CAST(dense_rank() OVER (PARTITION BY seed, node ORDER BY key) - 1 AS BIGINT) AS key)
            FROM {t}act""")


def _step(con: duckdb.DuckDBPyConnection, t: str, step: int, m: int, e: int, radix: int, mixed: bool,
          ms: int, config: CompletionConfig, next_node: int, packed_probes: bool, *, last: bool) -> int:
    """One probe more for every track; returns the next free node number."""
    unused = f"FROM {t}tracks k JOIN {t}probes p ON ((k.used >> p.q) & 1) = 0"
    # 1. Policies scored without fibers choose first, so only their chosen child is refined.
    scores = []
    if "uncertainty" in config.policies:
        scores.append(f"SELECT k.policy, k.seed, k.draw, p.q, x.score {unused} "
                      f"JOIN {t}ent x ON x.seed = k.seed AND x.q = p.q WHERE k.policy = 'uncertainty'")
    for policy, sign in (("diversity", "-"), ("benchmark_aligned", "")):
        if policy in config.policies:
            scores.append(
                f"SELECT k.policy, k.seed, k.draw, p.q, {sign}avg(r.absr) AS score {unused} "
                f"JOIN {t}cor r ON r.seed = k.seed AND r.q = p.q "
                f"AND (r.col < {e} OR ((k.used >> (r.col - {e})) & 1) = 1) "
                f"WHERE k.policy = '{policy}' GROUP BY k.policy, k.seed, k.draw, p.q")
    if "random" in config.policies:
        scores.append(f"SELECT k.policy, k.seed, k.draw, p.q, "
                      f"-CAST(hash('random:' || k.seed || ':' || k.draw || ':' || p.q) AS DOUBLE) AS score "
                      f"{unused} WHERE k.policy = 'random'")
    empty = "SELECT NULL::VARCHAR AS policy, NULL::INTEGER AS seed, NULL::INTEGER AS draw, NULL::INTEGER AS q"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {t}pick AS
        {'SELECT policy, seed, draw, first(q ORDER BY score DESC, q) AS q FROM (' + ' UNION ALL '.join(scores)
         + ') GROUP BY ALL' if scores else empty + ' WHERE FALSE'}""")
    # 2. The children to refine: every unused probe of fiber-scored tracks, the chosen one of the others.
    fiber_scored = ", ".join(sql_literal(p) for p in _FIBER_SCORED)
    requested = f"""WITH x AS (SELECT DISTINCT seed, node, q FROM (
          SELECT k.seed, k.node, p.q {unused} WHERE k.policy IN ({fiber_scored})
          UNION ALL
          SELECT k.seed, k.node, c.q FROM {t}tracks k JOIN {t}pick c USING (policy, seed, draw)))"""
    if mixed:
        # A child (node, probe) is numbered densely from next_node, so node numbers never overflow (a
        # code like node * (m + 1) + q + 1 exceeds 64 bits after 14 steps of 20 probes); tracks that
        # share a prefix share its node, in every seed.
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {t}req AS {requested},
            kid AS (SELECT node, q, CAST({next_node} + dense_rank() OVER (ORDER BY node, q) - 1 AS BIGINT) AS child
                    FROM (SELECT DISTINCT node, q FROM x))
            SELECT x.seed, x.node, x.q, kid.child, pw.pw FROM x JOIN kid USING (node, q) JOIN {t}probes pw USING (q)""")
        top = con.execute(f"SELECT max(child) FROM {t}req").fetchall()[0][0]
        next_node = next_node if top is None else top + 1
        parents = f"{t}req"
    else:
        # Under "full" every fiber is refined, so a node's fibers are the base fibers split by the values of
        # its probes, whatever their order: the node is its set of probes (the tracks' used mask; the base
        # map is the empty set, 0), and tracks that reach one set in different orders share it. A set reached
        # from several parents is refined from one of them (the smallest), once per seed.
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {t}req AS {requested}
            SELECT x.seed, x.node, x.q, x.node | (CAST(1 AS BIGINT) << x.q) AS child, pw.pw
            FROM x JOIN {t}probes pw USING (q)""")
        parents = (f"(SELECT * FROM {t}req QUALIFY row_number() OVER (PARTITION BY seed, child ORDER BY node) = 1)")
    # 3. Refine the active candidates of each requested node by the probe; calibration counts per fiber.
    # The probe's value code is unpacked from vb (no join back to the patterns) when all codes fit.
    value = f"(a.vb // q.pw) % {radix}" if packed_probes else _probe_case(m, "q.q", "p.")
    pat_join = "" if packed_probes else f"JOIN {t}pat p ON p.pid = a.pid"
    refined = (f"SELECT a.seed, q.child AS node, a.pid, a.y, a.key * {radix} + {value} AS key, a.vb, a.n_cal, "
               f"a.n_test FROM {t}act a JOIN {parents} q ON a.seed = q.seed AND a.node = q.node {pat_join}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {t}fib AS {_fiber_sums(refined)}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {t}own AS {_own_stats(t, ms)}")
    # Under "mixed", decisions made at the parent are kept; a node with nothing left to refine
    # inherits its parent's statistics.
    keep = "p.{0} + " if mixed else ""
    cols = ("cal_cert", "test_cert", "test_cert_true", "test_false")
    # Entropy is never inherited: decided candidates carry none, and refined ones are recounted.
    inherit = f"JOIN {t}nst p ON p.seed = q.seed AND p.node = q.node" if mixed else ""
    con.execute(f"""INSERT INTO {t}nst
        SELECT q.seed, q.child AS node, {', '.join(keep.format(c) + f'coalesce(o.{c}, 0)' for c in cols)},
               coalesce(o.cal_entropy, 0.0)
        FROM (SELECT DISTINCT seed, {'node, ' if mixed else ''}child FROM {t}req) q
        {inherit}
        LEFT JOIN {t}own o ON o.seed = q.seed AND o.node = q.child""")
    # 4. Fiber-scored policies choose among the refined children.
    fs = [p for p in _FIBER_SCORED if p in config.policies]
    tie = {"entropy": "s.cal_entropy, p.q", "first": "p.q", "last": "p.q DESC"}[config.tie_break]
    if fs:
        con.execute(f"""INSERT INTO {t}pick
            SELECT k.policy, k.seed, k.draw,
                   CASE WHEN k.policy = 'oracle'
                        THEN first(p.q ORDER BY s.test_cert - s.test_false DESC, s.test_false, {tie})
                        WHEN k.policy = 'cost_gain'  -- calibration certified gain per unit cost, cheaper on ties
                        THEN first(p.q ORDER BY (s.cal_cert - par.cal_cert) / p.cost DESC, p.cost, {tie})
                        ELSE first(p.q ORDER BY s.cal_cert DESC, {tie}) END AS q
            {unused} JOIN {t}req r ON r.seed = k.seed AND r.node = k.node AND r.q = p.q
            JOIN {t}nst s ON s.seed = k.seed AND s.node = r.child
            JOIN {t}nst par ON par.seed = k.seed AND par.node = k.node
            WHERE k.policy IN ({', '.join(sql_literal(p) for p in fs)}) GROUP BY k.policy, k.seed, k.draw""")
    # 5. Advance every track; remember its node; keep the active candidates of the nodes reached.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {t}tracks AS
        SELECT k.policy, k.seed, k.draw, r.child AS node, k.used | (CAST(1 AS BIGINT) << c.q) AS used
        FROM {t}tracks k JOIN {t}pick c USING (policy, seed, draw)
        JOIN {t}req r ON r.seed = k.seed AND r.node = k.node AND r.q = c.q""")
    con.execute(f"INSERT INTO {t}traj SELECT policy, seed, draw, {step}, q, node FROM {t}tracks "
                f"JOIN {t}pick USING (policy, seed, draw)")
    if not last:
        # Pattern rows only for the children the tracks moved to (one of up to m per track).
        reached = f"(SELECT DISTINCT seed, node FROM {t}tracks) k ON k.seed = q.seed AND k.node = q.child"
        _next_active(con, t, mixed, radix, f"{refined} JOIN {reached}")
    return next_node


def _avg(column: str, order: str) -> str:
    """A mean summed in a fixed order: DuckDB's parallel ``avg`` adds partial sums in whatever order its
    threads finish, so two runs could differ in the last bit; over an ordered list they cannot."""
    return f"list_avg(list({column} ORDER BY {order}))"


def _assemble(con: duckdb.DuckDBPyConnection, t: str, evidence: EvidenceMap, claim: Claim,
              config: CompletionConfig, source: str, audit_id: str | None, n_cand: int, n_excluded: int) -> pa.Table:
    head = (f"{sql_literal(source)} AS source, {sql_literal(audit_id)} AS audit_id, {sql_literal(claim.text)} AS claim, "
            f"{sql_literal(evidence.label)} AS evidence, {sql_literal(','.join(config.probes))} AS probes, "
            f"{sql_literal(str(evidence.rule))} AS fiber_rule, CAST({int(config.min_support)} AS BIGINT) AS min_support, "
            f"CAST({float(config.calibration_fraction)!r} AS DOUBLE) AS calibration_fraction, "
            f"{sql_literal(config.refinement)} AS refinement, {sql_literal(config.tie_break)} AS tie_break")
    order = "CASE policy " + " ".join(f"WHEN '{p}' THEN {i}" for i, p in enumerate(ALL_POLICIES)) + " END"
    within = ("NULL::BOOLEAN" if config.budget is None
              else f"cumulative_cost <= {float(config.budget)!r} + 1e-12")
    return con.sql(f"""
        WITH x AS (
          SELECT j.policy, j.seed, j.draw, j.step, p.probe,
                 sum(coalesce(p.cost, 0.0)) OVER (PARTITION BY j.policy, j.seed, j.draw ORDER BY j.step)
                   AS cumulative_cost,
                 s.test_cert / n.n_test AS certified_fraction,
                 s.test_false / n.n_test AS false_decision_rate,
                 s.cal_cert / n.n_cal AS calibration_certified_fraction,
                 s.test_cert_true / n.n_test AS certified_true_fraction,
                 n.n_test
          FROM {t}traj j JOIN {t}nst s USING (seed, node) JOIN {t}sn n USING (seed)
          LEFT JOIN {t}probes p ON p.q = j.q),
        per_seed AS (
          SELECT policy, step, seed, count(*) AS n_draws,
                 {_avg("certified_fraction", "draw")} AS certified_fraction,
                 {_avg("false_decision_rate", "draw")} AS false_decision_rate,
                 {_avg("calibration_certified_fraction", "draw")} AS calibration_certified_fraction,
                 {_avg("certified_true_fraction", "draw")} AS certified_true_fraction,
                 {_avg("n_test", "draw")} AS n_test, {_avg("cumulative_cost", "draw")} AS cumulative_cost
          FROM x GROUP BY policy, step, seed),
        seed_probe AS (SELECT policy, step, seed, probe, count(*) AS k FROM x GROUP BY ALL),
        seed_mode AS (SELECT policy, step, seed, first(probe ORDER BY k DESC, probe) AS probe_added,
                             max(k) / sum(k) AS probe_added_share FROM seed_probe GROUP BY ALL),
        all_probe AS (SELECT policy, step, probe, count(*) AS k FROM x GROUP BY ALL),
        all_mode AS (SELECT policy, step, first(probe ORDER BY k DESC, probe) AS probe_added,
                            max(k) / sum(k) AS probe_added_share FROM all_probe GROUP BY ALL),
        mean AS (
          SELECT policy, step, CAST(NULL AS BIGINT) AS seed, count(*) AS n_draws,
                 {_avg("certified_fraction", "seed, draw")} AS certified_fraction,
                 quantile_cont(certified_fraction, 0.1) AS certified_fraction_p10,
                 quantile_cont(certified_fraction, 0.9) AS certified_fraction_p90,
                 {_avg("false_decision_rate", "seed, draw")} AS false_decision_rate,
                 quantile_cont(false_decision_rate, 0.1) AS false_decision_rate_p10,
                 quantile_cont(false_decision_rate, 0.9) AS false_decision_rate_p90,
                 {_avg("calibration_certified_fraction", "seed, draw")} AS calibration_certified_fraction,
                 {_avg("certified_true_fraction", "seed, draw")} AS certified_true_fraction,
                 {_avg("n_test", "seed, draw")} AS n_test, {_avg("cumulative_cost", "seed, draw")} AS cumulative_cost
          FROM x GROUP BY policy, step),
        se AS (  -- standard error of the mean over seeds (random: over per-seed means of the draws)
          SELECT policy, step,
                 list_aggregate(list(certified_fraction ORDER BY seed), 'stddev_samp') / sqrt(count(*))
                   AS certified_fraction_se,
                 list_aggregate(list(false_decision_rate ORDER BY seed), 'stddev_samp') / sqrt(count(*))
                   AS false_decision_rate_se
          FROM per_seed GROUP BY policy, step)
        SELECT {head}, policy, policy <> 'oracle' AS deployable, CAST(step AS BIGINT) AS step,
               probe_added, CAST(probe_added_share AS DOUBLE) AS probe_added_share, CAST(seed AS BIGINT) AS seed,
               CAST(n_draws AS BIGINT) AS n_draws,
               certified_fraction, certified_fraction_p10, certified_fraction_p90, certified_fraction_se,
               false_decision_rate, false_decision_rate_p10, false_decision_rate_p90, false_decision_rate_se,
               calibration_certified_fraction, certified_true_fraction,
               CAST(n_test AS DOUBLE) AS n_test, CAST({n_cand} AS BIGINT) AS n_candidates,
               CAST({n_excluded} AS BIGINT) AS n_excluded, cumulative_cost,
               {within} AS within_budget
        FROM (
          SELECT p.*, NULL::DOUBLE AS certified_fraction_p10, NULL::DOUBLE AS certified_fraction_p90,
                 NULL::DOUBLE AS false_decision_rate_p10, NULL::DOUBLE AS false_decision_rate_p90,
                 NULL::DOUBLE AS certified_fraction_se, NULL::DOUBLE AS false_decision_rate_se,
                 sm.probe_added, sm.probe_added_share
          FROM per_seed p JOIN seed_mode sm USING (policy, step, seed)
          UNION ALL BY NAME
          SELECT a.*, am.probe_added, am.probe_added_share, se.certified_fraction_se, se.false_decision_rate_se
          FROM mean a JOIN all_mode am USING (policy, step) JOIN se USING (policy, step))
        ORDER BY {order}, step, seed NULLS FIRST""").to_arrow_table()


# --- the pipeline stage -------------------------------------------------------------------------------------------

_SECTION_KEYS = {"audit", "evidence", "claim", "fiber_rule", "table", "probes", "seeds", "calibration_fraction",
                 "min_support", "policies", "random_draws", "seed_offset", "steps", "refinement", "tie_break",
                 "costs", "budget"}


def parse_costs(value: object, origin: str = "[completion] costs") -> tuple[tuple[str, float], ...]:
    """``{probe = price, …}`` (a TOML inline table) or "probe=price,probe=price" (the CLI) -> (probe, price) pairs."""
    if value is None:
        return ()
    if isinstance(value, str):  # the CLI's text: each price is read as a number here
        out: list[tuple[str, float]] = []
        for part in (p.strip() for p in value.split(",") if p.strip()):
            probe, sep, price = part.rpartition("=")
            probe = probe.strip().strip('"')
            if not sep or not probe:
                raise SpecError(f"{origin}: {part!r} is not probe=price")
            if probe in dict(out):  # the first price would be dropped without a word
                raise SpecError(f"{origin}: {probe!r} has two prices; give each probe one")
            try:
                out.append((probe, float(price)))
            except ValueError:
                raise SpecError(f"{origin}: the price of {probe!r} must be a number, got {price.strip()!r}") from None
        if not out:
            raise _no_prices(origin)
        return tuple(out)
    if not isinstance(value, dict):
        raise SpecError(f"{origin} must map probe names to prices, e.g. {{ \"SR-MMP\" = 2.0 }}")
    if not value:
        raise _no_prices(origin)
    # a spec's values are typed: true or "2" is no price (as seeds = true is no number of seeds)
    return tuple((str(probe), coerce_field(value, probe, float, origin, what="the price of ")) for probe in value)


def _no_prices(origin: str) -> SpecError:
    """An empty price list would silently mean unit costs (as an empty list of names would mean none)."""
    return SpecError(f"{origin} is empty: give every probe a price (probe=price, …), or leave costs out for a "
                     "cost of 1 per probe")


@dataclass(frozen=True)
class CompletionSection:
    """A spec's ``[completion]`` section, validated: which audit, evidence, claim and config to run."""

    task: AuditTask             # the audit the section refines
    evidence: EvidenceMap
    claim: Claim
    config: CompletionConfig
    table: str | None


def parse_completion_section(raw: object, audits: Sequence[AuditTask]) -> CompletionSection:
    """Validate ``[completion]`` against the spec's audits (``AuditTask`` objects); SpecError on any problem.

    ``audit = "<id>"`` takes evidence, claim, fiber rule, table and min_support from that audit
    (default: the spec's first audit); the section's own keys override them.
    """
    if not isinstance(raw, dict):
        raise SpecError("[completion] must be a table of settings")
    section: dict[str, Any] = dict(raw)
    check_keys(section, _SECTION_KEYS, "[completion]")
    by_id = {a.audit_id: a for a in audits}
    audit_id = section.get("audit")
    if audit_id is not None and audit_id not in by_id:
        raise SpecError(f"[completion] audit = {audit_id!r}: no such audit; the spec has {sorted(by_id)}")
    task = by_id[audit_id] if audit_id is not None else audits[0]
    # probes have no default: name_list's "or leave it out for the default" would send the user in a circle
    probes = section.get("probes")
    if probes is None or (isinstance(probes, str | list | tuple) and
                          not (split_names(probes) if isinstance(probes, str) else probes)):
        raise SpecError("[completion] needs probes = [\"column\", …]: the columns that could be measured next "
                        "(there is no default)")
    evidence = task.evidence
    if "evidence" in section or "fiber_rule" in section:
        cols = name_list(section["evidence"], "[completion] evidence") if "evidence" in section else evidence.columns
        rule = parse_fiber_rule(section["fiber_rule"]) if "fiber_rule" in section else evidence.rule
        evidence = EvidenceMap(cols, rule, "drop")
    claim = parse_claim(section["claim"]) if "claim" in section else task.claim
    costs = parse_costs(section.get("costs"))
    if section.get("budget") is not None and not costs:  # a budget without prices would be silently ignored
        raise SpecError("[completion] budget needs costs (a price per probe) to spend it on")
    default = list(DEFAULT_POLICIES) + (["cost_gain"] if costs else [])
    policies = name_list(section.get("policies", default), "[completion] policies")
    # options that only act with a policy that is not run would be silently ignored
    if "random_draws" in section and "random" not in policies:
        raise SpecError("[completion] random_draws is the number of random probe orders of the random policy, which "
                        f"is not among the policies ({', '.join(policies)}): add it, or leave random_draws out")
    if "tie_break" in section and not any(p in _FIBER_SCORED for p in policies):
        raise SpecError(f"[completion] tie_break orders the probes that {', '.join(_FIBER_SCORED)} score alike; none "
                        f"of them is among the policies ({', '.join(policies)}): leave tie_break out")
    # each scalar as its field's type: 2.5 seeds or seeds = true is an error, not 2 or 1 seeds
    scalars = {k: v for k, v in section.items() if k not in ("probes", "policies", "costs")}
    values = {"min_support": task.min_support, **typed_fields(CompletionConfig, scalars, "[completion]")}
    config = CompletionConfig(probes=name_list(section["probes"], "[completion] probes"), policies=policies, costs=costs, **values)
    return CompletionSection(task, evidence, claim, config, section.get("table", task.table))


def completion_stage(ctx: StageContext) -> StageTables:
    """Runner stage for a spec's ``[completion]`` section (see :func:`parse_completion_section`)."""
    parsed = parse_completion_section(ctx.spec.sections.get("completion") or {}, ctx.spec.audits)
    task, evidence, claim, config = parsed.task, parsed.evidence, parsed.claim, parsed.config
    relation = ctx.view_for(parsed.table)
    result = completion_curves(ctx.con, relation, id_column=ctx.spec.id_column, evidence=evidence, claim=claim,
                               config=config, source=ctx.source, audit_id=task.audit_id)
    ctx.notes.extend(result.notes)
    return {"completion": [result.table]}
