"""The evidence package is written and verified by the core (:mod:`dcaudit.storage`); reports read it."""

from dcaudit.storage import (  # noqa: F401
    PACKAGE_TABLES,
    cached_table,
    concat,
    md5_file,
    read_manifest,
    sha256_file,
    verify_package,
    with_run_id,
    write_package,
    write_table_atomic,
)
