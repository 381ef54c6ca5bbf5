"""sha256 of files, and the early start of an input file's digest while the command is still loading.

A run keys its cache and its record on the sha256 of its input files, so it hashes them before any work.
Hashing a 160 MB Parquet file takes ~0.1 s, and the command line spends ~0.3 s importing DuckDB, Arrow
and the engine before it gets there, on one core. :func:`start_sha256` hashes a file on a thread of its
own from the moment the command knows its input (``hashlib`` and file reads release the GIL, so the two
overlap); :func:`sha256_file` then takes that result instead of reading the file again, provided the file
is still the one that was hashed: the same device, inode, size and modification time.

Standard library only, so the command line can start a digest before it imports anything heavy.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from concurrent.futures import Future
from pathlib import Path

# Large reads: the reading and the hashing release the GIL, but each chunk takes it back once, and on a thread
# beside the imports of a starting command that costs up to a switch interval (5 ms) a time.
_CHUNK = 1 << 22
# file identity -> the digest started for it; each is taken once (by the next sha256_file of that file)
_STARTED: dict[tuple[int, int, int, int], Future[str]] = {}
_LOCK = threading.Lock()


def file_identity(path: Path | str) -> tuple[int, int, int, int] | None:
    """(device, inode, size, mtime in ns) of a regular file: what tells that a file is still the one seen
    before without reading it. None for anything else or a file that cannot be looked at (the caller then
    reads it, or fails, as it would without the identity)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _hash(path: Path | str) -> str:
    h = hashlib.sha256()
    size = os.path.getsize(path)   # 0 for a pipe or a device: read those in whole chunks too
    buffer = bytearray(size if 0 < size < _CHUNK else _CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buffer):
            h.update(view[:n])
    return h.hexdigest()


def sha256_file(path: Path | str) -> str:
    """sha256 of a file's bytes, read in 4 MiB chunks (the one definition): the digest :func:`start_sha256`
    started for this very file when there is one, else computed now."""
    key = file_identity(path)
    if key is not None:
        with _LOCK:
            started = _STARTED.pop(key, None)
        if started is not None:
            try:
                digest = started.result()
            except Exception:  # noqa: BLE001 - hashed again here, so the error (if any) is the caller's own
                digest = None
            if digest is not None and file_identity(path) == key:   # unchanged while it was hashed
                return digest
    return _hash(path)


def start_sha256(path: Path | str) -> None:
    """Start hashing the regular file ``path`` on a daemon thread; the next :func:`sha256_file` of that file
    takes the result. Anything but a regular file (a glob, a folder, a missing path) is left alone."""
    key = file_identity(path)
    if key is None:
        return
    started: Future[str] = Future()
    with _LOCK:
        if key in _STARTED:
            return
        _STARTED[key] = started

    def work() -> None:
        try:
            started.set_result(_hash(path))
        except BaseException as exc:  # noqa: BLE001 - handed to the taker, who hashes again itself
            started.set_exception(exc)

    threading.Thread(target=work, name="dcaudit-input-digest", daemon=True).start()
