"""The evidence package: one directory per run, one Parquet file per row shape, plus manifest.json.

The implementation lives in the core (:mod:`dcaudit.storage`, so the catalog can verify packages
without importing a layer above it); this module re-exports it for the code that reads packages.
"""

from __future__ import annotations

import pyarrow.parquet as pq  # noqa: F401 - kept: tests patch ``package.pq.write_table``

from dcaudit.storage import (  # noqa: F401 - re-exported
    CATALOG_TABLES,
    PACKAGE_TABLES,
    TABLE_SCHEMAS,
    concat,
    conform,
    read_manifest,
    sha256_of,
    verify_package,
    with_run_id,
    write_package,
    write_table_atomic,
)
