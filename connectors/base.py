"""What every connector shares: where a source lives, fetching (mirror first, then download with a
hash check and a progress bar), and writing normalised Parquet with provenance in its metadata.

Every connector module has the same shape:

* ``SOURCE``: a :class:`SourceFile` per upstream file (URL, hash, licence, citation, mirror path);
* ``prepare(settings) -> PreparedSource``: fetch, verify, normalise to ``tables/<source>/*.parquet``
  (reused while the input hash is unchanged) and return the tables and their input hashes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq

from dcaudit.config import Settings
from dcaudit.errors import IntegrityError, MissingSourceError


@dataclass(frozen=True)
class SourceFile:
    name: str                      # file name in raw/ and in the mirror directory
    url: str                       # canonical download address
    mirror_paths: tuple[str, ...]  # paths relative to $DCAUDIT_MIRROR, tried in order
    sha256: str | None = None      # of the downloaded bytes, when upstream bytes are stable
    md5: str | None = None
    licence: str = ""
    citation: str = ""


@dataclass(frozen=True)
class FetchedFile:
    path: Path
    sha256: str
    origin: str        # "mirror:<path>" or the URL
    retrieved_at: str


@dataclass(frozen=True)
class PreparedSource:
    """A connector's output: named Parquet tables plus the hashes of everything they came from."""

    name: str
    tables: dict[str, Path]
    inputs: dict[str, str]                       # input name -> sha256
    reports: dict[str, Path] = field(default_factory=dict)  # findings tables (duplicates, invalid rows)
    notes: tuple[str, ...] = ()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def fetch(source: SourceFile, settings: Settings, *, verify_bytes: bool = True) -> FetchedFile:
    """The mirror copy if there is one, else a verified download into ``raw/``.

    Mirror files are read in place (never copied). Downloads are checked against ``sha256``/``md5``
    when the connector knows them; connectors whose upstream bytes vary verify content instead.
    """
    if settings.mirror is not None:
        for rel in source.mirror_paths:
            candidate = settings.mirror / rel
            if candidate.is_file():
                digest = sha256_file(candidate)
                if verify_bytes and source.sha256 and rel.endswith(source.name) and digest != source.sha256:
                    raise IntegrityError(
                        f"mirror file {candidate} has sha256 {digest}, expected {source.sha256}: it is "
                        "truncated or modified; restore it from the origin")
                return FetchedFile(candidate, digest, f"mirror:{candidate}", _now())
    cached = settings.raw_dir / source.name
    if cached.is_file():
        return FetchedFile(cached, sha256_file(cached), source.url, _mtime(cached))
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

    from dcaudit.reports.console import PoochProgress

    known = f"sha256:{source.sha256}" if source.sha256 else (f"md5:{source.md5}" if source.md5 else None)
    settings.raw_dir.mkdir(parents=True, exist_ok=True)
    try:
        path = pooch.retrieve(source.url, known_hash=known, fname=source.name, path=settings.raw_dir,
                              progressbar=PoochProgress(source.name))
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


def cached_table(path: Path, input_sha256: str, version: str | None, *,
                 key_field: str = "dcaudit.sha256") -> bool:
    """True when ``path`` exists, reads, and was derived from this input by this normaliser version.

    ``key_field`` names the metadata entry holding the input key (a file's sha256, a digest of several, a
    protocol hash); ``version=None`` skips the normaliser-version check.
    """
    if not path.is_file():
        return False
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:  # a corrupt table is re-derived, never trusted
        return False
    return (meta.get(key_field.encode(), b"").decode() == input_sha256
            and (version is None or meta.get(b"dcaudit.normaliser", b"").decode() == version))
