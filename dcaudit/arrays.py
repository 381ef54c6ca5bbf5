"""Arrow arrays to and from numpy through their buffers.

``pa.array(...)`` of numpy arrays or Python lists, ``Array.to_numpy()`` and ``Table.from_pylist`` make
pyarrow import pandas to check for pandas types: ~0.3-0.5 s and ~40 MB the first time in a process, more
than a 1e6-candidate audit takes. The audits build and read their (small) result columns here instead,
as :func:`dcaudit.storage.constant_strings` and the input contract's row numbers do.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Literal

import numpy as np
import pyarrow as pa

Kind = Literal["int64", "float64", "string", "bool", "timestamp_us"]
_EPOCH = datetime(1970, 1, 1)


def _validity(mask: np.ndarray | None, n: int) -> pa.Buffer | None:
    """The validity bitmap of ``n`` values, ``mask`` true where a value is NULL (None: no NULL)."""
    if mask is None:
        return None
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return None
    return pa.py_buffer(np.packbits(~mask, bitorder="little"))


def _fixed(kind: pa.DataType, dtype: type, values: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    data: np.ndarray = np.ascontiguousarray(np.asarray(values, dtype=dtype))
    n = len(data)
    return pa.Array.from_buffers(kind, n, [_validity(mask, n), pa.py_buffer(data)])


def float64(values: np.ndarray | Sequence[float], mask: np.ndarray | None = None) -> pa.Array:
    return _fixed(pa.float64(), np.float64, np.asarray(values, dtype=np.float64), mask)


def float64_nan_null(values: np.ndarray | Sequence[float]) -> pa.Array:
    """Doubles with NaN as NULL (the replay tables' convention for "not defined")."""
    values = np.asarray(values, dtype=np.float64)
    return float64(values, np.isnan(values))


def int64(values: np.ndarray | Sequence[int], mask: np.ndarray | None = None) -> pa.Array:
    return _fixed(pa.int64(), np.int64, np.asarray(values), mask)


def int32(values: np.ndarray | Sequence[int], mask: np.ndarray | None = None) -> pa.Array:
    return _fixed(pa.int32(), np.int32, np.asarray(values), mask)


def boolean(values: np.ndarray | Sequence[bool], mask: np.ndarray | None = None) -> pa.Array:
    bits = np.asarray(values, dtype=bool)
    n = len(bits)
    return pa.Array.from_buffers(pa.bool_(), n, [_validity(mask, n), pa.py_buffer(np.packbits(bits, bitorder="little"))])


def strings(values: Sequence[str | None] | np.ndarray) -> pa.Array:
    """A string array of Python strings (None: NULL)."""
    items = list(values)
    encoded = [b"" if v is None else str(v).encode() for v in items]
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    mask = np.fromiter((v is None for v in items), dtype=bool, count=len(items))
    kind = pa.string() if offsets[-1] < 2**31 else pa.large_string()
    off = offsets.astype(np.int32) if kind == pa.string() else offsets
    array = pa.Array.from_buffers(kind, len(items), [_validity(mask, len(items)), pa.py_buffer(off),
                                                     pa.py_buffer(b"".join(encoded))])
    return array if kind == pa.string() else array.cast(pa.string())


def repeated_strings(values: Sequence[str | None], counts: Sequence[int] | np.ndarray) -> pa.Array:
    """Each of ``values`` repeated ``counts`` times, in order (a few distinct labels over many rows)."""
    counts = np.asarray(counts, dtype=np.int64)
    index = np.repeat(np.arange(len(values)), counts)
    return take_strings(values, index)


def take_strings(values: Sequence[str | None], index: np.ndarray) -> pa.Array:
    """``values[index]`` as a string array, built from the few distinct values' bytes."""
    encoded = [b"" if v is None else str(v).encode() for v in values]
    lengths = np.asarray([len(e) for e in encoded], dtype=np.int64)
    index = np.asarray(index, dtype=np.int64)
    n = len(index)
    row_len = lengths[index] if len(lengths) else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_len, out=offsets[1:])
    # the bytes of row i are encoded[index[i]]: gather through a flat byte pool
    pool = np.frombuffer(b"".join(encoded), dtype=np.uint8) if any(lengths) else np.zeros(0, dtype=np.uint8)
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    total = int(offsets[-1])
    if total:
        # position j of the output belongs to row r = searchsorted(offsets, j, 'right') - 1
        row = np.repeat(np.arange(n), row_len)
        within = np.arange(total) - offsets[row]
        data = pool[starts[index[row]] + within].tobytes()
    else:
        data = b""
    none = np.asarray([v is None for v in values], dtype=bool)
    mask = none[index] if len(none) else np.zeros(0, dtype=bool)
    kind = pa.string() if total < 2**31 else pa.large_string()
    off = offsets.astype(np.int32) if kind == pa.string() else offsets
    array = pa.Array.from_buffers(kind, n, [_validity(mask, n), pa.py_buffer(off), pa.py_buffer(data)])
    return array if kind == pa.string() else array.cast(pa.string())


