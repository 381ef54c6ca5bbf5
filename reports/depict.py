"""Small pictures of candidates for the fiber explorer: RDKit 2-D depictions of molecules (SVG) and
greyscale thumbnails of images (a hex string of pixels the page draws on a canvas).

RDKit is the optional ``chem`` extra: it is imported inside :func:`depict_smiles`; without it (or for a
SMILES RDKit cannot parse) a member simply has no depiction.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

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


def compact_svg(svg: str) -> str:
    """RDKit writes one ``<path>`` per bond half and per glyph with a long style each (~10 KB for a
    drug-sized molecule): merge the paths of one colour into one and keep one decimal (~3 KB)."""
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for m in re.finditer(r"<path\b([^>]*?)/>", svg):
        attrs = m.group(1)
        d = re.search(r"\bd='([^']*)'", attrs)
        if not d:
            continue
        style_m = re.search(r"style='([^']*)'", attrs)
        style = dict(kv.split(":", 1) for kv in (style_m.group(1) if style_m else "").split(";") if ":" in kv)
        fill = re.search(r"\bfill='([^']*)'", attrs)
        if fill and fill.group(1) != "none":
            key: tuple[str, ...] = ("f", fill.group(1))
        elif style.get("fill", "none") != "none":
            key = ("f", style["fill"])
        else:
            key = ("s", style.get("stroke", "#000000"), style.get("stroke-width", "1px").removesuffix("px"))
        path = re.sub(r"\s*([MLQCZ])\s*", r"\1", d.group(1).strip())
        groups[key].append(re.sub(r"(\d+\.\d)\d+", r"\1", path))
    parts = []
    for key, paths in groups.items():
        if key[0] == "f":
            parts.append(f'<path fill="{key[1]}" d="{"".join(paths)}"/>')
        else:
            parts.append(f'<path fill="none" stroke="{key[1]}" stroke-width="{key[2]}" d="{"".join(paths)}"/>')
    box = re.search(r"viewBox='([^']*)'", svg)
    view = box.group(1) if box else f"0 0 {DEPICTION_SIZE[0]} {DEPICTION_SIZE[1]}"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="{view}" stroke-linecap="round">'
            + "".join(parts) + "</svg>")


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
