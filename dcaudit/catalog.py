"""The run registry (one JSON record per run) and ``catalog.duckdb``, a file derived from it.

Truth lives in files the runner writes atomically: ``$DCAUDIT_HOME/records/<run_id>.json`` (one per
run: running, then succeeded / failed / reused / skipped) and the evidence packages under ``runs/``.
``catalog.duckdb`` is derived from them: a ``runs`` table and one view per package table, built into a
temporary file and renamed over the old one. A reader holding the old file open (the DuckDB shell, a
notebook with ``read_only=True``, another ``dcaudit query``) keeps its snapshot, and a run never needs
the catalog's DuckDB lock. Every command that reads the catalog first checks that it still matches the
records and packages (a fingerprint over their names, sizes and modification times) and rebuilds it
when it does not, or when the file is missing, truncated or corrupt.

Before a package is served by the views its files are checked against the sha256s in its manifest (the
verdict is cached by file size and modification time, so a refresh stays fast). A damaged package is
left out of the views, its run shows status ``damaged`` with the bad files named. Views read every
package table by name with its declared type (:data:`dcaudit.storage.TABLE_SCHEMAS`), so no run changes a
column's type for the others; an older package whose values do not fit is left out and named
(status ``incompatible``).

Caching is content-addressed: a run's ``cache_key`` hashes its spec, its input sha256s, the package
version and a sha256 of the code itself. An unchanged rerun (same key, earlier package intact) records a
``reused`` run whose ``run_dir`` and ``reused_from`` point at the earlier run; no package is copied, so
the catalog views never count a result twice.

Run directories are recorded relative to ``DCAUDIT_HOME``: a copied or moved workspace works on its own.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from dcaudit.claims import quote_string
from dcaudit.config import Settings
from dcaudit.errors import DcauditError, RunLockedError, SpecError, one_line
from dcaudit.storage import (
    CATALOG_TABLES,
    OPTIONAL_VIEWS,
    TABLE_SCHEMAS,
    NotAFileError,
    process_alive,
    read_manifest,
    regular_file,
    verify_package,
    write_bytes_atomic,
    write_json_atomic,
)

STORAGE_VERSION = "v1.5.0"   # the DuckDB 1.5 shell (and later) reads the catalog
CATALOG_FORMAT = "3"         # bump when the build changes what the catalog holds: catalogs rebuild themselves
RUNS_SCHEMA: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"), ("spec", "VARCHAR"), ("spec_hash", "VARCHAR"),
    ("input_hashes", "VARCHAR"),  # JSON object: input name -> sha256
    ("status", "VARCHAR"),        # running | succeeded | failed | reused | skipped | damaged | incompatible
    ("started_at", "TIMESTAMP"), ("finished_at", "TIMESTAMP"), ("seconds", "DOUBLE"),
    ("package_version", "VARCHAR"), ("git_sha", "VARCHAR"), ("run_dir", "VARCHAR"), ("error", "VARCHAR"),
    ("cache_key", "VARCHAR"),     # hash of spec, inputs, package version and code: equal keys, equal results
    ("code_hash", "VARCHAR"),     # sha256 over the package's source files (catches uncommitted edits)
    ("reused_from", "VARCHAR"),   # for status 'reused': the run whose package this run reused
)
_RUN_COLUMNS = tuple(name for name, _ in RUNS_SCHEMA)
_FINISHED = ("succeeded", "failed", "reused", "skipped")
# The package files the views read, and their schemas: what a run needs to add its package to the views
# without listing every other package (Catalog._append). Underscored: the build's bookkeeping.
_FILES, _SCHEMAS = "_package_files", "_package_schemas"
_RUN_ID = re.compile(r"^[^\x00-\x1f\x7f/\\.][^\x00-\x1f\x7f/\\]{0,200}$")
_INTERRUPTED = "interrupted (the process ended before finishing)"
_WRITE_DENIED = (errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    run_dir: Path
    spec_hash: str | None
    input_hashes: dict[str, str]
    package_version: str | None
    git_sha: str | None
    code_hash: str | None


@dataclass(frozen=True)
class RunDiff:
    """The latest two succeeded runs of a spec: what moved, and whether data or code changed."""

    spec: str
    before: RunRecord
    after: RunRecord
    audits: pa.Table                      # one row per audit (× model): fractions before/after and the change
    inputs_changed: tuple[str, ...]       # input names added, removed or with a new sha256
    code_changed: tuple[str, ...]         # which of spec_hash, package_version, git_sha, code_hash differ

    def as_dict(self) -> dict:
        return {"spec": self.spec, "before": self.before.run_id, "after": self.after.run_id,
                "data_changed": bool(self.inputs_changed), "inputs_changed": list(self.inputs_changed),
                "code_changed": list(self.code_changed), "audits": self.audits.to_pylist()}


@dataclass
class BuildReport:
    """What a catalog build found: runs, packages served, packages left out (named), time taken."""

    path: Path
    runs: int = 0
    packages: int = 0
    left_out: dict[str, list[str]] = field(default_factory=dict)   # run_id -> problems
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    hashed: int = 0        # package files hashed (not answered by the verification cache)


@contextlib.contextmanager
def file_lock(path: Path, *, wait: float = 30.0, what: str = "the catalog") -> Iterator[None]:
    """An exclusive advisory lock (released by the OS if the holder dies, so kill -9 never wedges it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RunLockedError(f"{what} is locked by another dcaudit process ({path})") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _stderr_note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


class Catalog:
    def __init__(self, settings: Settings, notify: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.home = settings.home
        self.path = settings.catalog_path
        self.records_dir = settings.home / "records"
        self.lock_path = settings.home / ".catalog.lock"
        self.cache_path = settings.home / ".catalog-cache.json"
        self.notify = notify or _stderr_note
        self._noted = False
        self._temp_dir: Path | None = None   # a private catalog when DCAUDIT_HOME is read-only
        # run records parsed by this object, by file name: (size, mtime_ns, record). A command reads the
        # records two or three times (stale runs, the reuse lookup, the catalog build); unchanged ones are
        # parsed once.
        self._parsed: dict[str, tuple[int, int, dict]] = {}
        # ... and across commands: the records as the last build parsed them (.records-cache.json), so a
        # workspace of thousands of runs parses only the records that changed (each file read costs ~0.1 ms)
        self.records_cache_path = settings.home / ".records-cache.json"
        self._parsed_fresh = False   # a record parsed from its file since the cache was read
        self._present_records: set[str] = set()   # the record files the last listing found
        self._listings: dict[str, list[list[object]]] = {}   # package dir -> its files, as last fingerprinted

    # ------------------------------------------------------------ records (the registry)

    def _record_path(self, run_id: str) -> Path:
        if not _RUN_ID.match(run_id):
            raise ValueError(f"not a safe run id: {run_id!r}")
        return self.records_dir / f"{run_id}.json"

    def _stored_dir(self, run_dir: Path) -> str:
        """A run directory as recorded: relative to DCAUDIT_HOME when inside it (copies keep working)."""
        run_dir = Path(run_dir).absolute()
        with contextlib.suppress(ValueError):
            return run_dir.relative_to(self.home.absolute()).as_posix()
        return str(run_dir)

    def resolve_dir(self, stored: str | None) -> Path:
        if not stored:
            return self.home
        path = Path(stored)
        if not path.is_absolute():
            return self.home / path
        if not path.exists() and path.parent.name == "runs" and (self.settings.runs_dir / path.name).is_dir():
            return self.settings.runs_dir / path.name   # an absolute path from an older catalog, in a copy
        return path

    def _write_record(self, record: dict) -> None:
        write_json_atomic(self._record_path(record["run_id"]), record)

    def read_record(self, run_id: str) -> dict | None:
        try:
            return json.loads(self._record_path(run_id).read_text())
        except (OSError, ValueError):
            return None

    def records(self) -> list[dict]:
        """Every readable run record (unreadable ones are skipped and noted by the catalog build)."""
        return self._load_records()[0]

    def _load_records(self) -> tuple[list[dict], list[str]]:
        out, bad = [], []
        try:
            entries = sorted(os.scandir(self.records_dir), key=lambda e: e.name)
        except FileNotFoundError:
            return [], []
        if not self._parsed:
            self._parsed.update(self._read_records_cache())
        self._present_records = {e.name for e in entries if e.name.endswith(".json") and not e.name.startswith(".")}
        for entry in entries:
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            try:
                st = entry.stat()
                known = self._parsed.get(entry.name)
                if known is not None and known[:2] == (st.st_size, st.st_mtime_ns):
                    out.append(dict(known[2]))   # a copy: callers update records before writing them back
                    continue
                rec = json.loads(Path(entry.path).read_text())
                if not isinstance(rec, dict) or not isinstance(rec.get("run_id"), str):
                    raise ValueError("not a run record")
                self._parsed[entry.name] = (st.st_size, st.st_mtime_ns, rec)
                self._parsed_fresh = True
                out.append(dict(rec))
            except (OSError, ValueError) as exc:
                bad.append(f"{entry.path}: unreadable run record ({type(exc).__name__}: {exc})")
        return out, bad

    def _read_records_cache(self) -> dict[str, tuple[int, int, dict]]:
        """The records the last build parsed, by file name: (size, mtime_ns, record). Only an entry whose file
        still has that size and modification time is used; anything unreadable is an empty cache."""
        try:
            raw = json.loads(self.records_cache_path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(raw, dict) or raw.get("format") != 1 or not isinstance(raw.get("records"), dict):
            return {}
        out = {}
        journal = _journal_lines(_journal(self.records_cache_path))   # records runs added since the last build
        self._parsed_fresh = self._parsed_fresh or bool(journal)      # so that the build writes them whole
        for name, entry in [*raw["records"].items(), *((e[0], e[1:]) for e in journal
                                                       if isinstance(e, list) and len(e) == 4)]:
            if (isinstance(entry, list) and len(entry) == 3 and all(type(x) is int for x in entry[:2])
                    and isinstance(entry[2], dict) and isinstance(entry[2].get("run_id"), str)):
                out[str(name)] = (entry[0], entry[1], entry[2])
        return out

    def _save_records_cache(self, present: set[str]) -> None:
        """Keep the parsed records (those whose files are ``present``) for the next command's build."""
        if not self._parsed_fresh and len(present) == len(self._parsed):
            return
        records = {name: [*known[:2], known[2]] for name, known in self._parsed.items() if name in present}
        with contextlib.suppress(OSError):   # only saves work: without it, the next build reads every record
            write_bytes_atomic(self.records_cache_path,
                               json.dumps({"format": 1, "records": records}, separators=(",", ":")).encode(),
                               durable=False)
            with contextlib.suppress(FileNotFoundError):
                _journal(self.records_cache_path).unlink()   # its lines are in the file now
        self._parsed_fresh = False

    # ------------------------------------------------------------ per-spec indexes of the records
    # Two small files beside a spec's run lock answer what a run asks of the records without reading every
    # record of the workspace (~0.08 s at 4,000 runs): which run of the spec may have been killed, and which
    # earlier run has the same cache key. They are hints: an absent or unreadable one means "look at every
    # record", and what they name is checked against its record.

    def _spec_file(self, spec: str, what: str) -> Path:
        return self.home / "locks" / f"{spec}.{what}"

    def _write_hint(self, path: Path, text: str) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(path, text.encode(), durable=False)
        except OSError:   # a hint that cannot be kept must not be believed: without it, records are read
            with contextlib.suppress(OSError):
                path.unlink()

    def _in_flight(self, spec: str) -> list[str] | None:
        """The run of ``spec`` that started and has not recorded its end (``locks/<spec>.running``); None
        when the spec has no such file (its runs so far were made by an older dcaudit)."""
        try:
            return [i for i in self._spec_file(spec, "running").read_text().split() if _RUN_ID.match(i)]
        except (OSError, ValueError):
            return None

    def _reuse_hint(self, spec: str) -> dict[str, str] | None:
        """cache key -> the latest succeeded run of ``spec`` with it (``locks/<spec>.reuse.json``)."""
        try:
            hint = json.loads(self._spec_file(spec, "reuse.json").read_text())
        except (OSError, ValueError):
            return None
        return {str(k): str(v) for k, v in hint.items()} if isinstance(hint, dict) else None

    def _note_succeeded(self, record: dict) -> None:
        spec, key = record.get("spec"), record.get("cache_key")
        if not isinstance(spec, str) or not isinstance(key, str):
            return
        hint = self._reuse_hint(spec)
        if hint is None:   # the first run of the spec to keep one: every earlier key, once
            rows = sorted((r for r in self.records() if r.get("spec") == spec and r.get("status") == "succeeded"
                           and isinstance(r.get("cache_key"), str)),
                          key=lambda r: (str(r.get("started_at") or ""), r["run_id"]))
            hint = {r["cache_key"]: r["run_id"] for r in rows}
        hint[key] = record["run_id"]
        self._write_hint(self._spec_file(spec, "reuse.json"), json.dumps(hint, sort_keys=True))

    def start_run(self, run_id: str, *, spec: str, spec_hash: str, input_hashes: Mapping[str, str],
                  package_version: str, git_sha: str | None, run_dir: Path, cache_key: str | None = None,
                  code_hash: str | None = None) -> None:
        # first the note that this run is in flight: a run killed after its record is written is found by it
        self._write_hint(self._spec_file(spec, "running"), run_id)
        self._write_record(_record(
            run_id=run_id, spec=spec, spec_hash=spec_hash, input_hashes=dict(input_hashes), status="running",
            started_at=_now(), package_version=package_version, git_sha=git_sha, run_dir=self._stored_dir(run_dir),
            cache_key=cache_key, code_hash=code_hash))

    def record_reuse(self, run_id: str, *, spec: str, earlier: RunRecord, cache_key: str, seconds: float) -> None:
        """An unchanged rerun: a finished record pointing at the earlier run's package."""
        now = _now()
        self._write_record(_record(
            run_id=run_id, spec=spec, spec_hash=earlier.spec_hash, input_hashes=earlier.input_hashes,
            status="reused", started_at=now, finished_at=now, seconds=seconds,
            package_version=earlier.package_version, git_sha=earlier.git_sha,
            run_dir=self._stored_dir(earlier.run_dir), cache_key=cache_key, code_hash=earlier.code_hash,
            reused_from=earlier.run_id))

    def record_failure(self, run_id: str, *, spec: str, spec_hash: str, run_dir: Path, status: str, error: str,
                       seconds: float, package_version: str, git_sha: str | None, code_hash: str | None) -> None:
        """A run that ended before its inputs were known (e.g. a tampered mirror file): failed or skipped."""
        existing = self.read_record(run_id)
        now = _now()
        self._write_record(_record(
            run_id=run_id, spec=spec, spec_hash=spec_hash, input_hashes={}, status=status,
            started_at=existing["started_at"] if existing else now, finished_at=now, seconds=seconds,
            package_version=package_version, git_sha=git_sha, run_dir=self._stored_dir(run_dir), error=error,
            code_hash=code_hash))

    def finish_run(self, run_id: str, *, status: str, seconds: float, error: str | None = None,
                   refresh: bool = True) -> str | None:
        """Mark a run finished; then refresh the catalog. Returns a note when the refresh failed (the run's
        record is written either way, and the next command refreshes the catalog)."""
        record = self.read_record(run_id)
        if record is None:
            raise DcauditError(f"no record of run {run_id!r} in {self.records_dir}")
        record.update(status=status, finished_at=_now(), seconds=seconds, error=error)
        self._write_record(record)
        spec = record.get("spec")
        if isinstance(spec, str):
            if status == "succeeded":
                self._note_succeeded(record)
            if self._in_flight(spec) == [run_id]:
                self._write_hint(self._spec_file(spec, "running"), "")
        return self.try_refresh(run_id) if refresh else None

    def mark_stale_runs_failed(self, spec: str) -> list[str]:
        """Call holding the spec's run lock: any run of it still 'running' belongs to a process that died.

        Only the run the spec's in-flight note names is looked at (every record of the workspace when the
        spec has no note). Returns their run ids (so the caller can remove what they left in
        ``runs/.partial``)."""
        named = self._in_flight(spec)
        records = self.records() if named is None else [r for r in map(self.read_record, named) if r]
        ids = []
        for rec in records:
            if rec.get("spec") == spec and rec.get("status") == "running":
                rec.update(status="failed", finished_at=_now(), error=_INTERRUPTED)
                self._write_record(rec)
                ids.append(rec["run_id"])
        return ids

    def _run_record(self, rec: dict) -> RunRecord:
        return RunRecord(rec["run_id"], self.resolve_dir(rec.get("run_dir")), rec.get("spec_hash"),
                         dict(rec.get("input_hashes") or {}), rec.get("package_version"), rec.get("git_sha"),
                         rec.get("code_hash"))

    def _latest(self, keep: Callable[[dict], bool], limit: int) -> list[RunRecord]:
        rows = sorted((r for r in self.records() if keep(r)),
                      key=lambda r: (str(r.get("started_at") or ""), r["run_id"]), reverse=True)
        return [self._run_record(r) for r in rows[:limit]]

    def find_reusable(self, cache_key: str, spec: str | None = None) -> RunRecord | None:
        """The latest succeeded run with this cache key (its package may still need verifying).

        With ``spec``, the spec's reuse note answers without reading every record: a cache key hashes the
        code too, so every succeeded run with this key was made by this code, which notes each one; a key
        the note lacks has no such run (at worst, with a note lost, a result is computed again)."""
        if spec is not None:
            hint = self._reuse_hint(spec)
            if hint is not None:
                named = hint.get(cache_key)
                if named is None:
                    return None
                rec = self.read_record(named) if _RUN_ID.match(named) else None
                if rec is not None and rec.get("status") == "succeeded" and rec.get("cache_key") == cache_key:
                    return self._run_record(rec)
        rows = self._latest(lambda r: r.get("status") == "succeeded" and r.get("cache_key") == cache_key, 1)
        return rows[0] if rows else None

    # ------------------------------------------------------------ building catalog.duckdb

    def fingerprint(self) -> str:
        """Names, sizes and modification times of every record and package file, and where the workspace
        is: the catalog is current when its stored fingerprint equals this.

        The fingerprint is a sum of one hash per file (:func:`_fingerprint_term`), so a run that adds its
        record and package can add their terms to the catalog's stored fingerprint without listing the
        workspace (:meth:`_append`); any other change shows as a different sum."""
        total = _fingerprint_term(f"{CATALOG_FORMAT}\0{self.home.absolute()}\0"
                                  + json.dumps(TABLE_SCHEMAS, sort_keys=True))
        listings: dict[str, list[list[object]]] = {}
        for label, base in (("records", self.records_dir), ("runs", self.settings.runs_dir)):
            prefix = str(Path(base).absolute()) + os.sep   # as Path(entry.path).absolute(), without a Path each
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(base):
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        with contextlib.suppress(OSError):
                            listing = _listing_of(entry.path)
                            total += _package_terms(label, entry.name, listing)
                            listings[prefix + entry.name] = listing
                    else:
                        st = entry.stat()
                        total += _fingerprint_term(_file_entry(label, entry.name, st.st_size, st.st_mtime_ns))
        # each package's listing as this fingerprint saw it: the build that follows answers an unchanged
        # package from it (:meth:`_VerifyCache.package_problems`) instead of listing the directory again
        self._listings = listings
        return _fingerprint_hex(total)

    def rebuild(self, *, reason: str | None = None) -> BuildReport:
        """Build catalog.duckdb from the records and packages, now (``dcaudit catalog rebuild``)."""
        report = self._refresh(force=True, reason=reason)
        assert report is not None  # a forced refresh always builds
        return report

    def refresh(self) -> BuildReport | None:
        """Rebuild the catalog if it no longer matches the records and packages; None when it was current."""
        return self._refresh(force=False)

    def try_refresh(self, run_id: str | None = None) -> str | None:
        """Refresh, never raising: returns a one-line note when the catalog could not be refreshed. With
        ``run_id`` (a run that just ended), the catalog is extended by that run when it can be
        (:meth:`_append`), and refreshed in full otherwise."""
        try:
            try:
                appended = run_id is not None and self._append(run_id)
            except (OSError, duckdb.Error):   # e.g. a damaged catalog: the full refresh repairs it or words it
                appended = False
            if not appended:
                self._refresh(force=False, fallback=False)
        except NotAFileError as exc:   # the next command cannot do better: the user must move it
            return f"the run is recorded, but catalog.duckdb could not be refreshed: {_one_line(exc)}"
        except Exception as exc:  # noqa: BLE001 - the run's record is written; the next command refreshes
            return (f"the run is recorded, but catalog.duckdb could not be refreshed "
                    f"({_one_line(exc)}); the next dcaudit command refreshes it")
        return None

    def _stamp_path(self, path: Path) -> Path:
        return path.with_name(f".{path.name}.fingerprint")

    def _current_fingerprint_of(self, path: Path) -> str | None:
        # The fingerprint is also kept beside the file with the file's identity (inode, size, mtime): opening
        # the DuckDB file to read it costs ~0.03 s of every command. Any other file in its place, or a stamp
        # that does not parse, falls back to reading catalog_info.
        stored = self._stamped_fingerprint(path)
        if stored is not None:
            return stored
        try:
            con = duckdb.connect(str(path), read_only=True)
        except duckdb.Error:
            return None
        try:
            row = next(iter(con.execute("SELECT value FROM catalog_info WHERE key = 'fingerprint'").fetchall()), None)
            return row[0] if row else None
        except duckdb.Error:
            return None
        finally:
            con.close()

    def _refresh(self, *, force: bool, reason: str | None = None, fallback: bool = True) -> BuildReport | None:
        fingerprint = self.fingerprint()
        if not force and _current(self._current_fingerprint_of(self.path), fingerprint):
            return None
        try:
            with file_lock(self.lock_path, wait=120.0):
                # someone else may have built it while we waited for the lock
                existing = self._current_fingerprint_of(self.path)
                if not force and _current(existing, fingerprint):
                    return None
                # Not taken again: the build reads the files after this fingerprint was taken, so a change
                # since then leaves a catalog that reads as stale (rebuilt by the next reader), never one
                # that reads as current without holding the change.
                report = self._build(self.path, fingerprint, legacy=existing is None and self.path.exists())
        except OSError as exc:
            if not (fallback and exc.errno in _WRITE_DENIED):
                raise
            report = self._private_build(fingerprint, f"DCAUDIT_HOME ({self.home}) is not writable")
        if reason:
            report.notes.insert(0, f"catalog.duckdb was {reason}; rebuilt it from {report.runs} run record(s) "
                                   f"({report.packages} package(s) in the views)")
        return report

    def _private_build(self, fingerprint: str, why: str) -> BuildReport:
        """A catalog in a temporary directory, for this process only (the workspace cannot take one)."""
        self.close()
        self._temp_dir = Path(tempfile.mkdtemp(prefix="dcaudit-catalog-"))
        report = self._build(self._temp_dir / "catalog.duckdb", fingerprint, write_back=False)
        report.notes.insert(0, f"{why}; the catalog was built in {report.path} for this command")
        return report

    def _build(self, target: Path, fingerprint: str, *, write_back: bool = True, legacy: bool = False) -> BuildReport:
        started = time.monotonic()
        report = BuildReport(path=target)
        if write_back and legacy:
            self._import_legacy_catalog(report)
        records, bad = self._load_records()
        report.notes += bad
        by_id = {r["run_id"]: r for r in records}
        self._adopt_orphan_packages(by_id, report, write_back=write_back)
        cache = _VerifyCache.load(self.cache_path, self.home)
        cache.listings = self._listings
        host = socket.gethostname()
        runs_dir = self.settings.runs_dir.absolute()
        # verify every package a succeeded run owns (under runs/), once per directory
        served: dict[Path, str] = {}      # package dir -> run id
        problems: dict[Path, list[str]] = {}
        where = {run_id: self.resolve_dir(rec.get("run_dir")).absolute() for run_id, rec in by_id.items()}
        for run_id, rec in by_id.items():
            if rec.get("status") != "succeeded":
                continue
            run_dir = where[run_id]
            if run_dir.parent != runs_dir:
                continue   # --out packages are not served by the views
            problems[run_dir] = cache.package_problems(run_dir)
            if not problems[run_dir]:
                served[run_dir] = rec["run_id"]
        report.hashed = cache.hashed
        schemas = _TableFiles(cache)
        for run_dir in sorted(served):
            present = cache.recorded_names(run_dir)   # a table its manifest does not list is not served
            for name in CATALOG_TABLES:
                if f"{name}.parquet" in present:
                    # a string, not run_dir / name: 12,000 Path objects are ~0.1 s of a 4,000-run workspace
                    schemas.add(name, f"{run_dir}{os.sep}{name}.parquet", run_dir)
        incompatible = schemas.check(report)
        for run_dir, why in incompatible.items():
            served.pop(run_dir, None)
            problems[run_dir] = why
        rows = []
        running: list[int] = []  # processes of this host shown as running: the catalog is stale once one ends
        for rec in by_id.values():
            run_dir = where[rec["run_id"]]
            row = _run_row(rec, run_dir, problems.get(run_dir), run_dir in incompatible, host)
            if rec.get("status") in ("succeeded", "reused") and problems.get(run_dir):
                report.left_out.setdefault(rec["run_id"], problems[run_dir])
            if row["status"] == "running" and rec.get("host") == host and isinstance(rec.get("pid"), int):
                running.append(rec["pid"])
            rows.append(row)
        report.runs, report.packages = len(rows), len(served)
        stored = fingerprint + (_RUNNING + ",".join(map(str, sorted(running))) if running else "")
        self._write_catalog(target, rows, schemas, set(served), stored, report)
        if write_back:
            with contextlib.suppress(OSError):   # the cache only saves work: without it, the next build hashes
                cache.save()
            self._save_records_cache(self._present_records)
        report.seconds = round(time.monotonic() - started, 3)
        return report

    def _write_catalog(self, target: Path, rows: list[dict], schemas: _TableFiles, served: set[Path],
                       fingerprint: str, report: BuildReport) -> None:
        files, schema_columns = schemas.served_files(served)

        def fill(con: duckdb.DuckDBPyConnection) -> None:
            con.execute("CREATE TABLE runs (" + ", ".join(f"{c} {t}" for c, t in RUNS_SCHEMA) + ")")
            if rows:
                con.register("_new_runs", _runs_table(rows))
                con.execute("INSERT INTO runs SELECT * FROM _new_runs ORDER BY started_at, run_id")
                con.unregister("_new_runs")
            for name in CATALOG_TABLES:
                sql = schemas.view_sql(name, served)
                if sql is None:
                    continue   # findings, costs: a view only once some package has the table
                con.execute(f"CREATE VIEW {name} AS {sql}")
            con.execute(f"CREATE TABLE {_FILES} (table_name VARCHAR, file VARCHAR, run_dir VARCHAR, "
                        "schema_id VARCHAR)")
            con.execute(f"CREATE TABLE {_SCHEMAS} (schema_id VARCHAR, columns VARCHAR)")
            _insert(con, _FILES, files)
            _insert(con, _SCHEMAS, schema_columns)
            con.execute("CREATE TABLE catalog_info (key VARCHAR, value VARCHAR)")
            info = {"fingerprint": fingerprint, "format": CATALOG_FORMAT, "home": str(self.home),
                    "built_at": _now().isoformat(), "runs": str(len(rows)), "packages": str(len(served))}
            con.executemany("INSERT INTO catalog_info VALUES (?, ?)", list(info.items()))
            con.execute("CREATE TABLE left_out (run_id VARCHAR, problem VARCHAR)")
            pairs = [(r, p) for r, ps in report.left_out.items() for p in ps]
            if pairs:
                con.executemany("INSERT INTO left_out VALUES (?, ?)", pairs)

        self._commit_catalog(target, fill, fingerprint)

    def _commit_catalog(self, target: Path, fill: Callable[[duckdb.DuckDBPyConnection], None], fingerprint: str,
                        *, start_from: Path | None = None) -> None:
        """Write a catalog under a temporary name — a new database, or a copy of ``start_from`` — with
        ``fill`` in one transaction, then rename it over ``target`` and stamp it with ``fingerprint``."""
        regular_file(target, "the catalog")   # a directory there would fail only after the whole build
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(target, self.records_dir)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        try:
            if start_from is not None:
                shutil.copyfile(start_from, tmp)   # never opened for writing in place: readers may hold it
            # Attached to the process's DuckDB (opening a database of its own costs ~0.03 s more), in a
            # format the DuckDB 1.5 command-line shell can read too (`duckdb catalog.duckdb`).
            from dcaudit.engine import shared_connection

            con = shared_connection()
            alias = f"catalog_build_{os.getpid()}_{time.monotonic_ns()}"
            version = f" (STORAGE_VERSION '{STORAGE_VERSION}')" if start_from is None else ""
            con.execute(f"ATTACH {quote_string(str(tmp))} AS {alias}{version}")
            try:
                con.execute(f"USE {alias}")
                # One transaction: each autocommitted statement would write and sync the WAL on its own.
                con.execute("BEGIN TRANSACTION")
                fill(con)
                con.execute("COMMIT")
                con.execute(f"CHECKPOINT {alias}")
            finally:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")  # only when a statement above failed mid-transaction
                con.execute("USE memory")
                con.execute(f"DETACH {alias}")
                con.close()
            os.replace(tmp, target)   # readers holding the old file keep their snapshot
            with contextlib.suppress(OSError):
                st = target.stat()
                write_bytes_atomic(self._stamp_path(target),
                                   f"{st.st_ino} {st.st_size} {st.st_mtime_ns}\n{fingerprint}\n".encode(),
                                   durable=False)
        finally:
            for leftover in (tmp, Path(f"{tmp}.wal")):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    def _append(self, run_id: str) -> bool:
        """Add one finished run to catalog.duckdb without listing the workspace: its record's row and, when it
        succeeded, its package in the views. Returns False when the catalog cannot be extended this way (the
        caller then refreshes it in full).

        A full refresh lists every record and package (the fingerprint) and rebuilds every view: ~0.2 s a
        command in a workspace of 1,000 runs, ~0.8 s at 4,000. This one touches the run's own files only. It
        holds when the catalog is stamped as current with a fingerprint ``F`` (its stamp file matches the
        file) and does not show the run yet: the new catalog holds the old one's rows and files plus the
        run's, and is stamped ``F`` plus the run's terms (the fingerprint is a sum of one term per file). If
        anything else changed meanwhile — another run, a record edited, a package damaged — the workspace's
        own fingerprint differs from that sum, so the next reader finds the catalog stale and rebuilds it.
        The views' SQL, the runs table and the catalog's other tables are those a full build writes."""
        if not self.path.is_file():
            return False
        with file_lock(self.lock_path, wait=120.0):
            stored = self._stamped_fingerprint(self.path)
            files_part, running_sep, pids = (stored or "").partition(_RUNNING)
            try:
                total = int(files_part, 16)
            except ValueError:
                return False
            record_path = self._record_path(run_id)
            try:
                st = record_path.stat()
                rec = json.loads(record_path.read_text())
            except (OSError, ValueError):
                return False
            if not isinstance(rec, dict) or rec.get("run_id") != run_id or rec.get("status") not in _FINISHED:
                return False
            total += _fingerprint_term(_file_entry("records", record_path.name, st.st_size, st.st_mtime_ns))
            runs_dir = self.settings.runs_dir.absolute()
            package = runs_dir / run_id
            listing: list[list[object]] | None = None
            if package.is_dir() and not package.is_symlink():
                listing = _listing(package)
                if listing is None:
                    return False
                total += _package_terms("runs", run_id, listing)
            run_dir = self.resolve_dir(rec.get("run_dir")).absolute()
            serves = rec["status"] == "succeeded" and run_dir.parent == runs_dir
            if serves and run_dir != package:
                return False
            cache = _VerifyCache(self.cache_path, self.home, {})   # the run's package only: not loaded
            tables = _TableFiles(cache)
            problems: list[str] = []
            incompatible = False
            if serves:
                if listing is not None:
                    cache.listings = {str(package): listing}
                problems = cache.package_problems(package)
                if not problems:
                    present = cache.recorded_names(package)
                    for name in CATALOG_TABLES:
                        if f"{name}.parquet" in present:
                            tables.add(name, f"{package}{os.sep}{name}.parquet", package)
                    unfit = tables.check(BuildReport(path=self.path))
                    if unfit:
                        problems, incompatible = unfit[package], True
            row = _run_row(rec, run_dir, problems, incompatible, socket.gethostname())
            served = {package} if serves and not problems else set()
            fingerprint = _fingerprint_hex(total) + running_sep + pids

            def fill(con: duckdb.DuckDBPyConnection) -> None:
                info = dict(con.execute("SELECT key, value FROM catalog_info").fetchall())
                if info.get("format") != CATALOG_FORMAT or info.get("home") != str(self.home):
                    raise _CannotAppend
                shown, left, later = con.execute(
                    "SELECT count_if(run_id = $id), count_if(run_dir = $dir AND status IN ('damaged', 'incompatible')), "
                    "count_if(started_at IS NULL OR started_at > $at OR (started_at = $at AND run_id > $id)) FROM runs",
                    {"id": run_id, "dir": str(run_dir), "at": row["started_at"]}).fetchall()[0]
                if shown or left:   # shown already, or a reuse of a package the catalog leaves out
                    raise _CannotAppend
                con.register("_new_runs", _runs_table([row]))
                con.execute("INSERT INTO runs SELECT * FROM _new_runs")
                con.unregister("_new_runs")
                if later:   # the rows in the order a build inserts them (a run sorts last unless runs overlap)
                    con.execute("CREATE TABLE _runs_ordered AS SELECT * FROM runs ORDER BY started_at, run_id")
                    con.execute("DROP TABLE runs")
                    con.execute("ALTER TABLE _runs_ordered RENAME TO runs")
                if served:
                    files, schema_columns = tables.served_files(served)
                    _insert(con, _FILES, files)
                    con.register("_new_schemas", schema_columns)
                    con.execute(f"INSERT INTO {_SCHEMAS} SELECT * FROM _new_schemas WHERE schema_id NOT IN "
                                f"(SELECT schema_id FROM {_SCHEMAS})")
                    con.unregister("_new_schemas")
                    groups = _stored_groups(con, list(tables.groups))
                    for name in tables.groups:
                        sql = _view_sql(name, groups.get(name, []))
                        if sql is not None:
                            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
                if problems and rec["status"] in ("succeeded", "reused"):
                    con.executemany("INSERT INTO left_out VALUES (?, ?)", [(run_id, p) for p in problems])
                packages = int(info.get("packages") or 0) + len(served)
                runs = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
                con.executemany("UPDATE catalog_info SET value = ? WHERE key = ?", [
                    (fingerprint, "fingerprint"), (_now().isoformat(), "built_at"), (str(runs), "runs"),
                    (str(packages), "packages")])

            try:
                self._commit_catalog(self.path, fill, fingerprint, start_from=self.path)
            except _CannotAppend:
                return False
            # what the next full build would otherwise read again: this record, this package's verdict
            with contextlib.suppress(OSError):
                _append_line(_journal(self.records_cache_path), [record_path.name, st.st_size, st.st_mtime_ns, rec])
                if serves and str(package) in cache.packages:
                    entry = cache.packages[str(package)]
                    used = {e.get("schema") for e in entry.get("files", {}).values() if isinstance(e, dict)}
                    _append_line(_journal(self.cache_path), {
                        "dir": str(package), "package": entry,
                        "schemas": {sid: rows for sid, rows in cache.schemas.items() if sid in used}})
        return True

    def _stamped_fingerprint(self, path: Path) -> str | None:
        """The fingerprint in the stamp beside ``path`` when the stamp is of this very file (inode, size,
        modification time), else None."""
        with contextlib.suppress(OSError, ValueError):
            st = path.stat()
            ident, stored = self._stamp_path(path).read_text().split("\n")[:2]
            if ident == f"{st.st_ino} {st.st_size} {st.st_mtime_ns}":
                return stored
        return None

    def _import_legacy_catalog(self, report: BuildReport) -> None:
        """A catalog.duckdb written before run records existed: its runs table becomes records, once."""
        try:
            con = duckdb.connect(str(self.path), read_only=True)
        except duckdb.Error:
            return
        try:
            if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'catalog_info'").fetchall()[0][0]:
                return
            cols = [r[0] for r in con.execute("DESCRIBE runs").fetchall()]
            rows = con.execute(f"SELECT {', '.join(cols)} FROM runs").fetchall()
        except duckdb.Error:
            return
        finally:
            con.close()
        imported = 0
        for values in rows:
            row = dict(zip(cols, values, strict=True))
            if not isinstance(row.get("run_id"), str) or not _RUN_ID.match(row["run_id"]) \
                    or self._record_path(row["run_id"]).exists():
                continue
            try:
                hashes = json.loads(row.get("input_hashes") or "{}")
            except ValueError:
                hashes = {}
            status = row.get("status")
            self._write_record(_record(
                **{c: row.get(c) for c in _RUN_COLUMNS if c not in ("input_hashes", "run_dir", "status")},
                input_hashes=hashes, run_dir=self._stored_dir(Path(row["run_dir"])) if row.get("run_dir") else None,
                status="succeeded" if status == "damaged" else status, pid=None, host=None))
            imported += 1
        if imported:
            report.notes.append(f"imported {imported} run(s) from the older catalog.duckdb into {self.records_dir}")

    def _adopt_orphan_packages(self, by_id: dict[str, dict], report: BuildReport, *, write_back: bool) -> None:
        """A package under runs/ without a record (the record was lost): its manifest becomes the record."""
        runs_dir = self.settings.runs_dir
        known: set[Path] | None = None  # the recorded package dirs, resolved only if a directory is not a run id
        with contextlib.suppress(FileNotFoundError):
            for entry in sorted(os.scandir(runs_dir), key=lambda e: e.name):
                if entry.name.startswith(".") or entry.name in by_id or not entry.is_dir():
                    continue
                path = Path(entry.path).absolute()
                if known is None:
                    known = {self.resolve_dir(r.get("run_dir")).absolute() for r in by_id.values()}
                if path in known:
                    continue
                try:
                    manifest = json.loads((path / "manifest.json").read_text())
                except (OSError, ValueError):
                    continue
                run_id = manifest.get("run_id") if isinstance(manifest, dict) else None
                if run_id != entry.name or not _RUN_ID.match(run_id):
                    continue
                started = str(manifest.get("started_at") or "")
                rec = _record(run_id=run_id, spec=manifest.get("spec"), spec_hash=manifest.get("spec_hash"),
                              input_hashes=manifest.get("inputs") or {}, status="succeeded",
                              started_at=_parse_time(started) or _now(), finished_at=None,
                              seconds=manifest.get("seconds"), package_version=manifest.get("package_version"),
                              git_sha=manifest.get("git_sha"), run_dir=self._stored_dir(path),
                              cache_key=manifest.get("cache_key"), code_hash=manifest.get("code_hash"),
                              pid=None, host=None)
                by_id[run_id] = rec
                report.notes.append(f"run {run_id}: no run record; recovered it from {path / 'manifest.json'}")
                if write_back:
                    with contextlib.suppress(OSError):
                        self._write_record(rec)

    # ------------------------------------------------------------ reading

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection to catalog.duckdb, rebuilt first when it is missing, damaged or out of date
        (for the Python API; close it when done — a later refresh never waits for it)."""
        return self._connect()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection to a catalog that matches the records (rebuilt first when it does not)."""
        reason = None
        if not self.path.exists():
            if not self.records() and not any(self.settings.runs_dir.glob("*/manifest.json")):
                raise DcauditError(f"no runs in {self.home} yet: run an audit first (e.g. `dcaudit run tox21`)")
            reason = "missing"
        else:
            try:
                con = duckdb.connect(str(self.path), read_only=True)
            except duckdb.Error as exc:
                reason = f"unreadable ({_one_line(exc)})"
            else:
                try:
                    row = next(iter(con.execute("SELECT value FROM catalog_info WHERE key = 'fingerprint'").fetchall()), None)
                except duckdb.Error as exc:
                    row, reason = None, _unreadable_or_older(con, exc)
                if row is not None and _current(row[0], self.fingerprint()):
                    self._note_left_out(con)
                    return con
                con.close()
        # out of date: rebuilt unless another process did it while we waited for the build lock
        try:
            report = self._refresh(force=reason is not None, reason=reason)
        except (OSError, duckdb.Error) as exc:   # e.g. a full disk: build privately, else serve the last one
            why = f"catalog.duckdb could not be rebuilt ({_one_line(exc)})"
            try:
                report = self._private_build(self.fingerprint(), why)
            except (OSError, duckdb.Error):
                if reason is not None:
                    raise DcauditError(f"{why}, and no usable catalog exists: free space in {self.home} or "
                                       "make it writable, then run `dcaudit catalog rebuild`") from None
                self.notify(f"{why}; answering from the catalog as last built (it may miss the latest runs)")
                report = None
        for note in report.notes if report else ():
            self.notify(note)
        con = duckdb.connect(str(report.path if report else self.path), read_only=True)
        self._note_left_out(con)
        return con

    def _note_left_out(self, con: duckdb.DuckDBPyConnection) -> None:
        if self._noted:
            return
        self._noted = True
        with contextlib.suppress(duckdb.Error):
            rows = con.execute("SELECT run_id, problem FROM left_out ORDER BY run_id").fetchall()
            if rows:
                shown = "; ".join(p for _, p in rows[:3]) + (f"; … {len(rows) - 3} more" if len(rows) > 3 else "")
                self.notify(f"{len({r for r, _ in rows})} package(s) left out of the views: {shown} "
                            "(dcaudit catalog check lists them; re-run their specs)")

    def query(self, sql: str) -> pa.Table:
        """Run SQL against the catalog. It cannot write into DCAUDIT_HOME: read statements (SELECT, DESCRIBE,
        SHOW, SUMMARIZE) run on a read-only connection and may read any file; anything else (EXPLAIN, whose
        ANALYZE form runs the statement, COPY, EXPORT, ATTACH, SET …) runs in a sandbox whose only writable
        places lie outside DCAUDIT_HOME."""
        try:
            statements = duckdb.extract_statements(sql)
        except duckdb.Error as exc:
            raise DcauditError(f"query failed: {_one_line(exc)}") from None
        con = self._connect()
        try:
            # EXPLAIN goes to the sandbox too: EXPLAIN ANALYZE runs what it explains (a COPY writes)
            if all(s.type == duckdb.StatementType.SELECT for s in statements):
                result = con.sql(sql)
            else:
                con, result = self._sandboxed(con, sql)
            return result.to_arrow_table() if result is not None else pa.table({})
        except duckdb.PermissionException as exc:
            raise DcauditError(
                f"query refused: {_one_line(exc)} (a query can never write into DCAUDIT_HOME {self.home}; "
                f"COPY/EXPORT may write only into {', '.join(map(str, self._writable_dirs())) or 'no directory here'})"
            ) from None
        except duckdb.Error as exc:
            bad = self.damaged_packages() if isinstance(exc, duckdb.IOException | duckdb.InvalidInputException) \
                else []
            hint = (f" (damaged package file(s): {'; '.join(bad)}; re-run their specs or remove those run "
                    "directories)") if bad else ""
            raise DcauditError(f"query failed: {_one_line(exc)}{hint}") from None
        finally:
            con.close()

    def _writable_dirs(self) -> list[Path]:
        home = self.home.resolve()
        out = []
        for d in (Path.cwd().resolve(), Path(tempfile.gettempdir()).resolve()):
            if not (d == home or d.is_relative_to(home) or home.is_relative_to(d)) and d not in out:
                out.append(d)
        return out

    def _sandboxed(self, catalog: duckdb.DuckDBPyConnection,
                   sql: str) -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyRelation]:
        """An in-memory connection with the catalog's tables it names, file access limited to directories
        outside DCAUDIT_HOME, and the configuration locked (no SET can give access back)."""
        names = [r[0] for r in catalog.execute(
            "SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views() "
            "WHERE NOT internal").fetchall()]
        sandbox = duckdb.connect()
        try:
            for name in names:
                if re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", sql, re.IGNORECASE):
                    sandbox.register(name, catalog.sql(f'SELECT * FROM "{name}"').to_arrow_table())
            catalog.close()
            dirs = ", ".join("'" + str(d).replace("'", "''") + "/'" for d in self._writable_dirs())
            sandbox.execute(f"SET allowed_directories = [{dirs}]")
            sandbox.execute("SET enable_external_access = false")
            sandbox.execute("SET lock_configuration = true")
            return sandbox, sandbox.sql(sql)
        except BaseException:
            sandbox.close()
            raise

    def check(self) -> tuple[int, list[str]]:
        """Hash every package file against its manifest (no cache): (packages checked, problems)."""
        cache = _VerifyCache.load(self.cache_path, self.home)
        dirs = set()
        with contextlib.suppress(FileNotFoundError):
            dirs |= {Path(e.path).absolute() for e in os.scandir(self.settings.runs_dir)
                     if e.is_dir() and not e.name.startswith(".")}
        for rec in self.records():
            if rec.get("status") == "succeeded":
                run_dir = self.resolve_dir(rec.get("run_dir")).absolute()
                if run_dir.is_relative_to(self.home.absolute()):
                    dirs.add(run_dir)
        problems: list[str] = []
        for run_dir in sorted(dirs):
            problems += verify_package(run_dir, remember=cache.remember)
        with contextlib.suppress(OSError):
            cache.save()
        if problems:
            # A file changed behind the cache (bytes rewritten, size and mtime kept): the catalog's fingerprint
            # cannot see it, so the views are rebuilt now, from these verdicts, and leave the package out.
            with contextlib.suppress(OSError, duckdb.Error, DcauditError):
                self.rebuild()
        return len(dirs), problems

    def damaged_packages(self) -> list[str]:
        """Every package file under runs/ that is missing, unreadable or differs from its recorded hash."""
        cache = _VerifyCache.load(self.cache_path, self.home)
        problems: list[str] = []
        with contextlib.suppress(FileNotFoundError):
            for run_dir in sorted(p for p in self.settings.runs_dir.iterdir()
                                  if p.is_dir() and not p.name.startswith(".")):
                problems += verify_package(run_dir, hash_ok=cache.hash_ok)
        return problems

    def refresh_views(self) -> None:
        self.rebuild()

    def runs(self, limit: int = 20) -> pa.Table:
        return self.query(f"SELECT run_id, spec, status, started_at, seconds, reused_from, error FROM runs "
                          f"ORDER BY started_at DESC, run_id DESC LIMIT {int(limit)}")

    def run_dir(self, run_id_or_spec: str) -> Path:
        """The package directory of a run id, or of a spec name's latest run.

        A spec's latest run is the latest one recorded, whatever its status: when it failed, was skipped, is
        still running or its package is damaged, that is an error naming it and the previous run that has a
        package (whose run id gives that one), never the previous run passed off as the latest."""
        k = _sql_string(run_id_or_spec)
        runs = self.query(f"SELECT run_id, run_dir, status, error, started_at FROM runs WHERE run_id = {k} OR "
                          f"spec = {k} ORDER BY run_id = {k} DESC, started_at DESC, run_id DESC").to_pylist()
        if not runs:
            raise SpecError(f"no run or spec {run_id_or_spec!r} in the catalog; `dcaudit runs` lists them")
        latest = runs[0]
        if latest["status"] in ("succeeded", "reused"):
            return Path(latest["run_dir"])
        why = (latest["error"] or "").strip().splitlines()[:1]
        what = {"damaged": "has a damaged package", "incompatible": "has a package the catalog cannot read",
                "running": "is still running"}.get(latest["status"], latest["status"])
        said = f"{what}{': ' + why[0][:300] if why else ''}"
        if latest["run_id"] == run_id_or_spec:
            if latest["status"] in ("failed", "skipped", "running"):  # no package was written: say so
                said += "; it has no evidence package"
            raise SpecError(f"run {run_id_or_spec!r} {said} (`dcaudit runs` lists the runs that have one)")
        earlier = next((r for r in runs[1:] if r["status"] in ("succeeded", "reused")), None)
        fix = "; re-run the spec for a fresh package" if latest["status"] in ("damaged", "incompatible") else ""
        hint = (f"; the previous run with a package is {earlier['run_id']} (started "
                f"{str(earlier['started_at'])[:19]}): give its run id for it" if earlier
                else "; no earlier run of it has a package")
        raise SpecError(f"the latest run of spec {run_id_or_spec!r}, {latest['run_id']}, {said}{fix}{hint}")

    def package_dir(self, name: str) -> Path:
        """The evidence package ``name`` names: a package directory (no catalog is read), else a run id or a
        spec name (:meth:`run_dir`). A directory without manifest.json is no package, and is said to be."""
        path = Path(name)
        if (path / "manifest.json").is_file():
            return path
        if path.is_dir():   # its manifest.json deleted, or never written
            raise SpecError(f"{name}: the directory has no manifest.json, so it is no evidence package; give a "
                           "package directory, a run id or a spec name (`dcaudit runs` lists them)")
        return self.run_dir(name)

    def diff(self, spec: str) -> RunDiff:
        """Compare the latest two succeeded runs of ``spec`` (reused rows repeat a run, so they are skipped)."""
        records = self._latest(lambda r: r.get("status") == "succeeded" and r.get("spec") == spec, 2)
        if len(records) < 2:
            raise DcauditError(f"spec {spec!r} has {len(records)} succeeded run(s) in the catalog; --diff needs two")
        after, before = records
        for rec in (before, after):
            bad = verify_package(rec.run_dir)
            if bad:
                raise DcauditError("damaged package file(s): " + "; ".join(bad))
        con = duckdb.connect()
        try:
            tables = {}
            for tag, rec in (("a", before), ("b", after)):
                con.execute(f"CREATE VIEW s_{tag} AS SELECT * FROM read_parquet("
                            f"{_sql_string(str(rec.run_dir / 'summary.parquet'))})")
                tables[tag] = {r[0] for r in con.execute(f"DESCRIBE s_{tag}").fetchall()}
            keys = [c for c in ("audit_id", "model", "claim", "evidence", "fiber_rule", "min_support")
                    if c in tables["a"] and c in tables["b"]]
            on = " AND ".join(f"a.{k} IS NOT DISTINCT FROM b.{k}" for k in keys)
            # moved: any decision count or fraction differs, a side without candidates included (NULL <> x
            # would be NULL: 0 -> 50 candidates counted as unchanged)
            measures = [c for c in _DIFF_MEASURES if c in tables["a"] and c in tables["b"]]
            moved = " OR ".join(f"a.{c} IS DISTINCT FROM b.{c}" for c in measures) or "FALSE"
            audits = con.sql(
                f"SELECT {', '.join(f'coalesce(b.{k}, a.{k}) AS {k}' for k in keys)}, "
                "a.certified_fraction AS certified_before, b.certified_fraction AS certified_after, "
                "b.certified_fraction - a.certified_fraction AS certified_change, "
                "a.ambiguous_fraction AS ambiguous_before, b.ambiguous_fraction AS ambiguous_after, "
                "b.ambiguous_fraction - a.ambiguous_fraction AS ambiguous_change, "
                "a.n_candidates AS n_before, b.n_candidates AS n_after, "
                f"coalesce(a._in AND b._in AND ({moved}), FALSE) AS moved "
                f"FROM (SELECT *, TRUE AS _in FROM s_a) a FULL OUTER JOIN (SELECT *, TRUE AS _in FROM s_b) b ON {on} "
                f"ORDER BY {', '.join(keys)}").to_arrow_table()
        finally:
            con.close()
        names = set(before.input_hashes) | set(after.input_hashes)
        inputs_changed = tuple(sorted(n for n in names if before.input_hashes.get(n) != after.input_hashes.get(n)))
        code_changed = tuple(f for f in ("spec_hash", "package_version", "git_sha", "code_hash")
                             if getattr(before, f) != getattr(after, f))
        return RunDiff(spec, before, after, audits, inputs_changed, code_changed)

    def close(self) -> None:
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


# ---------------------------------------------------------------- verification cache and views

class _VerifyCache:
    """What the catalog learnt about each package directory, valid while its files are unchanged.

    Per file (by size and modification time): its sha256 verdict and its Parquet schema. Per package: the
    directory's listing (every file's name, size and modification time) when it was last verified, and the
    problems found then. An unchanged package then costs a refresh one directory listing — no manifest
    read, no schema read — so a workspace of thousands of runs refreshes in a few hundredths of a second
    (before: ~0.9 ms a run, most of it this file written as indented JSON by Python's slow encoder).
    Entries are grouped by directory, so a file's path is stored once."""

    FORMAT = 2

    def __init__(self, path: Path, home: Path, packages: dict[str, dict],
                 schemas: dict[str, list] | None = None) -> None:
        self.path, self.home, self.packages, self.hashed, self.dirty = path, home, packages, 0, False
        self.schemas: dict[str, list] = schemas or {}   # schema id -> [[column, kind], ...], stored once
        self._stat: dict[str, tuple[int, int]] = {}
        self._listed: dict[str, dict[str, tuple[int, int]]] = {}   # dir -> name -> stat, as listed this build
        self._recorded: dict[str, set[str]] = {}   # dir -> the files its manifest lists (verified this build)
        self.listings: dict[str, list[list[object]]] = {}   # dir -> listing taken by the fingerprint, if any
        self._schema_rows: dict[str, list[tuple[str, str]]] = {}   # schema id -> its rows, converted once

    @classmethod
    def load(cls, path: Path, home: Path) -> _VerifyCache:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            raw = {}
        if not isinstance(raw, dict):
            raw = {}
        if raw.get("format") == cls.FORMAT and isinstance(raw.get("packages"), dict):
            schemas = raw.get("schemas")
            cache = cls(path, home, raw["packages"], schemas if isinstance(schemas, dict) else None)
            for line in _journal_lines(_journal(path)):   # packages verified by runs since the last build
                if isinstance(line, dict) and isinstance(line.get("package"), dict) and isinstance(
                        line.get("schemas"), dict):
                    cache.packages[str(line.get("dir"))] = line["package"]
                    cache.schemas.update(line["schemas"])
                    cache.dirty = True
            return cache
        packages: dict[str, dict] = {}   # the layout of earlier versions: one entry per file path
        for key, entry in raw.items():
            if isinstance(entry, dict):
                file = Path(key)
                packages.setdefault(str(file.parent), {"files": {}})["files"][file.name] = entry
        return cls(path, home, packages)

    def _file(self, path: Path | str, *, create: bool) -> dict | None:
        folder, name = os.path.split(str(path))   # not path.parent: a new Path each time, 10 µs a file
        package = self.packages.get(folder)
        if not isinstance(package, dict) or not isinstance(package.get("files"), dict):
            if not create:
                return None
            package = self.packages[folder] = {"files": {}}
        entry = package["files"].get(name)
        if not isinstance(entry, dict):
            if not create:
                return None
            entry = package["files"][name] = {}
        return entry

    def _key(self, path: Path | str) -> tuple[str, tuple[int, int]]:
        folder, name = os.path.split(str(path))
        listed = self._listed.get(folder, {}).get(name)
        if listed is not None:   # the package was listed just now (package_problems): no second stat
            return str(path), listed
        st = os.stat(path)
        return str(path), (st.st_size, st.st_mtime_ns)

    def hash_ok(self, path: Path, digest: str) -> bool | None:
        key, stat = self._key(path)
        self._stat[key] = stat   # taken before hashing: a change while hashing invalidates the entry
        entry = self._file(path, create=False)
        if entry is not None and entry.get("stat") == list(stat) and entry.get("sha256") == digest:
            return bool(entry.get("ok"))
        return None

    def remember(self, path: Path, digest: str, ok: bool) -> None:
        key = str(path)
        stat = self._stat.pop(key, None) or self._key(path)[1]
        self.hashed += 1
        entry = self._file(path, create=True)
        assert entry is not None
        if entry.get("stat") != list(stat):
            entry.clear()        # whatever else was known (the schema) was about the old bytes
        entry.update(stat=list(stat), sha256=digest, ok=ok)
        # a fresh verdict on one file (``dcaudit catalog check`` hashes every file) outdates the package's
        package = self.packages[os.path.split(str(path))[0]]
        package.pop("listing", None)
        package.pop("problems", None)
        self.dirty = True

    def package_problems(self, run_dir: Path) -> list[str]:
        """:func:`dcaudit.storage.verify_package`'s problems with ``run_dir``, from the cache when the
        directory lists the same files, with the same sizes and modification times, as when last verified."""
        # taken before verifying (by the fingerprint, or now): a file changed meanwhile is verified again
        listing = self.listings.get(str(run_dir)) or _listing(run_dir)
        if listing is not None:
            self._listed[str(run_dir)] = {str(n): (int(z), int(m)) for n, z, m in listing}  # type: ignore[call-overload]
        package = self.packages.get(str(run_dir))
        if listing is not None and isinstance(package, dict) and package.get("listing") == listing \
                and isinstance(package.get("problems"), list) and isinstance(package.get("recorded"), list):
            self._recorded[str(run_dir)] = {str(n) for n in package["recorded"]}
            return [str(p) for p in package["problems"]]
        problems = verify_package(run_dir, hash_ok=self.hash_ok, remember=self.remember)
        recorded: list[str] = []
        if not problems:  # the files its manifest lists, all present and intact: the package's tables
            with contextlib.suppress(OSError, ValueError):
                recorded = sorted(read_manifest(run_dir).get("files") or {})
        self._recorded[str(run_dir)] = set(recorded)
        if listing is not None:
            package = self.packages.get(str(run_dir))
            if not isinstance(package, dict) or not isinstance(package.get("files"), dict):
                package = self.packages[str(run_dir)] = {"files": {}}
            package["listing"], package["problems"], package["recorded"] = listing, problems, recorded
            self.dirty = True
        return problems

    def recorded_names(self, run_dir: Path) -> set[str]:
        """The files the manifest of ``run_dir`` lists, as :meth:`package_problems` found them in this build
        (empty when it was not asked, or found problems): a file it does not list is not the package's."""
        return set(self._recorded.get(str(run_dir), ()))

    def schema(self, path: Path | str) -> list[tuple[str, str]]:
        _, stat = self._key(path)
        entry = self._file(path, create=False)
        if entry is not None and entry.get("stat") == list(stat) and "schema" in entry:
            known = entry["schema"]
            if isinstance(known, list):   # inline, as earlier versions stored it: stored once from now on
                entry["schema"], self.dirty = self._intern(known), True
            elif isinstance(known, str):
                rows = self._schema_rows.get(known)
                if rows is not None:
                    return rows
                listed = self.schemas.get(known)
                if isinstance(listed, list):
                    rows = self._schema_rows[known] = [(str(c), str(k)) for c, k in listed]
                    return rows
            if isinstance(known, list):
                return [(str(c), str(k)) for c, k in known]
        schema = [(f.name, _kind(f.type)) for f in pq.read_schema(path)]
        entry = self._file(path, create=True)
        assert entry is not None
        if entry.get("stat") != list(stat):
            entry.clear()
            entry["stat"] = list(stat)
        entry["schema"] = self._intern([list(x) for x in schema])
        self.dirty = True
        return schema

    def _intern(self, schema: list) -> str:
        sid = _schema_id(schema)[0]
        self.schemas.setdefault(sid, schema)
        return sid

    def save(self) -> None:
        if not self.dirty:
            return
        # only this workspace's packages (a copied or moved workspace carries entries for the old paths)
        home = str(self.home.absolute()).rstrip(os.sep) + os.sep
        live = {d: v for d, v in self.packages.items() if d.startswith(home) and os.path.isdir(d)}
        used = {e["schema"] for v in live.values() if isinstance(v.get("files"), dict)
                for e in v["files"].values() if isinstance(e, dict) and isinstance(e.get("schema"), str)}
        schemas = {sid: v for sid, v in self.schemas.items() if sid in used}
        # compact: Python's json writes indented output with its pure-Python encoder (0.3 s at 800 runs)
        payload = json.dumps({"format": self.FORMAT, "packages": live, "schemas": schemas},
                             separators=(",", ":"), sort_keys=True)
        write_bytes_atomic(self.path, payload.encode(), durable=False)
        with contextlib.suppress(FileNotFoundError):
            _journal(self.path).unlink()   # its lines are in the file now


def _listing(run_dir: Path) -> list[list[object]] | None:
    """Every file of a directory as [name, size, mtime_ns], by name; None when it cannot be listed."""
    try:
        return _listing_of(run_dir)
    except OSError:
        return None


def _listing_of(folder: Path | str) -> list[list[object]]:
    """Every file of a directory as [name, size, mtime_ns], by name (as verify_package lists it)."""
    return sorted([e.name, (st := e.stat()).st_size, st.st_mtime_ns] for e in os.scandir(folder) if e.is_file())


_FINGERPRINT_BITS = 128


def _fingerprint_term(text: str) -> int:
    """One file's share of the fingerprint: a 128-bit hash of its description. The fingerprint is the sum of
    the terms modulo 2^128 (an order-independent multiset hash), so terms can be added one run at a time."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=_FINGERPRINT_BITS // 8).digest(), "big")


def _fingerprint_hex(total: int) -> str:
    return f"{total % (1 << _FINGERPRINT_BITS):0{_FINGERPRINT_BITS // 4}x}"


def _file_entry(base: str, name: str, size: int, mtime_ns: int) -> str:
    return f"{base}/{name}\0{size}\0{mtime_ns}"


def _package_terms(base: str, folder: str, listing: list[list[object]]) -> int:
    """The terms of a directory's Parquet and JSON files (what a package holds; report.html and other files
    can change without the catalog changing)."""
    total = 0
    for name, size, mtime in listing:
        if str(name).endswith((".parquet", ".json")):
            total += _fingerprint_term(_file_entry(base, f"{folder}/{name}", int(size), int(mtime)))  # type: ignore[call-overload]
    return total


def _kind(t: pa.DataType) -> str:
    """An Arrow type as the DuckDB type it reads as (near enough to decide whether a cast is lossless)."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_integer(t):
        return "UBIGINT" if t == pa.uint64() else "BIGINT"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return "DECIMAL"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", bool)(t):
        return "VARCHAR"
    if pa.types.is_null(t):
        return "NULL"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _kind(t.value_type) + "[]"
    return str(t)


# declared type -> kinds that cast to it without losing anything
_LOSSLESS = {
    "BIGINT": {"BIGINT", "BOOLEAN", "NULL"},
    "DOUBLE": {"BIGINT", "DOUBLE", "DECIMAL", "BOOLEAN", "NULL"},
    "VARCHAR": {"VARCHAR", "BIGINT", "DOUBLE", "DECIMAL", "BOOLEAN", "NULL"},
    "BOOLEAN": {"BOOLEAN", "NULL"},
    "DOUBLE[]": {"DOUBLE[]", "BIGINT[]", "DECIMAL[]", "NULL"},
}


class _TableFiles:
    """The package files of each table, grouped by identical schema, and the SQL of each view."""

    def __init__(self, cache: _VerifyCache) -> None:
        self.cache = cache
        # table -> schema -> [(file, package dir)]
        self.groups: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[str, Path]]]] = {}

    def add(self, table: str, file: str, run_dir: Path) -> None:
        schema = tuple(self.cache.schema(file))
        self.groups.setdefault(table, {}).setdefault(schema, []).append((file, run_dir))

    def check(self, report: BuildReport) -> dict[Path, list[str]]:
        """Packages whose values do not fit a declared type: {package dir: problems}. Lossless casts
        (an INTEGER min_support, a DECIMAL fraction) pass without reading data."""
        bad: dict[Path, list[str]] = {}
        con = None
        try:
            for table, groups in self.groups.items():
                declared = TABLE_SCHEMAS.get(table, {})
                for schema, files in groups.items():
                    for column, kind in schema:
                        want = declared.get(column)
                        if want is None or kind in _LOSSLESS[want]:
                            continue
                        con = con or duckdb.connect()
                        for file, run_dir in files:
                            if self._fits(con, file, column, kind, want):
                                continue
                            bad.setdefault(run_dir, []).append(
                                f"{file}: column {column!r} holds {kind} values that do not fit its declared "
                                f"type {want} (written by an older or different dcaudit)")
        finally:
            if con is not None:
                con.close()
        for groups in self.groups.values():
            for schema in list(groups):
                groups[schema] = [(f, d) for f, d in groups[schema] if d not in bad]
        return bad

    @staticmethod
    def _fits(con: duckdb.DuckDBPyConnection, file: str, column: str, kind: str, want: str) -> bool:
        col = _ident(column)
        lossy = f"OR TRY_CAST({col} AS DOUBLE) <> TRY_CAST({col} AS {want})" if want == "BIGINT" and kind in (
            "DOUBLE", "DECIMAL", "UBIGINT") else ""
        try:
            n = con.execute(f"SELECT count(*) FROM read_parquet({_sql_string(str(file))}) WHERE {col} IS NOT NULL "
                            f"AND (TRY_CAST({col} AS {want}) IS NULL {lossy})").fetchall()[0][0]
        except duckdb.Error:
            return False
        return n == 0

    def view_sql(self, table: str, served: set[Path]) -> str | None:
        groups = []
        for schema, files in self.groups.get(table, {}).items():
            kept = [f for f, d in files if d in served]   # in the order of their package folders
            if kept:
                groups.append((list(schema), kept[0], ", ".join(_sql_string(f) for f in kept)))
        return _view_sql(table, groups)

    def served_files(self, served: set[Path]) -> tuple[pa.Table, pa.Table]:
        """The files the views read, (table_name, file, run_dir, schema_id), and each schema's columns as
        JSON, (schema_id, columns): kept in the catalog so that a run can add its package to the views
        without the build listing every package again (:meth:`Catalog._append`)."""
        from dcaudit.arrays import table

        files: dict[str, list[str]] = {"table_name": [], "file": [], "run_dir": [], "schema_id": []}
        schemas: dict[str, str] = {}
        for name, groups in self.groups.items():
            for schema, members in groups.items():
                sid, columns = _schema_id(schema)
                for file, run_dir in members:
                    if run_dir in served:
                        schemas[sid] = columns
                        for column, value in zip(files, (name, file, str(run_dir), sid), strict=True):
                            files[column].append(value)
        return (table(files, dict.fromkeys(files, "string")),
                table({"schema_id": list(schemas), "columns": list(schemas.values())},
                      {"schema_id": "string", "columns": "string"}))


