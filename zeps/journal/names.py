"""Stream name <-> directory name.

A stream name comes from the network (ATTACH), so it must never be able to name anything but
one directory directly inside the data directory. The encoding:

* the name is UTF-8 encoded; every byte outside ``[A-Za-z0-9_.-]`` becomes ``%XX`` (upper-case
  hex), including ``%`` itself, ``/``, NUL and every non-ASCII byte;
* a leading ``.`` is also escaped (``%2E``), so a directory name never starts with a dot:
  ``.``, ``..`` and hidden names are impossible, and ``LOCK``-style files next to stream
  directories can not be confused with one;
* the empty name is refused.

The encoding is a bijection between valid names and canonical directory names:
``stream_from_dir_name`` only accepts a directory name that re-encodes to itself, so stray
directories (``lost+found``, editors' files) are not reported as streams.

* a name whose encoding is a file the data directory keeps for itself (``LOCK``) has its first
  character escaped too (``%4COCK``), so no stream can collide with it.

Long names: a directory name is at most 255 bytes, yet a valid stream name (1 to 255 bytes of
UTF-8) can take up to 765 once escaped (``'/' * 86``, ``'é' * 127``). Such a name is stored as
``<first 150 bytes of the escaped name>~<SHA-256 of the name, 64 hex digits>`` (``~`` never
appears in an escaped name, so the two forms cannot collide), with the real name in the file
``NAME`` inside the stream directory; :func:`list_streams` reads it back and checks the digest.
"""
from __future__ import annotations

import os
import hashlib
from typing import List, Optional

from .errors import JournalError, JournalNotFoundError

MAX_DIR_NAME = 255
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_HEX = "0123456789ABCDEF"
#: Files a data directory holds beside its stream directories.
RESERVED = frozenset({"LOCK"})
#: The file holding the real name of a stream stored under a hashed directory name.
NAME_FILE = "NAME"
_HASH_SEP = "~"
_HASH_KEEP = 150


class InvalidStreamNameError(JournalError, ValueError):
    """A stream name that can not be stored (empty, not text, or too long once encoded)."""


def stream_dir_name(name: str) -> str:
    """The directory name (one path component, never ``.``/``..``, no ``/``) of a stream."""
    if not isinstance(name, str):
        raise InvalidStreamNameError(f"stream name must be text, not {type(name).__name__}")
    if not name:
        raise InvalidStreamNameError("stream name must not be empty")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidStreamNameError(f"stream name {name!r} is not valid Unicode text") from None
    out = []
    for i, b in enumerate(raw):
        if b in _SAFE and not (i == 0 and b == 0x2E):
            out.append(chr(b))
        else:
            out.append("%" + _HEX[b >> 4] + _HEX[b & 15])
    result = "".join(out)
    if result in RESERVED:
        result = "%" + _HEX[raw[0] >> 4] + _HEX[raw[0] & 15] + result[1:]
    if len(result) > MAX_DIR_NAME:
        if len(raw) > MAX_DIR_NAME:
            raise InvalidStreamNameError(
                f"stream name {name[:40]!r}... is {len(raw)} bytes; the limit is {MAX_DIR_NAME}")
        head = result[:_HASH_KEEP]
        if "%" in head[-2:]:                       # never cut an escape in two
            head = head[:head.rindex("%")]
        result = head + _HASH_SEP + hashlib.sha256(raw).hexdigest()
    return result


def is_hashed(dirname: str) -> bool:
    """True for the directory name of a long stream name (its real name is in ``NAME``)."""
    return _HASH_SEP in dirname


def stream_from_dir_name(dirname: str, parent: Optional[str] = None) -> Optional[str]:
    """The stream name of a directory name, or None if it is not a canonical encoding. A hashed
    (long) name is read from its ``NAME`` file, which needs ``parent``, the data directory."""
    if not dirname or dirname[0] == ".":
        return None
    if is_hashed(dirname):
        if parent is None:
            return None
        try:
            with open(os.path.join(parent, dirname, NAME_FILE), "rb") as f:
                name = f.read(4096).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        try:
            return name if stream_dir_name(name) == dirname else None
        except InvalidStreamNameError:
            return None
    raw = bytearray()
    i, n = 0, len(dirname)
    try:
        while i < n:
            ch = dirname[i]
            if ch == "%":
                hx = dirname[i + 1:i + 3]
                if len(hx) != 2 or any(c not in _HEX for c in hx):
                    return None
                raw.append(int(hx, 16))
                i += 3
            else:
                o = ord(ch)
                if o > 127:
                    return None
                raw.append(o)
                i += 1
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        if stream_dir_name(name) != dirname:
            return None
    except InvalidStreamNameError:
        return None
    return name


def list_streams(data_dir: str) -> List[str]:
    """Names of the streams present in ``data_dir`` (sorted), decoded from directory names."""
    try:
        entries = list(os.scandir(data_dir))
    except FileNotFoundError:
        raise JournalNotFoundError(f"data directory {data_dir!r} does not exist") from None
    except NotADirectoryError:
        raise JournalNotFoundError(f"data directory {data_dir!r} is not a directory") from None
    except PermissionError as e:
        raise JournalError(f"data directory {data_dir!r} is not readable: {e.strerror}") from None
    names = []
    for e in entries:
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        name = stream_from_dir_name(e.name, data_dir)
        if name is not None:
            names.append(name)
    names.sort()
    return names
