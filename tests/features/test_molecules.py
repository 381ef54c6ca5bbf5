"""Canonical structures with RDKit: the two-process path gives what one process gives, and falls back to
one process when the worker cannot help."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("rdkit")

from dcaudit.features import molecules  # noqa: E402

# valid, invalid and empty SMILES, repeated: both halves hold every kind
SMILES = ["CCO", "c1ccccc1O", "C1CC(", None, "", "[Na+].[Cl-]", "C[C@H](N)C(=O)O", "not a smiles"] * 30


def test_the_two_halves_give_the_one_process_result() -> None:
    one = molecules.structures(SMILES)
    assert molecules.parallel_structures(SMILES, parallel_min=10) == one
    assert one[0] == ("CCO", "LFQSCWFLJHTTHZ-UHFFFAOYSA-N", None)
    assert one[2] == (None, None, "RDKit could not parse the SMILES")
    assert one[3] == one[4] == (None, None, "empty SMILES")


class _Liar:
    """A worker that answers one row per item, but not three fields a row."""

    def __init__(self, module: str, items: list) -> None:
        self.items = items

    def results(self) -> list:
        return [[1, 2] for _ in self.items]


@pytest.mark.parametrize("broken", ["missing interpreter", "wrong answer"])
def test_a_worker_that_cannot_help_is_done_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                broken: str) -> None:
    if broken == "missing interpreter":
        monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    else:
        monkeypatch.setattr(molecules, "ScriptWorker", _Liar)
    assert molecules.parallel_structures(SMILES, parallel_min=10) == molecules.structures(SMILES)
