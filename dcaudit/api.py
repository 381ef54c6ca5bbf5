"""The Python API: the one front door that the CLI, specs and notebooks all go through.

>>> import dcaudit, polars as pl
>>> result = dcaudit.audit(pl.read_csv("tox21.csv"), evidence=["NR-AR", "NR-AhR"], claim='"SR-p53" = 1',
...                        id="mol_id")
>>> result.summary, result.mixed(), result.excluded()

Every function builds a pipeline spec from its arguments (defaults come from the config objects —
``AuditTask``, ``EvidenceMap``, ``ReplayConfig``, ``CompletionConfig`` — and are defined there once),
runs it through the same runner and input contract as ``dcaudit run``, and returns a :class:`Result`.
With ``record=True`` the run is also recorded in the workspace (``$DCAUDIT_HOME``: catalog and
package), which is what the CLI does; otherwise nothing is written until ``result.save(dir)``.

``data`` may be a path (CSV, CSV.gz, TSV, Parquet or a Parquet glob), a polars DataFrame or LazyFrame,
a pandas DataFrame, a pyarrow Table, RecordBatchReader or Dataset, or a DuckDB relation; the same data
in any of these forms gives identical tables.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dcaudit import defaults
from dcaudit.config import Settings, load_settings
from dcaudit.errors import SpecError
from dcaudit.evidence_map import EvidenceMap
from dcaudit.inputs import ROW, Duplicates, glob_files, is_glob
from dcaudit.source_query import LABEL as QUERY_LABEL
from dcaudit.source_query import SourceQuery
from dcaudit.spec import AuditTask, check_keys, split_names, typed_fields
from dcaudit.storage import check_out_dir

if TYPE_CHECKING:  # heavy imports stay out of `import dcaudit`
    import duckdb
    import polars as pl
    import pyarrow as pa

    from dcaudit.pipelines.runner import RunResult
    from dcaudit.spec import PipelineSpec

__all__ = ["Result", "audit", "connect_catalog", "complete", "load", "replay", "run", "sensitivity"]

# Defaults, read from the config objects (one definition each).
_FIBER_RULE = str(EvidenceMap.rule)
_MISSING = EvidenceMap.missing
_SUPPORT = AuditTask.min_support


# ------------------------------------------------------------------------------------------------------------
# Results.

class Frames(Mapping[str, "pl.DataFrame"]):
    """The package's tables by name: Arrow underneath, each converted to a polars DataFrame the first time it
    is read (a command that prints the summary never pays for converting a million-row candidates table)."""

    def __init__(self, tables: Mapping[str, pa.Table]) -> None:
        self._arrow = dict(tables)
        self._frames: dict[str, pl.DataFrame] = {}

    def __getitem__(self, name: str) -> pl.DataFrame:
        if name not in self._frames:
            import polars as pl

            from dcaudit.storage import plain_strings

            frame = pl.from_arrow(plain_strings(self._arrow[name]))  # text, as the package file reads back
            assert isinstance(frame, pl.DataFrame)
            self._frames[name] = frame
        # a shallow copy (no data is copied): what a caller does to it in place (drop_in_place, insert_column,
        # df[i, col] = v, df.columns = …) never reaches this result's later reads, mixed() or the repr
        return self._frames[name].clone()

    def __contains__(self, name: object) -> bool:  # Mapping's own would convert the table to test for it
        return name in self._arrow

    def get(self, name: str, default: Any = None) -> Any:  # likewise: convert only a table that exists
        return self[name] if name in self._arrow else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrow)

    def __len__(self) -> int:
        return len(self._arrow)

    def arrow(self, name: str) -> pa.Table:
        return self._arrow[name]

    def rows(self, name: str) -> int:
        return self._arrow[name].num_rows


_READ_ONLY = "a Result's manifest is read-only (save() writes it); copy.deepcopy(result.manifest) is an editable copy"


class FrozenDict(dict):
    """A dict that refuses changes: a Result's manifest, which ``save()`` writes into the package. Still a dict
    (``isinstance(m, dict)``, ``json.dumps``); ``copy.deepcopy`` gives a plain, editable one."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> Any:
        raise TypeError(_READ_ONLY)

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        import copy

        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class FrozenList(list):
    """A list that refuses changes (inside a :class:`FrozenDict`); ``copy.deepcopy`` gives a plain one."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> Any:
        raise TypeError(_READ_ONLY)

    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = \
        sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        import copy

        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> Any:
        return (list, (list(self),))


def freeze(value: Any) -> Any:
    """``value`` with every dict and list in it read-only (a copy: the caller's own objects stay editable)."""
    if isinstance(value, Mapping):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        items = [freeze(v) for v in value]
        return tuple(items) if isinstance(value, tuple) else FrozenList(items)
    return value


def thaw(value: Any) -> Any:
    """The plain, editable form of a :func:`freeze` d value."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [thaw(v) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


# eq=False: equality is identity (field-wise equality would compare DataFrames, whose truth is ambiguous)
@dataclass(frozen=True, repr=False, eq=False)
class Result:
    """The evidence package of one run, as polars DataFrames (``summary``, ``fibers``, ``candidates``, and
    ``replay`` / ``completion`` / ``sensitivity`` / ``findings`` / … where the run made them). Read-only: the
    fields cannot be set, the manifest cannot be changed, and each table read is a frame of its own (changing
    it in place changes nothing in the result or in what ``save()`` writes)."""

    tables: Mapping[str, pl.DataFrame]
    notes: tuple[str, ...] = ()
    run_id: str | None = None
    package_dir: Path | None = None       # where the package is on disk (recorded, saved or loaded)
    manifest: Mapping[str, Any] = field(default_factory=dict)
    reused_from: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "manifest", freeze(self.manifest))
        object.__setattr__(self, "notes", tuple(self.notes))

    def table(self, name: str) -> pl.DataFrame | None:
        return self.tables.get(name)

    def arrow(self, name: str) -> pa.Table | None:
        """A table as Arrow, without converting it to polars (None when the run did not make it)."""
        if name not in self.tables:
            return None
        return self.tables.arrow(name) if isinstance(self.tables, Frames) else self.tables[name].to_arrow()

    def summary_rows(self) -> list[dict[str, Any]]:
        """The summary as plain rows (dicts, without run_id) read from Arrow: what ``--json`` prints, with no
        polars import (~0.3 s) for a few rows."""
        summary = self.arrow("summary")
        if summary is None:
            return []
        return summary.drop_columns([c for c in ("run_id",) if c in summary.column_names]).to_pylist()

    summary = property(lambda self: self.tables["summary"], doc="One row per audit.")
    fibers = property(lambda self: self.tables.get("fibers"), doc="One row per fiber.")
    candidates = property(lambda self: self.tables.get("candidates"), doc="One row per candidate.")
    replay = property(lambda self: self.tables.get("replay"), doc="Held-out replay (per policy x seed).")
    completion = property(lambda self: self.tables.get("completion"), doc="Completion curves.")
    sensitivity = property(lambda self: self.tables.get("sensitivity"), doc="Fiber-resolution sensitivity.")
    findings = property(lambda self: self.tables.get("findings"), doc="Problems found in the input, kept.")
    costs = property(lambda self: self.tables.get("costs"), doc="Decisions at a price (per policy x price).")
    choice = property(lambda self: self.tables.get("choice"), doc="Model choice: what each model certifies.")
    metrics = property(lambda self: self.tables.get("metrics"), doc="Per-model metrics (controlled experiments).")

    def mixed(self) -> pl.DataFrame:
        """Every member of every mixed (ambiguous) fiber with its fiber's evidence, size and claim counts."""
        import polars as pl

        cands, fibers = self.candidates, self.fibers
        if cands is None or fibers is None:
            raise SpecError("this result has no candidates table (run with candidates to list fiber members)")
        keys = [c for c in ("run_id", "audit_id", "model", "fiber_key") if c in cands.columns and c in fibers.columns]
        fib = fibers.select([*keys, "evidence", "evidence_key", "evidence_lo", "evidence_hi", "n", "n_true"])
        members = cands.filter(pl.col("status") == "ambiguous").select(
            [*keys, "candidate_id", "claim_value"])
        return (members.join(fib, on=keys, how="left", nulls_equal=True)
                .sort(["audit_id", "n", "fiber_key", "candidate_id"], descending=[False, True, False, False]))

    def excluded(self) -> pl.DataFrame:
        """Every excluded candidate with its reason (missing, NaN or infinite evidence, an undefined claim)."""
        import polars as pl

        cands = self.candidates
        if cands is None:
            raise SpecError("this result has no candidates table")
        cols = [c for c in ("audit_id", "model", "candidate_id", "excluded_reason") if c in cands.columns]
        return cands.filter(pl.col("status") == "excluded").select(cols)

    def excluded_by_reason(self) -> pl.DataFrame:
        """How many candidates each audit (and model, in a per-model audit) left out, by reason."""
        import polars as pl

        excluded = self.excluded()
        keys = [c for c in ("audit_id", "model") if c in excluded.columns]   # a model's exclusions are its own
        return (excluded.group_by([*keys, "excluded_reason"]).agg(pl.len().alias("n"))
                .sort([*keys, "n", "excluded_reason"], descending=[*(False for _ in keys), True, False],
                      nulls_last=True))

    def save(self, path: str | Path, *, force: bool = False) -> Path:
        """Write the evidence package to ``path`` atomically (an existing one is replaced only with
        ``force``, and only once the new one is complete). Returns the directory."""
        from dcaudit.config import load_settings
        from dcaudit.storage import check_out_dir, write_package

        if not isinstance(path, str | os.PathLike) or not str(path).strip():
            raise SpecError(f"save({path!r}): give a directory path for the evidence package")
        if not isinstance(force, bool):   # force="no" would be true
            raise SpecError(f"save(force={force!r}): force is True or False")
        target = Path(path).expanduser()   # "~/pkg" is the home's pkg, never a folder named "~" here
        _probe(target, "save()")
        if target.exists() and not target.is_dir():
            raise SpecError(f"{target} is a file; give a directory for the evidence package")
        # force=True replaces what is there: never the workspace, what holds it, or its runs, records, tables
        check_out_dir(target, load_settings().home, option="save()")
        if target.exists() and any(target.iterdir()) and not force:
            raise SpecError(f"{target} exists and is not empty; pass force=True (--force) to replace it")
        run_id = self.run_id or _new_run_id("result")
        manifest = {k: thaw(v) for k, v in self.manifest.items() if k not in ("run_id", "row_counts", "files")}
        manifest.setdefault("notes", list(self.notes))
        tables = {k: self.arrow(k) for k in self.tables}
        _check_package_tables(tables)   # a package load() would refuse is never written
        try:
            write_package(target, run_id, tables, manifest, replace_existing=target.exists())
        except ValueError as exc:       # a column of a type its table does not allow (text in a count)
            raise SpecError(f"save(): {exc}") from None
        return target

    def __repr__(self) -> str:
        lines = [f"dcaudit.Result run_id={self.run_id!r}" + (f" at {self.package_dir}" if self.package_dir else "")]
        for row in self.summary.iter_rows(named=True):
            lines.append(
                f"  {row.get('audit_id')}{'[' + str(row['model']) + ']' if row.get('model') else ''}: "
                f"{row['n_candidates']} candidates ({row.get('n_excluded', 0)} excluded), {row['n_fibers']} fibers, "
                f"{row['n_mixed_fibers']} mixed; certified {_pct(row['certified_fraction'])}, ambiguous "
                f"{_pct(row['ambiguous_fraction'])}, unsupported {_pct(row['unsupported_fraction'])}")
            if len(lines) > 12:
                lines.append(f"  … {self.summary.height - 11} more audits")
                break
        lines.append(f"  tables: {', '.join(f'{k} ({self.arrow(k).num_rows})' for k in self.tables)}")  # type: ignore[union-attr]
        # what the run noticed (leakage, exclusions, kept duplicates) belongs in the text view too, one line each
        for note in self.notes[:_REPR_NOTES]:
            text = " ".join(str(note).split())
            lines.append(f"  note: {text[:_REPR_NOTE_CHARS - 1] + '…' if len(text) > _REPR_NOTE_CHARS else text}")
        if len(self.notes) > _REPR_NOTES:
            lines.append(f"  … {len(self.notes) - _REPR_NOTES} more notes (result.notes)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        try:
            from dcaudit.reports.notebook import render_html
        except ImportError:  # the notebook view is optional; the text view always works
            import html

            return f"<pre>{html.escape(repr(self))}</pre>"
        return render_html({k: self.arrow(k) for k in self.tables}, title=self.run_id or "dcaudit result",
                           notes=self.notes)


def _check_package_tables(tables: Mapping[str, pa.Table]) -> None:
    """Tables a package can hold: known names, each with the columns its readers need (a result rebuilt with
    ``dataclasses.replace`` may have lost one); SpecErrors naming the table."""
    from dcaudit.storage import PACKAGE_TABLES, REQUIRED_COLUMNS

    unknown = sorted(set(tables) - set(PACKAGE_TABLES))
    if unknown:
        raise SpecError(f"save(): {', '.join(map(repr, unknown))} is no evidence-package table; a package holds "
                        f"{', '.join(PACKAGE_TABLES)}")
    for name, table in tables.items():
        missing = [c for c in REQUIRED_COLUMNS.get(name, ()) if c not in table.column_names]
        if missing:
            raise SpecError(f"save(): the {name} table lacks column(s) {', '.join(map(repr, missing))}, so load() "
                            "could not read the package back")


_REPR_NOTES = 5          # notes shown by repr(result); result.notes has them all
_REPR_NOTE_CHARS = 200


def _pct(value: float | None) -> str:
    from dcaudit.reports.numbers import percent_number

    return "—" if value is None else f"{percent_number(value, decimals=2)} %"


def _result(tables: Mapping[str, pa.Table], *, notes: Sequence[str], run_id: str | None,
            package_dir: Path | None = None, manifest: Mapping[str, Any] | None = None,
            reused_from: str | None = None) -> Result:
    from dcaudit.storage import with_run_id

    arrow = {}
    for name, table in tables.items():
        if run_id is not None and "run_id" not in table.column_names:
            table = with_run_id(table, run_id)
        arrow[name] = table
    return Result(Frames(arrow), tuple(notes), run_id, package_dir, dict(manifest or {}), reused_from)


def _from_run(run: RunResult) -> Result:
    from dcaudit.storage import read_manifest

    manifest = read_manifest(run.run_dir) if (Path(run.run_dir) / "manifest.json").is_file() else {}
    return _result(run.tables, notes=run.notes, run_id=run.run_id, package_dir=run.run_dir, manifest=manifest,
                   reused_from=run.reused_from)


# ------------------------------------------------------------------------------------------------------------
# Building and running specs.

def _settings(settings: Settings | None) -> Settings:
    if settings is not None and not isinstance(settings, Settings):
        raise SpecError(f"settings = {settings!r}: give a dcaudit.config.Settings (load_settings(), then "
                        "dataclasses.replace or .with_overrides), or None for the environment's")
    # (Settings(home="~/ws") is the home's ws already: Settings expands "~" however it is built)
    return load_settings() if settings is None else settings


def _new_run_id(name: str) -> str:
    from dcaudit.pipelines.runner import new_run_id

    return new_run_id(name)


def _source_label(data: object) -> str:
    if isinstance(data, SourceQuery):
        return QUERY_LABEL
    if isinstance(data, str | Path):
        return str(data)
    module = type(data).__module__.split(".")[0]
    kind = type(data).__name__
    return {"polars": f"polars {kind}", "pandas": "pandas DataFrame"}.get(module, f"{module} {kind}")


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def adhoc_name(data: object) -> str:
    """The spec name of an ad-hoc audit: the file's stem plus a digest of its whole path, so two files with
    the same stem (``good.csv.gz``, ``good.parquet``) never share a lock, an identity or a ``runs --diff``."""
    if isinstance(data, SourceQuery):  # runs of one query share a name (runs --diff, locks, load)
        return f"query-{hashlib.sha256(data.sql.encode()).hexdigest()[:8]}"
    if not isinstance(data, str | Path):
        return defaults.FRAME_SPEC
    path = Path(data)
    name = path.name
    for suffix in (".csv.gz", ".tsv.gz", ".parquet", ".csv", ".tsv", ".txt", ".pq"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)] or name
            break
    try:
        where = str(path.resolve())
    except (OSError, RuntimeError):   # a link that loops: the input contract names it; the name needs no target
        where = os.path.abspath(path)
    digest = hashlib.sha256(where.encode()).hexdigest()[:8]
    return f"{_SAFE.sub('_', name).strip('._-')[:60] or 'data'}-{digest}"   # a spec name starts with a word character


def evidence_list(evidence: str | Sequence[str], what: str = "evidence") -> list[str]:
    """``"a,b"`` -> ``["a", "b"]`` (``'"b,c"'`` is one name: :func:`dcaudit.spec.split_names`); a list or tuple
    is taken as is (so names that contain commas or spaces stay whole). A set has no order — the fiber key
    would change from one process to the next — and anything else is no list of names: SpecErrors."""
    if isinstance(evidence, str):
        return split_names(evidence)
    array = _array_names(evidence)   # df.columns[1:], a Series or a numpy array of names: ordered, as a list
    if array is not None:
        evidence = array
    if isinstance(evidence, set | frozenset | dict) or not isinstance(evidence, Sequence):
        kind = "a set has no order, and the order of the evidence is part of every fiber key" \
            if isinstance(evidence, set | frozenset | dict) else f"not {type(evidence).__name__} {_one_line(evidence)}"
        raise SpecError(f"{what}: give one name, a comma-separated string or a list of names; {kind}"[:240])
    if not all(isinstance(c, str) for c in evidence):
        raise SpecError(f"{what}: the names must be strings, got {_one_line(list(evidence), 200)}")
    return list(evidence)


def _array_names(value: object) -> list[Any] | None:
    """The items of a one-dimensional numpy array, pandas Index or Series, polars Series or Arrow array, in
    their order; None for anything else (a frame is no list of names)."""
    if type(value).__module__.split(".")[0] not in ("numpy", "pandas", "polars", "pyarrow") \
            or "Frame" in type(value).__name__ or getattr(value, "ndim", 1) != 1:
        return None
    for method in ("tolist", "to_list", "to_pylist"):
        to_list = getattr(value, method, None)
        if callable(to_list):
            items = to_list()
            return items if isinstance(items, list) else None
    return None


def _listed(value: object) -> object:
    """An option's value in its spec form: a tuple, or a 1-D numpy / pandas / polars / Arrow array (prices from
    ``np.linspace``), is a list; anything else as given."""
    if isinstance(value, tuple):
        return list(value)
    array = _array_names(value)
    return value if array is None else array


def _one_line(value: object, limit: int = 120) -> str:
    """A value's repr in one line of at most ``limit`` characters (a Series' repr spans many)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _spec(data: object, *, evidence: str | Sequence[str], claim: str, id: str | None, fiber_rule: str,
          min_support: int, missing: str, duplicates: Duplicates, sections: Mapping[str, Mapping[str, Any]],
          name: str | None, origin: str) -> PipelineSpec:
    from dcaudit.spec import spec_from_dict

    if data is None:
        raise SpecError("the data is None: give a path (CSV, CSV.gz, TSV, Parquet or a Parquet glob) or a frame "
                        "(polars, pandas, Arrow, a DuckDB relation)")
    if isinstance(data, str | Path):   # "~/data.csv" is the home's, as in a shell
        data = _user_path(data) if isinstance(data, str) else Path(_user_path(data))
        if "\x00" in str(data):
            raise SpecError(f"the data path {_one_line(str(data), 100)} holds a NUL character, which no file name can")
    if id is not None and (not isinstance(id, str) or not id.strip()):
        raise SpecError(f"id = {id!r}: name the candidate id column, or leave id out to number the rows")
    source: dict[str, Any] = ({"query": data.sql} if isinstance(data, SourceQuery) else {"path": _source_label(data)})
    source["id"] = id or ROW
    if duplicates != defaults.DUPLICATES:
        source["duplicates"] = duplicates
    raw = {"name": name or adhoc_name(data), "source": source,
           "audits": [{"id": "audit", "claim": claim, "evidence": evidence_list(evidence), "fiber_rule": fiber_rule,
                       "missing": missing, "min_support": min_support}],
           **{k: dict(v) for k, v in sections.items()}}
    return spec_from_dict(raw, origin=origin)


def _input_paths(spec: PipelineSpec, data: object) -> list[Path]:
    """The files (or, for a glob, the folder) a run reads, which no --out may replace. A query's files are
    DuckDB's to find; its rows are read whole before any package is written."""
    if isinstance(data, SourceQuery) or spec.query is not None:
        return []
    named = data if isinstance(data, str | Path) else spec.source
    path = Path(named)
    if not is_glob(path):
        return [path]
    # the folders of the files the glob reads (parts/*/x.parquet reads several), and the pattern's own folder
    folders = {f.parent for f in glob_files(path)}
    return sorted(folders if is_glob(path.parent) else {path.parent, *folders})


def _flags(**flags: object) -> list[bool]:
    """The yes/no keywords as bools: ``record="no"`` would be true (and record the run), so anything but a
    bool (or a numpy bool) is a SpecError naming the keyword."""
    values = []
    for name, value in flags.items():
        if not isinstance(value, bool) and not (type(value).__module__ == "numpy"
                                                and type(value).__name__ in ("bool", "bool_")):
            raise SpecError(f"{name} = {value!r}: give True or False"[:200])
        values.append(bool(value))
    return values


def _execute(spec: PipelineSpec, data: object, settings: Settings | None, *, record: bool,
             out: str | Path | None, force: bool, quiet: bool, engine: str = "duckdb",
             report: bool = True) -> Result:
    from dcaudit.engine import open_ahead

    record, force, quiet, report = _flags(record=record, force=force, quiet=quiet, report=report)
    s = _settings(settings)
    open_ahead(s)   # the audit's database opens on a thread while the runner loads and the checks run

    from dcaudit.pipelines import runner

    runner.check_engine(engine)
    if record or out is not None:
        if out is not None and not isinstance(out, str | os.PathLike):
            raise SpecError(f"out = {out!r}: give a directory path for the evidence package")
        out_dir = Path(out).expanduser() if out is not None else None
        empty = False
        if out_dir is not None:
            _probe(out_dir, "out =")
            if out_dir.exists() and not out_dir.is_dir():
                raise SpecError(f"--out {out_dir} is a file; give a directory for the evidence package")
            check_out_dir(out_dir, s.home, inputs=_input_paths(spec, data))
            empty = out_dir.is_dir() and not any(out_dir.iterdir())  # nothing to lose: no --force needed
            if out_dir.exists() and not empty and not force:
                raise SpecError(f"--out {out_dir} exists and is not empty; pass --force to replace it (the old "
                                "package is kept until the new one is complete)")
        return _from_run(runner.run_spec(spec, s, out_dir=out_dir, replace_existing=force or empty, quiet=quiet,
                                         data=data if not isinstance(data, str | Path) else None, report=report,
                                         engine=engine))
    prepared = runner.prepare_source(spec, s, data if not isinstance(data, str | Path) else None)
    tables, extra = runner.compute_spec(spec, s, prepared, quiet=True, engine=engine)
    run_id = _new_run_id(spec.name)
    manifest = {"spec": spec.name, "spec_hash": spec.spec_hash, "resolved_spec": spec.raw, **extra}
    return _result(tables, notes=extra.get("notes", ()), run_id=run_id, manifest=manifest)


def audit(data: object, *, evidence: str | Sequence[str], claim: str, id: str | None = None,
          fiber_rule: str = _FIBER_RULE, min_support: int = _SUPPORT, missing: str = _MISSING,
          duplicates: Duplicates = defaults.DUPLICATES, settings: Settings | None = None, record: bool = False,
          out: str | Path | None = None, force: bool = False, name: str | None = None,
          quiet: bool = True, report: bool = True, engine: str = "duckdb") -> Result:
    """Does ``evidence`` decide ``claim``? The mixed-fiber audit of one table.

    ``evidence``: column names (a list, or one comma-separated string); ``claim``: a boolean expression
    (``'"SR-p53" = 1'``, ``'gap > 1.0'``); ``id``: the candidate id column (default: the 1-based row);
    ``fiber_rule``: ``exact`` | ``quantile:K`` | ``width:W``; ``min_support``: pure fibers smaller than this
    are ``unsupported``; ``missing``: ``drop`` (complete cases; the rest excluded with a reason) or
    ``as-value``; ``duplicates``: repeated ids are an ``error``, or ``keep`` them and report them in
    ``findings``. ``record=True`` records the run in the workspace; ``out`` writes the package there.
    """
    spec = _spec(data, evidence=evidence, claim=claim, id=id, fiber_rule=fiber_rule, min_support=min_support,
                 missing=missing, duplicates=duplicates, sections={}, name=name, origin="dcaudit.audit()")
    return _execute(spec, data, settings, record=record, out=out, force=force, quiet=quiet, engine=engine, report=report)


def _defaults_of(config: type) -> dict[str, Any]:
    import dataclasses

    return {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}


def replay(data: object, *, evidence: str | Sequence[str], claim: str, id: str | None = None,
           fiber_rule: str = _FIBER_RULE, missing: str = _MISSING, min_support: int | None = None,
           tolerance: str | float | None = None, reference: str | None = None,
           duplicates: Duplicates = defaults.DUPLICATES, settings: Settings | None = None, record: bool = False,
           out: str | Path | None = None, force: bool = False, name: str | None = None, quiet: bool = True, report: bool = True,
           engine: str = "duckdb", **config: Any) -> Result:
    """Held-out certify-then-acquire replay: what would acting on ``evidence`` cost?

    Splits candidates into calibration and test (``seeds``, ``seed_offset``, ``calibration_fraction``),
    certifies fibers on calibration only (``mode`` = ``exact`` | ``calibrated`` with ``epsilon``, ``delta``;
    ``min_support``: 50 for fibers, 5 for ``tolerance`` windows unless given) and replays the policies on
    test. ``tolerance`` (a width, ``"mae"`` or ``"q80"`` against ``reference``) certifies by error windows on
    one numeric evidence column instead of fibers. Other keywords: the fields of ``ReplayConfig``.
    """
    from dcaudit.audits.replay import ReplayConfig
    from dcaudit.defaults import replay_min_support as default_min_support

    allowed = set(_defaults_of(ReplayConfig)) - {"min_support"}
    check_keys(config, allowed, "replay()", what="option")
    support = min_support if min_support is not None else default_min_support(windowed=tolerance is not None)
    section: dict[str, Any] = {**{k: _listed(v) for k, v in config.items()}, "min_support": support}
    if isinstance(section.get("prices"), int | float) and not isinstance(section["prices"], bool):
        section["prices"] = [section["prices"]]
    if tolerance is not None:
        section["tolerance"] = tolerance
    if reference is not None:
        section["reference"] = reference
    spec = _spec(data, evidence=evidence, claim=claim, id=id, fiber_rule=fiber_rule, min_support=support,
                 missing=missing, duplicates=duplicates, sections={"replay": section}, name=name,
                 origin="dcaudit.replay()")
    return _execute(spec, data, settings, record=record, out=out, force=force, quiet=quiet, engine=engine, report=report)


def complete(data: object, *, evidence: str | Sequence[str], claim: str, probes: str | Sequence[str],
             id: str | None = None, fiber_rule: str = _FIBER_RULE, duplicates: Duplicates = defaults.DUPLICATES,
             settings: Settings | None = None, record: bool = False, out: str | Path | None = None,
             force: bool = False, name: str | None = None, quiet: bool = True, report: bool = True, **config: Any) -> Result:
    """Completion curves: which of ``probes`` to measure next, and what each one certifies on held-out data.

    Keywords: the fields of ``CompletionConfig`` (``seeds``, ``min_support``, ``policies``, ``refinement``,
    ``tie_break``, …). The completion uses complete cases (missing evidence is dropped)."""
    from dcaudit.audits.completion import CompletionConfig

    allowed = set(_defaults_of(CompletionConfig))
    check_keys(config, allowed, "complete()", what="option")
    support = typed_fields(CompletionConfig, {"min_support": config.get("min_support", CompletionConfig.min_support)},
                           "complete()")["min_support"]
    section: dict[str, Any] = {k: _listed(v) for k, v in config.items()}
    section["probes"] = evidence_list(probes, "probes")
    costs = section.get("costs")
    if isinstance(costs, list | tuple):  # pairs from Python: the spec form is a table probe -> price
        if not all(isinstance(pair, list | tuple) and len(pair) == 2 for pair in costs):
            raise SpecError(f"costs = {costs!r}: give a price per probe, {{probe: price}} or [(probe, price), …]"[:200])
        section["costs"] = dict(costs)
    spec = _spec(data, evidence=evidence, claim=claim, id=id, fiber_rule=fiber_rule, min_support=support,
                 missing="drop", duplicates=duplicates, sections={"completion": section}, name=name,
                 origin="dcaudit.complete()")
    return _execute(spec, data, settings, record=record, out=out, force=force, quiet=quiet, report=report)


def sensitivity(data: object, *, evidence: str, claim: str, id: str | None = None,
                rules: Sequence[str] | None = None, tolerances: Sequence[str | float] | None = None,
                reference: str | None = None, min_support: int = _SUPPORT, duplicates: Duplicates = defaults.DUPLICATES,
                settings: Settings | None = None, record: bool = False, out: str | Path | None = None,
                force: bool = False, name: str | None = None, quiet: bool = True, report: bool = True) -> Result:
    """How the audit moves with the fiber resolution of one numeric evidence column: quantile bins and the
    window rules ``knn:K`` / ``window:T`` (default: quantile 5/10/20/40, knn 25/50/100), plus tolerance
    windows (a width, ``mae`` or ``q80`` against ``reference``)."""
    section: dict[str, Any] = {"min_support": min_support}
    # one rule or tolerance given as a string is a list of one (list("mae") would be three letters)
    if rules is not None:
        section["rules"] = [rules] if isinstance(rules, str) else evidence_list(rules, "rules")
    if tolerances is not None:
        if isinstance(tolerances, set | frozenset | Mapping):   # no order (a dict would give its keys)
            raise SpecError(f"tolerances = {tolerances!r}: give one tolerance or a list of them; a set or dict "
                            "has no order of its own"[:200])
        section["tolerances"] = [tolerances] if isinstance(tolerances, str | int | float) else \
            list(_listed(tolerances))  # type: ignore[call-overload]
    if reference is not None:
        section["reference"] = reference
    columns = evidence_list(evidence if evidence is not None else [])
    if len(columns) != 1:
        raise SpecError(f"sensitivity needs one numeric evidence column, got {len(columns)}: {', '.join(columns)}")
    spec = _spec(data, evidence=columns, claim=claim, id=id, fiber_rule=_summary_rule(section.get("rules")),
                 min_support=min_support, missing="drop", duplicates=duplicates, sections={"sensitivity": section},
                 name=name, origin="dcaudit.sensitivity()")
    return _execute(spec, data, settings, record=record, out=out, force=force, quiet=quiet, report=report)


def _summary_rule(rules: Sequence[str] | None) -> str:
    """The fiber rule of the audit in a sensitivity package's summary: the first binned rule compared (its
    summary row is that rule's sensitivity row), else ``exact`` when that is compared, else the default
    binned one. Exact fibers of a numeric column would make every candidate a fiber of its own, all
    certified: a summary row that says nothing, unless exact is what is asked for."""
    from dcaudit.evidence_map import parse_fiber_rule

    kinds: list[tuple[str, str]] = []
    for rule in rules if rules is not None else defaults.SENSITIVITY_RULES:
        try:
            if isinstance(rule, str):
                kinds.append((parse_fiber_rule(rule).kind, rule))
        except SpecError:
            continue  # the sensitivity section says what is wrong with its rules, in its own words
    for wanted in (("quantile", "width"), ("exact",)):
        chosen = next((rule for kind, rule in kinds if kind in wanted), None)
        if chosen is not None:
            return chosen
    return defaults.SENSITIVITY_SUMMARY_RULE


def run(spec: str | Path, *, force: bool = False, settings: Settings | None = None, quiet: bool = True,
        engine: str = "duckdb", report: bool = True) -> Result:
    """Run a built-in spec (``"tox21"``, …) or a spec file, recorded in the workspace like ``dcaudit run``.

    ``report=False`` leaves report.html out of the package (``dcaudit report RUN`` renders it later).
    ``engine="spark"`` runs the candidate passes of the fiber audits and fiber replays on Spark (the
    configured cluster, else local mode) over the same prepared tables; every other stage runs on DuckDB,
    and the run's notes say which (docs/scale.md)."""
    from dcaudit.engine import open_ahead

    force, quiet, report = _flags(force=force, quiet=quiet, report=report)   # force="no" would rerun
    if not isinstance(spec, str | os.PathLike):
        raise SpecError(f"run({spec!r}): give a built-in spec name (`dcaudit specs` lists them) or a spec file")
    s = _settings(settings)
    open_ahead(s)   # the run's database opens on a thread while the spec and the runner load

    from dcaudit.pipelines.runner import run_spec
    from dcaudit.spec import load_spec

    return _from_run(run_spec(load_spec(_user_path(spec)), s, reuse=not force, quiet=quiet, engine=engine,
                              report=report))


def _probe(path: Path, what: str) -> None:
    """Asking about ``path`` works: a name too long, or a parent that cannot be searched, is a SpecError here
    instead of an OSError from the first ``exists()``."""
    if "\x00" in os.fspath(path):   # no file name holds one (Path.exists() would say False, open() raise)
        raise SpecError(f"{what} {_one_line(os.fspath(path), 100)}: a path cannot hold a NUL character")
    try:
        path.exists()
        (path / "manifest.json").is_file()
    except OSError as exc:
        raise SpecError(f"{what} {_one_line(os.fspath(path), 100)}: {exc.strerror or exc}; give another path") from None


def _user_path(path: str | os.PathLike[str]) -> str:
    """A path as the user means it: ``~/x`` is the home's x (a spec name or run id never starts with ``~``)."""
    return os.path.expanduser(os.fspath(path))


def load(package: str | Path, *, settings: Settings | None = None) -> Result:
    """An evidence package back as a :class:`Result`: a package directory, a run id, or a spec name (its
    latest run). The tables equal those that were saved."""
    if not isinstance(package, str | os.PathLike) or not os.fspath(package).strip():  # "" would be "."
        raise SpecError(f"load({package!r}): give a package directory, a run id or a spec name")
    from dcaudit.catalog import Catalog

    name = _user_path(package)
    given = Path(name)
    _probe(given, "load():")
    if isinstance(package, os.PathLike) or os.sep in name:  # a path: a run id or spec name has no slash
        if not given.exists():
            raise SpecError(f"load({os.fspath(package)!r}): no such package directory")
        if not given.is_dir():
            raise SpecError(f"load({os.fspath(package)!r}) is a file; give the package's directory")
        if not (given / "manifest.json").is_file():
            raise SpecError(f"load({os.fspath(package)!r}): the directory has no manifest.json, so it is no evidence "
                            "package (a package directory, a run id or a spec name; `dcaudit runs` lists runs)")
    path = Catalog(_settings(settings)).package_dir(name)
    manifest, tables, ignored = _read_package(path)
    notes = list(manifest.get("notes", ()))
    if ignored:
        notes.append(f"load: {', '.join(ignored)} not read: not a table this package was written with")
    return _result(tables, notes=notes, run_id=manifest.get("run_id"), package_dir=path, manifest=manifest)


_LOAD_ATTEMPTS = 5       # reads of a package that another process replaces meanwhile (save(force=True), --force)
_LOAD_PAUSE = 0.05       # seconds between them


def _read_package(path: Path) -> tuple[dict[str, Any], dict[str, pa.Table], list[str]]:
    """The manifest and tables of the package at ``path``, all of one package: a package is replaced whole
    (a new directory renamed into place), so a read that overlaps a replacement could mix the old manifest
    with new tables. A read counts when the manifest is the same before and after it, every table it lists
    was read and each table's run_id is the manifest's; otherwise it is read again. Also returns the Parquet
    files not read (not listed in the manifest, or no package table)."""
    import time

    from dcaudit.storage import PACKAGE_TABLES, read_manifest, read_table, verify_package

    manifest_file = path / "manifest.json"
    for attempt in range(_LOAD_ATTEMPTS):
        last = attempt == _LOAD_ATTEMPTS - 1
        try:
            before = manifest_file.read_bytes()
            damaged = verify_package(path, columns=True)
            # damaged twice over one manifest: damaged, not being replaced (the first time may be a replacement)
            if damaged and (last or attempt > 0 and manifest_file.read_bytes() == before):
                raise SpecError(f"the package is damaged: {'; '.join(damaged)}")
            if not damaged:
                manifest = read_manifest(path)
                _check_manifest(manifest, manifest_file)
                listed = manifest.get("files")   # the tables the package was written with
                tables, ignored = {}, []
                for file in sorted(path.glob("*.parquet")):
                    if file.stem in PACKAGE_TABLES and (not isinstance(listed, Mapping) or file.name in listed):
                        tables[file.stem] = read_table(file)
                    else:
                        ignored.append(file.name)
                complete = not isinstance(listed, Mapping) or all(
                    Path(n).stem in tables for n in listed if n.endswith(".parquet"))
                stable = complete and manifest_file.read_bytes() == before
                others = _other_runs(tables, manifest.get("run_id"))
                if stable and not others:
                    return manifest, tables, ignored
                if stable and last:   # the same every time: written so, not being replaced
                    raise SpecError(f"the package is damaged: {', '.join(others)} carry another run_id than "
                                    f"{manifest_file} ({manifest.get('run_id')!r})")
        except (FileNotFoundError, NotADirectoryError):   # files gone midway: the package is being replaced
            if last:
                break
        time.sleep(_LOAD_PAUSE)
    raise SpecError(f"{path} changed while it was read, {_LOAD_ATTEMPTS} times (another process replacing the "
                    "package?); load it again once that is done")


def _check_manifest(manifest: Mapping[str, Any], where: Path) -> None:
    run_id, notes = manifest.get("run_id"), manifest.get("notes", ())
    if not (run_id is None or isinstance(run_id, str)) or not (
            isinstance(notes, list | tuple) and all(isinstance(n, str) for n in notes)):
        raise SpecError(f"the package is damaged: {where}: run_id must be text and notes a list of texts, got "
                        f"run_id = {run_id!r}, notes = {notes!r}"[:300])


def _other_runs(tables: Mapping[str, pa.Table], run_id: str | None) -> list[str]:
    """The tables whose run_id is not the manifest's (a package writes its run_id into every table)."""
    if run_id is None:
        return []
    return [name for name, t in tables.items()
            if "run_id" in t.column_names and t.num_rows and t.column("run_id")[0].as_py() != run_id]


def console_views() -> ModuleType:
    """The console views of results and packages (:mod:`dcaudit.reports.console`): the CLI modules print
    through the API, so only the API and ``cli.py`` reach the reports layer."""
    from dcaudit.reports import console

    return console


def connect_catalog(settings: Settings | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection to ``catalog.duckdb`` (views: runs, summary, fibers, candidates, …)."""
    from dcaudit.catalog import Catalog

    return Catalog(_settings(settings)).connect()  # rebuilt first when missing, damaged or out of date
