"""Pipeline specs: *what* to audit (source, evidence maps, claims, support), separate from *how*.

A spec is a TOML file; the built-in ones ship in ``dcaudit.pipelines`` (``tox21.toml`` …) and are
named by their stem (``dcaudit run tox21``). Sections later stages read (``[replay]``,
``[completion]``, ``[vision]``, …) are kept as plain mappings here; each stage's parser types and checks
its keys, and ``dcaudit.pipelines.stages.validate_spec`` runs every parser before anything runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import numbers
import re
import tomllib
import types
import typing
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from dcaudit import defaults
from dcaudit.claims import Claim, parse_claim
from dcaudit.errors import SpecError
from dcaudit.evidence_map import EvidenceMap, parse_fiber_rule
from dcaudit.inputs import Duplicates
from dcaudit.source_query import LABEL, SourceQuery

_TOP_KEYS = {"name", "description", "source", "audits", "replay", "completion", "sensitivity", "choice",
             "matbench", "jarvis", "vision"}
_AUDIT_KEYS = {"id", "claim", "evidence", "fiber_rule", "missing", "min_support", "table", "model", "per", "models",
               "identity"}
# [source] keys of every source; a connector's options share the table with them
SOURCE_KEYS = ("connector", "path", "query", "id", "duplicates")
SOURCE_KINDS = ("connector", "path", "query")  # a [source] names exactly one of these


@dataclass(frozen=True)
class AuditTask:
    """One claim audited against one evidence map."""

    audit_id: str
    claim: Claim
    evidence: EvidenceMap
    min_support: int = defaults.MIN_SUPPORT
    table: str | None = None  # which table of the source (connectors may provide several)
    # per = "model": audit each value of that column separately (summary rows carry it in `model`, and
    # metrics hold the median across them); groups = which values ("all" -> None). `model = "x"` is
    # shorthand for per = "model", models = ["x"].
    per: str | None = None
    groups: tuple[str, ...] | None = None
    # identity = "inchikey": split mixed fibers into label noise (one entity, conflicting records) and
    # incompleteness (distinct entities sharing the evidence)
    identity: str | None = None
    # the key ("models" or "model") that implied per = "model" when the spec wrote no per: a missing
    # 'model' column is then named by the key the spec did write (check_implied_per)
    per_implied_by: str | None = None


def check_implied_per(task: AuditTask, columns: Collection[str]) -> None:
    """A SpecError when ``task``'s per column was implied by ``models`` / ``model`` and the table lacks it:
    the spec never wrote per, so "per names unknown column" would name a key it does not have."""
    if task.per_implied_by is None or task.per in columns:
        return
    written = f"model = {task.groups[0]!r}" if task.per_implied_by == "model" and task.groups else \
        f"models = {list(task.groups) if task.groups is not None else 'all'!r}"
    shown = ", ".join(list(columns)[:20]) + (", …" if len(columns) > 20 else "")
    raise SpecError(f"audit {task.audit_id!r}: {written} needs per = \"<column>\": without per it names values of "
                    f"a column {task.per!r}, which the table does not have (columns: {shown})")


def check_not_blank(value: str, what: str) -> str:
    """``value``, unless it is empty or white space: a SpecError naming ``what`` (an empty id or name would
    silently mean the default, or name nothing)."""
    if not value.strip():
        raise SpecError(f"{what} = {value!r} is empty")
    return value


def fixed_width_reference(where: str, key: str, value: object) -> SpecError:
    """The error for a reference given with only fixed tolerance widths, which never read it: one wording
    for every stage (``key``: the stage's tolerance key, ``value``: its fixed width(s) as written)."""
    several = isinstance(value, list | tuple) and len(value) > 1
    shown = value[0] if isinstance(value, list | tuple) and len(value) == 1 else value
    return SpecError(f"{where}: {key} {shown!r} {'are fixed widths' if several else 'is a fixed width'}, which no "
                     "reference changes; reference is for \"mae\" or a quantile such as \"q80\" (leave it out)")


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    source: str                   # a connector name (tox21, jarvis, …), a path to CSV/Parquet, or LABEL (a query)
    id_column: str
    audits: tuple[AuditTask, ...]
    sections: dict[str, Any] = field(default_factory=dict)  # replay / completion / … as written
    raw: dict[str, Any] = field(default_factory=dict)
    duplicates: Duplicates = defaults.DUPLICATES     # repeated candidate ids: "error", or "keep" and report them as findings
    query: SourceQuery | None = None  # [source] query: the table is this query's result (source is then LABEL)

    @property
    def connector(self) -> str | None:
        """The connector that reads the source (``[source] connector``), or None for a user's table (a path,
        a query, a frame from the API) — as written, never guessed from what the working directory holds."""
        source = self.raw.get("source")
        name = source.get("connector") if isinstance(source, dict) else None
        return str(name) if name is not None else None

    @property
    def spec_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.raw, sort_keys=True, default=str).encode()).hexdigest()


