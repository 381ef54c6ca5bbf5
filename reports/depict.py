"""Small pictures of candidates for the fiber explorer: RDKit 2-D depictions of molecules (SVG) and
greyscale thumbnails of images (a hex string of pixels the page draws on a canvas).

RDKit is the optional ``chem`` extra: it is imported inside :func:`depict_smiles`; without it (or for a
SMILES RDKit cannot parse) a member simply has no depiction.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from dcaudit.worker import ScriptWorker, answer, has_spare_core, script_items

DEPICTION_SIZE = (120, 90)


def rdkit_available() -> bool:
    try:
        import rdkit.Chem  # noqa: F401
    except ImportError:
        return False
    return True


def depict_smiles(smiles: str | None, size: tuple[int, int] = DEPICTION_SIZE) -> str | None:
    """A compact SVG of the molecule (RDKit's drawing, paths merged per colour), or None."""
    if not smiles:
        return None
    try:
        from rdkit import Chem, RDLogger
        from rdkit.Chem.Draw import rdMolDraw2D
    except ImportError:
        return None
    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles)
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    drawer = rdMolDraw2D.MolDraw2DSVG(*size)
    opts = drawer.drawOptions()
    opts.clearBackground = False
    opts.bondLineWidth = 1
    opts.padding = 0.05
    try:
        rdMolDraw2D.PrepareAndDrawMolecule(drawer, mol)
    except Exception:  # RDKit raises RuntimeError/ValueError on some valences it parsed leniently
        return None
    drawer.FinishDrawing()
    return compact_svg(drawer.GetDrawingText())


_PATH = re.compile(r"<path\b([^>]*?)/>")
_ATTR = re.compile(r"""([\w:-]+)=(?:'([^']*)'|"([^"]*)")""")
_LONG_DECIMALS = re.compile(r"\.\d\d+")   # a literal first: the scan for it is fast
_VIEWBOX = re.compile(r"viewBox='([^']*)'")
_COMMANDS = "MLQCZ"


def _style(text: str, cache: dict[str, dict[str, str]] = {}) -> dict[str, str]:  # noqa: B006 - a cache
    """An inline ``style`` as a dict; RDKit repeats a handful of styles on every path."""
    if text not in cache:
        cache[text] = dict(kv.split(":", 1) for kv in text.split(";") if ":" in kv)
    return cache[text]


def _clean_path(d: str) -> str:
    """Path data with blanks collapsed, none around the command letters and one decimal."""
    d = " ".join(d.split())
    for c in _COMMANDS:
        d = d.replace(" " + c, c).replace(c + " ", c)
    return _LONG_DECIMALS.sub(lambda m: m.group()[:2], d) if "." in d else d


def compact_svg(svg: str) -> str:
    """RDKit writes one ``<path>`` per bond half and per glyph with a long style each (~10 KB for a
    drug-sized molecule): merge the paths of one colour into one and keep one decimal (~3 KB).

    A report depicts a few hundred molecules, so this does one pass over the paths and cleans the path
    text once per colour with plain string operations (regex substitutions cost 2 ms a molecule)."""
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for m in _PATH.finditer(svg):
        attrs = {k: v or w for k, v, w in _ATTR.findall(m.group(1))}
        d = attrs.get("d")
        if d is None:
            continue
        style = _style(attrs.get("style", ""))
        fill = attrs.get("fill")
        if fill is not None and fill != "none":
            key: tuple[str, ...] = ("f", fill)
        elif style.get("fill", "none") != "none":
            key = ("f", style["fill"])
        else:
            key = ("s", style.get("stroke", "#000000"), style.get("stroke-width", "1px").removesuffix("px"))
        groups[key].append(d)
    parts = []
    for key, paths in groups.items():
        # each path starts with a command letter, so the joined text cleans as the paths one by one
        path = _clean_path(" ".join(paths))
        if key[0] == "f":
            parts.append(f'<path fill="{key[1]}" d="{path}"/>')
        else:
            parts.append(f'<path fill="none" stroke="{key[1]}" stroke-width="{key[2]}" d="{path}"/>')
    box = _VIEWBOX.search(svg)
    view = box.group(1) if box else f"0 0 {DEPICTION_SIZE[0]} {DEPICTION_SIZE[1]}"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="{view}" stroke-linecap="round">'
            + "".join(parts) + "</svg>")


WORKER_MIN = 40  # fewer depictions than this are not worth a process (~0.25 s to start Python and RDKit)


class Depictions:
    """Depictions of SMILES, drawn ahead by a worker process (:class:`dcaudit.worker.ScriptWorker`, this
    module run with ``-m``) while the caller does other work, or here when asked for one the worker was not
    given, or when it could not help: the SVGs are the same either way (the same function draws them)."""

    def __init__(self, *, ahead: bool = True) -> None:
        self.ahead = ahead  # False: no worker (a caller that needs the depictions at once gains nothing)
        self._svg: dict[str, str | None] = {}
        self._asked: list[str] = []      # what the worker was given, in its order
        self._pending: set[str] = set()  # the same, to look up
        self._worker: ScriptWorker | None = None

    def prefetch(self, smiles: Sequence[str]) -> None:
        """Start drawing ``smiles`` in a worker (when there are enough and a core to spare)."""
        asked = list(dict.fromkeys(s for s in smiles if s and s not in self._svg))
        if self.ahead and self._worker is None and len(asked) >= WORKER_MIN and has_spare_core():
            self._worker, self._asked, self._pending = ScriptWorker(__name__, asked), asked, set(asked)

    def get(self, smiles: str) -> str | None:
        """The depiction of ``smiles`` (None when RDKit cannot draw it)."""
        if smiles not in self._svg and self._worker is not None and smiles in self._pending:
            rows = self._worker.results()
            self._worker = None
            if rows is not None and all(r is None or isinstance(r, str) for r in rows):
                self._svg.update(zip(self._asked, rows, strict=True))
        if smiles not in self._svg:
            self._svg[smiles] = depict_smiles(smiles)
        return self._svg[smiles]


def thumbnail(pixels: Sequence[float] | None, height: int | None = None, width: int | None = None) -> dict | None:
    """A greyscale image as ``{"w", "h", "px"}`` with one hex byte per pixel (0 = black … ff = white
    ink on paper is drawn dark: the value is ink intensity). Pixels in [0, 1] or [0, 255]."""
    if pixels is None:
        return None
    values = [float(v) if v is not None else 0.0 for v in pixels]
    if not values:
        return None
    n = len(values)
    if not height or not width:
        side = int(round(n ** 0.5))
        if side * side != n:
            return None
        height = width = side
    if height * width != n:
        return None
    top = max(values)
    scale = 255.0 if top <= 1.0 + 1e-9 else 1.0
    return {"w": int(width), "h": int(height),
            "px": "".join(f"{max(0, min(255, round(v * scale))):02x}" for v in values)}


if __name__ == "__main__":  # a worker of Depictions.prefetch
    answer([depict_smiles(s) for s in script_items()])
