"""Claims: the deployment action as a boolean expression over response columns.

A claim is parsed into a small syntax tree and re-rendered as SQL from that tree, so only column
references, literals, comparisons, arithmetic and boolean operators can ever reach DuckDB:
``"SR-p53" = 1``, ``optb88vdw_bandgap > 1.0``, ``ehull <= 0.1 and not metal``, ``robust = true``.
Identifiers with characters other than letters, digits and ``_`` are written in double quotes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
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


# Limits instead of exhaustion: a claim is a short boolean expression, and a parser or renderer that recursed
# without bound would die with RecursionError (or make DuckDB plan an expression thousands deep).
MAX_CLAIM_LENGTH = 100_000
MAX_NESTING = 40   # parentheses, unary minus and `not`, nested into each other
MAX_TERMS = 2_000  # operands of one claim (and/or chains are flattened, so they do not nest)
CLAIM_GRAMMAR = ("a claim may use column names (double-quote names with - or spaces: \"SR-p53\"), numbers, "
                 "'strings', true/false, comparisons (= != <> < <= > >=), + - * /, and/or/not and parentheses; "
                 "nothing else (no functions, no SQL comments)")


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_CLAIM_LENGTH:
        raise ClaimError(f"the claim is {len(text)} characters long; at most {MAX_CLAIM_LENGTH} are allowed")
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        if text.startswith(("--", "/*", "*/"), pos):
            # A user writing SQL expects a comment here; reading `y = 1 -- e1` as y = 1 - (-e1) would be wrong.
            raise ClaimError(f"claim {text!r}: {text[pos:pos + 2]!r} at position {pos + 1} looks like an SQL "
                             "comment, which claims cannot contain (for a double minus write a - (-b))")
        m = _TOKEN.match(text, pos)
        if not m:
            raise ClaimError(
                f"claim {text!r}: unexpected character {text[pos]!r} at position {pos + 1}; {CLAIM_GRAMMAR}")
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
        self.depth = 0
        operands = sum(t.kind in {"number", "string", "column"} or t.text in {"true", "false"} for t in self.tokens)
        if operands > MAX_TERMS:
            raise ClaimError(f"the claim has {operands} operands; at most {MAX_TERMS} are allowed "
                             "(audit a derived column instead)")

    def nest(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ClaimError(f"claim nests deeper than {MAX_NESTING} levels (parentheses, minus signs or `not`) "
                             f"at position {tok.pos + 1}; simplify it")

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
        # and/or chains are n-ary nodes (not left-deep binary trees), so a claim of hundreds of terms stays flat
        parts = [self.and_expr()]
        while self.peek().kind == "keyword" and self.peek().text == "or":
            self.take()
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else Node("or", children=tuple(parts))

    def and_expr(self) -> Node:
        parts = [self.not_expr()]
        while self.peek().kind == "keyword" and self.peek().text == "and":
            self.take()
            parts.append(self.not_expr())
        return parts[0] if len(parts) == 1 else Node("and", children=tuple(parts))

    def not_expr(self) -> Node:
        if self.peek().kind == "keyword" and self.peek().text == "not":
            self.nest(self.take())
            node = Node("not", children=(self.not_expr(),))
            self.depth -= 1
            return node
        return self.comparison()

    def comparison(self) -> Node:
        left = self.arith()
        tok = self.peek()
        if tok.kind == "op" and tok.text in _COMPARISONS:
            self.take()
            return Node("compare", _COMPARISONS[tok.text], (left, self.arith()))
        return left

    def arith(self) -> Node:
        return self.chain({"+", "-"}, self.term)

    def term(self) -> Node:
        return self.chain({"*", "/"}, self.unary)

    def chain(self, ops: set[str], operand: Callable[[], Node]) -> Node:
        # Arithmetic chains are left-deep; they count towards the nesting limit beyond a few links so that
        # rendering (recursive) stays far from Python's recursion limit.
        node, links = operand(), 0
        while self.peek().kind == "op" and self.peek().text in ops:
            op = self.take()
            links += 1
            if links > 4 * MAX_NESTING:
                raise ClaimError(f"claim chains more than {4 * MAX_NESTING} arithmetic operations at position "
                                 f"{op.pos + 1}; simplify it")
            node = Node("binary", op.text, (node, operand()))
        return node

    def unary(self) -> Node:
        if self.peek().kind == "op" and self.peek().text == "-":
            self.nest(self.take())
            node = Node("unary", "-", (self.unary(),))
            self.depth -= 1
            return node
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
            self.nest(tok)
            node = self.or_expr()
            if self.take().text != ")":
                raise self.fail(self.tokens[self.i - 1], "')'")
            self.depth -= 1
            return node
        raise self.fail(tok, "a column, a number, a 'string', true/false or '('")


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def sql_literal(value: object, *, null: str = "NULL::VARCHAR") -> str:
    """A Python value as a DuckDB literal (the one definition): NULL, TRUE/FALSE, a number or a quoted string.
    ``null`` is how None is written (typed VARCHAR by default, so a column of NULLs keeps a string type)."""
    if value is None:
        return null
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return quote_string(str(value))


@dataclass(frozen=True)
class SqlDialect:
    """How one SQL engine writes the few things the claim and evidence SQL need beyond portable SQL:
    identifiers, string and double literals, the text type and the NaN / infinity tests. The claim tree and
    the fiber rules decide everything else, so DuckDB and Spark evaluate the same expressions."""

    name: str
    identifier: Callable[[str], str]
    string: Callable[[str], str]
    text_type: str = "VARCHAR"
    nan: str = "'NaN'::DOUBLE"                  # a NaN double
    null_double: str = "NULL::DOUBLE"           # a NULL double
    double: Callable[[float], str] = repr       # a finite double literal (cut points, widths)
    is_finite: Callable[[str], str] = "isfinite({})".format   # NULL for NULL, as DuckDB's isfinite
    is_inf: Callable[[str], str] = "isinf({})".format
    try_double: Callable[[str], str] = "TRY_CAST({} AS DOUBLE)".format


DUCKDB = SqlDialect("duckdb", quote_identifier, quote_string)


def spark_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_string(text: str) -> str:
    """Spark SQL escapes quotes in string literals with a backslash."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_SPARK_INF = "CAST('Infinity' AS DOUBLE)"