def check_keys(raw: Iterable[object], allowed: Collection[str], where: str, *, what: str = "key") -> None:
    """A SpecError naming every key of ``raw`` (a mapping's keys) not in ``allowed``: the one unknown-key
    check of spec sections, ``[[audits]]`` entries and the API's options."""
    unknown = set(raw) - set(allowed)
    if unknown:
        import difflib

        names = sorted(map(str, unknown))
        close = {n: difflib.get_close_matches(n, [str(a) for a in allowed], n=1) for n in names}
        hint = "; ".join(f"{n!r}: did you mean {m[0]!r}?" for n, m in close.items() if m)
        raise SpecError(f"{where}: unknown {what}(s) {names}" + (f" ({hint})" if hint else "")
                        + f"; allowed: {sorted(allowed)}")


def describe_type(tp: object) -> str:
    """How a message names a type: 'an integer', 'a list of numbers', …"""
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple:
        return f"a list of {describe_type(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args if a is not type(None))
    return str(tp)


def coerce(value: object, tp: object) -> object:
    """``value`` as ``tp`` (str, bool, int, float, tuple[X, ...], X | None); ValueError when it is not."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg)
            except ValueError:
                continue
        raise ValueError
    if origin is tuple:
        try:  # one comma-separated string: the one splitter of names (quoted names keep their commas)
            items = split_names(value) if isinstance(value, str) else value
        except SpecError:  # an unclosed quote: a value of the wrong form, named by coerce_field
            raise ValueError from None
        if not isinstance(items, list | tuple):
            raise ValueError
        return tuple(coerce(v, args[0]) for v in items)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ValueError
    if tp is int:  # numpy's integers too (numbers.Integral); never a bool, never 2.5 cut to 2
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        raise ValueError
    if tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        raise ValueError
    if tp is str:
        if isinstance(value, str):
            return value
        raise ValueError
    return value


def typed_fields(config_type: type, raw: Mapping[str, object], where: str, *, what: str = "") -> dict[str, Any]:
    """The values of ``raw`` whose keys are fields of the dataclass ``config_type``, each as its field's
    type (:func:`coerce_field`): ``2.5`` or ``true`` is no integer, ``"0.1"`` no list of numbers. A value of
    the wrong type is one SpecError naming ``where``, the key (after ``what``, e.g. "option "), the type and
    the value; other keys are left out."""
    hints = typing.get_type_hints(config_type)
    names = {f.name for f in dataclasses.fields(config_type)}
    return {key: coerce_field(raw, key, hints[key], where, what=what) for key in raw if key in names}


def coerce_field(raw: Mapping[str, object], key: str, tp: object, where: str, *, what: str = "") -> Any:
    """``raw[key]`` as ``tp`` (:func:`coerce`), None when absent; a value of another type is a SpecError
    naming ``where``, the key, the type and the value."""
    if key not in raw:
        return None
    try:
        return coerce(raw[key], tp)
    except (ValueError, TypeError):
        raise SpecError(f"{where}: {what}{key} must be {describe_type(tp)}, got {raw[key]!r}") from None


def split_names(text: str) -> list[str]:
    """Comma-separated names: ``"a, b"`` -> ``["a", "b"]``. A name in double quotes is taken exactly — with its
    commas and surrounding spaces (``'"b,c", "e "'`` -> ``["b,c", "e "]``; a doubled quote inside is one quote);
    other names are trimmed. The one splitter of every list of column names, rules and policies (CLI, spec
    strings and the Python API)."""
    names: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            j, part = i + 1, []
            while True:
                if j >= n:
                    raise SpecError(f"{text!r}: the quoted name that starts at character {i + 1} is not closed")
                if text[j] == '"':
                    if j + 1 < n and text[j + 1] == '"':
                        part.append('"')
                        j += 2
                        continue
                    break
                part.append(text[j])
                j += 1
            j += 1
            while j < n and text[j].isspace():
                j += 1
            if j < n and text[j] != ",":
                raise SpecError(f"{text!r}: text after the quoted name {''.join(part)!r}; separate names with commas")
            names.append("".join(part))
            i = j + 1
        else:
            j = text.find(",", i)
            j = n if j < 0 else j
            if text[i:j].strip():
                names.append(text[i:j].strip())
            i = j + 1
    return names


def name_list(value: object, where: str) -> tuple[str, ...]:
    """Names given as a list of strings or as one comma-separated string (``audits = ["a", "b"]``,
    ``rules = "knn:5,window:0.1"``), in order. Anything else, an empty list or a name given twice is a
    SpecError naming ``where``: an empty list would silently mean "none" or "the default", a repeat would
    write the same rows twice."""
    items = split_names(value) if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(v, str) and v.strip() for v in items):
        raise SpecError(f"{where} must be a list of names or one comma-separated string, got {value!r}")
    if not items:
        raise SpecError(f"{where} is empty: name at least one, or leave it out for the default")
    repeated = sorted({v for v in items if items.count(v) > 1})
    if repeated:
        raise SpecError(f"{where} names {', '.join(map(repr, repeated))} more than once")
    return tuple(items)


MAX_SUPPORT = defaults.MAX_SUPPORT


def check_support(value: int, where: str) -> int:
    """A min_support every package column can hold (BIGINT), so no option can change a catalog view's type."""
    if not 1 <= value <= MAX_SUPPORT:
        raise SpecError(f"{where}: min_support must be a whole number from 1 to {MAX_SUPPORT}, not {value}")
    return value