def list_float64(block: np.ndarray, row_null: np.ndarray | None = None) -> pa.Array:
    """Rows of a (rows, width) array as list<double> (``row_null``: rows that are NULL lists)."""
    block = np.ascontiguousarray(np.asarray(block, dtype=np.float64))
    n, width = block.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    child = float64(block.ravel())
    return pa.Array.from_buffers(pa.list_(pa.float64()), n, [_validity(row_null, n), pa.py_buffer(offsets)],
                                 children=[child])


def timestamps_us(values: Sequence[datetime | None]) -> pa.Array:
    """Datetimes as ``timestamp[us]`` (naive: wall-clock as given; aware: converted to UTC)."""
    micros = np.fromiter(((0 if v is None else
                           ((v.astimezone(UTC).replace(tzinfo=None) if v.tzinfo else v) - _EPOCH)
                           // _MICROSECOND) for v in values), dtype=np.int64, count=len(values))
    mask = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    return pa.Array.from_buffers(pa.timestamp("us"), len(values), [_validity(mask, len(values)), pa.py_buffer(micros)])


_MICROSECOND = datetime(1970, 1, 1, microsecond=1) - _EPOCH


def infer_kind(values: Iterable[object]) -> Kind:
    """The column type of Python values: bool, int64, float64 (ints and floats), timestamp, else string."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return "string"
    if kinds <= {bool}:
        return "bool"
    if kinds <= {int}:
        return "int64"
    if kinds <= {int, float}:
        return "float64"
    if all(issubclass(k, datetime) for k in kinds):
        return "timestamp_us"
    return "string"


def column(values: Iterable[object], kind: Kind | None = None) -> pa.Array:
    """Python values (None: NULL) as an Arrow column of ``kind`` (inferred when not given)."""
    items = list(values)
    kind = kind or infer_kind(items)
    mask = np.fromiter((v is None for v in items), dtype=bool, count=len(items))
    if kind == "string":
        return strings([None if v is None else str(v) for v in items])
    if kind == "timestamp_us":
        return timestamps_us(items)  # type: ignore[arg-type]
    if kind == "bool":
        return boolean([bool(v) for v in items], mask)
    if kind == "int64":
        return int64(np.fromiter((0 if v is None else int(v) for v in items), dtype=np.int64, count=len(items)),  # type: ignore[call-overload]
                     mask)
    return float64(np.fromiter((np.nan if v is None else float(v) for v in items), dtype=np.float64,  # type: ignore[arg-type]
                               count=len(items)), mask)


def table(columns: Mapping[str, Iterable[object]], kinds: Mapping[str, Kind] | None = None) -> pa.Table:
    """Python lists as an Arrow table, column types inferred unless given in ``kinds`` (a small table:
    the values are walked in Python; result columns of audits are built from numpy instead)."""
    kinds = kinds or {}
    return pa.Table.from_arrays([column(values, kinds.get(name)) for name, values in columns.items()],
                                names=list(columns))


# ---------------------------------------------------------------------------------------------------
# Reading.

def _single(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    return array


def valid(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """True where a value is not NULL."""
    arr = _single(array)
    n = len(arr)
    buf = arr.buffers()[0]
    if buf is None or arr.null_count == 0:
        return np.ones(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
    return bits[arr.offset:arr.offset + n].astype(bool)


def values(array: pa.Array | pa.ChunkedArray, dtype: type) -> np.ndarray:
    """The values of a primitive (numeric or boolean) array as numpy; NULL slots hold whatever the buffer holds.

    A view of the Arrow buffer (read-only) when the array is one chunk of that type already; a copy otherwise."""
    return _chunk_values(_single(array), dtype)


def chunk_values(array: pa.Array | pa.ChunkedArray, dtype: type) -> Iterator[np.ndarray]:
    """:func:`values` chunk by chunk, in order: a large result of DuckDB comes as several chunks, and joining
    them copies every value (~0.2 s for two columns of 1e7 rows) where a view per chunk copies none."""
    for chunk in (array.chunks if isinstance(array, pa.ChunkedArray) else (array,)):
        yield _chunk_values(chunk, dtype)


def rising(array: pa.Array | pa.ChunkedArray, after: int | None = None) -> tuple[bool, int | None]:
    """Whether the integers of ``array`` rise strictly, above ``after`` (the last value of a part before them,
    if any), read chunk by chunk without a copy; and the last of them (``after`` when there are none), to
    pass on to the next part. Nulls are not looked at: callers check values known to be valid."""
    last = after
    for part in chunk_values(array, np.int64):
        if not len(part):
            continue
        if (last is not None and part[0] <= last) or not bool((part[1:] > part[:-1]).all()):
            return False, last
        last = int(part[-1])
    return True, last


def _chunk_values(arr: pa.Array, dtype: type) -> np.ndarray:
    n = len(arr)
    buf = arr.buffers()[1]
    if pa.types.is_boolean(arr.type):
        bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little") if n else np.zeros(0, np.uint8)
        return bits[arr.offset:arr.offset + n].astype(bool)
    width = arr.type.bit_width // 8
    kind = "f" if pa.types.is_floating(arr.type) else ("u" if pa.types.is_unsigned_integer(arr.type) else "i")
    raw = np.frombuffer(buf, dtype=np.dtype(f"{kind}{width}"), count=n, offset=arr.offset * width) if n else np.zeros(0)
    return raw.astype(dtype, copy=False)   # callers only read: no copy when the type already matches


def fetched_nulls(column: np.ndarray) -> np.ndarray:
    """Where a column of DuckDB's ``fetchnumpy`` holds NULL (a ``numpy.ma.MaskedArray`` when it has any).

    Without importing ``numpy.ma`` (~12 ms): DuckDB loads it only for a result with NULLs, so while it is not
    loaded no column is masked."""
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(column, ma.MaskedArray):
        return np.asarray(ma.getmaskarray(column))
    return np.zeros(len(column), dtype=bool)


def fetched_filled(column: np.ndarray, fill: object) -> np.ndarray:
    """A column of DuckDB's ``fetchnumpy`` with its NULLs (if any) as ``fill``, as a plain array
    (see :func:`fetched_nulls`)."""
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(column, ma.MaskedArray):
        return np.asarray(column.filled(fill))
    return np.asarray(column)


def unique_codes(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for integer keys in ``[0, size)``: the sorted distinct keys
    and each key's position among them.

    np.unique sorts the keys. When the range is small beside the number of keys (the (k, n) count pairs of a
    replay's windows: ~125,000 keys in a range of ~2 million), marking the keys present in a boolean array
    of the range and numbering the marks gives the same two arrays without a sort (on 125,000 uniform random
    pairs 6-11 ms against np.unique's 10-17 ms; on the JARVIS replay's pairs the bound cache went from
    0.18-0.20 s to 0.06-0.11 s); a range too large for that falls back to np.unique."""
    keys = np.asarray(keys, dtype=np.int64)
    if not len(keys) or size > max(1 << 16, min(1 << 24, 64 * len(keys))):
        uniq, inverse = np.unique(keys, return_inverse=True)
        return uniq, inverse.reshape(-1)
    present = np.zeros(size, dtype=bool)
    present[keys] = True
    uniq = np.flatnonzero(present)
    position = np.empty(size, dtype=np.int64)   # read only at the marked keys
    position[uniq] = np.arange(len(uniq))
    return uniq, position[keys]