# Spark SQL has isnan but no isfinite / isinf; abs() against infinity gives the same three-valued result.
SPARK = SqlDialect(
    "spark", spark_identifier, spark_string, text_type="STRING", nan="CAST('NaN' AS DOUBLE)",
    null_double="CAST(NULL AS DOUBLE)", double=lambda v: f"{v!r}D",  # 0.5 alone is a DECIMAL literal in Spark
    is_finite=lambda x: f"(NOT isnan({x}) AND abs({x}) != {_SPARK_INF})",
    is_inf=lambda x: f"(abs({x}) = {_SPARK_INF})", try_double="try_cast({} AS DOUBLE)".format)


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
        return "(" + f" {k.upper()} ".join(render(c, dialect) for c in node.children) + ")"
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


# What a DuckDB column type is to the claim grammar: float (may hold NaN), int, bool, text or other.
_FLOAT_TYPES = ("FLOAT", "DOUBLE", "REAL", "FLOAT4", "FLOAT8")
# Exact names: a prefix test would take INTERVAL for INT and BIGINT[] (a list) for BIGINT.
_INT_TYPES = frozenset(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                        "UBIGINT", "UHUGEINT", "DECIMAL", "INT", "INT1", "INT2", "INT4", "INT8"))
_DECIMAL = re.compile(r"^DECIMAL\(\d+, ?\d+\)$")


def value_kind(duckdb_type: str) -> str:
    """``float`` | ``int`` | ``bool`` | ``text`` | ``other`` for a DuckDB type name."""
    t = str(duckdb_type).upper()
    if t in _FLOAT_TYPES:
        return "float"
    if t in _INT_TYPES or _DECIMAL.match(t):
        return "int"
    if t == "BOOLEAN":
        return "bool"
    if t == "VARCHAR" or t.startswith("VARCHAR(") or t.startswith("ENUM("):
        return "text"
    return "other"


_ENUM_VALUE = re.compile(r"'((?:[^']|'')*)'")


def _categories(duckdb_type: str) -> list[str] | None:
    """The categories of an ENUM type, in order (``ENUM('low', 'mid', 'high')``); None for any other type."""
    if not str(duckdb_type).upper().startswith("ENUM("):
        return None
    return [v.replace("''", "'") for v in _ENUM_VALUE.findall(str(duckdb_type))]


