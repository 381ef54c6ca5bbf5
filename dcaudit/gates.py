"""Gates for CI: ``--fail-if "ambiguous_fraction > 0.2"`` over the rows of a run's summary.

A gate is a boolean expression in the claim grammar (:mod:`dcaudit.claims`): column names, numbers,
'strings', true/false, comparisons, ``+ - * /``, ``and`` / ``or`` / ``not`` and parentheses — nothing
else is parsed, and nothing is handed to an SQL engine or ``eval``. The names must be columns of
the summary table (:data:`SUMMARY_COLUMNS`, or the columns of the table being checked).

:func:`evaluate_gates` evaluates every gate on every summary row (one per audit, and per model for
per-model audits); a gate *fails* on a row where it is TRUE. Undefined values follow SQL: a NULL
column, a comparison with NULL or a division by zero make the expression NULL, which does not
fail (it is reported by :func:`undefined_gates` so a CI log can say so).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dcaudit.claims import _BOOLEAN_KINDS, Node, _columns, _Parser, _typed, check_columns
from dcaudit.errors import ClaimError

# The summary columns of docs/package.md (the fiber audit's summary row); a gate may name only these.
SUMMARY_COLUMNS = (
    "source", "audit_id", "claim", "evidence", "fiber_rule", "model", "min_support", "n_candidates", "n_excluded",
    "n_fibers", "n_mixed_fibers", "n_unsupported_fibers", "certified_true", "certified_false", "ambiguous",
    "unsupported", "certified_fraction", "ambiguous_fraction", "unsupported_fraction", "mixed_fiber_fraction",
    "prevalence", "benchmark_only_errors", "benchmark_only_risk", "median_fiber_size",
    # label noise vs incompleteness (dcaudit.audits.label_noise), when the audit has an identity column
    "n_label_noise_fibers", "n_incomplete_fibers", "n_both_fibers", "label_noise_candidates",
    "incomplete_candidates", "label_noise_fraction", "incomplete_fraction",
)


@dataclass(frozen=True)
class Gate:
    """A parsed gate: the expression as written, its tree and the summary columns it reads."""

    text: str
    tree: Node
    columns: tuple[str, ...]


@dataclass(frozen=True)
class GateFailure:
    """A gate that is TRUE on a summary row: which audit (and model), which expression, the values read."""

    audit: str
    expression: str
    values: Mapping[str, Any]
    model: str | None = None

    @property
    def value(self) -> Any:
        """The value of the gate's single column (the common case), else the mapping of all columns read."""
        return next(iter(self.values.values())) if len(self.values) == 1 else dict(self.values)

    @property
    def message(self) -> str:
        where = self.audit + (f" (model {self.model})" if self.model else "")
        shown = ", ".join(f"{k} = {_show(v)}" for k, v in self.values.items())
        return f"gate failed: audit {where}: {self.expression} ({shown})"