def _schema_id(schema: Iterable[Iterable[str]]) -> tuple[str, str]:
    """(an id, the JSON text) of a file's schema as [[column, kind], ...]."""
    text = json.dumps([list(c) for c in schema])
    return hashlib.sha256(text.encode()).hexdigest()[:16], text


def _view_sql(table: str, groups: list[tuple[list[tuple[str, str]], str, str]]) -> str | None:
    """The SQL of the view over package table ``table``: one SELECT per schema its files have, ``groups`` as
    (the schema's columns, its first file, the SQL list of its files in package-folder order); the groups
    in the order of their first file. Each declared column is cast to its declared type (NULL where a
    package lacks it)."""
    declared = TABLE_SCHEMAS.get(table, {})
    if not groups and table in OPTIONAL_VIEWS:
        return None
    # undeclared columns: their own type when every package agrees on it, else VARCHAR
    extra: dict[str, set[str]] = {}
    for schema, _, _ in groups:
        for column, kind in schema:
            if column not in declared:
                extra.setdefault(column, set()).add(kind)
    extra_types = {c: _duck_type(next(iter(k))) if len(k) == 1 else "VARCHAR" for c, k in extra.items()}
    columns = {**declared, **extra_types}
    if not groups:
        return "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {_ident(c)}" for c, t in columns.items()) + " WHERE false"
    parts = []
    for schema, _, listed in sorted(groups, key=lambda g: g[1]):
        present = {c for c, _ in schema}
        cols = ", ".join(f"CAST({_ident(c) if c in present else 'NULL'} AS {t}) AS {_ident(c)}"
                         for c, t in columns.items())
        parts.append(f"SELECT {cols} FROM read_parquet([{listed}])")
    return "\nUNION ALL ".join(parts)


