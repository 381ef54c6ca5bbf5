"""Every connector follows one contract: a name, typed options, its sources, prepare(settings, options)."""

from __future__ import annotations

import dataclasses

import pytest

from dcaudit.connectors import CONNECTORS, get_connector
from dcaudit.connectors.base import parse_options
from dcaudit.errors import SpecError

NAMES = sorted(CONNECTORS)


@pytest.mark.parametrize("name", NAMES)
def test_connector_shape(name: str) -> None:
    c = get_connector(name)
    assert c.name == name
    assert dataclasses.is_dataclass(c.Options) and c.Options.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert c.sources and all(s.url and s.citation for s in c.sources)
    assert parse_options(name, c.Options, {}) == c.Options()


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_is_one_clean_error(name: str) -> None:
    c = get_connector(name)
    allowed = sorted(f.name for f in dataclasses.fields(c.Options))
    with pytest.raises(SpecError) as info:
        parse_options(name, c.Options, {"bogus": 1})
    assert str(info.value) == f"[source] connector {name!r}: unknown option(s) ['bogus']; allowed: {allowed}"


def test_option_types_are_checked_and_lists_accept_text() -> None:
    jarvis = get_connector("jarvis")
    opts = parse_options("jarvis", jarvis.Options, {"models": "all", "require": "a, b"})
    assert opts.models == ("all",) and opts.require == ("a", "b")
    with pytest.raises(SpecError, match=r"option require must be a list of strings, got 3"):
        parse_options("jarvis", jarvis.Options, {"require": 3})
    vision = get_connector("vision")
    with pytest.raises(SpecError, match=r"option n_jobs must be an integer, got '2'"):
        parse_options("vision", vision.Options, {"n_jobs": "2"})
    assert parse_options("vision", vision.Options, {"digits_splits": None}).digits_splits is None


def test_unknown_source_lists_connectors() -> None:
    with pytest.raises(SpecError, match="unknown source 'tox22'; connectors: jarvis, matbench"):
        get_connector("tox22")


def test_findings_schema_helpers(tmp_path) -> None:  # noqa: ANN001
    import polars as pl
    import pyarrow.parquet as pq

    from dcaudit import findings

    rows = findings.from_rows([{"source": "s", "kind": "b_kind", "row": 2}, {"source": "s", "kind": "a_kind"},
                               {"source": "s", "kind": "b_kind", "detail": "x"}])
    assert rows.columns == list(findings.COLUMNS) and rows.schema["row"] == pl.Int64
    with pytest.raises(ValueError, match="not findings columns: \\['issue'\\]"):
        findings.from_rows([{"issue": "x"}])
    assert findings.counts(rows) == [("b_kind", 2), ("a_kind", 1)]
    assert findings.describe(rows) == "findings: 2 b_kind, 1 a_kind"
    assert findings.describe(findings.empty()) == "findings: none"
    kinds = pl.DataFrame({"issue": ["target: NaN", "Odd |thing| > 5"]}).select(
        findings.kind(pl.col("issue"), {"target: NaN": "target_nan"}))["issue"].to_list()
    assert kinds == ["target_nan", "odd_thing_5"]
    path = tmp_path / "f.parquet"
    pq.write_table(findings.to_arrow(rows), path)
    assert findings.read(path).schema == findings.ARROW_SCHEMA and findings.read(None).num_rows == 0


@pytest.mark.parametrize("name, options, needle", [
    ("vision", {"datasets": []}, "unknown dataset(s) (none)"),
    ("vision", {"n_jobs": 0}, "n_jobs must be"),
    ("vision", {"digits_splits": 0}, "digits_splits must be from 1"),
    ("vision", {"digits_models": []}, "digits_models is empty"),
    ("jarvis", {"properties": []}, "properties is empty"),
    ("jarvis", {"models": []}, "models is empty"),
    ("jarvis", {"properties": ["formation_energy_peratom", "nope"]}, "no JARVIS predictions for ['nope']"),
    ("matbench", {"tasks": []}, "tasks is empty"),
])
def test_option_values_that_ask_for_nothing_or_no_such_thing_are_spec_errors(
        name: str, options: dict, needle: str, tmp_path) -> None:  # noqa: ANN001
    """Not a missing source (which a batch skips), not the defaults in disguise, not an internal error."""
    from dcaudit.config import Settings
    from tests.conftest import MIRROR

    connector = get_connector(name)
    settings = Settings(home=tmp_path / "home", mirror=MIRROR, memory_limit="2GB", threads=None, offline=True)
    with pytest.raises(SpecError, match=re_escape(needle)):
        connector.prepare(settings, parse_options(name, connector.Options, options))


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_a_mirror_setting_that_is_a_file_is_named(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from dcaudit.config import load_settings

    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("DCAUDIT_MIRROR", str(tmp_path / "f"))
    with pytest.raises(SpecError, match="DCAUDIT_MIRROR = .* is a file"):
        load_settings()
