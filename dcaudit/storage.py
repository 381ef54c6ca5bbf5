"""Storage in the core: atomic writes, one sha256 helper, and the evidence package (one directory per run,
one Parquet file per row shape, plus manifest.json).

Writes are atomic: everything goes to a hidden ``.partial/<name>.<pid>.<token>.tmp`` below the parent
first and is renamed into place only when complete, so a crash or a failed run never leaves a half-written
package and never touches a package that was already there.

Every package table has a declared schema (:data:`TABLE_SCHEMAS`, column -> DuckDB type). Packages are
written with it (declared columns cast to their type; a value that does not fit is an error, never a new
type) and the catalog views read them by name with those types, so no run can change a column's type
for the others. Columns a stage adds beyond the declared ones are kept as written.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import queue
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from dcaudit.digests import file_identity, sha256_file
from dcaudit.errors import InputError, one_line

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from dcaudit.arrays import Kind

# The tables of docs/package.md, in the order a reader meets them.
PACKAGE_TABLES = ("summary", "fibers", "candidates", "findings", "completion", "replay", "costs", "choice",
                  "metrics", "sensitivity")
CATALOG_TABLES = PACKAGE_TABLES          # one view per package table in catalog.duckdb
OPTIONAL_VIEWS = ("findings", "costs")   # views that exist only once some package has the table


_AUDIT = {"run_id": "VARCHAR", "source": "VARCHAR", "audit_id": "VARCHAR", "claim": "VARCHAR",
          "evidence": "VARCHAR", "fiber_rule": "VARCHAR", "model": "VARCHAR"}
_COUNTS = {k: "BIGINT" for k in ("n_candidates", "n_fibers", "n_mixed_fibers", "certified_true",
                                   "certified_false", "ambiguous", "unsupported")}
_FRACTIONS = {k: "DOUBLE" for k in ("certified_fraction", "ambiguous_fraction", "unsupported_fraction",
                                     "mixed_fiber_fraction", "median_fiber_size", "benchmark_only_risk")}
_P10_P90 = ("certified_fraction", "false_decision_rate")

TABLE_SCHEMAS: dict[str, dict[str, str]] = {
    "summary": {**_AUDIT, "min_support": "BIGINT", **_COUNTS, "n_excluded": "BIGINT",
                "n_unsupported_fibers": "BIGINT", **_FRACTIONS, "prevalence": "DOUBLE",
                "benchmark_only_errors": "BIGINT", "split": "BIGINT", "n_splits": "BIGINT",
                "clean_accuracy": "DOUBLE", "robust_accuracy": "DOUBLE", "corruptions": "VARCHAR",
                # identity = "inchikey": mixed fibers split into label noise and incomplete evidence
                "identity": "VARCHAR", "n_label_noise_fibers": "BIGINT", "n_incomplete_fibers": "BIGINT",
                "n_both_fibers": "BIGINT", "label_noise_candidates": "BIGINT", "incomplete_candidates": "BIGINT",
                "both_candidates": "BIGINT", "conflicting_records": "BIGINT", "label_noise_fraction": "DOUBLE",
                "incomplete_fraction": "DOUBLE"},
    "fibers": {**_AUDIT, "fiber_key": "BIGINT", "evidence_key": "VARCHAR", "evidence_lo": "DOUBLE",
               "evidence_hi": "DOUBLE", "n": "BIGINT", "n_true": "BIGINT", "status": "VARCHAR", "split": "BIGINT",
               "predicted": "VARCHAR", "clean_correct": "BOOLEAN", "confidence_decile": "BIGINT",
               "n_entities": "BIGINT", "n_conflicting_entities": "BIGINT", "n_true_entities": "BIGINT",
               "n_false_entities": "BIGINT", "conflicting_records": "BIGINT", "mixed_kind": "VARCHAR"},
    "candidates": {**_AUDIT, "candidate_id": "VARCHAR", "fiber_key": "BIGINT", "claim_value": "BOOLEAN",
                   "status": "VARCHAR", "excluded_reason": "VARCHAR", "split": "BIGINT"},
    "completion": {**_AUDIT, "probes": "VARCHAR", "min_support": "BIGINT", "calibration_fraction": "DOUBLE",
                   "refinement": "VARCHAR", "tie_break": "VARCHAR", "policy": "VARCHAR", "deployable": "BOOLEAN",
                   "step": "BIGINT", "probe_added": "VARCHAR", "probe_added_share": "DOUBLE", "seed": "BIGINT",
                   "n_draws": "BIGINT", "certified_fraction": "DOUBLE", "false_decision_rate": "DOUBLE",
                   **{f"{m}_{s}": "DOUBLE" for m in _P10_P90 for s in ("p10", "p90", "se")},
                   "calibration_certified_fraction": "DOUBLE", "certified_true_fraction": "DOUBLE",
                   "n_test": "DOUBLE", "n_candidates": "BIGINT", "n_excluded": "BIGINT",
                   "cumulative_cost": "DOUBLE", "within_budget": "BOOLEAN"},
    "replay": {**_AUDIT, "certification": "VARCHAR", "mode": "VARCHAR", "min_support": "BIGINT",
               "epsilon": "DOUBLE", "delta": "DOUBLE", "calibration_fraction": "DOUBLE", "seed_offset": "BIGINT",
               "n_excluded": "BIGINT", "policy": "VARCHAR", "seed": "BIGINT", "n_seeds": "BIGINT",
               "n_calibration": "DOUBLE", "n_test": "DOUBLE", "tolerance": "DOUBLE", "certified": "DOUBLE",
               "certified_fraction": "DOUBLE", "decided_fraction": "DOUBLE", "false_decisions": "DOUBLE",
               "false_decision_rate": "DOUBLE", "false_rate_certified": "DOUBLE", "risk_bound": "DOUBLE",
               "risk_bound_max": "DOUBLE", "acquisitions": "DOUBLE", "acquired_fraction": "DOUBLE",
               "break_even_price": "DOUBLE", "baseline_false_decisions": "DOUBLE", "prices": "DOUBLE[]",
               "total_cost": "DOUBLE[]", "relative_cost_reduction": "DOUBLE[]",
               **{f"{m}_{s}": "DOUBLE" for m in (*_P10_P90, "acquisitions", "break_even_price")
                  for s in ("p10", "p90")}, "break_even_price_median": "DOUBLE",
               "false_rate_certified_bound": "DOUBLE", "certified_units": "DOUBLE"},
    "choice": {"run_id": "VARCHAR", "source": "VARCHAR", "audit_id": "VARCHAR", "claim": "VARCHAR",
               "model": "VARCHAR", "split": "BIGINT", "seed": "BIGINT", "fiber_rule": "VARCHAR",
               "metric": "VARCHAR", "benchmark_metric_name": "VARCHAR", "benchmark_metric": "DOUBLE",
               "robust_accuracy": "DOUBLE", "certified_fraction": "DOUBLE", "ambiguous_fraction": "DOUBLE",
               "certified": "DOUBLE", "false_decisions": "DOUBLE", "false_rate_certified": "DOUBLE",
               "certified_error": "DOUBLE", "n_candidates": "BIGINT", "rank_by_benchmark": "DOUBLE",
               "rank_by_robustness": "DOUBLE", "rank_by_certification": "DOUBLE", "chosen_by_benchmark": "DOUBLE",
               "chosen_by_robustness": "DOUBLE", "chosen_by_certification": "DOUBLE"},
    "costs": {**_AUDIT, "certification": "VARCHAR", "mode": "VARCHAR", "min_support": "BIGINT", "delta": "DOUBLE",
              "policy": "VARCHAR", "price": "DOUBLE", "seed": "BIGINT", "n_seeds": "BIGINT", "n_test": "DOUBLE",
              "false_decisions": "DOUBLE", "measurements": "DOUBLE", "cost": "DOUBLE",
              "cost_per_candidate": "DOUBLE", "measured_fraction": "DOUBLE", "false_rate": "DOUBLE",
              "cost_per_candidate_p10": "DOUBLE", "cost_per_candidate_p90": "DOUBLE", "envelope_cost": "DOUBLE",
              "cheapest": "BOOLEAN", "band_low": "DOUBLE", "band_high": "DOUBLE", "best_baseline": "VARCHAR",
              "diff_vs_best": "DOUBLE", "diff_low": "DOUBLE", "diff_high": "DOUBLE"},
    "metrics": {"run_id": "VARCHAR", "source": "VARCHAR", "experiment": "VARCHAR", "setting": "VARCHAR",
                "claim": "VARCHAR", "fiber_rule": "VARCHAR", "min_support": "BIGINT", "metric": "VARCHAR",
                "value": "DOUBLE", "ci_low": "DOUBLE", "ci_high": "DOUBLE", "sd": "DOUBLE", "min": "DOUBLE",
                "max": "DOUBLE", "n_seeds": "BIGINT", "radius_scale": "DOUBLE"},
    "sensitivity": {**_AUDIT, "rule_kind": "VARCHAR", "tolerance_source": "VARCHAR", "tolerance": "DOUBLE",
                    "min_support": "BIGINT", **_COUNTS, **_FRACTIONS},
    "findings": {"run_id": "VARCHAR", "source": "VARCHAR", "file": "VARCHAR", "row": "BIGINT", "column": "VARCHAR",
                 "kind": "VARCHAR", "detail": "VARCHAR", "candidate_id": "VARCHAR"},
}

_ARROW_TYPES = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
                "DOUBLE[]": pa.list_(pa.float64())}


def arrow_schema_of(table: str) -> dict[str, pa.DataType]:
    return {name: _ARROW_TYPES[kind] for name, kind in TABLE_SCHEMAS.get(table, {}).items()}


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class NotAFileError(InputError, OSError):
    """Something other than a file (a directory, a link to nothing) where dcaudit reads or writes one: a
    one-line input error (exit 2), and an OSError too, so a caller that lets an optional cache fail quietly
    (the catalog's) still does."""


def _not_a_file(path: Path) -> tuple[Path, str] | None:
    """Why ``path`` can be neither read nor replaced as a file (it is there, but not as one) and what is in
    the way (``path`` or a parent), or None when it is a regular file (or a link to one) or nothing is there."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            return path, f"is a symbolic link to {os.readlink(path)}, which does not exist"
        return None
    except NotADirectoryError:
        from dcaudit.config import file_in_the_way

        blocked = file_in_the_way(path) or path.parent
        return blocked, f"cannot be there: {blocked} is a file, not a directory"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return path, "is a symbolic link that loops back on itself"
        raise
    if stat.S_ISREG(mode):
        return None
    return path, ("is a directory, not a file" if stat.S_ISDIR(mode)
                  else "is not a regular file (a pipe, socket or device)")


def regular_file(path: Path, what: str = "") -> bool:
    """True when ``path`` is a regular file (or a link to one), False when nothing is there. Anything else
    there (a directory, a link to nothing, a pipe) is a NotAFileError naming it: read as missing it would be
    fetched or derived again and then fail to replace it, or replace what the user put there.

    The connectors look up mirror, downloaded and derived files with it, and every atomic write checks its
    target with it (:func:`write_bytes_atomic`, :func:`write_table_atomic`). ``what`` says what the file is for.
    (A file a user names on the command line is checked by :func:`dcaudit.inputs.check_file`.)"""
    path = Path(path)
    found = _not_a_file(path)
    if found is None:
        return path.is_file()
    culprit, problem = found
    raise NotAFileError(f"{what + ' ' if what else ''}{path} {problem}; move {'it' if culprit == path else culprit} "
                        "out of the way (dcaudit does not remove it)")


def _replace_or_remove(tmp: Path, path: Path, write: Callable[[Path], None], what: str) -> None:
    """``write(tmp)``, then ``os.replace(tmp, path)``; on any failure ``tmp`` is removed, and a directory that
    appeared at ``path`` meanwhile is named as such (never an internal error)."""
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):   # never in place of an interrupt
            regular_file(path, what)
        raise


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary sibling and ``os.replace`` (readers see old or new).
    Something other than a file at ``path`` (a directory) is a NotAFileError, and stays as it is."""
    path = Path(path)
    regular_file(path)   # before mkdir: a parent that is a file is named too
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())

    _replace_or_remove(path.with_name(f".{path.name}.{os.getpid()}.tmp"), path, write, "")
    if durable:
        _fsync_dir(path.parent)


