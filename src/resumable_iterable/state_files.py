"""Saving and loading states: a lossless codec and the two file formats it writes.

A state is a tree of plain containers whose leaves may be example data: bytes, numpy arrays,
PIL images, dates... :func:`encode_state` turns it into a JSON document. Values JSON cannot hold
become tagged objects ``{"__ri__": kind, ...}``; the decoder rebuilds exactly those kinds and
nothing else, so loading a state never runs code (no pickle, no ``eval``; images are decoded by
Pillow's PNG reader or rebuilt from raw pixels).

Two formats:

* **JSON text** (:func:`dumps_state`, and :func:`save_state` when the state holds no large
  values): one JSON object, binary values in base64, with a ``"checksum"`` entry - the SHA-256
  of the rest of the object in canonical form.
* **Binary state file** (:func:`save_state` when the state holds arrays or bytes of at least
  :data:`BLOB_MIN` bytes, typically the examples of a shuffle buffer): the same JSON document,
  with every large value replaced by a reference to a raw *blob* stored after it::

      header   64 bytes: MAGIC, format version (u32), flags (u32), JSON length (u64),
               data length (u64), SHA-256 of the JSON (32 bytes)         - little endian
      JSON     {"blobs": [[offset, nbytes, checksum hex], ...], "hash": "xxh3_128", "value": <encoded state>}
      data     the blobs, each at an offset that is a multiple of 64 (zero padding between)

  The JSON is checked against the header's SHA-256 and every blob against its own checksum
  (xxh3-128 from the ``xxhash`` package that HF ``datasets`` installs - it runs at memory
  speed; SHA-256 where ``xxhash`` is missing; the file names the one it used), so a truncated
  or damaged file is refused with a ``ValueError``. The blobs are the arrays' own
  bytes: writing costs one pass over them (hashing) plus the write; loading reads each blob
  straight into the memory of a new (writable) array.

:func:`load_state` and :func:`loads_state` read both formats. Files are written atomically
(a temporary file, ``fsync``, rename): a crash leaves the previous file or the new one.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import hashlib
import io
import json
import math
import os
import struct
import sys
from typing import Any, Callable

import numpy as np

try:  # installed with HF datasets; ~10x faster than SHA-256, so hashing the blobs costs little
    import xxhash as _xxhash
except ImportError:  # pragma: no cover
    _xxhash = None

_TAG = "__ri__"
#: first bytes of a binary state file (``\\x93`` is never the first byte of UTF-8 JSON text)
MAGIC = b"\x93RISTATE"
FILE_VERSION = 1
#: arrays and bytes of at least this many bytes are stored as blobs in a binary state file
BLOB_MIN = 1024
#: blobs start at multiples of this many bytes
ALIGN = 64
#: how deeply a state's JSON document may nest (containers inside containers)
MAX_DEPTH = 400
_HEADER = struct.Struct("<8sIIQQ32s")
assert _HEADER.size == 64
#: PIL image modes PNG stores exactly; other modes are saved as raw pixels
_PNG_MODES = frozenset(("1", "L", "LA", "P", "RGB", "RGBA", "I;16"))
_MAX_DTYPE_DEPTH = 32
#: the checksum of each blob in the binary state files this library writes
BLOB_HASH = "xxh3_128" if _xxhash is not None else "sha256"


def _blob_hasher(name: Any) -> Callable[[Any], str]:
    """The hex digest function of a blob checksum named in a binary state file."""
    if name == "sha256":
        return lambda data: hashlib.sha256(data).hexdigest()
    if name == "xxh3_128":
        if _xxhash is None:
            raise ValueError("its blobs are checksummed with xxh3_128: install the xxhash package to load it")
        return _xxhash.xxh3_128_hexdigest
    raise ValueError(f"unknown blob checksum {name!r}")


_PLAIN = frozenset((str, int, bool, type(None)))  # JSON values kept as they are (finite floats are checked)
_CONTAINERS = frozenset((dict, list))


def _too_deep() -> ValueError:
    return ValueError(f"the state is nested more than {MAX_DEPTH} levels deep (or refers to itself); "
                      "states this deep are not supported")


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# --------------------------------------------------------------------------- numpy dtypes


def _dtype_to_json(dt: np.dtype) -> Any:
    """An exact JSON description of a dtype: its ``str`` (byte order, unit and size included)
    for plain dtypes, names/formats/offsets/itemsize for structured ones."""
    if dt.fields is not None:
        fields = [(name, dt.fields[name]) for name in dt.names]
        out: dict[str, Any] = {"names": list(dt.names), "formats": [_dtype_to_json(f[0]) for _, f in fields],
                               "offsets": [f[1] for _, f in fields], "itemsize": dt.itemsize}
        if any(len(f) > 2 for _, f in fields):
            out["titles"] = [f[2] if len(f) > 2 else None for _, f in fields]
        if dt.isalignedstruct:
            out["aligned"] = True
        return out
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return {"subdtype": _dtype_to_json(base), "shape": list(shape)}
    return dt.str


def _dtype_from_json(obj: Any, depth: int = 0) -> np.dtype:
    if depth > _MAX_DTYPE_DEPTH:
        raise ValueError("dtype nested too deeply")
    if type(obj) is str:
        dt = np.dtype(obj)
    elif type(obj) is dict and "subdtype" in obj:
        shape = obj["shape"]
        if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"bad subarray shape {shape!r}")
        dt = np.dtype((_dtype_from_json(obj["subdtype"], depth + 1), tuple(shape)))
    elif type(obj) is dict:
        names, formats, offsets, itemsize = obj["names"], obj["formats"], obj["offsets"], obj["itemsize"]
        if not (type(names) is list and all(type(n) is str for n in names) and type(formats) is list
                and type(offsets) is list and all(type(o) is int and o >= 0 for o in offsets)
                and type(itemsize) is int and itemsize >= 0 and len(names) == len(formats) == len(offsets)):
            raise ValueError("bad structured dtype")
        spec: dict[str, Any] = {"names": names, "formats": [_dtype_from_json(f, depth + 1) for f in formats],
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


def _array_bytes(arr: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, as a flat memoryview (works for every dtype)."""
    if arr.nbytes == 0:
        return memoryview(b"")
    return memoryview(arr.reshape(-1).view(np.uint8))


