"""The claim grammar lives in the core (:mod:`dcaudit.claims`) so core modules (gates, spec) can parse
claims and gate expressions without importing the audits layer; this module re-exports it unchanged."""

from dcaudit.claims import (  # noqa: F401
    _BOOLEAN_KINDS,
    _COMPARISONS,
    _KEYWORDS,
    _TOKEN,
    DUCKDB,
    Claim,
    Node,
    SqlDialect,
    Token,
    _columns,
    _Parser,
    check_columns,
    parse_claim,
    quote_identifier,
    quote_string,
    render,
    tokenize,
)

__all__ = ["DUCKDB", "Claim", "Node", "SqlDialect", "Token", "check_columns", "parse_claim", "quote_identifier",
           "quote_string", "render", "tokenize"]