def write_json_atomic(path: Path, payload: object, *, durable: bool = True) -> None:
    write_bytes_atomic(path, (json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n").encode(),
                       durable=durable)


def with_run_id(table: pa.Table, run_id: str) -> pa.Table:
    """Every table carries ``run_id`` as its first column."""
    if "run_id" in table.column_names:
        table = table.drop(["run_id"])
    return table.add_column(0, "run_id", constant_dictionary(run_id, table.num_rows))


def constant_dictionary(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` as a dictionary-encoded string column: one value and ``n`` zero indices.

    Used for the constant columns of large tables (run_id, and the audit's source, claim, … of every
    candidate): building ``n`` strings and then finding they form one dictionary page costs ~0.07 s per
    column at 1e6 rows. Package files are written without the Arrow schema, so the Parquet column reads
    back as plain text everywhere (DuckDB, polars, pyarrow)."""
    import numpy as np

    # one-byte indices: a quarter of the memory of int32 ones, and a third less time to write (1e6 rows: 9 -> 6 ms)
    indices = pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(np.zeros(n, dtype=np.int8))])
    return pa.DictionaryArray.from_arrays(indices, constant_strings(value, 1))


def plain_strings(table: pa.Table) -> pa.Table:
    """``table`` with dictionary-encoded string columns decoded (what a package file reads back as)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, pa.field(field.name, field.type.value_type),
                                     table.column(i).cast(field.type.value_type))
    return table


def constant_strings(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` as an Arrow string array, built from buffers: converting Python objects
    (``pa.array([...])``, ``pa.scalar``) makes pyarrow import pandas, ~0.3 s of a command's start-up."""
    import numpy as np

    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32 if len(data) * n < 2**31 else np.int64) * len(data)
    kind = pa.string() if offsets.dtype == np.int32 else pa.large_string()
    array = pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])
    return array if kind == pa.string() else array.cast(pa.string())


