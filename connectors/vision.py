"""Vision: does an image's clean prediction decide that the classifier stays right under corruption?

The connector builds (or reuses) one predictions table per dataset — ``digits`` (the paper's protocol
on scikit-learn's digits) and ``mnist-c`` (the MNIST test set with an ImageNet-C subset) — and the
per-image table a plain ``[[audits]]`` entry audits. Its parts, by job:

* :mod:`dcaudit.connectors.vision_models` — the two protocols and their model zoo (fitting, predicting);
* :mod:`dcaudit.features.image_corruptions` — the corruptions (arrays in, arrays out);
* :mod:`dcaudit.connectors.vision_predictions` — the predictions-table contract, a user's prediction
  files, and the per-image evidence.

``prepare`` writes ``images.parquet`` (one row per dataset × split × model × image: ``candidate_id``,
the clean evidence ``predicted``, ``clean_correct``, ``confidence``, ``confidence_decile`` and the claim
column ``robust``), which a plain ``[[audits]]`` entry can audit with dataset, split and model inside
the fiber key, and ``findings-*.parquet`` (:func:`vision_findings`). Tables live in
``$DCAUDIT_HOME/tables/vision/``; options and finding kinds: docs/connectors.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from dcaudit import findings
from dcaudit.config import Settings
from dcaudit.connectors.base import PreparedSource, SourceConnector
from dcaudit.connectors.vision_models import (
    DIGITS_MODELS,
    MNIST_SOURCES,
    NORMALISER,
    DigitsProtocol,
    MnistProtocol,
    digits_corruptions,
    digits_images,
    digits_predictions,
    mnist_predictions,
)
from dcaudit.connectors.vision_predictions import CLEAN, image_evidence_sql
from dcaudit.errors import SpecError
from dcaudit.storage import cached_table, recorded_sha256, write_table_atomic

DERIVED_KEY = "dcaudit.derived_key"  # metadata entry: what a derived table was made from (see _derived)


def write_images_table(predictions: dict[str, Path], out: Path, key: str = "") -> Path:
    """``images.parquet``: per (dataset, split, model, image) evidence and ``robust`` (correct on clean
    and on every corruption; NULL when a corruption is missing and none is wrong) — the table a plain
    ``[[audits]]`` entry can audit, with split and model inside the fiber key."""
    con = duckdb.connect()
    try:
        parts = []
        for dataset, path in predictions.items():
            view = f"p_{len(parts)}"
            con.execute(f"CREATE VIEW {view} AS SELECT * FROM read_parquet('{str(path).replace(chr(39), chr(39) * 2)}')")
            n_corr = con.execute(f"SELECT count(DISTINCT condition) FROM {view} WHERE condition <> '{CLEAN}'").fetchall()[0][0]
            parts.append(f"""SELECT '{dataset}' AS dataset,
                    '{dataset}:' || e.split || ':' || e.model || ':' || e.image_id AS candidate_id, e.*,
                    CASE WHEN e.clean_correct = FALSE OR r.ok = FALSE THEN FALSE
                         WHEN e.clean_correct AND r.n = {n_corr} THEN TRUE END AS robust
                FROM ({image_evidence_sql(view)}) e LEFT JOIN (
                    SELECT split, model, image_id, count(*) AS n, bool_and(predicted = label) AS ok
                    FROM {view} WHERE condition <> '{CLEAN}' GROUP BY ALL) r USING (split, model, image_id)""")
        table = con.sql(" UNION ALL ".join(parts) + " ORDER BY dataset, split, model, image_id").to_arrow_table()
    finally:
        con.close()
    write_table_atomic(table, out, {"dcaudit.normaliser": NORMALISER, DERIVED_KEY: key,
                                    "dcaudit.derived_from": json.dumps({k: p.name for k, p in predictions.items()})})
    return out


DATASETS = ("digits", "mnist-c")
MAX_SPLITS = 1000  # the paper uses 25; each split refits every model


@dataclass(frozen=True)
class Options:
    """``[source]`` options: ``datasets`` (which of :data:`DATASETS`), ``digits_splits`` and
    ``digits_models`` (fewer splits or models for a quick look; the defaults are the paper's 25 splits
    and eight models), ``n_jobs`` (processes for fitting)."""

    datasets: tuple[str, ...] = DATASETS
    digits_splits: int | None = None
    digits_models: tuple[str, ...] | None = None
    n_jobs: int = 2


def vision_findings(predictions: dict[str, Path], images: Path) -> pl.DataFrame:
    """What the predictions tables hold that an audit cannot use as given, in the findings schema.

    ``missing_clean_prediction``: an image a model predicted under some corruption but not clean (no
    evidence: excluded); ``incomplete_conditions``: correct on every corruption present but missing
    some (``robust`` NULL: excluded); ``model_fit_warning``: a warning while fitting the protocol's
    models (e.g. an MLP that did not converge), one per distinct message.
    """
    con = duckdb.connect()
    try:
        rows = con.execute(f"""SELECT dataset, candidate_id,
                CASE WHEN predicted IS NULL THEN 'missing_clean_prediction' ELSE 'incomplete_conditions' END,
                CASE WHEN predicted IS NULL THEN 'no clean prediction for this image: no evidence, excluded'
                     ELSE 'correct on every corruption present, but not every corruption was predicted: '
                          || 'robust is NULL, excluded' END
            FROM read_parquet('{str(images).replace("'", "''")}') WHERE robust IS NULL""").fetchall()
    finally:
        con.close()
    found = [{"source": f"vision-{d}", "file": images.name, "column": "condition", "kind": kind, "detail": detail,
              "candidate_id": cid} for d, cid, kind, detail in rows]
    for dataset, path in predictions.items():
        meta = pq.read_schema(path).metadata or {}
        for message in json.loads(meta.get(b"dcaudit.warnings", b"[]")):
            found.append({"source": f"vision-{dataset}", "file": path.name, "kind": "model_fit_warning",
                          "detail": message})
    return findings.from_rows(found)