# --------------------------------------------------------------------------- PIL images


def _pil_image_class() -> type | None:
    mod = sys.modules.get("PIL.Image")  # a PIL image can only exist if PIL was imported
    return getattr(mod, "Image", None) if mod is not None else None


def _encode_image(img: Any) -> dict:
    """A lossless description of a PIL image: PNG bytes for the modes PNG stores exactly (as
    HF ``datasets`` stores images without a source file), raw pixels for the other modes."""
    if img.mode in _PNG_MODES:
        buf = io.BytesIO()
        img.save(buf, format="PNG", compress_level=1)  # lossless at any level; 1 is the fastest
        return {"png": buf.getvalue()}
    out: dict[str, Any] = {"mode": img.mode, "size": list(img.size), "raw": img.tobytes()}
    if img.palette is not None and "P" in img.mode:
        pmode = img.palette.mode
        out["palette"] = [pmode, bytes(img.getpalette(pmode))]
    return out


def _decode_image(obj: dict, data: Callable[[Any], Any]) -> Any:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is installed with datasets[vision]
        raise ValueError("the state holds a PIL image; install Pillow to load it") from None
    try:
        if "png" in obj:
            png = data(obj["png"])
            if type(png) is not bytes:
                raise ValueError("image data must be bytes")
            img = Image.open(io.BytesIO(png), formats=["PNG"])
            img.load()
            return img
        mode, size, raw = obj["mode"], obj["size"], data(obj["raw"])
        if (type(mode) is not str or type(size) is not list or len(size) != 2
                or not all(type(n) is int and n >= 0 for n in size) or type(raw) is not bytes):
            raise ValueError("bad raw image")
        if size[0] * size[1] > 8 * len(raw):  # more pixels than the data can hold
            raise ValueError("image size does not match its data")
        img = Image.frombytes(mode, tuple(size), raw)
        if "palette" in obj:
            pmode, pal = obj["palette"]
            img.putpalette(data(pal), pmode)
        return img
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of Pillow on damaged data
        raise ValueError(f"bad image: {type(e).__name__}: {e}") from None