def _in_category_order(node: Node, sides: list[tuple[str, str]], types: Mapping[str, str], text: str,
                       d: SqlDialect) -> tuple[str, str]:
    """The operands of an order comparison (< <= > >=) that reads a column of ordered categories (an ENUM:
    an ordered pandas Categorical or a polars Enum): compared in the categories' order, not alphabetically.
    DuckDB compares an ENUM with a text literal as text, so the literal becomes a value of the column's
    ENUM; it must be one of the categories. Two such columns must share their categories."""
    (a, _), (b, _) = sides
    enums = [types.get(c.value) if c.kind == "column" and _categories(types.get(c.value, "")) is not None
             else None for c in node.children]
    if enums == [None, None]:
        return a, b
    if d is not DUCKDB:
        raise ClaimError(f"claim {text!r} compares ordered categories by order, which only the DuckDB engine does "
                         "in category order: compare their codes (.cat.codes in pandas, .to_physical() in polars)")
    out = [a, b]
    for i, (child, other) in enumerate(((node.children[0], node.children[1]), (node.children[1], node.children[0]))):
        enum = enums[1 - i]
        if enum is None or enums[i] is not None:
            continue
        categories = _categories(enum) or []
        if child.kind != "string":
            raise ClaimError(f"claim {text!r} compares {other.value!r}, ordered categories ({', '.join(categories)}), "
                             f"by order with {_describe(child, 'other')}: compare it with one of its categories")
        if child.value not in categories:
            raise ClaimError(f"claim {text!r}: {child.value!r} is not one of the categories of {other.value!r} "
                             f"({', '.join(categories)}), so it has no place in their order")
        out[i] = f"CAST({d.string(child.value)} AS {enum})"
    if enums[0] is not None and enums[1] is not None and enums[0] != enums[1]:
        raise ClaimError(f"claim {text!r} compares ordered categories of {node.children[0].value!r} and "
                         f"{node.children[1].value!r}, which differ: there is no one order to compare them in")
    return out[0], out[1]


_NUMERIC = {"float", "int", "number"}
_WORDS = {"float": "a number", "int": "a number", "number": "a number", "bool": "true/false", "text": "text",
          "string": "a 'string'", "other": "a value"}


def _describe(node: Node, kind: str) -> str:
    if node.kind == "column":
        return f"column {node.value!r} ({_WORDS[kind]})"
    if node.kind in {"number", "string", "bool"}:
        return f"the literal {node.value!r}" if node.kind != "string" else f"the string '{node.value}'"
    return _WORDS[kind]


def _comparable(a: str, b: str) -> bool:
    """Text never compares with a number or true/false (DuckDB would fail on the first row that is not a
    number, or compare strings); booleans compare with 0/1 (labels are stored either way); anything else
    (dates, all-empty columns) is left to DuckDB."""
    textual, numeric = {"text", "string"}, _NUMERIC | {"bool"}
    return not (a in textual and b in numeric or a in numeric and b in textual)


def claim_sql(claim: Claim, types: Mapping[str, str], dialect: SqlDialect = DUCKDB) -> str:
    """NaN- and division-safe SQL for ``claim`` over columns of the given DuckDB ``types``, written for
    ``dialect`` (DuckDB, or Spark over the same data).

    The claim is *undefined* (SQL NULL) — never TRUE — where it divides by zero or a number it reads or
    computes is NaN (DuckDB orders NaN above every number, so ``NaN > 0.5`` would be TRUE). Operands of
    the wrong kind (text compared with a number, arithmetic on text, ``and`` over a number) are a
    ClaimError naming the column, before anything reaches DuckDB.

    It is also NULL where a column it reads is empty, even when the rest would decide it (``p = 1 or
    q = 1`` with ``q`` empty): such a candidate is ``claim_missing``, and every pass that reads the claim's
    value — fiber counts, quantile cut points, the candidates table, the replays — leaves out the same rows.
    """
    sql, kind = _typed(claim.tree, types, claim.text, dialect)
    if kind != "bool":
        raise ClaimError(f"claim {claim.text!r} is {_WORDS[kind]}, not true/false: compare it, e.g. "
                         f"'{claim.text} = 1'")
    if not _null_propagating(claim.tree):
        # and/or can decide past a NULL operand (TRUE OR NULL): NULL wherever a column is empty, and
        # wherever an operand is undefined (NaN, division by zero), as a lone comparison would be
        empty = [f"{dialect.identifier(c)} IS NULL" for c in claim.columns]
        undefined = [f"({leaf}) IS NULL" for leaf in _operands(claim.tree, types, claim.text, dialect)]
        return f"CASE WHEN {' OR '.join(empty + undefined)} THEN NULL ELSE {sql} END"
    return sql


def _operands(node: Node, types: Mapping[str, str], text: str, d: SqlDialect) -> list[str]:
    """The SQL of the operands that and / or / not combine (comparisons, boolean columns and literals), each
    NULL exactly where it is empty or undefined."""
    if node.kind in {"and", "or", "not"}:
        return [sql for child in node.children for sql in _operands(child, types, text, d)]
    return [_typed(node, types, text, d)[0]] if node.kind != "bool" else []


def _null_propagating(node: Node) -> bool:
    """True when the expression is NULL wherever a column it reads is NULL: comparisons, arithmetic and
    ``not`` all propagate NULL (``"SR-p53" = 1``, ``gap + 0.1 > e_hull``); ``and`` / ``or`` can decide
    without the NULL operand (``false and NULL`` is false)."""
    return node.kind not in {"and", "or"} and all(_null_propagating(c) for c in node.children)


