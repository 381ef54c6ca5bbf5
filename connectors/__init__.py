"""Connectors: one module per source, each with ``SOURCE`` and ``prepare(settings) -> PreparedSource``."""

from __future__ import annotations

import importlib
from types import ModuleType

from dcaudit.errors import SpecError

# name -> module (imported lazily so a missing extra only matters for the source that needs it)
CONNECTORS = {"tox21": "dcaudit.connectors.tox21", "jarvis": "dcaudit.connectors.jarvis",
              "matbench": "dcaudit.connectors.matbench",
              "matbench-discovery": "dcaudit.connectors.matbench_discovery",
              "vision": "dcaudit.connectors.vision"}


def get_connector(name: str) -> ModuleType:
    if name not in CONNECTORS:
        raise SpecError(f"unknown source {name!r}; connectors: {', '.join(sorted(CONNECTORS))} "
                        "(or give the path of a CSV/Parquet file)")
    return importlib.import_module(CONNECTORS[name])
