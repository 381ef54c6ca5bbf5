"""The Magpie caches under tables/magpie/: what they say when a cache's place holds a directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from dcaudit.features import magpie
from dcaudit.storage import NotAFileError


def test_a_feature_cache_that_is_a_directory_is_named_and_kept(tmp_path: Path) -> None:
    """It read as "no cache" and the rewrite failed in os.replace (an internal error, a temporary file left)."""
    (tmp_path / "magpie.parquet").mkdir()
    (tmp_path / "magpie.parquet" / "mine.txt").write_text("keep")
    with pytest.raises(NotAFileError, match=f"{tmp_path / 'magpie.parquet'} is a directory, not a file"):
        magpie.cached_features(tmp_path, ["NaCl"])
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["magpie.parquet", "mine.txt"]


def test_an_element_table_that_is_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "elements.parquet").mkdir()
    with pytest.raises(NotAFileError, match=f"{tmp_path / 'elements.parquet'} is a directory, not a file"):
        magpie.elemental_table(["Na", "Cl"], tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["elements.parquet"]
