"""Tox21 (MoleculeNet/DeepChem): 7831 compounds, 12 assay labels (0/1/missing), SMILES.

Copies of ``tox21.csv(.gz)`` differ in compression, line endings and label formatting (``1`` vs
``1.0``), so the file is verified by content: the 14 columns, 7831 rows and a fingerprint over
``mol_id`` and the normalised labels. SMILES are parsed with RDKit (extra ``chem``) into canonical
SMILES and InChIKey; unparsable rows are kept and flagged, and distinct compounds sharing an
InChIKey are reported as structure duplicates with any assay labels on which they conflict.

Tables written to ``$DCAUDIT_HOME/tables/tox21/``:

* ``tox21.parquet`` — mol_id, smiles, canonical_smiles, inchikey, smiles_valid, smiles_error and the
  12 assays as nullable Int8 (1 active, 0 inactive, null not tested), in source order;
* ``structure_duplicates.parquet`` — one row per (inchikey, mol_id) in a duplicate group, with
  ``conflicting_assays`` listing assays on which the group's labels disagree;
* ``findings.parquet`` (the ``dcaudit.findings`` schema; ``row`` is the data row of ``tox21.csv``):
  ``invalid_smiles``, ``structure_duplicate_conflicting_labels`` (one row per compound of a group
  whose labels disagree on some assay) and ``structure_duplicate`` (groups whose labels agree).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from dcaudit import findings
from dcaudit.config import Settings
from dcaudit.connectors.base import (
    FetchedFile,
    NoOptions,
    PreparedSource,
    SourceConnector,
    SourceFile,
    cached_table,
    fetch,
    provenance,
)
from dcaudit.errors import InputError, IntegrityError, require
from dcaudit.features.molecules import parallel_structures
from dcaudit.storage import write_table_atomic

if TYPE_CHECKING:
    import polars as pl

ASSAYS = (
    "NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma",
    "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53",
)
NR_ASSAYS = ASSAYS[:7]
SR_PROBES = ("SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP")
COLUMNS = (*ASSAYS, "mol_id", "smiles")
N_ROWS = 7831
# sha256 over "mol_id,label1,…,label12" lines (labels normalised to 0/1/empty), in file order.
FINGERPRINT = "4d64a90d78a1f73aa48c19482f39fa03fe88f4db580099e3df850ef08e2da593"
# sha256 of the SMILES column, one per line in source order (the canonical tox21.csv.gz's SMILES as written)
SMILES_FINGERPRINT = "1b6b3a30ad844b50458135adfca046c5444e5498403e8eb003bda490a0e93bfd"
NORMALISER = "tox21-1"

SOURCE = SourceFile(
    name="tox21.csv.gz",
    url="https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/tox21.csv.gz",
    mirror_paths=("tox21/tox21.csv", "tox21/tox21.csv.gz"),
    sha256=None,  # upstream copies differ in bytes; verified by content (FINGERPRINT)
    licence="MoleculeNet/DeepChem MIT; assay data from the US Tox21 programme (NIH/NCATS, EPA, NTP, FDA)",
    citation="Wu et al., MoleculeNet: a benchmark for molecular machine learning, Chem. Sci. 9, 513 (2018)",
)

_LABEL_TEXT = {"0": 0, "1": 1, "0.0": 0, "1.0": 1, "": None}


def read_labels(path: Path) -> pl.DataFrame:
    """Read and validate a Tox21 CSV: the 14 columns, labels 0/1/empty. Errors name file, row, column."""
    import polars as pl  # here, not at import: a run with cached tables needs no polars

    from dcaudit.inputs import check_file, read_csv

    # The input contract's reader: a ragged or non-UTF-8 line, a truncated .gz, a repeated column name are
    # one-line errors naming the line, as for any table a user brings. Every column stays text here.
    table = read_csv(check_file(path), text_columns=tuple(COLUMNS))
    if table.num_rows == 0:
        raise InputError("file has a header but no rows", file=str(path))
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s) {missing}; found {df.columns}", file=str(path), column=missing[0])
    df = df.select(COLUMNS).with_row_index("row", offset=1)
    for assay in ASSAYS:
        text = pl.col(assay).fill_null("").str.strip_chars()
        bad = df.filter(~text.is_in(list(_LABEL_TEXT)))
        if bad.height:
            first = bad.row(0, named=True)
            raise InputError(
                f"assay labels must be 0, 1 or empty; found {first[assay]!r} "
                f"({bad.height} such value(s) in this column)",
                file=str(path), row=int(first["row"]), column=assay)
        df = df.with_columns(
            text.replace_strict(_LABEL_TEXT, return_dtype=pl.Int8, default=None).alias(assay))
    empty_id = df.filter(pl.col("mol_id").is_null() | (pl.col("mol_id").str.strip_chars() == ""))
    if empty_id.height:
        raise InputError("mol_id is empty", file=str(path), row=int(empty_id["row"][0]), column="mol_id")
    dup = df.filter(pl.col("mol_id").is_duplicated())
    if dup.height:
        raise InputError(f"mol_id {dup['mol_id'][0]!r} occurs {dup.height} times", file=str(path),
                         row=int(dup["row"][0]), column="mol_id")
    return df.drop("row")


def content_fingerprint(df: pl.DataFrame) -> str:
    import polars as pl  # here, not at import: a run with cached tables needs no polars
    line = pl.concat_str(
        [pl.col("mol_id")] + [pl.col(a).cast(pl.Utf8).fill_null("") for a in ASSAYS], separator=",")
    return hashlib.sha256("\n".join(df.select(line).to_series().to_list()).encode()).hexdigest()


def verify_content(df: pl.DataFrame, path: Path) -> None:
    if df.height != N_ROWS:
        raise IntegrityError(f"{path}: {df.height} rows, expected {N_ROWS} (truncated or a different Tox21 copy)")
    fp = content_fingerprint(df)
    if fp != FINGERPRINT:
        raise IntegrityError(f"{path}: content fingerprint {fp[:16]}… differs from the MoleculeNet Tox21 "
                             f"table's {FINGERPRINT[:16]}… (labels or ids were changed)")
    # SMILES decide the structure identity (InChIKey) of the label-noise split: a changed one is a changed table
    sfp = hashlib.sha256("\n".join(v or "" for v in df["smiles"].to_list()).encode()).hexdigest()
    if sfp != SMILES_FINGERPRINT:
        raise IntegrityError(f"{path}: its SMILES differ from the MoleculeNet Tox21 table's (fingerprint "
                             f"{sfp[:16]}…, expected {SMILES_FINGERPRINT[:16]}…): a structure was changed or cut")


def parse_structures(smiles: list[str | None]) -> pl.DataFrame:
    """Canonical SMILES and InChIKey per row; rows RDKit rejects are kept with the reason."""
    import polars as pl  # here, not at import: a run with cached tables needs no polars
    require("rdkit.Chem", "chem")
    rows = parallel_structures(smiles)  # RDKit holds the GIL: the second half in a child process
    return pl.DataFrame({"canonical_smiles": [r[0] for r in rows], "inchikey": [r[1] for r in rows],
                         "smiles_error": [r[2] for r in rows]},
                        schema={"canonical_smiles": pl.Utf8, "inchikey": pl.Utf8, "smiles_error": pl.Utf8})


def structure_duplicates(df: pl.DataFrame) -> pl.DataFrame:
    """Distinct mol_ids with one InChIKey: the finest evidence there is, and already mixed where labels differ."""
    import polars as pl  # here, not at import: a run with cached tables needs no polars
    groups = df.filter(pl.col("inchikey").is_not_null() & pl.col("inchikey").is_duplicated())
    if groups.height == 0:
        return pl.DataFrame(schema={"inchikey": pl.Utf8, "mol_id": pl.Utf8, "smiles": pl.Utf8,
                                    "group_size": pl.UInt32, "conflicting_assays": pl.List(pl.Utf8)})
    conflicts = groups.group_by("inchikey").agg(
        pl.len().alias("group_size"),
        *[(pl.col(a).drop_nulls().n_unique() > 1).alias(a) for a in ASSAYS],
    ).with_columns(
        pl.concat_list([pl.when(pl.col(a)).then(pl.lit(a)) for a in ASSAYS]).list.drop_nulls()
        .alias("conflicting_assays")
    ).select("inchikey", "group_size", "conflicting_assays")
    return (groups.select("inchikey", "mol_id", "smiles").join(conflicts, on="inchikey")
            .sort("inchikey", "mol_id"))


def tox21_findings(table: pl.DataFrame, dups: pl.DataFrame, file: str) -> pl.DataFrame:
    """Invalid SMILES and structure duplicates as findings (``row`` = data row in the CSV, 1-based)."""
    import polars as pl  # here, not at import: a run with cached tables needs no polars
    rows = table.select("mol_id", pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("row"))
    invalid = table.with_columns(rows["row"]).filter(~pl.col("smiles_valid")).select(
        pl.lit("tox21").alias("source"), pl.lit(file).alias("file"), "row", pl.lit("smiles").alias("column"),
        pl.lit("invalid_smiles").alias("kind"),
        pl.format("{}: '{}'", pl.col("smiles_error"), pl.col("smiles").fill_null("")).alias("detail"),
        pl.col("mol_id").alias("candidate_id"))
    conflicting = pl.col("conflicting_assays").list.len() > 0
    duplicates = dups.join(rows, on="mol_id", how="left").select(
        pl.lit("tox21").alias("source"), pl.lit(file).alias("file"), "row", pl.lit("smiles").alias("column"),
        pl.when(conflicting).then(pl.lit("structure_duplicate_conflicting_labels"))
        .otherwise(pl.lit("structure_duplicate")).alias("kind"),
        pl.when(conflicting).then(pl.format("InChIKey {} is shared by {} compounds whose labels disagree on {}",
                                            "inchikey", "group_size", pl.col("conflicting_assays").list.join(", ")))
        .otherwise(pl.format("InChIKey {} is shared by {} compounds with agreeing labels", "inchikey",
                             "group_size")).alias("detail"),
        pl.col("mol_id").alias("candidate_id"))
    return findings.concat([invalid, duplicates])


def normalise(fetched: FetchedFile, out_dir: Path, *, verify: bool = True) -> dict[str, Path]:
    import polars as pl  # here, not at import: a run with cached tables needs no polars
    df = read_labels(fetched.path)
    if verify:
        verify_content(df, fetched.path)
    structures = parse_structures(df["smiles"].to_list())
    table = pl.concat([df, structures], how="horizontal").with_columns(
        pl.col("smiles_error").is_null().alias("smiles_valid"))
    table = table.select("mol_id", "smiles", "canonical_smiles", "inchikey", "smiles_valid", "smiles_error",
                         *ASSAYS)
    dups = structure_duplicates(table)
    counts = {"rows": table.height, "invalid_smiles": int((~table["smiles_valid"]).sum()),
              "structure_duplicate_groups": dups["inchikey"].n_unique() if dups.height else 0}
    meta = provenance(SOURCE, fetched, normaliser=NORMALISER, counts=counts)
    paths = _paths(out_dir)
    write_table_atomic(findings.to_arrow(tox21_findings(table, dups, fetched.path.name)), paths["findings"], meta)
    write_table_atomic(dups.to_arrow(), paths["structure_duplicates"], meta)
    write_table_atomic(table.to_arrow(), paths["tox21"], meta)  # written last: its presence marks completion
    return paths


def _paths(out_dir: Path) -> dict[str, Path]:
    return {name: out_dir / f"{name}.parquet" for name in ("tox21", "structure_duplicates", "findings")}


def prepare(settings: Settings, options: NoOptions | None = None) -> PreparedSource:
    fetched = fetch(SOURCE, settings)
    out_dir = settings.tables_dir / "tox21"
    paths = _paths(out_dir)
    reused = all(cached_table(p, fetched.sha256, NORMALISER) for p in paths.values())
    if not reused:
        paths = normalise(fetched, out_dir)
    return PreparedSource(
        name="tox21",
        tables={"tox21": paths["tox21"]},
        inputs={SOURCE.name: fetched.sha256},
        findings=paths["findings"],
        reports={"structure_duplicates": paths["structure_duplicates"]},
        notes=(f"tox21: {'reused' if reused else 'normalised'} {paths['tox21']} from {fetched.origin}",),
        sources=(SOURCE,),
    )


CONNECTOR = SourceConnector("tox21", NoOptions, (SOURCE,), prepare)
