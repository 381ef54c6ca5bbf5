"""Canonical structures with RDKit: the two-process path gives what one process gives, and falls back to
one process when the child cannot help."""

from __future__ import annotations

import sys

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


@pytest.mark.parametrize("broken", ["missing interpreter", "wrong answer"])
def test_a_child_that_cannot_help_is_done_here(monkeypatch: pytest.MonkeyPatch, tmp_path, broken: str) -> None:  # noqa: ANN001
    if broken == "missing interpreter":
        monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    else:  # a child that answers, but not with one result per SMILES
        script = tmp_path / "liar.py"
        script.write_text("print('[[1, 2, 3]]')\n")
        monkeypatch.setattr(molecules, "__file__", str(script))
    assert molecules.parallel_structures(SMILES, parallel_min=10) == molecules.structures(SMILES)
