"""Settings from ``DCAUDIT_*`` environment variables; CLI flags override them via ``with_overrides``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dcaudit import defaults
from dcaudit.errors import SpecError


@dataclass(frozen=True)
class Settings:
    home: Path
    mirror: Path | None
    memory_limit: str
    threads: int | None
    offline: bool

    def __post_init__(self) -> None:
        # Settings built in Python (dataclasses.replace, the constructor) get the environment's checks too:
        # a bad value is a SpecError here, not a DuckDB syntax error in the middle of a run.
        for name in ("home", "mirror"):
            value = getattr(self, name)
            if isinstance(value, str | Path):   # "~/ws" is the user's home's ws, as in DCAUDIT_HOME, never "./~"
                object.__setattr__(self, name, Path(value).expanduser())
            elif not (value is None and name == "mirror"):
                raise SpecError(f"Settings({name}={value!r}): give a directory path")
        if not isinstance(self.memory_limit, str):
            raise SpecError(f"Settings(memory_limit={self.memory_limit!r}): give an amount such as 8GB")
        check_memory_limit(self.memory_limit, "Settings(memory_limit)")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or not 1 <= self.threads <= defaults.MAX_THREADS):
            raise SpecError(f"Settings(threads={self.threads!r}): give a whole number of threads from 1 to "
                            f"{defaults.MAX_THREADS}, or None for every core")
        if not isinstance(self.offline, bool):
            raise SpecError(f"Settings(offline={self.offline!r}): give True or False")

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
        given: dict[str, Any] = {k: v for k, v in changes.items() if v is not None}
        if "memory_limit" in given:
            given["memory_limit"] = check_memory_limit(str(given["memory_limit"]), "--memory-limit")
        if "threads" in given:  # named as the option, not as Settings(threads=...)
            given["threads"] = check_threads(str(given["threads"]), "--threads")
        if "home" in given:
            check_home(Path(str(given["home"])), "--home")
        if "mirror" in given and Path(str(given["mirror"])).is_file():
            raise SpecError(f"--mirror {given['mirror']} is a file; give the directory laid out like the data mirror")
        return replace(self, **given)


def _env_bool(name: str) -> bool:
    """A yes/no variable: 1/true/yes/on or 0/false/no/off (or unset, empty); anything else is a SpecError —
    DCAUDIT_OFFLINE=2 silently meant online."""
    value = os.environ.get(name, "").strip().lower()
    if value in {"", "0", "false", "no", "off"}:
        return False
    if value in {"1", "true", "yes", "on"}:
        return True
    from dcaudit.errors import SpecError

    raise SpecError(f"{name}={os.environ[name]!r}: use 1 (or true, yes, on) or 0 (false, no, off)")


_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)
# DuckDB's units: KB … PB are powers of 1000, KiB … PiB of 1024, in any case (it reports PiB back)
BYTE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15, "kib": 2**10,
              "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}


def check_memory_limit(text: str, where: str) -> str:
    m = _MEMORY.match(text)
    if not m:
        raise SpecError(f"{where} = {text!r}: give an amount such as 8GB, 512MB or 16GiB")
    if float(m.group(1)) * BYTE_UNITS[m.group(2).lower()] > defaults.MAX_MEMORY_LIMIT:
        raise SpecError(f"{where} = {text!r}: give at most {defaults.MAX_MEMORY_LIMIT_TEXT} (no machine has more; "
                        "e.g. 8GB, 512MB or 16GiB)")
    return text.strip()


def check_threads(text: str, where: str) -> int:
    if not text.strip().isdecimal() or not 1 <= int(text) <= defaults.MAX_THREADS:
        raise SpecError(f"{where} = {text!r}: give a whole number of threads from 1 to {defaults.MAX_THREADS}")
    return int(text)


def check_home(home: Path, where: str = "DCAUDIT_HOME") -> Path:
    if home.exists() and not home.is_dir():
        raise SpecError(f"{where} = {home} is a file; give a directory for the workspace")
    blocked = file_in_the_way(home)
    if blocked is not None:
        raise SpecError(f"{where} = {home}: {blocked} is a file, so the workspace cannot be made there")
    return home


def file_in_the_way(path: Path) -> Path | None:
    """The first parent directory of ``path`` that exists as a file (no directory can be made under it)."""
    return next((p for p in path.parents if p.exists() and not p.is_dir()), None)


def _mirror(text: str) -> Path:
    path = Path(text).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise SpecError(f"DCAUDIT_MIRROR = {path} is a file; give the directory laid out like the data mirror "
                        "(tox21/, jarvis_leaderboard/, …)")
    return path


def load_settings() -> Settings:
    """Read the environment once; nothing else in the package reads ``os.environ``. A malformed
    setting is a SpecError naming the variable (exit 2), never a traceback later."""
    mirror = os.environ.get("DCAUDIT_MIRROR", "").strip()
    threads = os.environ.get("DCAUDIT_THREADS", "").strip()
    memory = os.environ.get("DCAUDIT_MEMORY_LIMIT", "").strip()
    return Settings(
        home=check_home(Path(os.environ.get("DCAUDIT_HOME", "workspace")).expanduser().resolve()),
        mirror=_mirror(mirror) if mirror else None,
        memory_limit=check_memory_limit(memory, "DCAUDIT_MEMORY_LIMIT") if memory else defaults.MEMORY_LIMIT,
        threads=check_threads(threads, "DCAUDIT_THREADS") if threads else None,
        offline=_env_bool("DCAUDIT_OFFLINE"),
    )
