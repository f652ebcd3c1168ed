"""numpy arrays in states: an exact JSON description of every dtype (byte order, units, string
lengths, structured fields with offsets, titles and padding) and back, the raw bytes of an
array, and the checks that keep decoding from allocating more than the data it was given.
Used by ``state_codec.py`` (arrays and numpy scalars in documents) and ``state_files.py`` (blobs).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

#: how deeply a dtype's description may nest (structured fields, subarrays)
_MAX_DTYPE_DEPTH = 32


def dtype_to_json(dt: np.dtype) -> Any:
    """An exact JSON description of a dtype: its ``str`` (byte order, unit and size included)
    for plain dtypes, names/formats/offsets/itemsize for structured ones."""
    if dt.fields is not None:
        fields = [(name, dt.fields[name]) for name in dt.names]
        out: dict[str, Any] = {"names": list(dt.names), "formats": [dtype_to_json(f[0]) for _, f in fields],
                               "offsets": [f[1] for _, f in fields], "itemsize": dt.itemsize}
        if any(len(f) > 2 for _, f in fields):
            out["titles"] = [f[2] if len(f) > 2 else None for _, f in fields]
        if dt.isalignedstruct:
            out["aligned"] = True
        return out
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return {"subdtype": dtype_to_json(base), "shape": list(shape)}
    return dt.str


def dtype_from_json(obj: Any, depth: int = 0) -> np.dtype:
    if depth > _MAX_DTYPE_DEPTH:
        raise ValueError("dtype nested too deeply")
    if type(obj) is str:
        dt = np.dtype(obj)
    elif type(obj) is dict and "subdtype" in obj:
        shape = obj["shape"]
        if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"bad subarray shape {shape!r}")
        dt = np.dtype((dtype_from_json(obj["subdtype"], depth + 1), tuple(shape)))
    elif type(obj) is dict:
        names, formats, offsets, itemsize = obj["names"], obj["formats"], obj["offsets"], obj["itemsize"]
        if not (type(names) is list and all(type(n) is str for n in names) and type(formats) is list
                and type(offsets) is list and all(type(o) is int and o >= 0 for o in offsets)
                and type(itemsize) is int and itemsize >= 0 and len(names) == len(formats) == len(offsets)):
            raise ValueError("bad structured dtype")
        spec: dict[str, Any] = {"names": names, "formats": [dtype_from_json(f, depth + 1) for f in formats],
                                "offsets": offsets, "itemsize": itemsize}
        titles = obj.get("titles")
        if titles is not None:
            if type(titles) is not list or len(titles) != len(names) or not all(t is None or type(t) is str for t in titles):
                raise ValueError("bad dtype titles")
            spec["titles"] = titles
        dt = np.dtype(spec, align=obj.get("aligned") is True)
    else:
        raise ValueError(f"bad dtype {obj!r}")
    if dt.hasobject:
        raise ValueError("object dtype")
    return dt


def string_scalar(dtype: np.dtype, raw: bytes) -> Any:
    """The ``np.bytes_`` / ``np.str_`` scalar of ``dtype`` whose bytes are ``raw``. A scalar is as
    long as its value (its dtype says so), trailing NULs included: ``np.bytes_(b"ab\\0")`` (bytes
    ending in zeros are common) is not ``np.bytes_(b"ab")``, although an array holding either gives
    the latter back."""
    if dtype.kind == "S":
        return np.bytes_(raw)
    big = dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")
    return np.str_(raw.decode("utf-32-be" if big else "utf-32-le", errors="surrogatepass"))


def check_shape(shape: Any, dtype: np.dtype, nbytes: int) -> None:
    """Raise ``ValueError`` unless ``shape`` is a list of sizes that ``nbytes`` bytes of ``dtype``
    fill exactly (so that decoding never allocates more than the data it was given)."""
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"bad shape {shape!r}")
    count = math.prod(shape)
    if count * dtype.itemsize != nbytes:
        raise ValueError(f"{nbytes} bytes do not hold an array of shape {shape} and dtype {dtype}")
    if dtype.itemsize == 0 and count > 1 << 20:
        raise ValueError(f"{count} elements of a zero-size dtype")


def array_bytes(arr: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, as a flat memoryview (works for every dtype)."""
    if arr.nbytes == 0:
        return memoryview(b"")
    return memoryview(arr.reshape(-1).view(np.uint8))