def arrow_table(columns: Mapping[str, Sequence[object]], types: Mapping[str, Kind] | None = None) -> pa.Table:
    """Python lists as an Arrow table (column types inferred unless given in ``types``): built on numpy
    buffers by :func:`dcaudit.arrays.table`, since pyarrow's own conversion of Python objects (``pa.array``,
    ``pa.table`` of lists, ``Table.from_pylist``) imports pandas to look for pandas types, ~0.3 s of a command."""
    from dcaudit.arrays import table

    return table(columns, types)


def read_table(path: Path | str) -> pa.Table:
    """One Parquet file as an Arrow table. ``pq.read_table`` looks for pandas metadata and so imports
    pandas (~0.3 s of a command); ``ParquetFile.read`` does not."""
    with pq.ParquetFile(path) as file:
        return file.read()


def concat(tables: list[pa.Table]) -> pa.Table:
    """Stack tables of one row shape from several audits (columns unified by name)."""
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowTypeError:  # a constant (dictionary) column beside a text one: stack them as text
        return pa.concat_tables([plain_strings(t) for t in tables], promote_options="permissive")


def write_table_atomic(table: pa.Table, path: Path, metadata: Mapping[str, object] | None = None) -> None:
    """Write one Parquet file through a temporary name and ``os.replace``. Something other than a file at
    ``path`` or at its digest note (a directory) is a NotAFileError, and stays as it is."""
    path = Path(path)
    regular_file(path, "the derived table")
    regular_file(_digest_path(path), "the digest note of a derived table")  # else the table is never reused
    path.parent.mkdir(parents=True, exist_ok=True)
    if metadata:
        meta = dict(table.schema.metadata or {})
        meta.update({str(k).encode(): str(v).encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(meta)
    _replace_or_remove(path.with_name(f".{path.name}.{os.getpid()}.tmp"), path,
                       lambda tmp: pq.write_table(table, tmp, compression="zstd"), "the derived table")
    _remember_digest(path)


def _digest_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


def _identity(path: Path) -> str:
    """The file identity a digest note records (:func:`dcaudit.digests.file_identity`, without the device)."""
    identity = file_identity(path)
    if identity is None:
        raise FileNotFoundError(errno.ENOENT, "not a regular file", str(path))
    return " ".join(str(part) for part in identity[1:])


def _remember_digest(path: Path) -> None:
    """Beside a derived table: its sha256 and the file identity it was taken at (:func:`table_intact`)."""
    with contextlib.suppress(OSError):  # without the note the table is derived again next time: slower, not wrong
        _digest_path(path).write_text(f"{_identity(path)}\n{sha256_file(path)}\n")


def table_intact(path: Path) -> bool:
    """True when a derived table holds the bytes it was written with: its file identity (inode, size, mtime)
    is the one noted when it was written, or — after a copy that kept the bytes — its sha256 is. A table with
    no note, or whose bytes changed (a flipped bit, a rewrite by another tool), is not intact: derived again.
    A note that is a directory is a NotAFileError (:func:`regular_file`): it could never be written again."""
    regular_file(_digest_path(path), "the digest note of a derived table")
    try:
        identity, digest = _digest_path(path).read_text().split("\n")[:2]
        if identity == _identity(path):
            return True
        if sha256_file(path) == digest:
            _remember_digest(path)
            return True
    except (OSError, ValueError):
        pass
    return False


def recorded_sha256(path: Path) -> str:
    """The sha256 a derived table was written with (its digest note), for keying what is derived from it;
    computed from the file when the note is missing or does not match the file (:func:`table_intact`)."""
    if table_intact(path):
        with contextlib.suppress(OSError, ValueError):
            return _digest_path(path).read_text().split("\n")[1]
    return sha256_file(path)


def conform(name: str, table: pa.Table) -> pa.Table:
    """Cast the declared columns of package table ``name`` to their declared types.

    A value that does not fit (text in a count, 1e30 in a BIGINT) raises ValueError naming the table and
    column: a run never writes a column of a type the catalog views do not expect."""
    declared = arrow_schema_of(name)
    for i, field in enumerate(table.schema):
        want = declared.get(field.name)
        if want is None or field.type == want or (pa.types.is_dictionary(field.type)
                                                  and field.type.value_type == want):
            continue
        try:
            column = table.column(i).cast(want, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueError(f"package table {name}: column {field.name!r} of type {field.type} does not fit its "
                             f"declared type {TABLE_SCHEMAS[name][field.name]} ({exc})") from None
        table = table.set_column(i, pa.field(field.name, want), column)
    return table


# Columns of a package table that hold a value on every row. They are written as Parquet REQUIRED columns,
# which carry no definition levels: at 1e7 candidates that is 0.16 s of a 0.92 s write (the constant columns
# cost half as much each), and it tells every reader the column has no NULLs.
NON_NULL_COLUMNS: dict[str, tuple[str, ...]] = {
    "candidates": ("run_id", "source", "audit_id", "claim", "evidence", "fiber_rule", "candidate_id", "status"),
}


def declare_non_null(name: str, table: pa.Table) -> pa.Table:
    """``table`` with the :data:`NON_NULL_COLUMNS` of package table ``name`` declared not nullable (those
    without a NULL; a column that has one stays nullable, so nothing is refused here). Values are untouched."""
    names = NON_NULL_COLUMNS.get(name, ())
    if not names:
        return table
    fields = [f.with_nullable(False) if f.name in names and table.column(i).null_count == 0 else f
              for i, f in enumerate(table.schema)]
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields, metadata=table.schema.metadata))


def statistics_columns(table: pa.Table) -> list[str]:
    """The columns whose Parquet statistics (min/max) are written: all but the candidate ids and the
    dictionary-encoded text columns other than ``run_id``. pyarrow computes a dictionary column's min/max by
    decoding every row (~0.02 s a column at 1e6 rows; a third of writing the candidates table), and neither
    can skip anything: ids are unordered, and the constant columns hold one value per audit. ``run_id`` keeps
    them, so a query over every run's files can skip the files of other runs."""
    return [f.name for f in table.schema if f.name == "run_id"
            or (f.name != "candidate_id" and not pa.types.is_dictionary(f.type))]


def write_package(target: Path, run_id: str, tables: Mapping[str, pa.Table], manifest: Mapping[str, object],
                  *, replace_existing: bool = False, finalize: Callable[[Path], None] | None = None) -> Path:
    """Write ``tables`` (name -> Arrow table) and ``manifest.json`` to ``target`` atomically.

    An existing ``target`` is kept unless ``replace_existing``; then it is swapped out only after the
    new package is complete. The manifest records each file's sha256 (``files``) so a damaged package
    file is named later (:func:`verify_package`). ``finalize(partial_dir)`` adds derived files (the HTML
    report) before the package appears, so it appears complete or not at all.
    """
    with PackageWriter(target, run_id, replace_existing=replace_existing) as writer:
        return writer.commit(tables, manifest, finalize=finalize)


class PackageWriter:
    """An evidence package written in two steps: tables that are final early (a run's candidates table, once
    its fiber stage is done) are written on a thread of their own while the run goes on (:meth:`write_early`;
    pyarrow's writer releases the GIL, and at 1e7 candidates it takes ~0.9 s on one core), then
    :meth:`commit` writes the rest and the manifest and renames the package into place, as
    :func:`write_package` does. Used as a context manager: a run that fails leaves nothing behind (the staging
    directory goes, once an early write in flight has finished).

    An existing ``target`` is refused here, before any work, unless ``replace_existing``."""

    def __init__(self, target: Path, run_id: str, *, replace_existing: bool = False) -> None:
        target = Path(target).expanduser()   # callers inside dcaudit pass paths as given
        if target.exists() and not replace_existing:
            from dcaudit.errors import SpecError

            raise SpecError(f"--out {target} already exists; pass --force to replace it (the old one is "
                            "kept until the new package is complete)")
        self.target, self.run_id, self.replace_existing = target, run_id, replace_existing
        self._partial: Path | None = None
        self._early: dict[str, tuple[pa.Table, Future[int | None]]] = {}
        self._streams: list[TableStream] = []
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> PackageWriter:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if exc is not None:
            self.discard()

    def _staging(self) -> Path:
        if self._partial is None:
            _remove_stale_staging(self.target)
            self._partial = staging_dir(self.target)
            self._partial.mkdir(parents=True)
        return self._partial

    def _prepared(self, name: str, table: pa.Table) -> pa.Table:
        return declare_non_null(name, conform(name, with_run_id(table, self.run_id)))

    def _write(self, name: str, table: pa.Table) -> int:
        table = self._prepared(name, table)
        pq.write_table(table, self._staging() / f"{name}.parquet", row_group_size=ROW_GROUP_ROWS,
                       **_parquet_options(table))
        return table.num_rows

    def _write_parts(self, name: str, parts: queue.SimpleQueue[pa.Table | object]) -> int | None:
        """Write the parts of a :class:`TableStream` as they arrive, as :meth:`_write` writes a whole table:
        the same columns and options, in row groups of :data:`ROW_GROUP_ROWS` rows (parts are gathered or cut
        to that size). None when the stream was abandoned or a part's columns differ from the first part's in
        more than a NULL (a column REQUIRED in the first part holds a NULL later): the commit then writes the
        table whole."""
        path = self._staging() / f"{name}.parquet"
        out: pq.ParquetWriter | None = None
        pending: list[pa.Table] = []   # rows not yet written: less than a row group
        rows, part = 0, None
        try:
            while (part := parts.get()) is not _END:
                if part is _ABANDON:
                    return None
                assert isinstance(part, pa.Table)
                table = self._prepared(name, part)
                if out is None:
                    out = pq.ParquetWriter(path, table.schema, **_parquet_options(table))
                elif table.schema != out.schema:
                    if not _looser(out.schema, table.schema):
                        return None
                    table = pa.Table.from_arrays(table.columns, schema=out.schema)
                pending.append(table)
                rows += table.num_rows
                if sum(t.num_rows for t in pending) >= ROW_GROUP_ROWS:
                    block = pa.concat_tables(pending)
                    full = block.num_rows - block.num_rows % ROW_GROUP_ROWS
                    out.write_table(block.slice(0, full), row_group_size=ROW_GROUP_ROWS)
                    pending = [block.slice(full)] if full < block.num_rows else []
            if out is not None and pending:
                out.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
        finally:
            if out is not None:
                out.close()
            if part is not _END:   # abandoned, refused or failed: no file the commit could take for the table
                path.unlink(missing_ok=True)
        return rows

    def stream(self, name: str) -> TableStream:
        """A :class:`TableStream` for package table ``name``: its parts are written on the writer's thread
        as they are put, while the run computes the next ones."""
        if name not in PACKAGE_TABLES:
            raise ValueError(f"not an evidence-package table: {name!r}")
        self._staging()
        stream = TableStream(self, name)
        self._streams.append(stream)
        return stream

    def _submit(self, task: Callable[..., int | None], *args: object) -> Future[int | None]:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor  # only a run that writes early loads it

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="dcaudit-package-writer")
        return self._pool.submit(task, *args)

    def write_early(self, name: str, table: pa.Table) -> None:
        """Start writing package table ``name`` now, on the writer's thread; :meth:`commit` waits for it, and
        writes it again itself if its ``tables`` hold another table under that name."""
        if name not in PACKAGE_TABLES:
            raise ValueError(f"not an evidence-package table: {name!r}")
        self._staging()
        self._early[name] = (table, self._submit(self._write, name, table))

    def commit(self, tables: Mapping[str, pa.Table], manifest: Mapping[str, object], *,
               finalize: Callable[[Path], None] | None = None) -> Path:
        """Write the tables not written early (and any early one ``tables`` replace), ``manifest.json`` and
        ``finalize``'s files, then rename the package into place (see :func:`write_package`)."""
        unknown = set(tables) - set(PACKAGE_TABLES)
        if unknown:
            raise ValueError(f"not evidence-package tables: {sorted(unknown)}")
        partial = self._staging()
        for stream in self._streams:   # one not done: its thread stops (and removes its file) before any write
            stream.settle()
        counts: dict[str, int] = {}
        for name, table in tables.items():
            early = self._early.get(name)
            if early is None or early[0] is not table:
                if early is not None:   # the run changed it after all: this one, once the early write is done
                    early[1].result()
                counts[name] = self._write(name, table)
        for name, (_, done) in self._early.items():
            written = done.result()   # an early write's error is this commit's
            if name in tables and name not in counts:
                # a stream that could not be written part by part (None): the table, whole
                counts[name] = written if written is not None else self._write(name, tables[name])
            elif name not in tables:
                (partial / f"{name}.parquet").unlink(missing_ok=True)
        counts = {name: counts[name] for name in tables}   # the manifest lists tables in the run's order
        files = {f"{name}.parquet": sha256_file(partial / f"{name}.parquet") for name in tables}
        full_manifest = {**manifest, "run_id": self.run_id, "row_counts": counts, "files": files}
        (partial / "manifest.json").write_text(json.dumps(full_manifest, indent=2, default=str) + "\n")
        if finalize is not None:
            finalize(partial)
        self._close_pool()
        target = self.target
        if self.replace_existing and target.exists():
            old = partial.with_name(partial.name.removesuffix(".tmp") + ".old")
            os.replace(target, old)
            os.replace(partial, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:  # rename(2) does not replace a directory that holds anything: a package another run put there
                os.rename(partial, target)     # meanwhile stays, and this run says so
            except OSError as exc:
                self.discard()
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    from dcaudit.errors import SpecError

                    raise SpecError(f"--out {target} appeared while this run was writing (another run?): it is "
                                    "kept, and this package was not written; pass --force to replace it") from None
                raise
        self._partial = None
        _remove_if_empty(partial.parent)
        return target

    def discard(self) -> None:
        """Remove what was staged, once a write in flight has finished (it cannot be stopped half-way)."""
        self._close_pool()
        if self._partial is not None:
            shutil.rmtree(self._partial, ignore_errors=True)
            _remove_if_empty(self._partial.parent)
            self._partial = None

    def _close_pool(self) -> None:
        for stream in self._streams:   # a stream never finished (the run failed) ends, so its thread does
            stream.abandon()
        self._streams = []
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


_END, _ABANDON = object(), object()   # what a TableStream's queue holds after its last part
# Rows of a row group in a package file, whole or streamed (pyarrow's default is 1 Mi). A quarter of that lets
# the writer start on a 1e6-row candidates table while the scan goes on (the 1e6 audit command 9 % faster),
# and a reader decodes a 1e6-row file on four threads instead of one; the file is ~2 % larger.
ROW_GROUP_ROWS = 1 << 18


class RowSink(Protocol):
    """Where a table's rows go while they are computed: parts, in order (:class:`TableStream`, or an adapter
    in front of one). ``abandon`` says the parts put so far are not the table after all."""

    def put(self, part: pa.Table) -> None: ...

    def abandon(self) -> None: ...


class TableStream:
    """A package table written part by part while it is being computed (:meth:`PackageWriter.stream`).

    The producer :meth:`put` s the table's rows in order, as Arrow tables of any size (the writer gathers and
    cuts them into the row groups a whole write makes), and says at the end which table they make up
    (:meth:`done`): the commit then waits for the file instead of writing it. :meth:`abandon` says
    the parts put so far are not the table (e.g. rows that came out of order and had to be sorted): the
    commit writes the table whole, as it does for a stream never marked done.

    At 1e7 candidates, DuckDB's scan and pyarrow's writer then run side by side: the writer takes ~0.8 s on
    one core, and the scan leaves that core free for most of it."""

    def __init__(self, writer: PackageWriter, name: str) -> None:
        self._writer, self._name = writer, name
        self._queue: queue.SimpleQueue[pa.Table | object] = queue.SimpleQueue()
        self._rows, self._open, self._taken = 0, True, False
        self._future = writer._submit(writer._write_parts, name, self._queue)

    def put(self, part: pa.Table) -> None:
        if self._open:
            self._rows += part.num_rows
            self._queue.put(part)

    def abandon(self) -> None:
        if self._open:
            self._open = False
            self._queue.put(_ABANDON)

    def done(self, table: pa.Table) -> bool:
        """The parts put are ``table`` (its rows, in order): the commit takes the file the stream wrote. False
        (and the stream abandoned) when nothing or other rows were put, or it was abandoned already: the commit
        writes ``table`` whole."""
        if not self._open:
            return False
        if self._rows != table.num_rows or self._rows == 0:
            self.abandon()
            return False
        self._open, self._taken = False, True
        self._queue.put(_END)
        self._writer._early[self._name] = (table, self._future)
        return True

    def settle(self) -> None:
        """A stream not marked done is abandoned, and its thread has stopped (and removed its file) when this
        returns, so the table can be written whole under the same name; a failure of that thread is left for
        the whole write to meet again."""
        if self._taken:
            return
        self.abandon()
        with contextlib.suppress(Exception):
            self._future.result()


def _parquet_options(table: pa.Table) -> dict[str, object]:
    """How every package table is written. No dictionary for the id column: every id is distinct, and trying
    costs twice the plain encoding. No Arrow schema: dictionary-encoded constant columns read back as plain
    text."""
    return {"compression": "zstd", "store_schema": False,
            "use_dictionary": [c for c in table.column_names if c != "candidate_id"],
            "write_statistics": statistics_columns(table)}


def _looser(first: pa.Schema, later: pa.Schema) -> bool:
    """Whether a later part's schema differs from the first part's only by columns the first left nullable and
    the later part declares not null (it has no NULL there): such a part is written under the first schema."""
    return first.names == later.names and all(
        a.type == b.type and (a.nullable or not b.nullable) for a, b in zip(first, later, strict=True))


def staging_dir(target: Path) -> Path:
    """Where a package for ``target`` is written before it is renamed into place: two levels below the
    parent, so catalog globs (runs/*/x.parquet) never see a partial package, under a name of this write's
    own (``<name>.<pid>.<token>.tmp``), so nothing already in ``.partial`` — another write, or a directory
    of the user's — is ever touched."""
    return Path(target).parent / ".partial" / f"{Path(target).name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def process_alive(pid: object) -> bool:
    """Whether process ``pid`` of this host still runs (an unknown pid may: the next run settles it)."""
    if not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_staging(target: Path) -> None:
    """What a killed write for ``target`` left in ``.partial`` (its process is gone): removed, so a kill -9
    never leaves debris beside an --out for good."""
    for leftover in (Path(target).parent / ".partial").glob(f"{glob.escape(Path(target).name)}.*.*.*"):
        pid = leftover.name[len(Path(target).name) + 1:].split(".", 1)[0]
        if leftover.name.endswith((".tmp", ".old")) and pid.isdecimal() and not process_alive(int(pid)):
            if leftover.is_symlink():
                leftover.unlink(missing_ok=True)
            else:
                shutil.rmtree(leftover, ignore_errors=True)


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):   # not empty (another write, the user's files) or already gone: kept
        folder.rmdir()


