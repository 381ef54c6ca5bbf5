"""Connectors: one module per source, each ending with ``CONNECTOR`` (see :mod:`dcaudit.connectors.base`
and docs/connectors.md). The registry maps a source name to its module, imported lazily so that a
missing extra only matters for the source that needs it."""

from __future__ import annotations

import importlib

from dcaudit.connectors.base import Connector
from dcaudit.errors import SpecError

CONNECTORS: dict[str, str] = {
    "tox21": "dcaudit.connectors.tox21",
    "jarvis": "dcaudit.connectors.jarvis",
    "matbench": "dcaudit.connectors.matbench",
    "matbench-discovery": "dcaudit.connectors.matbench_discovery",
    "vision": "dcaudit.connectors.vision",
    "spin-defects": "dcaudit.connectors.spin_defects",
}


def get_connector(name: str) -> Connector:
    if name not in CONNECTORS:
        raise SpecError(f"unknown source {name!r}; connectors: {', '.join(sorted(CONNECTORS))} "
                        "(or give the path of a CSV/Parquet file)")
    connector: Connector = importlib.import_module(CONNECTORS[name]).CONNECTOR
    return connector
