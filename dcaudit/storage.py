"""Storage in the core: atomic writes, one sha256 helper, and the evidence package (one directory per run,
one Parquet file per row shape, plus manifest.json).

Writes are atomic: everything goes to a hidden ``.<name>.partial`` sibling first and is renamed
into place only when complete, so a crash or a failed run never leaves a half-written package and
never touches a package that was already there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# The tables of docs/package.md, in the order a reader meets them.
PACKAGE_TABLES = ("summary", "fibers", "candidates", "findings", "completion", "replay", "costs", "choice",
                  "metrics", "sensitivity")


def with_run_id(table: pa.Table, run_id: str) -> pa.Table:
    """Every table carries ``run_id`` as its first column."""
    if "run_id" in table.column_names:
        table = table.drop(["run_id"])
    return table.add_column(0, "run_id", pa.array([run_id] * table.num_rows, pa.string()))


def concat(tables: list[pa.Table]) -> pa.Table:
    """Stack tables of one row shape from several audits (columns unified by name)."""
    return pa.concat_tables(tables, promote_options="permissive")


def write_table_atomic(table: pa.Table, path: Path, metadata: Mapping[str, object] | None = None) -> None:
    """Write one Parquet file through a temporary name and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if metadata:
        meta = dict(table.schema.metadata or {})
        meta.update({str(k).encode(): str(v).encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(meta)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def write_package(target: Path, run_id: str, tables: Mapping[str, pa.Table], manifest: Mapping[str, object],
                  *, replace_existing: bool = False, finalize: Callable[[Path], None] | None = None) -> Path:
    """Write ``tables`` (name -> Arrow table) and ``manifest.json`` to ``target`` atomically.

    An existing ``target`` is kept unless ``replace_existing``; then it is swapped out only after the
    new package is complete. The manifest records each file's sha256 (``files``) so a damaged package
    file is named later (:func:`verify_package`). ``finalize(partial_dir)`` adds derived files (the HTML
    report) before the package appears, so it appears complete or not at all.
    """
    unknown = set(tables) - set(PACKAGE_TABLES)
    if unknown:
        raise ValueError(f"not evidence-package tables: {sorted(unknown)}")
    target = Path(target)
    if target.exists() and not replace_existing:
        raise FileExistsError(f"{target} already exists; pass --force to replace it (the old one is kept "
                              "until the new package is complete)")
    # Two levels below the parent, so catalog globs (runs/*/x.parquet) never see a partial package.
    partial = target.parent / ".partial" / target.name
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    counts: dict[str, int] = {}
    try:
        for name, table in tables.items():
            table = with_run_id(table, run_id)
            pq.write_table(table, partial / f"{name}.parquet", compression="zstd")
            counts[name] = table.num_rows
        files = {f"{name}.parquet": sha256_file(partial / f"{name}.parquet") for name in tables}
        full_manifest = {**manifest, "run_id": run_id, "row_counts": counts, "files": files}
        (partial / "manifest.json").write_text(json.dumps(full_manifest, indent=2, default=str) + "\n")
        if finalize is not None:
            finalize(partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if target.exists():
        old = target.parent / ".partial" / f"{target.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(partial, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(partial, target)
    return target


def sha256_file(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks (the one definition)."""
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


def read_manifest(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "manifest.json").read_text())


def verify_package(run_dir: Path) -> list[str]:
    """Problems with a package on disk, one line per bad file (empty when it is intact).

    A file is bad when it is missing, differs from the sha256 the manifest recorded, or (for packages
    written before hashes were recorded) does not read as Parquet.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return [f"{run_dir}: the package directory is missing"]
    try:
        manifest = read_manifest(run_dir)
    except (OSError, ValueError) as exc:
        return [f"{run_dir / 'manifest.json'}: unreadable ({type(exc).__name__}: {exc})"]
    problems = []
    recorded: dict[str, str] = manifest.get("files") or {}
    for name, digest in sorted(recorded.items()):
        path = run_dir / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif sha256_file(path) != digest:
            problems.append(f"{path}: sha256 differs from the one recorded in manifest.json (damaged or modified)")
    for path in sorted(run_dir.glob("*.parquet")):
        if path.name in recorded:
            continue
        try:
            pq.read_metadata(path)
        except Exception as exc:  # any reader error means the file cannot be trusted
            problems.append(f"{path}: not readable as Parquet ({exc})")
    return problems