# What a workspace keeps for itself ($DCAUDIT_HOME/<name>): no --out may write into or over these.
WORKSPACE_PARTS = ("runs", "records", "tables", "raw", "locks", "tmp", "catalog.duckdb")


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_out_dir(target: Path, home: Path, option: str = "--out", *, inputs: Iterable[Path | str] = ()) -> None:
    """A SpecError for a package directory that would replace the workspace or what it keeps: the workspace
    itself, a directory around it, or a place inside its runs, records, tables, raw data or locks (``--force``
    would delete them first). Also for a path under a file, the current directory (or one holding it), an
    existing directory of other files than an evidence package (``--force`` replaces only packages), and a
    directory holding one of ``inputs`` (the files the run reads)."""
    from dcaudit.config import file_in_the_way
    from dcaudit.errors import SpecError

    if target.expanduser().is_symlink():   # replacing it would put a directory where the link was
        raise SpecError(f"{option} {target} is a symbolic link (to {os.readlink(target.expanduser())}); give the "
                        "directory itself")
    out, ws = target.expanduser().resolve(), home.expanduser().resolve()
    if _within(ws, out):
        raise SpecError(f"{option} {target} is the workspace (DCAUDIT_HOME={home}) or holds it; the package "
                        "would replace every run: give a directory outside it")
    kept = next((part for part in WORKSPACE_PARTS if _within(out, ws / part)), None)
    if kept is not None:
        raise SpecError(f"{option} {target} lies in the workspace's {kept}, which dcaudit keeps for itself "
                        f"(DCAUDIT_HOME={home}): give a directory outside it")
    blocked = file_in_the_way(out)
    if blocked is not None:
        raise SpecError(f"{option} {target}: {blocked} is a file, so no directory can be made under it")
    with contextlib.suppress(OSError):
        if _within(Path.cwd().resolve(), out):
            raise SpecError(f"{option} {target} is the current directory or holds it; a package replaces its "
                            f"directory whole: give a new directory, e.g. {option} results")
    for source in inputs:
        if _within(Path(source).expanduser().resolve(), out):
            raise SpecError(f"{option} {target} holds the input {source}, which replacing the directory would "
                            "delete: give a directory elsewhere")
    if out.is_dir() and any(out.iterdir()):
        if not _is_package(out):
            raise SpecError(f"{option} {target} is a directory of other files, not an evidence package (it has no "
                            "manifest.json); only an earlier package is replaced (--force): give a new or empty "
                            "directory")
        foreign = _foreign_files(out)
        if foreign:
            raise SpecError(f"{option} {target} is an evidence package that also holds files dcaudit did not write "
                            f"({', '.join(foreign[:3])}{', …' if len(foreign) > 3 else ''}), which replacing it "
                            "would delete: move them out, or give another directory")
    problem = _unwritable(out)
    if problem is not None:
        raise SpecError(f"{option} {target} cannot be written ({problem}): give a directory you can write to")