def write_pixels_table(protocol: DigitsProtocol, out: Path, key: str = "") -> Path:
    """``digits-pixels.parquet``: the clean image and its corruptions (image_id, condition, 8 x 8 pixels in
    [0, 1]) — what the report's explorer draws as thumbnails next to each member's predictions."""
    images, _ = digits_images()
    conditions = digits_corruptions(images, protocol)
    n = images.shape[0]
    parts = [pa.table({
        "image_id": pa.array(np.arange(n).astype(str), pa.string()),
        "condition": pa.array([name] * n, pa.string()),
        "pixels": pa.FixedSizeListArray.from_arrays(pa.array(np.clip(pix, 0, 1).reshape(-1).astype(np.float32)),
                                                   images.shape[1] * images.shape[2]),
        "height": pa.array(np.full(n, images.shape[1], dtype=np.int32)),
        "width": pa.array(np.full(n, images.shape[2], dtype=np.int32)),
    }) for name, pix in conditions.items()]
    write_table_atomic(pa.concat_tables(parts), out, {"dcaudit.normaliser": NORMALISER, DERIVED_KEY: key})
    return out


def prepare(settings: Settings, options: Options | None = None) -> PreparedSource:
    """Build (or reuse) the predictions tables (``digits``, ``mnist-c``) and the per-image table."""
    options = options or Options()
    datasets, digits_splits, digits_models, n_jobs = (options.datasets, options.digits_splits,
                                                      options.digits_models, options.n_jobs)
    bad = [d for d in datasets if d not in DATASETS]
    if bad or not datasets:
        raise SpecError(f"vision connector: unknown dataset(s) {bad or '(none)'}; choose from {', '.join(DATASETS)}")
    if digits_splits is not None and not 1 <= digits_splits <= MAX_SPLITS:
        raise SpecError(f"vision connector: digits_splits must be from 1 to {MAX_SPLITS}, got {digits_splits}")
    if digits_models is not None and not digits_models:
        raise SpecError(f"vision connector: digits_models is empty; choose from {', '.join(DIGITS_MODELS)}")
    if not (n_jobs == -1 or 1 <= n_jobs <= 1024):
        raise SpecError(f"vision connector: n_jobs must be a number of processes >= 1 (or -1: one per core), "
                        f"got {n_jobs}")
    tables: dict[str, Path] = {}
    inputs: dict[str, str] = {}
    notes: list[str] = []
    if "digits" in datasets:
        protocol = DigitsProtocol()
        if digits_splits is not None:
            protocol = replace(protocol, n_splits=int(digits_splits))
        if digits_models is not None:
            unknown_models = [m for m in digits_models if m not in DIGITS_MODELS]
            if unknown_models:
                raise SpecError(f"vision connector: unknown digits model(s) {unknown_models}; "
                                f"choose from {', '.join(DIGITS_MODELS)}")
            protocol = replace(protocol, models=tuple(digits_models))
        path, digest, reused = digits_predictions(settings, protocol, n_jobs=n_jobs)
        tables["digits"] = path
        pixels_key = hashlib.sha256(repr((digest, protocol)).encode()).hexdigest()
        pixels = settings.tables_dir / "vision" / f"digits-pixels-{pixels_key[:12]}.parquet"
        if not _derived(pixels, pixels_key):
            write_pixels_table(protocol, pixels, pixels_key)
        pixel_tables = {"digits-pixels": pixels}
        inputs["sklearn.load_digits"] = digest
        notes.append(f"vision-digits: {'reused' if reused else 'fitted'} {protocol.n_splits} splits × "
                     f"{len(protocol.models)} models -> {path.name}")
    if "mnist-c" in datasets:
        mp = MnistProtocol()
        path, mnist_inputs, reused, clean_acc = mnist_predictions(settings, mp, n_jobs=n_jobs)
        tables["mnist-c"] = path
        inputs.update(mnist_inputs)
        accs = ", ".join(f"{m} {a:.1%}" for m, a in clean_acc.items())
        notes.append(f"vision-mnist-c: {'reused' if reused else 'fitted'} {path.name}; models trained on "
                     f"{mp.train_size} MNIST *test* images (no training set in the mirror), evaluated on "
                     f"the other {10000 - mp.train_size}; clean accuracy {accs}")
    # The per-image table and its findings are made from the predictions tables' bytes (as noted when they
    # were written and checked intact above), so a predictions table made again means these are made again.
    key = hashlib.sha256(json.dumps({k: [p.name, recorded_sha256(p)] for k, p in tables.items()},
                                    sort_keys=True).encode()).hexdigest()
    images = settings.tables_dir / "vision" / f"images-{key[:12]}.parquet"
    if not _derived(images, key):
        write_images_table(tables, images, key)
    found = images.with_name(f"findings-{key[:12]}.parquet")
    if not _derived(found, key):
        write_table_atomic(findings.to_arrow(vision_findings(tables, images)), found,
                           {"dcaudit.normaliser": NORMALISER, DERIVED_KEY: key})
    tables["images"] = images
    if "digits" in datasets:
        tables.update(pixel_tables)  # thumbnails for the report; not a predictions table
    return PreparedSource(name="vision", tables=tables, inputs=inputs, findings=found, notes=tuple(notes),
                          sources=MNIST_SOURCES if "mnist-c" in datasets else ())


def _derived(path: Path, key: str) -> bool:
    """A derived table to reuse: it reads, holds the bytes it was written with, and was made from ``key`` by
    this normaliser (a table merely present there — half-copied, edited, left by an older version — is made
    again; a directory there is a NotAFileError naming it)."""
    return cached_table(path, key, NORMALISER, key_field=DERIVED_KEY)


CONNECTOR = SourceConnector("vision", Options, MNIST_SOURCES, prepare)
