"""Settings from ``DCAUDIT_*`` environment variables; CLI flags override them via ``with_overrides``."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    home: Path
    mirror: Path | None
    memory_limit: str
    threads: int | None
    offline: bool

    @property
    def raw_dir(self) -> Path:
        return self.home / "raw"

    @property
    def tables_dir(self) -> Path:
        return self.home / "tables"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def catalog_path(self) -> Path:
        return self.home / "catalog.duckdb"

    @property
    def temp_dir(self) -> Path:
        return self.home / "tmp"

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def load_settings() -> Settings:
    """Read the environment once; nothing else in the package reads ``os.environ``."""
    mirror = os.environ.get("DCAUDIT_MIRROR", "").strip()
    threads = os.environ.get("DCAUDIT_THREADS", "").strip()
    return Settings(
        home=Path(os.environ.get("DCAUDIT_HOME", "workspace")).expanduser().resolve(),
        mirror=Path(mirror).expanduser().resolve() if mirror else None,
        memory_limit=os.environ.get("DCAUDIT_MEMORY_LIMIT", "8GB"),
        threads=int(threads) if threads else None,
        offline=_env_bool("DCAUDIT_OFFLINE"),
    )
