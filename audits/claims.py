"""The claim grammar lives in the core (:mod:`dcaudit.claims`); this name is kept for audits' imports."""

from dcaudit.claims import (  # noqa: F401
    DUCKDB,
    Claim,
    Node,
    SqlDialect,
    Token,
    check_columns,
    claim_sql,
    parse_claim,
    quote_identifier,
    quote_string,
    render,
    tokenize,
)
