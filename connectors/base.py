"""The connector contract and what every connector shares.

A **connector** turns one upstream source into normalised Parquet tables. Each is one module under
``connectors/`` that ends with a :class:`SourceConnector` named ``CONNECTOR`` and satisfies the
:class:`Connector` protocol:

* ``name`` — the source name a spec's ``[source]`` (or ``dcaudit run NAME``) uses;
* ``Options`` — a frozen dataclass of the ``[source]`` options it accepts; :func:`parse_options`
  turns a spec's table into it (an unknown option or a wrong type is one clean :class:`SpecError`);
* ``sources`` — the upstream files it reads (:class:`SourceFile`: URL, hash, licence, citation);
* ``prepare(settings, options) -> PreparedSource`` — fetch (mirror first, then a verified download),
  normalise to ``$DCAUDIT_HOME/tables/<source>/`` (reused while the inputs are unchanged), and return
  the tables, their input hashes and the findings (``dcaudit.findings`` schema).

How to write one, and every connector's options and finding kinds: docs/connectors.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from dcaudit.config import Settings
from dcaudit.errors import IntegrityError, MissingSourceError
from dcaudit.spec import check_keys, typed_fields
from dcaudit.storage import cached_table, md5_file, regular_file, sha256_file

__all__ = ["Connector", "FetchedFile", "NoOptions", "PreparedSource", "SourceConnector", "SourceFile",
           "cached_table", "fetch", "parse_options", "provenance", "regular_file", "sha256_file", "verified_sha256"]


@dataclass(frozen=True)
class SourceFile:
    name: str                      # file name in raw/ and in the mirror directory
    url: str                       # canonical download address
    mirror_paths: tuple[str, ...]  # paths relative to $DCAUDIT_MIRROR, tried in order
    sha256: str | None = None      # of the bytes (download, and the mirror's first path), when stable
    md5: str | None = None         # checked when there is no sha256
    licence: str = ""
    citation: str = ""
    hash_origin: str = ""          # where the hash comes from, for the error message

    def manifest_entry(self) -> dict[str, str]:
        """What the run's manifest records about this file (empty fields left out)."""
        row = {"name": self.name, "url": self.url, "sha256": self.sha256, "md5": self.md5,
               "licence": self.licence, "citation": self.citation}
        return {k: v for k, v in row.items() if v}


@dataclass(frozen=True)
class FetchedFile:
    path: Path
    sha256: str
    origin: str        # "mirror:<path>" or the URL
    retrieved_at: str


@dataclass(frozen=True)
class PreparedSource:
    """A connector's output: named Parquet tables, the hashes of everything they came from, and findings."""

    name: str
    tables: dict[str, Path]
    inputs: dict[str, str]                       # input name -> sha256
    findings: Path | None = None                 # Parquet in the dcaudit.findings schema
    reports: dict[str, Path] = field(default_factory=dict)  # connector-specific detail tables (not audited)
    notes: tuple[str, ...] = ()
    sources: tuple[SourceFile, ...] = ()         # the upstream files read (written into the run manifest)


OptionsT = TypeVar("OptionsT")


class Connector(Protocol):
    """The contract every source follows (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def Options(self) -> type: ...  # noqa: N802 - the options dataclass, named like a class

    @property
    def sources(self) -> tuple[SourceFile, ...]: ...

    def prepare(self, settings: Settings, options: Any = None) -> PreparedSource: ...


@dataclass(frozen=True)
class SourceConnector(Generic[OptionsT]):
    """The usual way to satisfy :class:`Connector`: a module's ``CONNECTOR = SourceConnector(...)``."""

    name: str
    Options: type[OptionsT]
    sources: tuple[SourceFile, ...]
    run: Callable[[Settings, OptionsT], PreparedSource]

    def prepare(self, settings: Settings, options: OptionsT | None = None) -> PreparedSource:
        return self.run(settings, self.Options() if options is None else options)


@dataclass(frozen=True)
class NoOptions:
    """For connectors that take no ``[source]`` options."""