# --------------------------------------------------------------------------- encoding


class _Encoder:
    """Encodes one state. With ``blobs`` (a list), large arrays/bytes are appended to it as flat
    memoryviews and referenced by index; without, everything is inline base64."""

    __slots__ = ("blobs", "enc")

    def __init__(self, blobs: list | None):
        self.blobs = blobs
        other = self.encode_other

        def enc(obj: Any, d: int) -> Any:
            """The fast path, a closure: plain dicts and lists of JSON values (most of a state)."""
            t = type(obj)
            if t is dict:
                if d > MAX_DEPTH:
                    raise _too_deep()
                if _TAG not in obj and all(type(k) is str for k in obj):
                    d1 = d + 1
                    return {k: v if type(v) in _PLAIN else enc(v, d1) for k, v in obj.items()}
            elif t is list:
                if d > MAX_DEPTH:
                    raise _too_deep()
                d1 = d + 1
                return [v if type(v) in _PLAIN else enc(v, d1) for v in obj]
            return other(obj, d)

        self.enc = enc

    def binary(self, data: Any) -> dict:
        """A ``bytes`` tag for bytes-like data: a blob reference or base64."""
        view = memoryview(data)
        view = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        if self.blobs is not None and view.nbytes >= BLOB_MIN:
            self.blobs.append(view)
            return {_TAG: "bytes", "blob": len(self.blobs) - 1}
        return {_TAG: "bytes", "b64": base64.b64encode(view).decode()}

    def encode_other(self, obj: Any, d: int) -> Any:  # ``d``: JSON depth of the value being produced
        t = type(obj)
        if t is str or t is int or t is bool or obj is None:
            return obj
        if t is float:
            if math.isfinite(obj):
                return obj
            return {_TAG: "float", "v": repr(obj)}
        if d > MAX_DEPTH:
            raise _too_deep()
        if t is dict or isinstance(obj, dict):
            if all(type(k) is str for k in obj) and _TAG not in obj:
                enc, d1 = self.enc, d + 1
                # plain JSON values (most of a state) are kept without a call
                return {k: v if type(v) in _PLAIN else enc(v, d1) for k, v in obj.items()}
            return {_TAG: "dict", "items": [[self.enc(k, d + 3), self.enc(v, d + 3)] for k, v in obj.items()]}
        if isinstance(obj, list):  # list, and the state's list types (shuffle buffers)
            enc, d1 = self.enc, d + 1
            return [v if type(v) in _PLAIN else enc(v, d1) for v in obj]
        if t is tuple:
            return {_TAG: "tuple", "items": [self.enc(v, d + 2) for v in obj]}
        if isinstance(obj, (bytes, bytearray, memoryview)) and not isinstance(obj, np.generic):
            return self.binary(obj)
        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                return {_TAG: "ndarray_obj", "shape": list(obj.shape),
                        "items": [self.enc(v, d + 2) for v in obj.ravel().tolist()]}
            if obj.dtype.hasobject:
                raise TypeError(f"cannot store a numpy array of dtype {obj.dtype} (it holds Python objects) in a state")
            arr = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)
            out = {_TAG: "ndarray", "dtype": _dtype_to_json(arr.dtype), "shape": list(obj.shape)}
            data = _array_bytes(arr)
            if self.blobs is not None and data.nbytes >= BLOB_MIN:
                self.blobs.append(data)
                out["blob"] = len(self.blobs) - 1
            else:
                out["b64"] = base64.b64encode(data).decode()
            return out
        if isinstance(obj, np.generic):
            if obj.dtype.hasobject:
                raise TypeError(f"cannot store a numpy scalar of dtype {obj.dtype} in a state")
            return {_TAG: "npscalar", "dtype": _dtype_to_json(obj.dtype), "b64": base64.b64encode(obj.tobytes()).decode()}
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return self.enc(float(obj), d)
        if isinstance(obj, str):
            return str(obj)
        if isinstance(obj, _dt.datetime):
            return {_TAG: "datetime", "v": obj.isoformat()}
        if isinstance(obj, _dt.date):
            return {_TAG: "date", "v": obj.isoformat()}
        if isinstance(obj, _dt.time):
            return {_TAG: "time", "v": obj.isoformat()}
        if isinstance(obj, _dt.timedelta):
            return {_TAG: "timedelta", "v": [obj.days, obj.seconds, obj.microseconds]}
        if isinstance(obj, decimal.Decimal):
            return {_TAG: "decimal", "v": str(obj)}
        pil = _pil_image_class()
        if pil is not None and isinstance(obj, pil):
            return self.image(obj)
        raise TypeError(
            f"cannot store a value of type {type(obj).__name__} in a state; supported: JSON types, bytes, "
            "tuples, numpy arrays/scalars, PIL images, datetime/date/time/timedelta, Decimal. Use "
            "buffer_state='replay' or 'drop' on shuffle() for examples that hold other objects."
        )

    def image(self, img: Any) -> dict:
        parts = _encode_image(img)
        out: dict[str, Any] = {_TAG: "image"}
        for k, v in parts.items():
            if k == "palette":
                out[k] = [v[0], self.binary(v[1])]
            else:
                out[k] = self.binary(v) if type(v) is bytes else v
        return out


