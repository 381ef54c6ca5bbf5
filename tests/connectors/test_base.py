"""connectors.base.fetch: the mirror copy, then the downloaded one, then a download — and what it says when a
copy's place holds something other than a file (never "missing", never a download around it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dcaudit.config import Settings
from dcaudit.connectors import base
from dcaudit.connectors.base import SourceFile, fetch
from dcaudit.errors import MissingSourceError
from dcaudit.storage import NotAFileError

SOURCE = SourceFile(name="data.csv.gz", url="https://example.invalid/data.csv.gz",
                    mirror_paths=("src/data.csv", "src/data.csv.gz"))


def _settings(tmp_path: Path, *, offline: bool = False) -> Settings:
    return Settings(home=tmp_path / "home", mirror=tmp_path / "mirror", memory_limit="1GB", threads=None,
                    offline=offline)


def _listing(folder: Path) -> dict[str, bool]:
    return {str(p.relative_to(folder)): p.is_dir() for p in sorted(folder.rglob("*"))}


@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records any download fetch would start (none should)."""
    calls: list[str] = []
    monkeypatch.setattr(base, "_download", lambda source, settings: calls.append(source.url))
    return calls


def _block(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "directory":
        path.mkdir()
        (path / "mine.txt").write_text("keep")
    elif kind == "broken link":
        path.symlink_to(path.parent / "moved-away.csv")
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("kind, said", [("directory", "is a directory, not a file"),
                                        ("broken link", "moved-away.csv, which does not exist"),
                                        ("fifo", "is not a regular file")])
def test_a_mirror_copy_that_is_not_a_file_is_named_not_downloaded_around(
        tmp_path: Path, no_download: list[str], kind: str, said: str) -> None:
    """It read as missing: "not available offline: put it at <that very path>", then a download."""
    settings = _settings(tmp_path)
    first = tmp_path / "mirror" / "src" / "data.csv"
    _block(first, kind)
    (tmp_path / "mirror" / "src" / "data.csv.gz").write_bytes(b"another encoding")  # not taken instead
    before = _listing(tmp_path)
    with pytest.raises(NotAFileError) as caught:
        fetch(SOURCE, settings)
    message = str(caught.value)
    assert message.startswith(f"the mirror's copy of data.csv.gz {first} ") and said in message
    assert "\n" not in message and caught.value.exit_code == 2
    assert no_download == [] and _listing(tmp_path) == before


@pytest.mark.parametrize("kind", ["directory", "broken link"])
def test_a_downloaded_copy_that_is_not_a_file_is_named_not_downloaded_again(
        tmp_path: Path, no_download: list[str], kind: str) -> None:
    settings = _settings(tmp_path)
    cached = settings.raw_dir / SOURCE.name
    _block(cached, kind)
    before = _listing(tmp_path)
    with pytest.raises(NotAFileError, match=f"the downloaded copy of data.csv.gz {cached} "):
        fetch(SOURCE, settings)
    assert no_download == [] and _listing(tmp_path) == before


def test_a_raw_folder_that_is_a_file_is_named(tmp_path: Path, no_download: list[str]) -> None:
    """It was a FileExistsError from mkdir inside the download: an internal error."""
    settings = _settings(tmp_path)
    settings.raw_dir.parent.mkdir(parents=True)
    settings.raw_dir.write_text("not a folder")
    with pytest.raises(NotAFileError, match=f"{settings.raw_dir} is a file, not a directory; move "
                                            f"{settings.raw_dir} out of the way"):
        fetch(SOURCE, settings)
    assert no_download == [] and settings.raw_dir.read_text() == "not a folder"


def test_nothing_anywhere_is_still_missing_and_a_file_is_fetched(tmp_path: Path) -> None:
    settings = _settings(tmp_path, offline=True)
    with pytest.raises(MissingSourceError, match="not available offline"):
        fetch(SOURCE, settings)
    link = tmp_path / "mirror" / "src" / "data.csv"
    link.parent.mkdir(parents=True)
    (tmp_path / "real.csv").write_text("a,b\n1,2\n")
    link.symlink_to(tmp_path / "real.csv")            # a link to a file is a file
    assert fetch(SOURCE, settings).path == link