def _run_row(rec: dict, run_dir: Path, problems: list[str] | None, incompatible: bool, host: str) -> dict:
    """A record as its row of the ``runs`` table: a finished run whose package has ``problems`` shows
    ``damaged`` (``incompatible`` when its types do not fit), a run this host shows as running whose process
    is gone shows ``failed``."""
    row = {c: rec.get(c) for c in _RUN_COLUMNS}
    row["run_dir"] = str(run_dir)
    hashes = rec.get("input_hashes") or {}
    row["input_hashes"] = json.dumps(hashes, sort_keys=True) if hashes else "{}"
    status = rec.get("status")
    if status in ("succeeded", "reused") and problems:
        row["status"] = "incompatible" if incompatible else "damaged"
        row["error"] = "; ".join(problems)
    elif status == "running" and rec.get("host") == host and not process_alive(rec.get("pid")):
        row["status"], row["error"] = "failed", _INTERRUPTED
    for col in ("started_at", "finished_at"):
        row[col] = _parse_time(row[col])
    return row


class _CannotAppend(Exception):
    """The catalog cannot take the run as an addition (it shows the run already, or is of another format)."""


def _insert(con: duckdb.DuckDBPyConnection, name: str, rows: pa.Table) -> None:
    if rows.num_rows:
        con.register("_rows", rows)
        con.execute(f"INSERT INTO {name} SELECT * FROM _rows")
        con.unregister("_rows")


