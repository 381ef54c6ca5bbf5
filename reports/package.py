"""The evidence package is written and verified by the core (:mod:`dcaudit.storage`); reports read it."""

import pyarrow.parquet as pq  # noqa: F401 - kept: tests patch ``package.pq.write_table``

from dcaudit.storage import (  # noqa: F401
    PACKAGE_TABLES,
    TABLE_SCHEMAS,
    cached_table,
    concat,
    conform,
    md5_file,
    read_manifest,
    sha256_file,
    verify_package,
    with_run_id,
    write_package,
    write_table_atomic,
)
