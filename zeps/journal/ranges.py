"""Binary Arrow arrays of byte ranges of a block (the keys, bodies and producer ids of the
columnar reader, :mod:`.columnar`): one compact copy of ``buf[starts[i]:ends[i]]`` for all ``i``.
Needs numpy and pyarrow."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .speedups import journalc


_EVEN_MASKS: dict = {}


def _even_mask(n: int) -> pa.Array:
    """Boolean array [T, F, T, F, ..., T] of length 2n-1 (cached by size)."""
    m = _EVEN_MASKS.get(n)
    if m is None:
        a = np.zeros(2 * n - 1, dtype=bool)
        a[0::2] = True
        m = pa.array(a)
        if len(_EVEN_MASKS) > 16:
            _EVEN_MASKS.clear()
        _EVEN_MASKS[n] = m
    return m


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _from(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.int64)


_BINARY = pa.binary()


def _compact(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray,
             kind: pa.DataType = _BINARY) -> pa.Array:
    """A compact array of ``data[starts[i]:ends[i]]`` (ranges increasing, disjoint) of type
    ``kind`` (binary, or ``pa.string()``: the bytes are taken as they are, the caller
    validates them): :func:`_compact_py`, or one C loop of copies where :mod:`.speedups` has
    it."""
    if journalc is None or not len(starts):
        a = _compact_py(data, starts, ends)
        return a if kind == _BINARY else a.view(kind)
    offsets, values = journalc.compact(data, _i64(starts), _i64(ends))
    return pa.Array.from_buffers(kind, len(starts),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def _compact_py(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """:func:`_compact` with pyarrow: 2n interleaved offsets over the block give 2n-1 elements
    (range i, then the gap after it); ``filter`` keeps the even ones, copying them into a new
    contiguous buffer in C++."""
    n = len(starts)
    if n == 0:
        return pa.array([], type=pa.binary())
    offsets = np.empty(2 * n, dtype=np.int32)
    offsets[0::2] = starts
    offsets[1::2] = ends
    wide = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(offsets), data])
    return wide.filter(_even_mask(n))
