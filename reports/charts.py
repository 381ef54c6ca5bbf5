"""Charts of the report, drawn by matplotlib's SVG backend and inlined into the HTML.

Why matplotlib: it is already installed with the materials stack (pymatgen needs it), renders SVG
offline with no browser or JavaScript runtime, and its SVG output is deterministic once the date is
dropped and the id salt fixed (a re-rendered report is byte-identical). Text stays text
(``svg.fonttype = none``), so a chart costs 10–40 KB rather than the glyph outlines' 100 KB. A chart is
drawn once and cropped by its viewBox, and matplotlib is imported without pyplot: the report is the
default output of every audit, so its time counts (docs/performance.md, *The report*).

Every chart is a ``<figure class="chart" data-chart=KIND>`` holding one ``<svg>``. The SVG's ids are
prefixed per chart (several charts share one HTML document), and the marks tests look for carry ids
with a fixed part: ``…-series-i`` (a curve), ``…-band-i`` (its p10–p90 band), ``…-bar-i-j`` (a bar
segment), ``…-whisker-i`` (an interval), ``…-dot-i`` (its centre).
"""

from __future__ import annotations

import hashlib
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
STATUS_COLOURS = {"certified_true": "#009E73", "certified_false": "#0072B2", "ambiguous": "#E69F00",
                  "unsupported": "#999999", "certified": "#009E73", "claim true": "#D55E00",
                  "claim false": "#E69F00"}
RC = {"svg.fonttype": "none", "svg.hashsalt": "dcaudit", "font.size": 8, "font.family": "sans-serif",
      "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e6e6e6",
      "grid.linewidth": 0.6, "axes.axisbelow": True, "legend.frameon": False, "path.simplify": True,
      "svg.image_inline": True,
      # labels are the user's text (evidence values, model names): a '$' is a dollar, never mathtext
      "text.parse_math": False}


@dataclass(frozen=True)
class Series:
    label: str
    x: tuple[float, ...]
    y: tuple[float | None, ...]
    lo: tuple[float | None, ...] | None = None   # band, e.g. p10 over seeds
    hi: tuple[float | None, ...] | None = None


@dataclass(frozen=True)
class StackedBar:
    label: str
    segments: tuple[tuple[str, float], ...]   # (segment name, value); values of one bar sum to <= 1
    note: str = ""


@dataclass(frozen=True)
class Interval:
    label: str
    value: float | None
    lo: float | None = None
    hi: float | None = None


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def _import_figure() -> type:
    """``matplotlib.figure.Figure``, imported without pyplot (no global state, safe in threads).

    The first import of matplotlib's artists costs ~0.6 s here, and ~0.2 s of it is spent writing the
    property tables of every artist class's ``set()`` docstring (``matplotlib.artist.kwdoc``, run once a
    class). A report never reads those, so while this process imports the artists the tables are left
    empty; the docstrings of the setters themselves, and everything that draws, are untouched. When the
    figure module is already imported (a notebook, a second report) this changes nothing."""
    import sys

    if "matplotlib.figure" not in sys.modules:
        import matplotlib.artist

        kwdoc = getattr(matplotlib.artist, "kwdoc", None)
        setattr(matplotlib.artist, "kwdoc", lambda artist: "")  # noqa: B010 - a module function, restored below
        try:
            import matplotlib.figure
        finally:
            if kwdoc is not None:
                setattr(matplotlib.artist, "kwdoc", kwdoc)  # noqa: B010
    from matplotlib.figure import Figure

    return Figure


def _figure(width: float, height: float):  # noqa: ANN202 - matplotlib.figure.Figure
    return _import_figure()(figsize=(width, height), dpi=72)


def _percent(ax, axis: str = "y") -> None:  # noqa: ANN001
    from matplotlib.ticker import PercentFormatter

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(1.0, decimals=None))


