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