def parse_options(connector: str, options_type: type[OptionsT], raw: Mapping[str, object] | None) -> OptionsT:
    """A spec's ``[source]`` options as ``options_type``; unknown names and wrong types are one SpecError."""
    raw = dict(raw or {})
    fields = {f.name: f for f in dataclasses.fields(options_type)}  # type: ignore[arg-type]
    where = f"[source] connector {connector!r}"
    check_keys(raw, fields, where, what="option")
    return options_type(**typed_fields(options_type, raw, where, what="option "))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def verified_sha256(path: Path, source: SourceFile) -> str:
    """The file's sha256, after checking it against the source's sha256 (or, without one, its md5)."""
    digest = sha256_file(path)
    why = f" ({source.hash_origin})" if source.hash_origin else ""
    if source.sha256 and digest != source.sha256:
        raise IntegrityError(f"{path} has sha256 {digest}, expected {source.sha256}{why}: it is truncated or "
                             "modified; restore it from the origin")
    if not source.sha256 and source.md5 and (md5 := md5_file(path)) != source.md5:
        raise IntegrityError(f"{path} has md5 {md5}, expected {source.md5}{why}: it is truncated, modified or "
                             "another version; restore it from the origin")
    return digest


def fetch(source: SourceFile, settings: Settings) -> FetchedFile:
    """The mirror copy if there is one, else the copy in ``raw/``, else a download into ``raw/``.

    Mirror files are read in place (never copied). Every copy is checked against the source's sha256
    (or md5) when the connector knows one — for the mirror, the file at the first mirror path or named
    like the source (other mirror paths may hold another encoding of the data); connectors whose upstream
    bytes vary, or whose hash is unknown, verify the content instead.

    A directory (or a link to nothing) where a copy belongs stops the fetch with a one-line error naming it
    (:func:`dcaudit.storage.regular_file`): it is not a missing file, and no download should go around it.
    """
    if settings.mirror is not None:
        for rel in source.mirror_paths:
            candidate = settings.mirror / rel
            if regular_file(candidate, f"the mirror's copy of {source.name}"):
                hashed = rel == source.mirror_paths[0] or rel.endswith(source.name)
                digest = verified_sha256(candidate, source) if hashed else sha256_file(candidate)
                return FetchedFile(candidate, digest, f"mirror:{candidate}", _now())
    cached = settings.raw_dir / source.name
    if regular_file(cached, f"the downloaded copy of {source.name}"):
        return FetchedFile(cached, verified_sha256(cached, source), source.url, _mtime(cached))
    if settings.offline:
        raise MissingSourceError(_missing_message(source, settings))
    return _download(source, settings)


def _mtime(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")


def _missing_message(source: SourceFile, settings: Settings) -> str:
    where = (f"{settings.mirror}/{source.mirror_paths[0]}" if settings.mirror
             else f"$DCAUDIT_MIRROR/{source.mirror_paths[0]}")
    return (f"{source.name} is not available offline: put it at {where} or {settings.raw_dir / source.name}, "
            f"or allow the download from {source.url}")


def _download(source: SourceFile, settings: Settings) -> FetchedFile:
    import pooch

    from dcaudit.progress import DownloadProgress

    known = f"sha256:{source.sha256}" if source.sha256 else (f"md5:{source.md5}" if source.md5 else None)
    settings.raw_dir.mkdir(parents=True, exist_ok=True)
    try:
        path = pooch.retrieve(source.url, known_hash=known, fname=source.name, path=settings.raw_dir,
                              progressbar=DownloadProgress(source.name))
    except ValueError as exc:  # pooch raises ValueError on a hash mismatch and deletes the file
        raise IntegrityError(f"download of {source.url} failed verification: {exc}") from exc
    except Exception as exc:
        raise MissingSourceError(f"{_missing_message(source, settings)} (download failed: {exc})") from exc
    p = Path(path)
    return FetchedFile(p, sha256_file(p), source.url, _now())


def provenance(source: SourceFile, fetched: FetchedFile, **extra: object) -> dict[str, str]:
    """Parquet key-value metadata recording where a table came from."""
    meta = {
        "dcaudit.source": source.name,
        "dcaudit.origin": fetched.origin,
        "dcaudit.url": source.url,
        "dcaudit.sha256": fetched.sha256,
        "dcaudit.retrieved_at": fetched.retrieved_at,
        "dcaudit.licence": source.licence,
        "dcaudit.citation": source.citation,
    }
    meta.update({f"dcaudit.{k}": v if isinstance(v, str) else json.dumps(v) for k, v in extra.items()})
    return meta