def _unwritable(out: Path) -> str | None:
    """Why nothing can be made at ``out`` (its nearest existing folder refuses a new entry), or None. Tried
    with a directory made and removed at once, before any work: permissions alone do not tell (root, /proc)."""
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        probe = tempfile.mkdtemp(prefix=".dcaudit-probe-", dir=folder)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    with contextlib.suppress(OSError):
        os.rmdir(probe)
    return None


def _foreign_files(package: Path) -> list[str]:
    """Entries of a package directory that dcaudit did not write: neither a file its manifest lists, nor the
    manifest, nor a report (report.html, compare-*.html) that ``dcaudit report`` writes into it."""
    try:
        listed = set(read_manifest(package).get("files") or {})
    except (OSError, ValueError):
        listed = set()
    ours = listed | {"manifest.json", "report.html"}
    return sorted(e.name for e in os.scandir(package)
                  if not (e.is_file(follow_symlinks=False) and (e.name in ours or
                                                                (e.name.startswith("compare-") and e.name.endswith(".html")))))


def _is_package(folder: Path) -> bool:
    """A directory dcaudit wrote as an evidence package: its manifest.json reads as one."""
    try:
        manifest = read_manifest(folder)
    except (OSError, ValueError):
        return False
    return isinstance(manifest.get("files"), dict)