def builtin_specs() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("dcaudit.pipelines").iterdir()
                  if p.name.endswith(".toml"))


def load_spec(name_or_path: str) -> PipelineSpec:
    """A built-in spec by name, or a spec file by path."""
    path = Path(name_or_path)
    # A folder is never a spec: one named like a built-in spec (a tox21/ data folder here) leaves the name to it.
    if path.suffix == ".toml" or path.exists() and not (path.is_dir() and name_or_path in builtin_specs()):
        if path.is_dir():
            raise SpecError(f"spec {path} is a directory; give a .toml spec file in it, or a built-in spec name")
        if not path.is_file():
            raise SpecError(f"spec file {path} does not exist")
        try:
            text, origin = path.read_text(encoding="utf-8"), str(path)
        except UnicodeDecodeError:
            raise SpecError(f"spec file {path} is not UTF-8 text; save it as UTF-8 (TOML is UTF-8)") from None
        except OSError as exc:
            raise SpecError(f"spec file {path} cannot be read ({exc.strerror or exc})") from None
    else:
        if name_or_path not in builtin_specs():
            raise SpecError(f"no built-in spec {name_or_path!r}; built-in: {', '.join(builtin_specs())} "
                            "(or give the path of a .toml spec)")
        text = resources.files("dcaudit.pipelines").joinpath(f"{name_or_path}.toml").read_text()
        origin = f"builtin:{name_or_path}"
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: not valid TOML: {exc}") from exc
    return spec_from_dict(raw, origin=origin, base_dir=path.parent if not origin.startswith("builtin:") else None)


# A spec name names files (locks/<name>.lock, records/<name>-<time>-<hex>.json): letters, digits and a few
# punctuation marks, at most 100 characters, never starting with a dot or a space.
SPEC_NAME = re.compile(r"[^\W][\w.+@=,() -]{0,99}")