# --------------------------------------------------------------------------- decoding


class _Blobs:
    """The blobs of a binary state file, read on demand and checked against their SHA-256."""

    def __init__(self, table: Any, hash_name: Any, data_len: int, read: Callable[[int, memoryview], None],
                 read_bytes: Callable[[int, int], bytes]):
        self._hash = _blob_hasher(hash_name)
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
            raise ValueError(f"blob {i} of the state file does not match its checksum: the file was damaged or edited")

    def array(self, i: Any, dtype: np.dtype, shape: list) -> np.ndarray:
        offset, nbytes, digest = self.entry(i)
        if math.prod(shape) * dtype.itemsize != nbytes:
            raise ValueError(f"blob {i} holds {nbytes} bytes, not an array of shape {shape} and dtype {dtype}")
        arr = np.empty(shape, dtype)  # the blob is read straight into the new array's memory
        view = _array_bytes(arr)
        if nbytes:
            self._read(offset, view)
        self._check(i, view, digest)
        return arr

    def bytes(self, i: Any) -> bytes:
        offset, nbytes, digest = self.entry(i)
        data = self._read_bytes(offset, nbytes)
        self._check(i, data, digest)
        return data


class _Decoder:
    __slots__ = ("blobs", "dec")

    def __init__(self, blobs: _Blobs | None):
        self.blobs = blobs
        tagged = self.decode_tagged

        def dec(obj: Any, d: int) -> Any:
            """The fast path, a closure: untagged dicts and lists."""
            t = type(obj)
            if t is list:
                if d > MAX_DEPTH:
                    raise _too_deep()
                d1 = d + 1
                return [dec(v, d1) if type(v) in _CONTAINERS else v for v in obj]
            if t is not dict:
                return obj
            if d > MAX_DEPTH:
                raise _too_deep()
            if _TAG not in obj:
                d1 = d + 1
                return {k: dec(v, d1) if type(v) in _CONTAINERS else v for k, v in obj.items()}
            return tagged(obj, d)

        self.dec = dec

    def binary(self, obj: Any) -> bytes:
        if "blob" in obj:
            if self.blobs is None:
                raise ValueError("refers to a binary blob, but this is a JSON text state")
            return self.blobs.bytes(obj["blob"])
        return base64.b64decode(obj["b64"], validate=True)

    def decode_tagged(self, obj: dict, d: int) -> Any:
        tag = obj[_TAG]
        try:
            if tag == "float":
                return float(obj["v"])
            if tag == "dict":
                return {self.dec(k, d + 3) if not isinstance(k, list) else tuple(self.dec(k, d + 3)): self.dec(v, d + 3)
                        for k, v in obj["items"]}
            if tag == "tuple":
                return tuple(self.dec(v, d + 2) for v in obj["items"])
            if tag == "bytes":
                return self.binary(obj)
            if tag == "ndarray":
                dtype = _dtype_from_json(obj["dtype"])
                shape = obj["shape"]
                if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
                    raise ValueError(f"bad shape {shape!r}")
                if "blob" in obj:
                    if self.blobs is None:
                        raise ValueError("refers to a binary blob, but this is a JSON text state")
                    return self.blobs.array(obj["blob"], dtype, shape)
                raw = base64.b64decode(obj["b64"], validate=True)
                if math.prod(shape) * dtype.itemsize != len(raw):
                    raise ValueError(f"{len(raw)} bytes cannot hold shape {shape} of {dtype}")
                arr = np.empty(shape, dtype)
                if raw:
                    _array_bytes(arr)[:] = raw
                return arr
            if tag == "ndarray_obj":
                items = [self.dec(v, d + 2) for v in obj["items"]]
                arr = np.empty(len(items), dtype=object)
                arr[:] = items
                return arr.reshape(obj["shape"])
            if tag == "npscalar":
                dtype = _dtype_from_json(obj["dtype"])
                raw = base64.b64decode(obj["b64"], validate=True)
                if len(raw) != dtype.itemsize:
                    raise ValueError(f"{len(raw)} bytes cannot hold a scalar of {dtype}")
                arr = np.empty(1, dtype)
                if raw:
                    _array_bytes(arr)[:] = raw  # bytewise: padding bytes of structured dtypes included
                return arr[0]
            if tag == "image":
                return _decode_image(obj, self.binary_of)
            if tag == "datetime":
                return _dt.datetime.fromisoformat(obj["v"])
            if tag == "date":
                return _dt.date.fromisoformat(obj["v"])
            if tag == "time":
                return _dt.time.fromisoformat(obj["v"])
            if tag == "timedelta":
                days, s, us = obj["v"]
                return _dt.timedelta(days=days, seconds=s, microseconds=us)
            if tag == "decimal":
                return decimal.Decimal(obj["v"])
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, decimal.InvalidOperation) as e:
            raise ValueError(f"state holds a malformed encoded value of kind '{tag}': {e}") from None
        raise ValueError(f"state holds an encoded value of unknown kind '{tag}'")

    def binary_of(self, obj: Any) -> bytes:
        if type(obj) is not dict or obj.get(_TAG) != "bytes":
            raise ValueError("expected encoded bytes")
        return self.binary(obj)


