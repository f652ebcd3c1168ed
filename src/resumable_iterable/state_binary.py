"""The binary state file (``state_files.py`` writes it and reads both of its formats): the same
JSON document as a text state, with every large array or bytes value replaced by a reference to a
raw blob stored after it::

    header   64 bytes: MAGIC, format version (u32), flags (u32), JSON length (u64),
             data length (u64), SHA-256 of the JSON (32 bytes)         - little endian
    JSON     {"blobs": [[offset, nbytes, checksum hex], ...], "hash": "xxh3_128", "value": <encoded state>}
    data     the blobs, each at an offset that is a multiple of 64 (zero padding between)

This module holds the layout (its header, alignment and blob checksums) and reads such a file,
from bytes or from an open file: its header and JSON checked, each blob checked against its own
checksum and read straight into the memory of a new array, on demand."""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any, Callable

import numpy as np

from .state_arrays import array_bytes, check_shape
from .state_codec import DamagedFile, decode, too_deep

try:  # installed with HF datasets; ~10x faster than SHA-256, so hashing the blobs costs little
    import xxhash as _xxhash
except ImportError:  # pragma: no cover
    _xxhash = None

#: first bytes of a binary state file (``\x93`` is never the first byte of UTF-8 JSON text)
MAGIC = b"\x93RISTATE"
FILE_VERSION = 1
#: blobs start at multiples of this many bytes
ALIGN = 64
HEADER = struct.Struct("<8sIIQQ32s")
assert HEADER.size == 64
#: the checksum of each blob in the binary state files this library writes
BLOB_HASH = "xxh3_128" if _xxhash is not None else "sha256"


def blob_hasher(name: Any) -> Callable[[Any], str]:
    """The hex digest function of a blob checksum named in a binary state file."""
    if name == "sha256":
        return lambda data: hashlib.sha256(data).hexdigest()
    if name == "xxh3_128":
        if _xxhash is None:
            raise ValueError("its blobs are checksummed with xxh3_128: install the xxhash package to load it")
        return _xxhash.xxh3_128_hexdigest
    raise ValueError(f"unknown blob checksum {name!r}")


def align(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGN`."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


class _Blobs:
    """The blobs of a binary state file, read on demand and checked against their checksums."""

    def __init__(self, table: Any, hash_name: Any, data_len: int, read: Callable[[int, memoryview], None],
                 read_bytes: Callable[[int, int], bytes]):
        self._hash = blob_hasher(hash_name)
        if type(table) is not list:
            raise ValueError("its blob table is damaged")
        for entry in table:
            if not (type(entry) is list and len(entry) == 3 and type(entry[0]) is int and type(entry[1]) is int
                    and type(entry[2]) is str and 0 <= entry[0] and 0 <= entry[1]
                    and entry[0] + entry[1] <= data_len):
                raise ValueError("its blob table is damaged")
        self.table = table
        self._read = read
        self._read_bytes = read_bytes

    def entry(self, i: Any) -> tuple[int, int, str]:
        if type(i) is not int or not 0 <= i < len(self.table):
            raise ValueError(f"refers to blob {i!r}, which the file does not hold")
        return tuple(self.table[i])  # type: ignore[return-value]

    def _check(self, i: int, data: Any, digest: str) -> None:
        if self._hash(data) != digest:
            raise DamagedFile(f"blob {i} of the state file does not match its checksum: the file was damaged or edited")

    def array(self, i: Any, dtype: np.dtype, shape: list) -> np.ndarray:
        offset, nbytes, digest = self.entry(i)
        check_shape(shape, dtype, nbytes)
        arr = np.empty(shape, dtype)  # the blob is read straight into the new array's memory
        view = array_bytes(arr)
        if nbytes:
            self._read(offset, view)
        self._check(i, view, digest)
        return arr

    def bytes(self, i: Any) -> bytes:
        offset, nbytes, digest = self.entry(i)
        data = self._read_bytes(offset, nbytes)
        self._check(i, data, digest)
        return data


def parse_header(head: bytes, size: int) -> tuple[int, int, bytes]:
    """``(json_len, data_offset, json_sha256)`` of a binary state file of ``size`` bytes."""
    if len(head) < HEADER.size:
        raise ValueError("binary state file is truncated (its header is incomplete)")
    magic, version, _flags, json_len, data_len, sha = HEADER.unpack(head[: HEADER.size])
    if magic != MAGIC:
        raise ValueError("not a binary state file")
    if version != FILE_VERSION:
        raise ValueError(f"unsupported binary state file version {version}: this library reads version {FILE_VERSION}")
    data_offset = align(HEADER.size + json_len)
    expected = data_offset + data_len
    if size != expected:
        what = "truncated" if size < expected else "damaged (it has extra bytes)"
        raise ValueError(f"binary state file is {what}: {size} bytes, its header says {expected}")
    return json_len, data_offset, sha


def _parse_document(doc_bytes: bytes, sha: bytes) -> dict:
    if hashlib.sha256(doc_bytes).digest() != sha:
        raise ValueError("state checksum does not match its content: the state was damaged or edited")
    try:
        doc = json.loads(doc_bytes)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"binary state file holds invalid JSON: {e}") from None
    except RecursionError:
        raise too_deep() from None
    if type(doc) is not dict or set(doc) != {"blobs", "hash", "value"}:
        raise ValueError("binary state file holds an unexpected JSON document")
    return doc


def loads_binary(data: bytes | bytearray | memoryview) -> Any:
    view = memoryview(data).cast("B")
    json_len, data_offset, sha = parse_header(bytes(view[: HEADER.size]), view.nbytes)
    doc = _parse_document(bytes(view[HEADER.size: HEADER.size + json_len]), sha)

    def read(offset: int, dest: memoryview) -> None:
        start = data_offset + offset
        dest[:] = view[start: start + dest.nbytes]

    def read_bytes(offset: int, n: int) -> bytes:
        return bytes(view[data_offset + offset: data_offset + offset + n])

    return decode(doc["value"], _Blobs(doc["blobs"], doc["hash"], view.nbytes - data_offset, read, read_bytes))


def load_binary_file(f: Any, size: int) -> Any:
    f.seek(0)
    json_len, data_offset, sha = parse_header(f.read(HEADER.size), size)
    doc = _parse_document(f.read(json_len), sha)

    def read(offset: int, dest: memoryview) -> None:
        f.seek(data_offset + offset)
        got, n = 0, dest.nbytes
        while got < n:
            k = f.readinto(dest[got:])
            if not k:
                raise DamagedFile("binary state file is truncated (it shrank while being read)")
            got += k

    def read_bytes(offset: int, n: int) -> bytes:
        f.seek(data_offset + offset)
        out = f.read(n)
        if len(out) != n:
            raise DamagedFile("binary state file is truncated (it shrank while being read)")
        return out

    return decode(doc["value"], _Blobs(doc["blobs"], doc["hash"], size - data_offset, read, read_bytes))
