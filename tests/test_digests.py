"""A digest started early is the file's sha256, or is not used: the file's bytes decide, never the timing."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from dcaudit import digests
from dcaudit.cli_common import table_input


def _plain(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def blob(tmp_path: Path) -> Path:
    path = tmp_path / "table.parquet"
    # more than one read chunk, and a partial last chunk
    path.write_bytes(os.urandom(2 * digests._CHUNK + 12345))
    return path


def test_a_started_digest_is_the_files_sha256_and_is_taken_once(blob: Path) -> None:
    digests.start_sha256(blob)
    key = digests.file_identity(blob)
    assert key in digests._STARTED
    assert digests.sha256_file(blob) == _plain(blob)
    assert key not in digests._STARTED               # taken: the next digest reads the file again
    assert digests.sha256_file(blob) == _plain(blob)


def test_a_file_changed_after_its_digest_started_is_hashed_again(blob: Path) -> None:
    gate = threading.Event()
    real = digests._hash
    calls: list[str] = []

    def slow(path: Path | str) -> str:   # the started digest reads the old bytes, then waits
        digest = real(path)
        calls.append(digest)
        gate.wait(10)
        return digest

    digests._hash = slow  # type: ignore[assignment]
    try:
        digests.start_sha256(blob)
        old = _plain(blob)
        blob.write_bytes(b"new bytes")
        st = blob.stat()
        os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))   # a coarse clock still moves
        gate.set()
        assert digests.sha256_file(blob) == _plain(blob) != old
    finally:
        digests._hash = real  # type: ignore[assignment]
        digests._STARTED.clear()


def test_a_digest_that_failed_on_its_thread_is_computed_again(blob: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(path: Path | str) -> str:
        raise OSError("read error on the thread")

    monkeypatch.setattr(digests, "_hash", failing)
    digests.start_sha256(blob)
    key = digests.file_identity(blob)
    digests._STARTED[key].exception(timeout=10)      # the thread has failed
    monkeypatch.undo()
    assert digests.sha256_file(blob) == _plain(blob)


@pytest.mark.parametrize("name", ["missing.csv", "folder", "parts/*.parquet"])
def test_nothing_is_started_for_what_is_not_a_regular_file(tmp_path: Path, name: str) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "a.parquet").write_bytes(b"x")
    before = dict(digests._STARTED)
    digests.start_sha256(tmp_path / name)
    assert before == digests._STARTED


def test_an_empty_file_and_a_missing_one(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    digests.start_sha256(empty)
    assert digests.sha256_file(empty) == hashlib.sha256(b"").hexdigest()
    with pytest.raises(FileNotFoundError):
        digests.sha256_file(tmp_path / "missing.csv")


def test_a_table_commands_file_starts_its_digest(blob: Path) -> None:
    assert table_input(blob, None) == blob
    started = digests._STARTED.pop(digests.file_identity(blob))
    assert started.result(timeout=10) == _plain(blob)