# --------------------------------------------------------------------------- JSON text


def _checksum(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _encode_value(state: Any, blobs: list | None) -> Any:
    if not isinstance(state, (dict, list)):
        raise TypeError(f"expected a state (a dict) or a list of states, got {type(state).__name__}")
    if isinstance(state, dict):
        state = {k: v for k, v in state.items() if k != "checksum"}
    try:
        encoder = _Encoder(blobs)
        try:
            return encoder.enc(state, 1)
        finally:
            encoder.blobs = None  # the closure is a reference cycle: let it not hold the blobs
    except RecursionError:
        raise _too_deep() from None


def _text_document(payload: Any) -> dict:
    """The top-level JSON object of a text state: the payload with its checksum."""
    if type(payload) is not dict:  # a list of states: wrapped, so that the checksum has a place
        payload = {_TAG: "root", "value": payload}
    payload["checksum"] = _checksum(payload)
    return payload


def dumps_state(state: Any, indent: int | None = None) -> str:
    """Encode a state (as returned by ``state_dict()``), or a list of states (one per rank), to
    JSON text with a checksum. Binary values are stored inline in base64 (see :func:`save_state`
    for the compact binary file)."""
    payload = _encode_value(state, None)
    try:
        return json.dumps(_text_document(payload), indent=indent, allow_nan=False)
    except RecursionError:
        raise _too_deep() from None


def _loads_text(text: str | bytes) -> Any:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"state is not valid JSON (truncated or damaged?): {e}") from None
    except RecursionError:
        raise _too_deep() from None
    if not isinstance(raw, dict):
        raise ValueError(f"state must be a JSON object, got {type(raw).__name__}")
    if "checksum" in raw:
        body = {k: v for k, v in raw.items() if k != "checksum"}
        try:
            expected = _checksum(body)
        except ValueError as e:
            raise ValueError(f"state holds values JSON does not allow: {e}") from None
        except RecursionError:
            raise _too_deep() from None
        if raw["checksum"] != expected:
            raise ValueError("state checksum does not match its content: the state was damaged or edited")
    body = {k: v for k, v in raw.items() if k != "checksum"}
    if body.get(_TAG) == "root" and set(body) == {_TAG, "value"}:
        return _decode_value(body["value"], None)
    return _decode_value(body, None)


