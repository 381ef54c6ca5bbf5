"""The evidence package: one directory per run, one Parquet file per row shape, plus manifest.json.

Writes are atomic: everything goes to a hidden ``.<name>.partial`` sibling first and is renamed
into place only when complete, so a crash or a failed run never leaves a half-written package and
never touches a package that was already there.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# The tables of DESIGN §4, in the order a reader meets them.
PACKAGE_TABLES = ("summary", "fibers", "candidates", "completion", "replay", "choice", "metrics", "sensitivity")


def with_run_id(table: pa.Table, run_id: str) -> pa.Table:
    """Every table carries ``run_id`` as its first column."""
    if "run_id" in table.column_names:
        table = table.drop(["run_id"])
    return table.add_column(0, "run_id", pa.array([run_id] * table.num_rows, pa.string()))


def concat(tables: list[pa.Table]) -> pa.Table:
    """Stack tables of one row shape from several audits (columns unified by name)."""
    return pa.concat_tables(tables, promote_options="permissive")


def write_table_atomic(table: pa.Table, path: Path, metadata: Mapping[str, str] | None = None) -> None:
    """Write one Parquet file through a temporary name and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if metadata:
        meta = dict(table.schema.metadata or {})
        meta.update({k.encode(): str(v).encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(meta)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def write_package(target: Path, run_id: str, tables: Mapping[str, pa.Table], manifest: Mapping[str, object],
                  *, replace_existing: bool = False) -> Path:
    """Write ``tables`` (name -> Arrow table) and ``manifest.json`` to ``target`` atomically.

    An existing ``target`` is kept unless ``replace_existing``; then it is swapped out only after the
    new package is complete.
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
        full_manifest = {**manifest, "run_id": run_id, "row_counts": counts}
        (partial / "manifest.json").write_text(json.dumps(full_manifest, indent=2, default=str) + "\n")
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


def read_manifest(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "manifest.json").read_text())
