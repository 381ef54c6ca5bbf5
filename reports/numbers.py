"""How the views (console, report, comparison, the notebook summary) print numbers: one definition."""

from __future__ import annotations


def percent_number(fraction: float, *, digits: int = 3, decimals: int | None = None) -> str:
    """``100 * fraction`` as text, with ``digits`` significant digits (or ``decimals`` fixed ones), never
    rounded to 0 or 100 when the fraction is neither: 0.9999 reads 99.99, not 100, and 0.00004 with two
    decimals 0.004, not 0.00 — a share that is not all or nothing never reads as such."""
    value = 100 * float(fraction)
    text = f"{value:.{decimals}f}" if decimals is not None else f"{value:.{digits}g}"
    if 0 < fraction < 1 and float(text) in (0.0, 100.0):
        for more in range(1 if decimals is not None else digits + 1, 18):   # 17 digits tell every double
            text = f"{value:.{more}g}"
            if float(text) not in (0.0, 100.0):
                break
    return text


def number(value: float) -> str:
    """A float as text in 4 significant digits; a whole number as an integer (20000, not 2e+04)."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 row``, ``0 rows``, ``2 fibers``: a count and its noun, singular only for one."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def shown_of(shown: int, total: int, noun: str = "row", *, order: str = "first", plural: str | None = None) -> str:
    """What a view shows of ``total`` things, exactly: ``all 1 row``, ``all 3 rows``, ``first 20 of 4391
    rows`` (``order``: ``first``, ``largest``, …), ``none of the 3 rows``, ``no rows``. ``shown`` above
    ``total`` (a caller's miscount) reads as all of them, never as more than there are."""
    shown = max(0, min(shown, total))
    if total <= 0:
        return f"no {plural or noun + 's'}"
    if shown == total:
        return f"all {count(total, noun, plural)}"
    if shown == 0:
        return f"none of the {count(total, noun, plural)}"
    return f"{order} {shown} of {count(total, noun, plural)}"