def _decode_value(value: Any, blobs: _Blobs | None) -> Any:
    try:
        decoder = _Decoder(blobs)
        try:
            return decoder.dec(value, 1)
        finally:
            decoder.blobs = None  # the closure is a reference cycle: let it not hold the file
    except RecursionError:
        raise _too_deep() from None


# --------------------------------------------------------------------------- binary state files


class EncodedState:
    """A state encoded for saving, before anything is written.

    ``document`` is the JSON document (UTF-8), ``blobs`` the raw large values it refers to (views
    of the state's own arrays and bytes, not copies), ``digest`` the SHA-256 (hex) that
    :func:`state_file_digest` returns for the written file: of the JSON text, or of the JSON
    document of a binary file (which holds the checksum of every blob).
    """

    __slots__ = ("document", "blobs", "digest", "_table", "_header")

    def __init__(self, state: Any):
        blobs: list[memoryview] = []
        payload = _encode_value(state, blobs)
        self.blobs = blobs
        try:
            if not blobs:
                self.document = json.dumps(_text_document(payload), allow_nan=False).encode()
                self.digest = hashlib.sha256(self.document).hexdigest()
                self._header = b""
                return
            table, offset, digest = [], 0, _blob_hasher(BLOB_HASH)
            for b in blobs:
                table.append([offset, b.nbytes, digest(b)])
                offset = _align(offset + b.nbytes)
            data_len = table[-1][0] + table[-1][1]
            self.document = json.dumps({"blobs": table, "hash": BLOB_HASH, "value": payload}, allow_nan=False,
                                       separators=(",", ":")).encode()
        except RecursionError:
            raise _too_deep() from None
        sha = hashlib.sha256(self.document)
        self.digest = sha.hexdigest()
        self._header = _HEADER.pack(MAGIC, FILE_VERSION, 0, len(self.document), data_len, sha.digest())

    @property
    def binary(self) -> bool:
        """Whether this is a binary state file (else JSON text)."""
        return bool(self._header)

    def chunks(self) -> list:
        """The file's bytes, as a list of buffers to write in order."""
        if not self._header:
            return [self.document]
        out: list = [self._header, self.document, bytes(_align(64 + len(self.document)) - 64 - len(self.document))]
        last = len(self.blobs) - 1
        for i, b in enumerate(self.blobs):
            out.append(b)
            pad = _align(b.nbytes) - b.nbytes
            if pad and i != last:
                out.append(bytes(pad))
        return out

    @property
    def nbytes(self) -> int:
        return sum(memoryview(c).nbytes for c in self.chunks())

    def to_bytes(self) -> bytes:
        return b"".join(self.chunks())

    def write(self, path: str | os.PathLike) -> None:
        """Write the file atomically (see :func:`write_atomic`)."""
        _write_chunks(path, self.chunks())


def encode_state(state: Any) -> EncodedState:
    """Encode a state (or a list of states) for :meth:`EncodedState.write`: every value is
    checked and encoded here, so an unsupported value raises before any file is touched."""
    return EncodedState(state)


