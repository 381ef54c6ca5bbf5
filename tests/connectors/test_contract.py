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
    allowed = ", ".join(f.name for f in dataclasses.fields(c.Options)) or "none"
    with pytest.raises(SpecError) as info:
        parse_options(name, c.Options, {"bogus": 1})
    assert str(info.value) == f"[source] connector {name!r}: unknown option(s) bogus; allowed: {allowed}"


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
