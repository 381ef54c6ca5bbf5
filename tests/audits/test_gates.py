"""Gates (--fail-if): the claim grammar over summary columns, three-valued evaluation, exit statuses."""

from __future__ import annotations

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner

from dcaudit.errors import ClaimError
from dcaudit.gates import (
    SUMMARY_COLUMNS,
    evaluate_gates,
    gate_exit_status,
    parse_gate,
    parse_gates,
    undefined_gates,
)


def _summary() -> pa.Table:
    return pa.table({"audit_id": ["a", "b", "c"], "model": [None, "m1", None],
                     "ambiguous_fraction": [0.1, 0.5, None], "certified_fraction": [0.9, 0.5, 0.0],
                     "n_candidates": [10, 20, 0], "certified_true": [1, 2, 0]})


def test_gate_fails_where_true_and_names_audit_expression_value() -> None:
    failures = evaluate_gates(_summary(), [parse_gate("ambiguous_fraction > 0.2")])
    assert [(f.audit, f.model, f.expression, f.value) for f in failures] == [
        ("b", "m1", "ambiguous_fraction > 0.2", 0.5)]
    assert failures[0].message == "gate failed: audit b (model m1): ambiguous_fraction > 0.2 (ambiguous_fraction = 0.5)"
    assert gate_exit_status(failures) == 1
    assert gate_exit_status(evaluate_gates(_summary(), ["ambiguous_fraction > 0.9"])) == 0


def test_null_and_division_by_zero_do_not_fail_but_are_reported() -> None:
    gates = parse_gates(["certified_true / n_candidates < 0.5", "ambiguous_fraction >= 0"])
    failures = evaluate_gates(_summary(), gates)
    assert {(f.audit, f.expression) for f in failures} == {
        ("a", "certified_true / n_candidates < 0.5"), ("b", "certified_true / n_candidates < 0.5"),
        ("a", "ambiguous_fraction >= 0"), ("b", "ambiguous_fraction >= 0")}
    assert set(undefined_gates(_summary(), gates)) == {("c", "certified_true / n_candidates < 0.5"),
                                                         ("c", "ambiguous_fraction >= 0")}
    both = evaluate_gates(_summary(), ["ambiguous_fraction > 0.2 or certified_fraction < 0.1"])
    assert [f.audit for f in both] == ["b", "c"]  # NULL or TRUE is TRUE
    assert both[1].value == {"ambiguous_fraction": None, "certified_fraction": 0.0}


@pytest.mark.parametrize("text, match", [
    ("ambiguous_fraction > 0.2; drop table x", "unexpected character"),
    ("__import__('os')", "unexpected character|expected"),
    ("ambigous_fraction > 0.2", "ambiguous_fraction"),  # a near miss is suggested
    ("ambiguous_fraction", "not true/false"),
    ("ambiguous_fraction + 1", "not true/false"),
    ("", "empty"),
    ("n_candidates > (1", "expected"),
    # gates that could never be evaluated on a summary row: found when parsed, before any run is recorded
    ("claim > 1", "compares column 'claim' \\(text\\) with the literal '1'"),
    ("certified_fraction > 'a'", "compares column 'certified_fraction' \\(a number\\)"),
    ("certified_fraction + claim > 1", "arithmetic \\(\\+\\) on column 'claim' \\(text\\)"),
    ("-source < 0", "minus applied to column .source. \\(text\\)"),
    ("not n_candidates", "not needs true/false"),
    ("ambiguous_fraction > 0.2 and n_candidates", "and needs true/false"),
])
def test_bad_gates_are_one_line_errors(text: str, match: str) -> None:
    with pytest.raises(ClaimError, match=match) as info:
        parse_gate(text)
    assert "\n" not in str(info.value)
    assert not str(info.value).startswith("claim")  # worded as a gate, not as a claim


@pytest.mark.parametrize("text", ["claim = 'y = 1' and ambiguous_fraction > 0.2", "not (n_fibers > 3) or model = 'm'",
                                  "n_candidates = true", "-certified_fraction < -0.5"])
def test_gates_of_matching_kinds_parse(text: str) -> None:
    assert parse_gate(text).text == text


def test_only_summary_columns() -> None:
    assert parse_gate("benchmark_only_risk > 0.01").columns == ("benchmark_only_risk",)
    with pytest.raises(ClaimError, match="summary columns"):
        parse_gate('"SR-p53" = 1')
    assert "ambiguous_fraction" in SUMMARY_COLUMNS


def test_fail_if_exit_statuses_through_a_click_command(tmp_path) -> None:  # noqa: ANN001
    """How the CLI wires --fail-if: parse first (bad gate -> exit 2), evaluate after the run (failure -> exit 1)."""
    import pyarrow.parquet as pq

    from dcaudit.gates import check_package

    pq.write_table(_summary(), tmp_path / "summary.parquet")

    @click.command()
    @click.option("--fail-if", "fail_if", multiple=True)
    def audit(fail_if: tuple[str, ...]) -> None:
        try:
            parse_gates(fail_if)
        except ClaimError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(2) from None
        failures = check_package(tmp_path, fail_if)
        for f in failures:
            click.echo(f.message, err=True)
        raise SystemExit(gate_exit_status(failures))

    runner = CliRunner()
    assert runner.invoke(audit, []).exit_code == 0
    assert runner.invoke(audit, ["--fail-if", "ambiguous_fraction > 0.9"]).exit_code == 0
    res = runner.invoke(audit, ["--fail-if", "ambiguous_fraction > 0.2"])
    assert res.exit_code == 1 and "audit b (model m1): ambiguous_fraction > 0.2 (ambiguous_fraction = 0.5)" in res.output
    assert runner.invoke(audit, ["--fail-if", "ambiguous > 0.2 )"]).exit_code == 2