# a file path as an SQL string literal, as _sql_string writes it (single quotes doubled)
_SQL_STRING_OF_FILE = "'''' || replace(f.file, '''', '''''') || ''''"


def _stored_groups(con: duckdb.DuckDBPyConnection, tables: list[str]
                   ) -> dict[str, list[tuple[list[tuple[str, str]], str, str]]]:
    """The groups of :func:`_view_sql` for each of ``tables`` from the catalog's own list of served files: the
    file list of each schema as the SQL :func:`_sql_string` writes, in package-folder order."""
    rows = con.execute(
        f"SELECT f.table_name, any_value(s.columns), arg_min(f.file, f.run_dir), "
        f"string_agg({_SQL_STRING_OF_FILE}, ', ' ORDER BY f.run_dir) "
        f"FROM {_FILES} f JOIN {_SCHEMAS} s USING (schema_id) WHERE list_contains($tables, f.table_name) "
        f"GROUP BY f.table_name, f.schema_id", {"tables": tables}).fetchall()
    out: dict[str, list[tuple[list[tuple[str, str]], str, str]]] = {}
    for table, columns, first, listed in rows:
        out.setdefault(table, []).append(([(str(c), str(k)) for c, k in json.loads(columns)], first, listed))
    return out


def _journal(cache: Path) -> Path:
    """Lines added to a cache file since it was last written whole (a run adds its own; the next full build
    reads them and writes the cache whole again)."""
    return cache.with_name(cache.name + ".journal")