def check_out_file(target: Path, home: Path, *, may_replace: Callable[[str], bool], option: str = "--out") -> None:
    """A SpecError for a file to write (a report) that is a directory, lies under a file, or would overwrite
    a file of an evidence package (a directory with a manifest.json) or of the workspace; only names for
    which ``may_replace(name)`` holds (report.html, compare-*.html) may replace a file in a package."""
    from dcaudit.config import file_in_the_way
    from dcaudit.errors import SpecError

    out, ws = target.expanduser().resolve(), home.expanduser().resolve()
    if out.is_dir():
        raise SpecError(f"{option} {target} is a directory; give a file name such as report.html")
    blocked = file_in_the_way(out)
    if blocked is not None:
        raise SpecError(f"{option} {target}: {blocked} is a file, so no directory can be made under it")
    in_package = (out.parent / "manifest.json").is_file()
    if (in_package or any(_within(out, ws / part) for part in WORKSPACE_PARTS if part != "runs")) \
            and not (in_package and may_replace(out.name)):
        raise SpecError(f"{option} {target} would overwrite a file of an evidence package or of the workspace; "
                        "give a path outside them")


sha256_of = sha256_file   # the name the catalog code used before


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
    A table that does not read, or whose bytes changed since it was written (:func:`table_intact`), is
    never trusted: the caller derives it again. A directory (or anything but a file) at ``path`` is a
    NotAFileError naming it (:func:`regular_file`), not a table to derive again.
    """
    if not regular_file(path, "the derived table"):
        return False
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:  # a corrupt table is re-derived, never trusted
        return False
    return (meta.get(key_field.encode(), b"").decode() == input_key
            and (version is None or meta.get(b"dcaudit.normaliser", b"").decode() == version)
            and table_intact(path))


def read_manifest(run_dir: Path) -> dict:
    """A package's manifest.json; ValueError when it is not a JSON object whose ``files`` (when present)
    map names to sha256 strings — a damaged or hand-edited manifest is a damaged package, not a crash."""
    manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
    if not isinstance(manifest, dict):
        raise ValueError(f"not a JSON object but {type(manifest).__name__}")
    files = manifest.get("files")
    if files is not None and not (isinstance(files, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items())):
        raise ValueError("its 'files' is not a table of file names and sha256 digests")
    return manifest


# What readers of a package (load and its summary line, report, compare) rely on in each table, whatever
# wrote it; every other declared column is there only for some audits, and the reports show what is present.
REQUIRED_COLUMNS = {
    "summary": ("n_candidates", "n_fibers", "n_mixed_fibers", "certified_fraction", "ambiguous_fraction",
                "unsupported_fraction"),
    "fibers": ("n", "n_true"),
    "candidates": ("candidate_id",),
}


def _fits(actual: pa.DataType, declared: str) -> bool:
    """A column's Parquet type serves its declared type (as DuckDB and polars read it back)."""
    if pa.types.is_dictionary(actual):
        actual = actual.value_type
    if declared == "VARCHAR":
        return pa.types.is_string(actual) or pa.types.is_large_string(actual) or pa.types.is_null(actual)
    if declared == "BIGINT":
        return pa.types.is_integer(actual) or pa.types.is_null(actual)
    if declared == "DOUBLE":
        return pa.types.is_floating(actual) or pa.types.is_integer(actual) or pa.types.is_null(actual)
    if declared == "BOOLEAN":
        return pa.types.is_boolean(actual) or pa.types.is_null(actual)
    if declared == "DOUBLE[]":
        return (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and _fits(actual.value_type, "DOUBLE")
    return True


def schema_problems(run_dir: Path) -> list[str]:
    """The package tables that lack a column their readers need (:data:`REQUIRED_COLUMNS`) or hold a declared
    column of another type (text where a count belongs): one line per table. A package dcaudit wrote has
    none; one whose files and manifest another tool rewrote may."""
    problems = []
    for path in sorted(Path(run_dir).glob("*.parquet")):
        declared = TABLE_SCHEMAS.get(path.stem)
        if declared is None:
            continue
        try:
            schema = pq.read_schema(path)
        except Exception as exc:  # noqa: BLE001 - any reader error: the file cannot be used
            problems.append(f"{path}: not readable as Parquet ({one_line(exc)})")
            continue
        missing = [c for c in REQUIRED_COLUMNS.get(path.stem, ()) if c not in schema.names]
        wrong = [f"{f.name!r} is {f.type}, not {declared[f.name]}" for f in schema
                 if f.name in declared and not _fits(f.type, declared[f.name])]
        if missing or wrong:
            parts = ([f"lacks column(s) {', '.join(map(repr, missing))}"] if missing else []) + wrong
            problems.append(f"{path}: {'; '.join(parts)} (not as dcaudit writes it)")
    return problems


def verify_package(run_dir: Path, *, hash_ok: Callable[[Path, str], bool | None] | None = None,
                   remember: Callable[[Path, str, bool], None] | None = None, columns: bool = False) -> list[str]:
    """Problems with a package on disk, one line per bad file (empty when it is intact).

    A file is bad when it is missing or differs from the sha256 the manifest recorded; a manifest that records
    no digests at all is itself a problem. Files the manifest does not list are not the package's: its readers
    (``load``, the catalog's views) leave them unread. ``hash_ok(path, sha256)`` may answer
    from a cache (None: unknown, hash it); ``remember(path, sha256, ok)`` is told each verdict.
    ``columns``: also the tables' columns (:func:`schema_problems`), for a reader about to use them.
    """
    run_dir = Path(run_dir)
    try:  # one listing of the directory instead of a stat per file (the catalog verifies every package)
        files = {e.name for e in os.scandir(run_dir) if e.is_file()}
    except (FileNotFoundError, NotADirectoryError):
        return [f"{run_dir}: the package directory is missing"]
    try:
        manifest = read_manifest(run_dir)
    except (OSError, ValueError) as exc:
        return [f"{run_dir / 'manifest.json'}: unreadable ({type(exc).__name__}: {exc})"]
    recorded = manifest.get("files")
    if recorded is None:  # deleted from a manifest dcaudit wrote (every version records it): nothing to check against
        return [f"{run_dir / 'manifest.json'}: records no sha256 digests ('files'), so its tables cannot be checked"]
    problems = []
    for name, digest in sorted(recorded.items()):
        path = run_dir / name
        if name not in files:
            problems.append(f"{path}: missing")
            continue
        ok = hash_ok(path, digest) if hash_ok is not None else None
        if ok is None:
            ok = sha256_file(path) == digest
            if remember is not None:
                remember(path, digest, ok)
        if not ok:
            problems.append(f"{path}: sha256 differs from the one recorded in manifest.json (damaged or modified)")
    if columns and not problems:
        problems += schema_problems(run_dir)
    return problems
