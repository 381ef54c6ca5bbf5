"""Storage primitives every layer shares: atomic Parquet writes and the one sha256 helper.

A write goes to a temporary sibling and is renamed into place (``os.replace``), so a reader never
sees half a file and a crash never damages the file that was there before.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def md5_file(path: Path) -> str:
    """Hex md5 of a file's bytes (only to compare with the md5 an upstream publishes)."""
    h = hashlib.md5()  # noqa: S324 - upstream publishes md5, not a security use
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_table_atomic(table: pa.Table, path: Path, metadata: Mapping[str, object] | None = None) -> None:
    """Write one Parquet file (zstd) through a temporary name and ``os.replace``.

    ``metadata`` becomes Parquet key-value metadata (values as text), merged over the table's own.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if metadata:
        meta = dict(table.schema.metadata or {})
        meta.update({str(k).encode(): str(v).encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(meta)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def cached_table(path: Path, input_key: str, version: str | None, *,
                 key_field: str = "dcaudit.sha256") -> bool:
    """True when ``path`` exists, reads, and was derived from this input by this normaliser version.

    ``key_field`` names the metadata entry holding the input key (a file's sha256, a digest of several, a
    protocol hash); ``version=None`` skips the normaliser-version check (``dcaudit.normaliser``).
    A table that does not read is never trusted: the caller derives it again.
    """
    if not path.is_file():
        return False
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:  # a corrupt table is re-derived, never trusted
        return False
    return (meta.get(key_field.encode(), b"").decode() == input_key
            and (version is None or meta.get(b"dcaudit.normaliser", b"").decode() == version))