def check_spec_name(name: str, origin: str = "spec") -> str:
    if not SPEC_NAME.fullmatch(name) or name != name.strip():
        shown = name if len(name) <= 40 else name[:40] + "…"
        raise SpecError(f"{origin}: name {shown!r} is not a usable spec name: 1 to 100 letters, digits or "
                        "_ . + @ = , ( ) - and spaces, starting with a letter, a digit or _ (it names files)")
    return name


def _per_group(entry: dict[str, Any], where: str) -> tuple[str | None, tuple[str, ...] | None, str | None]:
    """``per`` / ``models`` / ``model`` of an audit entry -> (group column, chosen groups or None for all,
    the key that implied per = "model" when per is not written)."""
    per = entry.get("per")
    models = entry.get("models")
    implied_by = None
    if "model" in entry:
        if models is not None:
            raise SpecError(f"{where}: give model = \"…\" or models = […], not both")
        _require_type(entry["model"], str, where, "model must be a string")
        models = [check_not_blank(entry["model"], f"{where}: model")]
        implied_by = "model" if per is None else None
    elif models is not None and per is None:
        implied_by = "models"
    per = "model" if implied_by else per
    if per is None:
        return None, None, None
    if not isinstance(per, str) or not per:
        raise SpecError(f"{where}: per must name a column, e.g. per = \"model\"")
    if models is None or models == "all":
        return per, None, implied_by
    if not isinstance(models, list | str) or not (split_names(models) if isinstance(models, str) else models):
        raise SpecError(f"{where}: models must be \"all\" or a non-empty list of names, not {models!r}"[:200])
    return per, name_list(models, f"{where}: models"), implied_by  # a name given twice is an error too


def _require_type(value: object, kind: type | tuple[type, ...], where: str, what: str) -> None:
    """Specs come from TOML or code: a value of the wrong type is a SpecError, never a TypeError later."""
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple)
                                                                               else (kind,)):
        raise SpecError(f"{where}: {what}, not {type(value).__name__} {value!r}"[:300])