def _append_line(path: Path, value: object) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(value, separators=(",", ":")) + "\n")


def _journal_lines(path: Path) -> list[object]:
    """The journal's lines that parse (one cut short by a crash is skipped)."""
    out = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def _duck_type(kind: str) -> str:
    return {"NULL": "VARCHAR", "DECIMAL": "DOUBLE"}.get(kind, kind if re.fullmatch(r"[A-Z]+(\[\])?", kind)
                                                      else "VARCHAR")


def _runs_table(rows: list[dict]) -> pa.Table:
    """The runs rows as an Arrow table for DuckDB to scan, built on numpy buffers (``Table.from_pylist``
    would make pyarrow import pandas, ~0.3 s of every command that records a run)."""
    from dcaudit.arrays import Kind, table

    kinds: dict[str, Kind] = {"VARCHAR": "string", "TIMESTAMP": "timestamp_us", "DOUBLE": "float64"}
    return table({c: [r.get(c) for r in rows] for c, _ in RUNS_SCHEMA}, {c: kinds[t] for c, t in RUNS_SCHEMA})


def _record(**values: object) -> dict:
    record = {c: values.get(c) for c in _RUN_COLUMNS}
    for col in ("started_at", "finished_at"):
        value = record[col]
        if isinstance(value, datetime):
            record[col] = value.isoformat(timespec="microseconds")
    record["pid"] = values.get("pid", os.getpid())
    record["host"] = values.get("host", socket.gethostname())
    record["record_version"] = 1
    return record