def _log_x(ax) -> None:  # noqa: ANN001
    """A log x axis labelled 1, 10, 100 and without minor ticks: matplotlib's default 10^k labels go through
    mathtext, whose parser costs ~0.35 s the first time a process draws one, and the unlabelled minor ticks
    (2–9 of every decade, each a tick object of five artists) cost ~0.08 s a chart."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def _render(fig, kind: str, title: str) -> str:  # noqa: ANN001
    """The figure drawn once by matplotlib's SVG renderer, then cropped to its tight box by the viewBox.

    ``savefig(bbox_inches="tight")`` draws a figure twice (once to measure it) and measures every text
    again for the second draw; measuring after the one draw, with the renderer that drew, reuses its
    text extents."""
    import matplotlib
    from matplotlib.backends.backend_svg import RendererSVG

    with matplotlib.rc_context(RC):
        width, height = (72 * v for v in fig.get_size_inches())
        fig.dpi = 72
        buf = io.StringIO()
        renderer = RendererSVG(width, height, buf, image_dpi=72, metadata={"Date": None})
        fig.draw(renderer)
        renderer.finalize()
        box = fig.get_tightbbox(renderer).padded(0.05)
    x0, y0, w, h = (f"{72 * v:.2f}".rstrip("0").rstrip(".") for v in (box.x0, height / 72 - box.y1, box.width,
                                                                          box.height))
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r'width="[^"]*" height="[^"]*" viewBox="[^"]*"',
                  f'width="{w}pt" height="{h}pt" viewBox="{x0} {y0} {w} {h}"', text, count=1)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    # ids unique per chart (several share one document) and stable across re-renders
    prefix = "c" + hashlib.sha1(text.encode()).hexdigest()[:8] + "-"
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", text)
    text = re.sub(r'xlink:href="#([^"]+)"', lambda m: f'xlink:href="#{prefix}{m.group(1)}"', text)
    text = text.replace("<svg ", f'<svg role="img" aria-label="{escape(title)}" ', 1)
    return f'<figure class="chart" data-chart="{escape(kind)}">{text}</figure>'


def _styled(draw):  # noqa: ANN001, ANN202
    """Run a chart builder under the report's rcParams (fonts, grid, spines)."""
    import functools

    @functools.wraps(draw)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        import matplotlib

        with matplotlib.rc_context(RC):
            return draw(*args, **kwargs)
    return wrapper


def _no_data(kind: str, title: str) -> str:
    return f'<figure class="chart empty" data-chart="{escape(kind)}"><figcaption>{escape(title)}: no data' \
           "</figcaption></figure>"


def _short(label: str, n: int = 42) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


@_styled
def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str, percent: bool = True,
               kind: str = "lines", log_x: bool = False, width: float = 6.4, height: float = 3.0) -> str:
    """One line per series (markers at the points) with an optional shaded band between lo and hi."""
    if not any(_finite(y) for s in series for y in s.y):
        return _no_data(kind, title)
    fig = _figure(width, height)
    ax = fig.add_subplot()
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        pts = [(x, y) for x, y in zip(s.x, s.y, strict=True) if _finite(x) and _finite(y)]
        if s.lo is not None and s.hi is not None:
            band = [(x, lo, hi) for x, lo, hi in zip(s.x, s.lo, s.hi, strict=True)
                    if _finite(x) and _finite(lo) and _finite(hi)]
            if band:
                ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band], color=colour,
                                alpha=0.15, linewidth=0, gid=f"band-{i}")
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour, linewidth=1.6, marker="o",
                    markersize=2.5, label=_short(s.label, 28), gid=f"series-{i}")
    if log_x:
        _log_x(ax)
    if percent:
        _percent(ax)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title, loc="left", fontsize=9, fontweight="bold", y=1.0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return _render(fig, kind, title)


