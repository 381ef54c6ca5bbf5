"""The layers hold at import level: the core imports nothing above it; connectors and audits import only
the core (and their own folder; connectors also the feature code in features/); reports import only the
core; pipelines and the API/CLI compose.

Imports are read with ``ast`` from the source files (lazy imports inside functions count too), so a
backward import fails here whether or not a test happens to execute it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> package it installs as
PACKAGES = {"dcaudit": "dcaudit", "connectors": "dcaudit.connectors", "features": "dcaudit.features",
            "audits": "dcaudit.audits", "pipelines": "dcaudit.pipelines", "reports": "dcaudit.reports"}
LAYERS = ("dcaudit.connectors", "dcaudit.features", "dcaudit.audits", "dcaudit.pipelines", "dcaudit.reports")
# the modules of the core that compose the layers above it
COMPOSERS = {"dcaudit.api", "dcaudit.cli", "dcaudit"}
ALLOWED = {
    "dcaudit": (),                                  # the core: nothing above it
    "dcaudit.connectors": ("dcaudit.connectors", "dcaudit.features"),  # features: Magpie, image corruptions
    "dcaudit.features": ("dcaudit.features",),
    "dcaudit.audits": ("dcaudit.audits",),
    "dcaudit.reports": ("dcaudit.reports",),
    "dcaudit.pipelines": LAYERS,
}


def layer_of(module: str) -> str:
    for layer in LAYERS:
        if module == layer or module.startswith(layer + "."):
            return layer
    return "dcaudit"


def modules() -> list[tuple[str, Path]]:
    out = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            out.append((name, path))
    return out


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.startswith("dcaudit")]


def backward_imports(name: str, path: Path) -> list[str]:
    if name in COMPOSERS:
        return []
    own = layer_of(name)
    problems = []
    for line, imported in imports_of(path):
        target = layer_of(imported)
        if target != "dcaudit" and target not in ALLOWED[own]:
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            problems.append(f"{where}:{line} ({own}) imports {imported} ({target})")
    return sorted(set(problems))


@pytest.mark.parametrize("name, path", modules(), ids=[m[0] for m in modules()])
def test_no_backward_imports(name: str, path: Path) -> None:
    assert backward_imports(name, path) == []


def test_the_check_catches_a_connector_importing_reports(tmp_path: Path) -> None:
    bad = tmp_path / "bad_connector.py"
    bad.write_text("def fetch():\n    from dcaudit.reports.console import console\n")
    problems = backward_imports("dcaudit.connectors.bad_connector", bad)
    assert problems and "(dcaudit.connectors) imports dcaudit.reports.console (dcaudit.reports)" in problems[0]