def _show(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "NULL" if value is None else repr(value) if isinstance(value, str) else str(value)


def _gate_error(message: str) -> ClaimError:
    return ClaimError(message.replace("claim ", "gate ", 1) if message.startswith("claim ") else message)


def parse_gate(text: str, columns: Iterable[str] | None = None) -> Gate:
    """Parse a ``--fail-if`` expression; every name must be a summary column (``columns``, default
    :data:`SUMMARY_COLUMNS`). Errors are :class:`~dcaudit.errors.ClaimError` (exit status 2 in the CLI)."""
    if not text or not text.strip():
        raise ClaimError("the gate is empty; write e.g. --fail-if \"ambiguous_fraction > 0.2\"")
    try:
        tree = _Parser(text).parse()
    except ClaimError as exc:
        raise _gate_error(str(exc)) from None
    if tree.kind not in _BOOLEAN_KINDS or tree.kind == "column":
        raise ClaimError(f"gate {text!r} is not true/false: compare a summary column, e.g. 'ambiguous_fraction > 0.2'")
    names = tuple(dict.fromkeys(_columns(tree)))
    try:
        check_columns(names, list(columns) if columns is not None else SUMMARY_COLUMNS,
                      what=f"gate {text.strip()!r}")
    except ClaimError as exc:
        raise ClaimError(str(exc).replace("available columns", "summary columns")) from None
    _check_kinds(tree, text.strip(), names)
    return Gate(text.strip(), tree, names)


def _check_kinds(tree: Node, text: str, names: Sequence[str]) -> None:
    """A ClaimError where the gate could never be evaluated on a summary row — text in arithmetic or
    compared with a number, ``not`` / ``and`` / ``or`` on a number — by the claims' own type rules over the
    summary's declared types, so it is found before any run, not after it. A gate naming columns beyond the
    declared ones (a table's own) is left to evaluation."""
    from dcaudit.storage import TABLE_SCHEMAS

    types = TABLE_SCHEMAS["summary"]
    if all(n in types for n in names):
        try:
            _typed(tree, types, text)
        except ClaimError as exc:
            raise _gate_error(str(exc)) from None


def parse_gates(texts: Sequence[str] | str | None, columns: Iterable[str] | None = None) -> tuple[Gate, ...]:
    if texts is None:
        return ()
    if isinstance(texts, str):
        texts = [texts]
    cols = list(columns) if columns is not None else None
    return tuple(parse_gate(t, cols) for t in texts)


# --- evaluation (three-valued, as SQL) -----------------------------------------------------------------------------

def _eval(node: Node, row: Mapping[str, Any]) -> Any:
    k = node.kind
    if k == "column":
        return row.get(node.value)
    if k == "number":
        return float(node.value)
    if k == "string":
        return node.value
    if k == "bool":
        return node.value == "true"
    if k == "unary":
        v = _eval(node.children[0], row)
        return None if v is None else -v
    if k == "not":
        v = _eval(node.children[0], row)
        return None if v is None else not v
    if k in {"and", "or"}:  # n-ary (the grammar flattens chains), three-valued as in SQL
        values = [_eval(c, row) for c in node.children]
        decisive = k == "or"
        if any(v is decisive for v in values):
            return decisive
        return None if any(v is None for v in values) else not decisive
    a, b = (_eval(c, row) for c in node.children)
    if a is None or b is None:
        return None
    try:
        if k == "binary":
            if node.value == "/":
                return None if b == 0 else a / b
            return {"+": a + b, "-": a - b, "*": a * b}[node.value]
        return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[node.value]
    except TypeError:
        raise ClaimError(f"gate: cannot compare {a!r} with {b!r} (a text column against a number?)") from None


def _rows(summary: pa.Table) -> list[dict[str, Any]]:
    return summary.to_pylist()


def evaluate_gates(summary: pa.Table, gates: Sequence[Gate | str]) -> list[GateFailure]:
    """Every (summary row, gate) where the gate is TRUE, in row order then gate order."""
    parsed = [g if isinstance(g, Gate) else parse_gate(g, summary.column_names) for g in gates]
    for g in parsed:
        check_columns(g.columns, summary.column_names, what=f"gate {g.text!r}")
    failures = []
    for row in _rows(summary):
        for gate in parsed:
            if _eval(gate.tree, row) is True:
                failures.append(GateFailure(str(row.get("audit_id") or row.get("source") or "?"), gate.text,
                                            {c: row.get(c) for c in gate.columns}, row.get("model")))
    return failures


def undefined_gates(summary: pa.Table, gates: Sequence[Gate]) -> list[tuple[str, str]]:
    """(audit, expression) pairs where a gate is NULL (undefined: a NULL value or a division by zero)."""
    return [(str(row.get("audit_id")), g.text) for row in _rows(summary) for g in gates if _eval(g.tree, row) is None]


def gate_exit_status(failures: Sequence[GateFailure]) -> int:
    """The CLI's exit status after gates: 1 when any gate failed, else 0."""
    return 1 if failures else 0


def check_package(run_dir: str | os.PathLike[str], texts: Sequence[str] | str) -> list[GateFailure]:
    """Evaluate gates on the ``summary.parquet`` of an evidence package (the CLI's ``--fail-if`` after a run)."""
    from pathlib import Path

    from dcaudit.storage import read_table

    summary = read_table(Path(run_dir) / "summary.parquet")
    return evaluate_gates(summary, parse_gates(texts, summary.column_names))
