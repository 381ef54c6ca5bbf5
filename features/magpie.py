"""Magpie element-property features of compositions (matminer's ``ElementProperty.from_preset("magpie")``),
cached as Parquet keyed by reduced formula.

matminer featurises one composition per call (~200 compositions/s for the full preset on one core
here; the Matbench mp tasks hold ~95k distinct formulas). The statistics are simple weighted
reductions over the elements of a composition, so this module takes matminer's own elemental table
(``matminer.utils.data.MagpieData``) and computes the same statistics — minimum, maximum, range,
mean, avg_dev, mode, with matminer's definitions (``PropertyStats``) — for all compositions at once
with numpy. ``tests/connectors/test_matbench.py`` checks the values against
``ElementProperty.featurize`` on real compositions.

Columns are ``magpie_<stat>_<property>`` (matminer's label is ``MagpieData <stat> <property>``).
The cache ``$DCAUDIT_HOME/tables/magpie/magpie.parquet`` (plus ``elements.parquet``, matminer's
elemental table) only grows: formulas already in it are never
recomputed; formulas pymatgen cannot parse are cached with null features and ``error`` set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from dcaudit.errors import require
from dcaudit.storage import cached_table, regular_file, write_table_atomic

VERSION = "magpie-1"
PROPERTIES = (
    "Number", "MendeleevNumber", "AtomicWeight", "MeltingT", "Column", "Row", "CovalentRadius",
    "Electronegativity", "NsValence", "NpValence", "NdValence", "NfValence", "NValence", "NsUnfilled",
    "NpUnfilled", "NdUnfilled", "NfUnfilled", "NUnfilled", "GSvolume_pa", "GSbandgap", "GSmagmom",
    "SpaceGroupNumber",
)
STATS = ("minimum", "maximum", "range", "mean", "avg_dev", "mode")
_CHUNK = 20_000


def column(stat: str, prop: str) -> str:
    return f"magpie_{stat}_{prop}"


def matminer_label(name: str) -> str:
    """``magpie_mean_Electronegativity`` -> ``MagpieData mean Electronegativity``."""
    _, rest = name.split("_", 1)
    for stat in sorted(STATS, key=len, reverse=True):
        if rest.startswith(stat + "_"):
            return f"MagpieData {stat} {rest[len(stat) + 1:]}"
    raise ValueError(f"not a Magpie column: {name}")


COLUMNS = tuple(column(s, p) for p in PROPERTIES for s in STATS)


def element_fractions(formulas: Sequence[str]) -> tuple[list[str], np.ndarray, list[str | None]]:
    """(element symbols, amount matrix n x E, parse error per formula); pymatgen parses each formula."""
    core = require("pymatgen.core", "materials")
    index: dict[str, int] = {}
    rows, cols, vals, errors = [], [], [], []
    for i, f in enumerate(formulas):  # one pymatgen parse per distinct formula; ~10 us each
        try:
            comp = core.Composition(f).element_composition
            items = [(str(el), amt) for el, amt in comp.items()]
            if not items:
                raise ValueError("no elements")
            fake = [str(el) for el in comp if not isinstance(el, core.Element)]
            if fake:  # pymatgen reads unknown symbols as dummy species rather than failing
                raise ValueError(f"not chemical elements: {fake}")
        except Exception as exc:  # pymatgen raises several types on bad formulas
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        errors.append(None)
        for sym, amt in items:
            rows.append(i)
            cols.append(index.setdefault(sym, len(index)))
            vals.append(amt)
    w = np.zeros((len(formulas), len(index)))
    w[rows, cols] = vals
    return list(index), w, errors


def elemental_table(symbols: Sequence[str], cache_dir: Path | None = None) -> np.ndarray:
    """E x P matrix of matminer's Magpie elemental values (NaN where Magpie has none).

    Importing matminer takes 10-20 s here, so with ``cache_dir`` the table for every element is
    taken from matminer once and kept as ``elements.parquet``.
    """
    table = _elements(cache_dir) if cache_dir is not None else None
    if table is None:
        data = require("matminer.utils.data", "materials").MagpieData()
        element = require("pymatgen.core", "materials").Element
        every = [e.symbol for e in element if e.Z <= 103] if cache_dir is not None else list(symbols)
        rows = {s: [float(data.get_elemental_property(element(s), p)) for p in PROPERTIES] for s in every}
        table = pl.DataFrame({"symbol": list(rows), **{p: [rows[s][j] for s in rows] for j, p in enumerate(PROPERTIES)}})
        if cache_dir is not None:
            write_table_atomic(table.to_arrow(), cache_dir / "elements.parquet", {"dcaudit.normaliser": VERSION})
    known = dict(zip(table["symbol"], range(table.height), strict=True))
    missing = [s for s in symbols if s not in known]
    if missing:
        raise ValueError(f"no Magpie data for element(s) {missing}")
    values = table.select(PROPERTIES).to_numpy()
    return values[[known[s] for s in symbols]] if symbols else np.empty((0, len(PROPERTIES)))


def _elements(cache_dir: Path) -> pl.DataFrame | None:
    path = cache_dir / "elements.parquet"
    if not regular_file(path, "the cached table"):
        return None
    meta = pq.read_schema(path).metadata or {}
    return pl.read_parquet(path) if meta.get(b"dcaudit.normaliser", b"").decode() == VERSION else None


def magpie_stats(w: np.ndarray, values: np.ndarray, properties: Sequence[str] = PROPERTIES) -> dict[str, np.ndarray]:
    """Every (stat, property) column for the amount matrix ``w`` (n x E) and elemental ``values`` (E x P,
    columns in the order of ``properties``).

    Definitions as matminer's ``PropertyStats``: weights are the element amounts; minimum/maximum
    are NaN when any present element lacks the property; mode is the smallest value among the
    elements of largest amount (``np.isclose``).
    """
    out = {column(s, p): np.empty(w.shape[0]) for p in properties for s in STATS}
    for lo in range(0, w.shape[0], _CHUNK):  # chunks bound memory at _CHUNK x E x 1 floats per property
        wc = w[lo:lo + _CHUNK]
        present = wc > 0
        total = wc.sum(axis=1)
        top = np.isclose(wc, wc.max(axis=1, keepdims=True)) & present
        for j, prop in enumerate(properties):
            v = values[:, j][None, :]
            nan_present = (present & np.isnan(v)).any(axis=1)
            vz = np.where(present, np.nan_to_num(v), 0.0)
            mean = (wc * vz).sum(axis=1) / total
            mean[nan_present] = np.nan
            dev = (wc * np.abs(vz - mean[:, None]) * present).sum(axis=1) / total
            mn = np.where(present, v, np.inf).min(axis=1)
            mx = np.where(present, v, -np.inf).max(axis=1)
            mode = np.where(top, v, np.inf).min(axis=1)
            for arr in (mn, mx):
                arr[nan_present] = np.nan
            sl = slice(lo, lo + wc.shape[0])
            out[column("minimum", prop)][sl] = mn
            out[column("maximum", prop)][sl] = mx
            out[column("range", prop)][sl] = mx - mn
            out[column("mean", prop)][sl] = mean
            out[column("avg_dev", prop)][sl] = dev
            out[column("mode", prop)][sl] = mode
    return out


def featurise(formulas: Sequence[str], cache_dir: Path | None = None) -> pl.DataFrame:
    """reduced_formula, error and every Magpie column for the given (distinct) formulas."""
    symbols, w, errors = element_fractions(formulas)
    ok = np.array([e is None for e in errors], dtype=bool)
    stats = magpie_stats(w[ok], elemental_table(symbols, cache_dir)) if ok.any() else {c: np.empty(0) for c in COLUMNS}
    cols: dict[str, object] = {"reduced_formula": list(formulas), "error": errors}
    for c in COLUMNS:
        full = np.full(len(formulas), np.nan)
        full[ok] = stats[c]
        cols[c] = full
    df = pl.DataFrame(cols, schema={"reduced_formula": pl.Utf8, "error": pl.Utf8,
                                    **{c: pl.Float64 for c in COLUMNS}})
    return df.with_columns(pl.col(c).fill_nan(None) for c in COLUMNS)


def _read_cache(cache: Path) -> pl.DataFrame | None:
    """The cache, or None when absent, unreadable or written by another version of this module."""
    if not cached_table(cache, VERSION, None, key_field="dcaudit.normaliser"):
        return None
    try:
        return pl.read_parquet(cache)
    except Exception:  # a corrupt cache is recomputed, never trusted
        return None


def cached_features(cache_dir: Path, formulas: Iterable[str | None]) -> tuple[pl.DataFrame, int]:
    """Features of every formula, computing only those not yet in ``cache_dir/magpie.parquet`` (which grows).

    Returns (features of the requested formulas, number newly computed).
    """
    cache = cache_dir / "magpie.parquet"
    wanted = pl.Series("reduced_formula", list(formulas), pl.Utf8).drop_nulls().unique()
    have = _read_cache(cache)
    missing = wanted if have is None else wanted.filter(~wanted.is_in(have["reduced_formula"].implode()))
    if missing.len() or have is None:
        new = featurise(missing.sort().to_list(), cache_dir)
        have = new if have is None else pl.concat([have, new])
        write_table_atomic(have.to_arrow(), cache, {"dcaudit.normaliser": VERSION,
                                                    "dcaudit.source": "matminer MagpieData (ElementProperty magpie)"})
    return have.filter(pl.col("reduced_formula").is_in(wanted.implode())), missing.len()