def spec_from_dict(raw: dict[str, Any], *, origin: str = "spec", base_dir: Path | None = None) -> PipelineSpec:
    """Validate a spec. ``base_dir``: the spec file's folder, against which a relative [source] path is
    resolved (a spec from a file reads the same data from any working directory)."""
    _require_type(raw, dict, origin, "a spec is a table of keys")
    check_keys(raw, _TOP_KEYS, origin)
    # [vision] audits a user's predictions table itself (every suite × split × model): no [[audits]] needed
    stands_alone = "vision" in raw
    for key in ("name", "source", *(() if stands_alone else ("audits",))):
        if key not in raw:
            under = raw.get("source")
            if isinstance(under, dict) and key in under:  # TOML puts every key after [source] into [source]
                written = f"{key} = {under[key]!r}"[:80]
                if key == "audits" and under[key] == []:
                    raise SpecError(f"{origin}: audits = [] is empty, and written under [source] it is a key of "
                                    "[source]; add at least one [[audits]] table")
                raise SpecError(f"{origin}: {written} is written under [source], so it is a key of [source] "
                                "(TOML puts every key after a [table] header into that table); write it above [source]"
                                + (", or the audits as [[audits]] tables" if key == "audits" else ""))
            raise SpecError(f"{origin}: missing required key {key!r}")
    _require_type(raw["name"], str, origin, "name must be a string")
    check_spec_name(raw["name"], origin)
    _require_type(raw.get("description", ""), str, origin, "description must be a string")
    source = raw["source"]
    kinds = [k for k in SOURCE_KINDS if k in source] if isinstance(source, dict) else []
    if isinstance(source, dict) and not kinds:
        check_keys(source, SOURCE_KEYS, f"{origin}: [source]")  # paht = … is named, not "needs a path"
    if not isinstance(source, dict) or not kinds:
        raise SpecError(f"{origin}: [source] needs connector = \"…\", path = \"…\" or query = \"SELECT …\"")
    if len(kinds) > 1:
        raise SpecError(f"{origin}: [source] has {'both ' if len(kinds) == 2 else ''}{' and '.join(kinds)}; give one (a connector reads its own "
                        "data, a path names your table, a query selects it)")
    if "path" in source or "query" in source:  # a user's table takes no connector options: any other key is a typo
        check_keys(source, [k for k in SOURCE_KEYS if k == kinds[0] or k not in SOURCE_KINDS], f"{origin}: [source]")
    for key in SOURCE_KEYS:
        if key in source:
            _require_type(source[key], str, f"{origin}: [source]", f"{key} must be a string")
            check_not_blank(source[key], f"{origin}: [source] {key}")
    if source.get("duplicates", defaults.DUPLICATES) not in defaults.DUPLICATES_CHOICES:
        raise SpecError(f"{origin}: [source] duplicates = {source['duplicates']!r}; use \"error\" (default) or "
                        "\"keep\" (keep repeated ids and report them)")
    if base_dir is not None and isinstance(source.get("path"), str) and not Path(source["path"]).is_absolute():
        source = {**source, "path": str((Path(base_dir) / source["path"]).resolve())}
        raw = {**raw, "source": source}
    _require_type(raw.get("audits", []), list, origin, "audits must be a list of [[audits]] tables")
    if not raw.get("audits") and not stands_alone:
        raise SpecError(f"{origin}: audits is empty; add at least one [[audits]] table")
    audits = []
    for i, entry in enumerate(raw.get("audits", [])):
        where = f"{origin}: audits[{i}]"
        _require_type(entry, dict, where, "an audit is a table of keys")
        check_keys(entry, _AUDIT_KEYS, where)
        if "claim" not in entry or "evidence" not in entry:
            raise SpecError(f"{where}: needs claim and evidence")
        _require_type(entry["claim"], str, where, "claim must be a string")
        evidence = entry["evidence"]
        if isinstance(evidence, str):
            evidence = split_names(evidence)
        _require_type(evidence, list, where, "evidence must be a column name or a list of them")
        if not all(isinstance(c, str) and c for c in evidence):
            raise SpecError(f"{where}: evidence must list column names (non-empty strings)")
        for key in ("fiber_rule", "missing", "table", "id", "identity"):
            if key in entry:
                _require_type(entry[key], str, where, f"{key} must be a string")
                if key in ("table", "id", "identity"):  # empty: an audit id '', no table, no identity split
                    check_not_blank(entry[key], f"{where}: {key}")
        emap = EvidenceMap(tuple(evidence), parse_fiber_rule(entry.get("fiber_rule", str(EvidenceMap.rule))),
                           entry.get("missing", EvidenceMap.missing))
        # a whole number — numpy's integers too, as every option takes them (never a bool, never 2.5)
        min_support = check_support(coerce_field({"min_support": entry.get("min_support", AuditTask.min_support)},
                                                 "min_support", int, where), where)
        per, groups, per_implied_by = _per_group(entry, where)
        audits.append(AuditTask(
            audit_id=str(entry.get("id", f"audit{i}")),
            claim=parse_claim(entry["claim"]),
            evidence=emap,
            min_support=min_support,
            table=entry.get("table"),
            per=per,
            groups=groups,
            identity=entry.get("identity"),
            per_implied_by=per_implied_by,
        ))
    ids = [a.audit_id for a in audits]
    if len(set(ids)) != len(ids):
        raise SpecError(f"{origin}: audit ids repeat: {ids}")
    sections: dict[str, Any] = {k: raw[k] for k in ("replay", "completion", "sensitivity", "choice", "matbench", "jarvis", "vision")
                if k in raw}
    return PipelineSpec(
        name=str(raw["name"]),
        description=str(raw.get("description", "")),
        source=LABEL if "query" in source else str(source.get("connector") or source.get("path")),
        query=SourceQuery(source["query"], base_dir=Path(base_dir).resolve() if base_dir is not None else None,
                          origin=f"{origin}: [source] query") if "query" in source else None,
        id_column=str(source.get("id", "candidate_id")),
        audits=tuple(audits),
        sections=sections,
        raw=raw,
        duplicates="keep" if source.get("duplicates") == "keep" else "error",  # checked above
    )
