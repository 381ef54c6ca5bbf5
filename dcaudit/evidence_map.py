"""Evidence maps as types (the core): how a candidate's benchmark observables become a fiber key.

Fiber rules, in the CLI's notation:

* ``exact``        identical values of every evidence column;
* ``quantile:K``   K equal-count bins per numeric column (cut points deduplicated, bins ``(lo, hi]``);
* ``width:W``      fixed-width bins ``floor(x / W)``;
* ``knn:K``        the K nearest neighbours in sorted evidence (a window per candidate);
* ``window:T``     every candidate within ``|Δ evidence| <= T`` (a window per candidate).

``missing``: ``drop`` keeps complete cases only (the others are excluded with a reason), ``as-value``
makes "missing" (and NaN, ±inf) a value of its own. The SQL that computes keys is built in
:mod:`dcaudit.audits.evidence` (:class:`EvidenceSQL`, for the engine that runs it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dcaudit import defaults
from dcaudit.errors import SpecError

if TYPE_CHECKING:
    import pyarrow as pa

    from dcaudit.claims import Claim

RuleKind = Literal["exact", "quantile", "width", "knn", "window"]
WINDOW_RULES = ("knn", "window")


@dataclass(frozen=True)
class FiberRule:
    kind: RuleKind
    param: float | None = None

    def __str__(self) -> str:
        if self.param is None:
            return self.kind
        value = int(self.param) if self.kind in {"quantile", "knn"} else self.param
        return f"{self.kind}:{value:g}" if isinstance(value, float) else f"{self.kind}:{value}"

    @property
    def is_window(self) -> bool:
        return self.kind in WINDOW_RULES


# A number as written in a rule or tolerance: ASCII digits, one optional point and exponent. Python's float()
# also reads "1_0" (10), " 5 ", Arabic-Indic digits and "inf", none of which a user means as a width.
_DECIMAL = re.compile(r"[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_WHOLE = re.compile(r"[0-9]+", re.ASCII)


def whole_number(text: str) -> int | None:
    """``text`` as a whole number written in ASCII digits, or None (``"²".isdigit()`` is True, ``int("²")`` fails)."""
    return int(text) if _WHOLE.fullmatch(text) else None


def positive_number(value: str | float) -> float | None:
    """``value`` as a positive finite number, or None: the widths and tolerances of specs."""
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            return None
        number = float(value)
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
    return number if number > 0 and math.isfinite(number) else None


def parse_fiber_rule(text: str) -> FiberRule:
    """``exact``, ``quantile:20``, ``width:0.5``, ``knn:25`` or ``window:0.042``."""
    kind, _, arg = str(text).strip().lower().partition(":")
    kind, arg = kind.strip(), arg.strip()   # "width: 0.5" as "width:0.5"
    if kind == "exact" and not arg:
        return FiberRule("exact")
    if kind in {"quantile", "knn"}:
        count = whole_number(arg)
        if count is None or count < (2 if kind == "quantile" else 1):
            raise SpecError(f"fiber rule {text!r}: {kind} takes a whole number of "
                            f"{'bins >= 2' if kind == 'quantile' else 'neighbours >= 1'}, e.g. {kind}:20")
        return FiberRule(kind, count)  # type: ignore[arg-type]
    if kind in {"width", "window"}:
        value = positive_number(arg)
        if value is None:
            raise SpecError(f"fiber rule {text!r}: {kind} takes a positive number, e.g. {kind}:0.5")
        return FiberRule(kind, value)  # type: ignore[arg-type]
    raise SpecError(f"unknown fiber rule {text!r}; use exact, quantile:K, width:W, knn:K or window:T")


@dataclass(frozen=True)
class EvidenceMap:
    """Which columns are the evidence and how they become fiber keys."""

    columns: tuple[str, ...]
    rule: FiberRule = FiberRule(defaults.FIBER_RULE)  # type: ignore[arg-type]
    missing: Literal["drop", "as-value"] = defaults.MISSING  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not self.columns:
            raise SpecError("the evidence map names no columns")
        if len(set(self.columns)) != len(self.columns):
            raise SpecError(f"evidence columns repeat: {', '.join(self.columns)}")
        if self.missing not in defaults.MISSING_CHOICES:
            raise SpecError(f"missing = {self.missing!r}: use 'drop' (complete cases) or 'as-value'")
        if self.rule.is_window and len(self.columns) != 1:
            raise SpecError(f"fiber rule {self.rule} windows one numeric column; got {len(self.columns)}")

    @property
    def label(self) -> str:
        """The columns as the package's ``evidence`` column writes them: :func:`join_names`."""
        return join_names(self.columns)

    def refine(self, *extra: str) -> EvidenceMap:
        """The same map with more evidence columns (a probe added)."""
        return EvidenceMap(self.columns + tuple(extra), self.rule, self.missing)


@dataclass(frozen=True)
class EvidenceSQL:
    """The SELECT that turns a source relation into (candidate_id, k0..kn, x0, y, reason[, _row]), written for the
    engine that runs it (``sql`` reads that engine's name of the source), with what it was built from:
    ``relation`` is the source as the driver's DuckDB knows it, ``evidence`` / ``claim`` the map and claim."""

    sql: str
    key_columns: tuple[str, ...]
    cuts: dict[str, list[float]]
    evidence: EvidenceMap
    claim: Claim
    relation: str         # the source relation in the driver's DuckDB (checks, key ranges)
    claim_sql: str = ""   # the claim as NaN- and division-safe SQL over this relation
    label: str = ""       # the user's name of the relation (for messages)
    # DuckDB types of the key columns when known from the relation ("" unknown), so grouping need not ask
    key_types: tuple[str, ...] = ()
    # a one-column quantile rule's grouped evidence (key, audited, n, n_true, lo, hi), from the passes that
    # selected its cut points on the DuckDB engine: the grouping uses it instead of another scan
    groups: pa.Table | None = None
    # the SELECT also gives ``_row``, the input's 1-based data row (``__row``): the candidates table's order
    has_row: bool = False


def join_names(names: Sequence[str]) -> str:
    """Names joined by commas, as :func:`dcaudit.spec.split_names` reads them back: a name that holds a comma,
    a double quote or a line break, or has surrounding spaces, in double quotes (a quote inside doubled), so
    ``"b,c"`` and ``d`` never read as three columns."""
    def one(name: str) -> str:
        if any(ch in name for ch in ',"\n\r') or name != name.strip():
            return '"' + name.replace('"', '""') + '"'
        return name

    return ",".join(one(n) for n in names)