def _remove_stale_temporaries(target: Path, records_dir: Path) -> None:
    """What killed processes left: half-built catalogs (we hold the build lock, so any other is stale) and
    record temporaries of processes that no longer exist."""
    for leftover in target.parent.glob(f".{target.name}.*.tmp*"):
        with contextlib.suppress(OSError):
            leftover.unlink()
    with contextlib.suppress(OSError):
        for leftover in records_dir.glob(".*.json.*.tmp"):
            pid = leftover.name.rsplit(".", 2)[-2]
            if pid.isdecimal() and not process_alive(int(pid)):
                with contextlib.suppress(OSError):
                    leftover.unlink()


# what a runs --diff compares per audit row: it moved when any of these differs between the two runs
_DIFF_MEASURES = ("n_candidates", "n_excluded", "n_fibers", "n_mixed_fibers", "certified_true", "certified_false",
                  "ambiguous", "unsupported", "certified_fraction", "ambiguous_fraction", "unsupported_fraction",
                  "benchmark_only_risk")

_RUNNING = "|running:"  # after the files' fingerprint: the pids of this host's runs the catalog shows running


def _current(stored: str | None, fingerprint: str) -> bool:
    """Whether a catalog built with ``stored`` still holds: the record and package files are as they were
    (``fingerprint``), and every run it shows as running on this host still has its process. A run killed
    with SIGKILL leaves its record as it was, so a catalog built while it ran would show it running forever."""
    if stored is None:
        return False
    files, _, pids = stored.partition(_RUNNING)
    return files == fingerprint and all(process_alive(int(p)) for p in pids.split(",") if p.isdecimal())


def _unreadable_or_older(con: duckdb.DuckDBPyConnection, exc: duckdb.Error) -> str:
    """Why a catalog's fingerprint cannot be read: it has no catalog_info (an older dcaudit wrote it), or
    its data cannot be read (a truncated or damaged file whose first blocks still open)."""
    try:
        has_info = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'catalog_info'"
                               ).fetchall()[0][0]
    except duckdb.Error:
        has_info = True
    return f"unreadable ({_one_line(exc)})" if has_info else "written by an older dcaudit"


def _parse_time(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def _one_line(exc: BaseException) -> str:
    return one_line(exc, 500)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