def _write_chunks(path: str | os.PathLike, chunks: list) -> None:
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to ``path`` so that a crash leaves either the old file or the new
    one (a temporary file in the same folder, ``fsync``, rename); the temporary file is removed
    if writing fails."""
    _write_chunks(path, [text.encode("utf-8") if isinstance(text, str) else text])


def _parse_header(head: bytes, size: int) -> tuple[int, int, bytes]:
    """``(json_len, data_offset, json_sha256)`` of a binary state file of ``size`` bytes."""
    if len(head) < _HEADER.size:
        raise ValueError("binary state file is truncated (its header is incomplete)")
    magic, version, _flags, json_len, data_len, sha = _HEADER.unpack(head[: _HEADER.size])
    if magic != MAGIC:
        raise ValueError("not a binary state file")
    if version != FILE_VERSION:
        raise ValueError(f"unsupported binary state file version {version}: this library reads version {FILE_VERSION}")
    data_offset = _align(_HEADER.size + json_len)
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
        raise _too_deep() from None
    if type(doc) is not dict or set(doc) != {"blobs", "hash", "value"}:
        raise ValueError("binary state file holds an unexpected JSON document")
    return doc


def _loads_binary(data: bytes | bytearray | memoryview) -> Any:
    view = memoryview(data).cast("B")
    json_len, data_offset, sha = _parse_header(bytes(view[: _HEADER.size]), view.nbytes)
    doc = _parse_document(bytes(view[_HEADER.size: _HEADER.size + json_len]), sha)

    def read(offset: int, dest: memoryview) -> None:
        start = data_offset + offset
        dest[:] = view[start: start + dest.nbytes]

    def read_bytes(offset: int, n: int) -> bytes:
        return bytes(view[data_offset + offset: data_offset + offset + n])

    return _decode_value(doc["value"], _Blobs(doc["blobs"], doc["hash"], view.nbytes - data_offset, read, read_bytes))


def _load_binary_file(f: Any, size: int) -> Any:
    f.seek(0)
    json_len, data_offset, sha = _parse_header(f.read(_HEADER.size), size)
    doc = _parse_document(f.read(json_len), sha)

    def read(offset: int, dest: memoryview) -> None:
        f.seek(data_offset + offset)
        got, n = 0, dest.nbytes
        while got < n:
            k = f.readinto(dest[got:])
            if not k:
                raise ValueError("binary state file is truncated")
            got += k

    def read_bytes(offset: int, n: int) -> bytes:
        f.seek(data_offset + offset)
        out = f.read(n)
        if len(out) != n:
            raise ValueError("binary state file is truncated")
        return out

    return _decode_value(doc["value"], _Blobs(doc["blobs"], doc["hash"], size - data_offset, read, read_bytes))


# --------------------------------------------------------------------------- public API


def loads_state(data: str | bytes | bytearray | memoryview) -> Any:
    """Decode a state from JSON text written by :func:`dumps_state`, or from the bytes of a file
    written by :func:`save_state` (either format), verifying its checksums."""
    if isinstance(data, str):
        return _loads_text(data)
    if bytes(memoryview(data)[: len(MAGIC)]) == MAGIC:
        return _loads_binary(data)
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"state is neither a binary state file nor UTF-8 JSON text (not UTF-8: {e})") from None
    return _loads_text(text)


def save_state(state: Any, path: str | os.PathLike) -> None:
    """Write a state (or a list of states, e.g. one per rank) to ``path`` atomically.

    The file is JSON text (as :func:`dumps_state`) unless the state holds arrays or bytes of
    :data:`BLOB_MIN` bytes or more; then it is a binary state file that stores those values
    raw (see the module docstring). Everything is encoded before the file is opened: a value
    that cannot be saved raises ``TypeError``/``ValueError`` and leaves ``path`` untouched.
    """
    encode_state(state).write(path)


def load_state(path: str | os.PathLike) -> Any:
    """Read a state written by :func:`save_state` (JSON text or a binary state file)."""
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            head = f.read(len(MAGIC))
            if head == MAGIC:
                return _load_binary_file(f, os.fstat(f.fileno()).st_size)
            data = head + f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"it is neither a binary state file nor UTF-8 JSON (not UTF-8: {e})") from None
        return _loads_text(text)
    except ValueError as e:
        raise ValueError(f"cannot load state file {p!r}: {e}") from None


def state_file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 (hex) identifying a state file's content without reading its blobs: of the
    whole file for JSON text, of the JSON document (which holds every blob's checksum) for a
    binary state file. Equal to :attr:`EncodedState.digest` of what was written."""
    with open(path, "rb") as f:
        head = f.read(_HEADER.size)
        if head[: len(MAGIC)] == MAGIC:
            json_len, _, _ = _parse_header(head, os.fstat(f.fileno()).st_size)
            return hashlib.sha256(f.read(json_len)).hexdigest()
        sha = hashlib.sha256(head)
        while chunk := f.read(1 << 20):
            sha.update(chunk)
        return sha.hexdigest()