@_styled
def stacked_bars(bars: Sequence[StackedBar], *, title: str, colours: dict[str, str] | None = None,
                 kind: str = "bars", percent: bool = True, width: float = 6.4) -> str:
    """One horizontal bar per row, split into named segments (shares of 1 when ``percent``)."""
    if not bars:
        return _no_data(kind, title)
    colours = {**STATUS_COLOURS, **(colours or {})}
    fig = _figure(width, 0.7 + 0.2 * len(bars))
    ax = fig.add_subplot()
    names: list[str] = []
    lefts: dict[str, list[float]] = {}
    widths: dict[str, list[float]] = {}
    rows: dict[str, list[int]] = {}
    ends = []
    for i, bar in enumerate(bars):
        left = 0.0
        for name, value in bar.segments:
            if name not in names:
                names.append(name)
            value = float(value or 0.0)
            if value <= 0:
                continue
            lefts.setdefault(name, []).append(left)
            widths.setdefault(name, []).append(value)
            rows.setdefault(name, []).append(i)
            left += value
        ends.append(left)
    for k, name in enumerate(names):   # one barh call per segment name: fast for many bars
        if name not in rows:
            continue
        patches = ax.barh(rows[name], widths[name], left=lefts[name], height=0.75,
                          color=colours.get(name, PALETTE[k % len(PALETTE)]))
        for i, patch in zip(rows[name], patches, strict=True):
            patch.set_gid(f"bar-{i}-{k}")
    for i, bar in enumerate(bars):
        if bar.note:
            ax.text(ends[i], i, f" {bar.note}", va="center", fontsize=7, color="#333")
    from matplotlib.patches import Patch

    handles = [Patch(color=colours.get(n, PALETTE[k % len(PALETTE)]), label=n) for k, n in enumerate(names)]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=min(4, len(names)), fontsize=7)
    ax.set_yticks(range(len(bars)), [_short(b.label) for b in bars], fontsize=7)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    if percent:
        ax.set_xlim(0, 1)
        _percent(ax, "x")
    ax.set_title(title, loc="left", fontsize=9, fontweight="bold", y=1.0, pad=18)
    return _render(fig, kind, title)


@_styled
def interval_chart(rows: Sequence[Interval], *, title: str, x_label: str, percent: bool = True,
                   kind: str = "intervals", width: float = 6.4) -> str:
    """A dot per row (the mean) with a whisker from ``lo`` to ``hi`` (e.g. p10–p90 over seeds)."""
    rows = [r for r in rows if _finite(r.value) or (_finite(r.lo) and _finite(r.hi))]
    if not rows:
        return _no_data(kind, title)
    fig = _figure(width, 0.6 + 0.22 * len(rows))
    ax = fig.add_subplot()
    for i, r in enumerate(rows):
        colour = PALETTE[i % len(PALETTE)]
        if _finite(r.lo) and _finite(r.hi):
            ax.plot([r.lo, r.hi], [i, i], color=colour, linewidth=2, solid_capstyle="butt", gid=f"whisker-{i}")
        if _finite(r.value):
            ax.plot([r.value], [i], marker="o", markersize=5, color=colour, gid=f"dot-{i}")
    ax.set_yticks(range(len(rows)), [_short(r.label) for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    if percent:
        _percent(ax, "x")
    ax.set_xlabel(x_label)
    ax.set_title(title, loc="left", fontsize=9, fontweight="bold", y=1.0)
    return _render(fig, kind, title)


@_styled
def fiber_sizes(sizes: dict[str, Sequence[int]], *, title: str, kind: str = "fiber-sizes",
                width: float = 6.4, height: float = 2.6) -> str:
    """Histogram of fiber sizes (log-spaced bins), stacked by status."""
    import numpy as np

    sizes = {k: v for k, v in sizes.items() if len(v)}
    if not sizes:
        return _no_data(kind, title)
    top = max(max(v) for v in sizes.values())
    # log-spaced integer edges up to top + 1: the last bin, where the largest fiber falls, is as wide as
    # its neighbours on the log axis (an edge at top and one at top + 1 drew it as a sliver)
    edges = np.unique(np.round(np.logspace(0, math.log10(top + 1), 25)).astype(int))
    fig = _figure(width, height)
    ax = fig.add_subplot()
    base = np.zeros(len(edges) - 1)
    for i, name in enumerate(sizes):   # one filled step outline per status, stacked: 3 artists, not 3 x 24 bars
        counts = np.histogram(np.asarray(sizes[name]), bins=edges)[0]
        ax.stairs(base + counts, edges, baseline=base.copy(), fill=True, label=name,
                  color=STATUS_COLOURS.get(name, PALETTE[i % len(PALETTE)]))
        base = base + counts
    ax.set_ylim(0, max(1.0, float(base.max())) * 1.05)
    _log_x(ax)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("fiber size (candidates)")
    ax.set_ylabel("fibers")
    ax.legend(loc="upper right", fontsize=7)
    ax.set_title(title, loc="left", fontsize=9, fontweight="bold", y=1.0)
    return _render(fig, kind, title)
