"""Claims: the deployment action as a boolean expression over response columns.

A claim is parsed into a small syntax tree and re-rendered as SQL from that tree, so only column
references, literals, comparisons, arithmetic and boolean operators can ever reach DuckDB:
``"SR-p53" = 1``, ``optb88vdw_bandgap > 1.0``, ``ehull <= 0.1 and not metal``, ``robust = true``.
Identifiers with characters other than letters, digits and ``_`` are written in double quotes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dcaudit.errors import ClaimError

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+(?:[eE][+-]?\d+)?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")+")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op><=|>=|<>|!=|==|=|<|>|\+|-|\*|/|\(|\))
    """,
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "true", "false"}
_COMPARISONS = {"=": "=", "==": "=", "!=": "<>", "<>": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


@dataclass(frozen=True)
class Token:
    kind: str  # number | string | column | keyword | op | end
    text: str
    pos: int


@dataclass(frozen=True)
class Node:
    """A claim syntax-tree node: ``kind`` is column, number, string, bool, unary, binary, compare, and, or, not."""

    kind: str
    value: str = ""
    children: tuple[Node, ...] = ()


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ClaimError(
                f"claim {text!r}: unexpected character {text[pos]!r} at position {pos + 1}; a claim may use "
                "column names, numbers, 'strings', true/false, comparisons, + - * /, and/or/not and parentheses"
            )
        kind = m.lastgroup or ""
        value = m.group()
        if kind == "quoted":
            tokens.append(Token("column", value[1:-1].replace('""', '"'), pos))
        elif kind == "name":
            low = value.lower()
            tokens.append(Token("keyword", low, pos) if low in _KEYWORDS else Token("column", value, pos))
        elif kind == "string":
            tokens.append(Token("string", value[1:-1].replace("''", "'"), pos))
        elif kind in {"number", "op"}:
            tokens.append(Token(kind, value, pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def fail(self, tok: Token, expected: str) -> ClaimError:
        found = "the end" if tok.kind == "end" else repr(tok.text)
        return ClaimError(f"claim {self.text!r}: expected {expected} at position {tok.pos + 1}, found {found}")

    def parse(self) -> Node:
        node = self.or_expr()
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "an operator or the end of the claim")
        return node

    def or_expr(self) -> Node:
        node = self.and_expr()
        while self.peek().kind == "keyword" and self.peek().text == "or":
            self.take()
            node = Node("or", children=(node, self.and_expr()))
        return node

    def and_expr(self) -> Node:
        node = self.not_expr()
        while self.peek().kind == "keyword" and self.peek().text == "and":
            self.take()
            node = Node("and", children=(node, self.not_expr()))
        return node

    def not_expr(self) -> Node:
        if self.peek().kind == "keyword" and self.peek().text == "not":
            self.take()
            return Node("not", children=(self.not_expr(),))
        return self.comparison()

    def comparison(self) -> Node:
        left = self.arith()
        tok = self.peek()
        if tok.kind == "op" and tok.text in _COMPARISONS:
            self.take()
            return Node("compare", _COMPARISONS[tok.text], (left, self.arith()))
        return left

    def arith(self) -> Node:
        node = self.term()
        while self.peek().kind == "op" and self.peek().text in {"+", "-"}:
            op = self.take().text
            node = Node("binary", op, (node, self.term()))
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in {"*", "/"}:
            op = self.take().text
            node = Node("binary", op, (node, self.unary()))
        return node

    def unary(self) -> Node:
        if self.peek().kind == "op" and self.peek().text == "-":
            self.take()
            return Node("unary", "-", (self.unary(),))
        return self.primary()

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "number":
            return Node("number", tok.text)
        if tok.kind == "string":
            return Node("string", tok.text)
        if tok.kind == "column":
            return Node("column", tok.text)
        if tok.kind == "keyword" and tok.text in {"true", "false"}:
            return Node("bool", tok.text)
        if tok.kind == "op" and tok.text == "(":
            node = self.or_expr()
            if self.take().text != ")":
                raise self.fail(self.tokens[self.i - 1], "')'")
            return node
        raise self.fail(tok, "a column, a number, a 'string', true/false or '('")


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class SqlDialect:
    """How identifiers and string literals are written; the tree decides everything else."""

    name: str
    identifier: Callable[[str], str]
    string: Callable[[str], str]


DUCKDB = SqlDialect("duckdb", quote_identifier, quote_string)


def render(node: Node, dialect: SqlDialect = DUCKDB) -> str:
    """SQL for a claim tree: every column quoted, every literal escaped, nothing else admitted."""
    k = node.kind
    if k == "column":
        return dialect.identifier(node.value)
    if k == "number":
        return node.value
    if k == "string":
        return dialect.string(node.value)
    if k == "bool":
        return node.value.upper()
    if k == "unary":
        return f"(-{render(node.children[0], dialect)})"
    if k == "not":
        return f"(NOT {render(node.children[0], dialect)})"
    if k in {"binary", "compare"}:
        a, b = node.children
        return f"({render(a, dialect)} {node.value} {render(b, dialect)})"
    if k in {"and", "or"}:
        a, b = node.children
        return f"({render(a, dialect)} {k.upper()} {render(b, dialect)})"
    raise AssertionError(k)  # pragma: no cover


def _columns(node: Node) -> Iterable[str]:
    if node.kind == "column":
        yield node.value
    for child in node.children:
        yield from _columns(child)


_BOOLEAN_KINDS = {"compare", "and", "or", "not", "bool", "column"}


@dataclass(frozen=True)
class Claim:
    """A validated claim: its text as written, the columns it reads and the SQL rendered from its tree."""

    text: str
    tree: Node
    columns: tuple[str, ...]

    @property
    def sql(self) -> str:
        return render(self.tree)


def parse_claim(text: str, available: Iterable[str] | None = None) -> Claim:
    """Parse ``text``; with ``available`` columns, every column the claim names must be among them."""
    if not text or not text.strip():
        raise ClaimError("the claim is empty; write a boolean expression such as '\"SR-p53\" = 1'")
    tree = _Parser(text).parse()
    if tree.kind not in _BOOLEAN_KINDS:
        raise ClaimError(f"claim {text!r} is not true/false: compare it, e.g. '{text} > 0'")
    columns = tuple(dict.fromkeys(_columns(tree)))
    if available is not None:
        check_columns(columns, available, what=f"claim {text!r}")
    return Claim(text=text.strip(), tree=tree, columns=columns)


def check_columns(columns: Iterable[str], available: Iterable[str], *, what: str) -> None:
    """Raise a ClaimError listing the available columns (and near misses) for every unknown column."""
    avail = list(available)
    unknown = [c for c in columns if c not in avail]
    if not unknown:
        return
    hints = []
    for col in unknown:
        close = difflib.get_close_matches(col, avail, n=3)
        # A bare SR-p53 tokenizes as SR minus p53: point at the quoted name.
        quoted = [a for a in avail if col in re.split(r"[^A-Za-z0-9_]", a) and a != col]
        near = [repr(c) for c in close] + [f'"{q}" (quote names with - or spaces)' for q in quoted[:2]]
        hints.append(f"{col!r}" + (f" (did you mean {', '.join(near)}?)" if near else ""))
    raise ClaimError(
        f"{what} names unknown column(s) {', '.join(hints)}; available columns: {', '.join(avail)}"
    )
