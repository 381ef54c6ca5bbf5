"""Hand-rolled inline SVG charts for the HTML report: no plotting dependency, no external URLs.

Three chart shapes cover the evidence package: lines with an optional p10–p90 band (completion
curves), stacked horizontal bars (certified / ambiguous / unsupported shares), and dots with
whiskers (replay false-decision rates over seeds). Every mark carries a class (``series``, ``band``,
``bar``, ``dot``) so tests can check that the figures are drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
STATUS_COLOURS = {"certified_true": "#009E73", "certified_false": "#0072B2", "ambiguous": "#E69F00",
                  "unsupported": "#999999"}
FONT = "font-family:system-ui,sans-serif;font-size:11px"
LABEL_W = 250   # room for row labels of about 38 characters at 11 px


def _short(label: str, n: int = 38) -> str:
    """Row labels fit the label column; the full label is in the mark's tooltip."""
    return label if len(label) <= n else label[: n - 1] + "…"


@dataclass(frozen=True)
class Series:
    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    lo: tuple[float, ...] | None = None   # band, e.g. p10 over seeds
    hi: tuple[float, ...] | None = None


@dataclass(frozen=True)
class StackedBar:
    label: str
    segments: tuple[tuple[str, float], ...]   # (segment name, value); values of one bar sum to <= 1
    note: str = ""                            # printed after the bar (e.g. its count)


@dataclass(frozen=True)
class Interval:
    label: str
    value: float
    lo: float | None = None
    hi: float | None = None


@dataclass(frozen=True)
class Scale:
    """Linear map from data [lo, hi] to pixels [p0, p1]."""

    lo: float
    hi: float
    p0: float
    p1: float

    def __call__(self, v: float) -> float:
        span = self.hi - self.lo or 1.0
        return self.p0 + (v - self.lo) / span * (self.p1 - self.p0)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi] (steps of 1, 2 or 5 × 10^k)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi - lo <= 1e-9 * max(1.0, abs(lo), abs(hi)):  # one value (or float noise): give it a unit range
        hi = lo + max(1.0, abs(lo))
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step + 1e-9) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


def fmt(v: float, percent: bool) -> str:
    if percent:
        p = 100 * v
        return f"{p:.0f}%" if abs(p - round(p)) < 1e-9 else f"{p:.3g}%"
    return f"{v:.4g}"


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" style="{FONT}">'
            f"<title>{escape(title)}</title>" + "".join(body) + "</svg>")


def _axis_y(scale: Scale, ticks: list[float], x0: float, x1: float, percent: bool) -> list[str]:
    out = []
    for t in ticks:
        y = scale(t)
        out.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{x0 - 4:.1f}" y="{y + 4:.1f}" text-anchor="end" fill="#444">{fmt(t, percent)}</text>')
    return out


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str, percent: bool = True,
               width: int = 620, height: int = 300) -> str:
    """Lines (one per series) with an optional shaded band between ``lo`` and ``hi``."""
    left, right, top, bottom = 56, 150, 24, 40
    xs = _finite([v for s in series for v in s.x])
    ys = _finite([v for s in series for v in (*s.y, *(s.lo or ()), *(s.hi or ()))])
    if not xs or not ys:
        return _svg(width, 40, title, [f'<text x="8" y="24">{escape(title)}: no data</text>'])
    y_ticks = nice_ticks(min(0.0, min(ys)), max(ys))
    x_ticks = nice_ticks(min(xs), max(xs), n=min(8, max(1, len(set(xs)) - 1)))
    sx = Scale(x_ticks[0], x_ticks[-1], left, width - right)
    sy = Scale(y_ticks[0], y_ticks[-1], height - bottom, top)
    body = [f'<text x="{left}" y="14" font-weight="600">{escape(title)}</text>']
    body += _axis_y(sy, y_ticks, left, width - right, percent)
    for t in x_ticks:
        x = sx(t)
        body.append(f'<text x="{x:.1f}" y="{height - bottom + 14}" text-anchor="middle" fill="#444">{t:g}</text>')
    body.append(f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6}" text-anchor="middle">'
                f"{escape(x_label)}</text>")
    body.append(f'<text transform="translate(12,{(top + height - bottom) / 2:.1f}) rotate(-90)" '
                f'text-anchor="middle">{escape(y_label)}</text>')
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        pts = [(x, y) for x, y in zip(s.x, s.y, strict=True) if y is not None and math.isfinite(y)]
        if s.lo is not None and s.hi is not None:
            band = [(x, lo, hi) for x, lo, hi in zip(s.x, s.lo, s.hi, strict=True)
                    if lo is not None and hi is not None]
            if band:
                upper = " L".join(f"{sx(x):.1f},{sy(hi):.1f}" for x, _, hi in band)
                lower = " L".join(f"{sx(x):.1f},{sy(lo):.1f}" for x, lo, _ in reversed(band))
                body.append(f'<path class="band" d="M{upper} L{lower} Z" fill="{colour}" fill-opacity="0.15" '
                            'stroke="none"/>')
        if pts:
            d = "M" + " L".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            body.append(f'<path class="series" d="{d}" fill="none" stroke="{colour}" stroke-width="2">'
                        f"<title>{escape(s.label)}</title></path>")
            body += [f'<circle class="dot" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}">'
                     f"<title>{escape(s.label)}: {fmt(y, percent)} at {x:g}</title></circle>" for x, y in pts]
        ly = top + 14 * i + 6
        body.append(f'<rect x="{width - right + 10}" y="{ly - 5}" width="12" height="3" fill="{colour}"/>'
                    f'<text x="{width - right + 26}" y="{ly}">{escape(s.label[:22])}</text>')
    return _svg(width, height, title, body)


