"""dcaudit: does benchmark evidence decide the deployment action?

The Python API (``dcaudit.audit``, ``replay``, ``complete``, ``sensitivity``, ``run``, ``load``, ``connect_catalog``,
and ``SourceQuery``: a DuckDB SELECT as the table to audit)
is re-exported here and imported on first use, so ``import dcaudit`` stays light. The core lives in this
folder (config, errors, engine, storage, claims, evidence maps, the input contract, spec, catalog); the
connectors, audits, pipelines and reports are the sibling folders installed as ``dcaudit.connectors`` and
so on.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = ("Result", "SourceQuery", "audit", "connect_catalog", "complete", "load", "replay", "run", "sensitivity")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from dcaudit import api

        return getattr(api, name)
    raise AttributeError(f"module 'dcaudit' has no attribute {name!r}")