def _typed(node: Node, types: Mapping[str, str], text: str, d: SqlDialect = DUCKDB) -> tuple[str, str]:
    k = node.kind
    if k == "column":
        kind = value_kind(types[node.value]) if node.value in types else "other"
        col = d.identifier(node.value)
        return (f"nullif({col}, {d.nan})" if kind == "float" else col), kind
    if k == "number":
        return node.value, "number"
    if k == "string":
        return d.string(node.value), "string"
    if k == "bool":
        return node.value.upper(), "bool"
    parts = [_typed(c, types, text, d) for c in node.children]
    if k == "unary":
        (sql, kind), = parts
        if kind not in _NUMERIC:
            raise ClaimError(f"claim {text!r}: minus applied to {_describe(node.children[0], kind)}")
        return f"(-{_widened(sql, node.children[0], types)})", kind
    if k == "binary":
        (a, ka), (b, kb) = parts
        for child, kind in zip(node.children, (ka, kb), strict=True):
            if kind not in _NUMERIC:
                raise ClaimError(f"claim {text!r}: arithmetic ({node.value}) on {_describe(child, kind)}")
        a, b = _widened(a, node.children[0], types), _widened(b, node.children[1], types)
        if node.value == "/":  # division by zero is undefined, not ±inf
            return f"nullif(({a} / nullif({b}, 0)), {d.nan})", "float"
        kind = "float" if "float" in (ka, kb) else "number"
        # inf - inf and 0 * inf are NaN: undefined as well
        return (f"nullif(({a} {node.value} {b}), {d.nan})" if kind == "float" else f"({a} {node.value} {b})"), kind
    if k == "compare":
        (a, ka), (b, kb) = parts
        if not _comparable(ka, kb):
            raise ClaimError(f"claim {text!r} compares {_describe(node.children[0], ka)} with "
                             f"{_describe(node.children[1], kb)}")
        # true/false against a number compares as 1/0 (DuckDB binds BOOLEAN > 0.5 to no comparison)
        if ka == "bool" and kb in _NUMERIC:
            a = f"CAST({a} AS INTEGER)"
        elif kb == "bool" and ka in _NUMERIC:
            b = f"CAST({b} AS INTEGER)"
        elif node.value in {"<", "<=", ">", ">="}:
            a, b = _in_category_order(node, parts, types, text, d)
        return f"({a} {node.value} {b})", "bool"
    if k in {"and", "or", "not"}:
        for child, (_, kind) in zip(node.children, parts, strict=True):
            if kind != "bool":
                raise ClaimError(f"claim {text!r}: {k} needs true/false operands, not {_describe(child, kind)}; "
                                 f"compare it, e.g. '{child.value or '…'} = 1'")
        if k == "not":
            return f"(NOT {parts[0][0]})", "bool"
        return "(" + f" {k.upper()} ".join(sql for sql, _ in parts) + ")", "bool"
    raise AssertionError(k)  # pragma: no cover


# DuckDB does arithmetic on narrow integers in their own width: two int8 columns overflow at 127, where the
# same values in int64 columns do not. Operands of arithmetic are widened, so a claim reads the same values
# alike whatever integer type holds them.
_NARROW_INTS = frozenset(("TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT", "UINTEGER", "INT", "INT1",
                          "INT2", "INT4"))


def _widened(sql: str, node: Node, types: Mapping[str, str]) -> str:
    if node.kind == "column" and str(types.get(node.value, "")).upper() in _NARROW_INTS:
        return f"CAST({sql} AS BIGINT)"
    return sql


def parse_claim(text: str, available: Iterable[str] | None = None) -> Claim:
    """Parse ``text``; with ``available`` columns, every column the claim names must be among them."""
    if not isinstance(text, str):
        raise ClaimError(f"claim = {text!r}: a claim is text, a boolean expression such as '\"SR-p53\" = 1'")
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
        close = [a for a in avail if a.lower() == col.lower()] or difflib.get_close_matches(col, avail, n=3)
        # A bare SR-p53 tokenizes as SR minus p53: point at the quoted name.
        quoted = [a for a in avail if col in re.split(r"[^A-Za-z0-9_]", a) and a != col]
        near = [repr(c) for c in close] + [f'"{q}" (quote names with commas, - or spaces)' for q in quoted[:2]]
        hints.append(f"{col!r}" + (f" (did you mean {', '.join(near)}?)" if near else ""))
    raise ClaimError(
        f"{what} names unknown column(s) {', '.join(hints)}; available columns: {', '.join(avail)}"
    )