def stacked_bars(bars: Sequence[StackedBar], *, title: str, colours: dict[str, str] | None = None,
                 width: int = 620, bar_height: int = 16) -> str:
    """One horizontal bar per row, split into named shares of 100 %."""
    colours = colours or STATUS_COLOURS
    label_w, top, legend_h = LABEL_W, 24, 22
    height = top + len(bars) * (bar_height + 4) + legend_h + 18
    scale = Scale(0.0, 1.0, label_w, width - 10)
    body = [f'<text x="4" y="14" font-weight="600">{escape(title)}</text>']
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = scale(t)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 2}" y2="{height - legend_h - 14}" stroke="#eee"/>'
                    f'<text x="{x:.1f}" y="{height - legend_h - 2}" text-anchor="middle" fill="#444">'
                    f"{fmt(t, True)}</text>")
    names: list[str] = []
    for i, bar in enumerate(bars):
        y = top + i * (bar_height + 4)
        body.append(f'<text x="{label_w - 6}" y="{y + bar_height - 4}" text-anchor="end">{escape(_short(bar.label))}'
                    "</text>")
        x = scale(0.0)
        for name, value in bar.segments:
            if name not in names:
                names.append(name)
            w = max(0.0, (value or 0.0)) * (scale.p1 - scale.p0)
            if w <= 0:
                continue
            colour = colours.get(name, PALETTE[names.index(name) % len(PALETTE)])
            body.append(f'<rect class="bar" x="{x:.1f}" y="{y}" width="{w:.2f}" height="{bar_height}" '
                        f'fill="{colour}"><title>{escape(bar.label)} — {escape(name)}: {fmt(value, True)}'
                        "</title></rect>")
            x += w
        if bar.note:
            body.append(f'<text x="{min(x + 4, width - 60):.1f}" y="{y + bar_height - 4}" fill="#333">'
                        f"{escape(bar.note)}</text>")
    lx = 4  # the legend starts under the labels so four status names fit the width
    for j, name in enumerate(names):
        colour = colours.get(name, PALETTE[j % len(PALETTE)])
        body.append(f'<rect x="{lx}" y="{height - 14}" width="10" height="10" fill="{colour}"/>'
                    f'<text x="{lx + 14}" y="{height - 5}">{escape(name)}</text>')
        lx += 24 + 7 * len(name)
    return _svg(width, height, title, body)


def interval_chart(rows: Sequence[Interval], *, title: str, x_label: str, percent: bool = True,
                   width: int = 620, row_height: int = 20) -> str:
    """A dot per row (the mean) with a whisker from ``lo`` to ``hi`` (e.g. p10–p90 over seeds)."""
    label_w, top, bottom = LABEL_W, 24, 36
    values = _finite([v for r in rows for v in (r.value, r.lo, r.hi)])
    if not values:
        return _svg(width, 40, title, [f'<text x="8" y="24">{escape(title)}: no data</text>'])
    height = top + len(rows) * row_height + bottom
    ticks = nice_ticks(min(0.0, min(values)), max(values))
    scale = Scale(ticks[0], ticks[-1], label_w, width - 16)
    body = [f'<text x="4" y="14" font-weight="600">{escape(title)}</text>']
    for t in ticks:
        x = scale(t)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 2}" y2="{height - bottom + 2}" stroke="#eee"/>'
                    f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle" fill="#444">'
                    f"{fmt(t, percent)}</text>")
    body.append(f'<text x="{(label_w + width) / 2:.1f}" y="{height - 4}" text-anchor="middle">'
                f"{escape(x_label)}</text>")
    for i, r in enumerate(rows):
        y = top + i * row_height + row_height / 2
        colour = PALETTE[i % len(PALETTE)]
        body.append(f'<text x="{label_w - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(_short(r.label))}</text>')
        if r.lo is not None and r.hi is not None and math.isfinite(r.lo) and math.isfinite(r.hi):
            body.append(f'<line class="whisker" x1="{scale(r.lo):.1f}" x2="{scale(r.hi):.1f}" y1="{y:.1f}" '
                        f'y2="{y:.1f}" stroke="{colour}" stroke-width="2"/>')
        if r.value is not None and math.isfinite(r.value):
            tip = f"{r.label}: {fmt(r.value, percent)}"
            if r.lo is not None and r.hi is not None:
                tip += f" [{fmt(r.lo, percent)}, {fmt(r.hi, percent)}]"
            body.append(f'<circle class="dot" cx="{scale(r.value):.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
                        f"<title>{escape(tip)}</title></circle>")
    return _svg(width, height, title, body)
