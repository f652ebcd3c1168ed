"""The lossless codec of states: a state tree <-> a JSON document.

A state is a tree of plain containers whose leaves may be example data. Values JSON cannot hold
become tagged objects ``{"__ri__": kind, ...}``: bytes, numpy arrays (every dtype, exactly: byte
order, units, string lengths, structured fields with offsets and padding: ``state_arrays.py``) and numpy scalars,
tuples, sets, dicts with non-string keys, ``bytearray``, non-finite floats, complex numbers, dates
and times (time zones and pandas' timestamps included, ``state_times.py``), ``Decimal``, PIL
images of PIL's own classes with their ``info`` (``state_images.py``), and dense CPU torch tensors
(``state_tensors.py``). The decoder rebuilds exactly those kinds and
nothing else, so decoding never runs code (no pickle, no ``eval``; dtypes are rebuilt from their
JSON description, images as pickle rebuilds them). Values are encoded by their exact type: a subclass
(an ``IntEnum``, an ``OrderedDict``, a ``namedtuple``, a pandas ``Timestamp`` is one of
``datetime``'s...) would come back as its base type, so one the codec does not know is refused
with a ``TypeError`` that says where in the state it is; so is any other type.

Large arrays and bytes may be handed out as *blobs* (raw memoryviews, referenced by index in
the document); ``state_files.py`` stores them in its binary state file. Documents nested more
than :data:`MAX_DEPTH` levels deep are refused with a ``ValueError`` both ways.
"""

from __future__ import annotations

import base64
import decimal
import math
import sys
from typing import Any

import numpy as np

from .state_arrays import array_bytes, check_shape, dtype_from_json, dtype_to_json, string_scalar
from .state_images import (decode_ifd_rational, decode_image, decode_png_text, encode_image, ifd_rational_class,
                           pil_image_class, png_text_class)
from .state_logs import BufferLog
from .state_tensors import tensor_bytes, tensor_class, tensor_from_bytes, tensor_itemsize
from .state_times import TIME_KINDS, decode_time, encode_time

TAG = "__ri__"
#: arrays and bytes of at least this many bytes become blobs (when the caller collects blobs)
BLOB_MIN = 1024
#: how deeply a state's JSON document may nest (containers inside containers)
MAX_DEPTH = 400
_PLAIN = frozenset((str, int, bool, type(None)))  # JSON values kept as they are (finite floats are checked)
_CONTAINERS = frozenset((dict, list))
#: kinds of the tagged objects a state itself holds: a buffer entry standing for a position
#: (``state_buffers.position_entry``) and a DataLoader worker's buffer described by arithmetic
#: (``nodes/worker_positions.py``). The encoder escapes them as it escapes any dict holding the
#: tag, so a document it wrote never carries them as tags; the plain JSON of a state
#: (``json.dump(loader.state_dict(), f)``) does, and they decode as the dicts they are.
STATE_KINDS = frozenset(("position", "derived"))


class StateList(list):
    """Base of the list types a state itself is made of (``state_buffers.py``: shuffle buffers,
    held examples): encoded as lists. Any other subclass of ``list`` is refused, as it would
    come back a plain list."""

    __slots__ = ()


class DamagedFile(ValueError):
    """The data of a binary state file is not what its document says (a blob's checksum, its
    length): decoding raises it as it is, not as a malformed encoded value."""


def too_deep() -> ValueError:
    return ValueError(f"the state is nested more than {MAX_DEPTH} levels deep (or refers to itself); "
                      "states this deep are not supported")


# --------------------------------------------------------------------------- encoding


class Encoder:
    """Encodes one state. With ``blobs`` (a list), large arrays/bytes are appended to it as flat
    memoryviews and referenced by index; without, everything is inline base64."""

    __slots__ = ("blobs", "enc", "_release")

    def __init__(self, blobs: list | None):
        self.blobs = blobs
        other = self.encode_other

        def enc(obj: Any, d: int) -> Any:
            """The fast path, a closure: plain dicts and lists of JSON values (most of a state)."""
            t = type(obj)
            if t is dict:
                if d > MAX_DEPTH:
                    raise too_deep()
                if TAG not in obj and all(type(k) is str for k in obj):
                    d1 = d + 1
                    return {k: v if type(v) in _PLAIN else enc(v, d1) for k, v in obj.items()}
            elif t is list:
                if d > MAX_DEPTH:
                    raise too_deep()
                d1 = d + 1
                return [v if type(v) in _PLAIN else enc(v, d1) for v in obj]
            return other(obj, d)

        self.enc = enc

        def release() -> None:
            nonlocal enc, other
            enc = other = None

        self._release = release

    def release(self) -> None:
        """Let go of what the encoder holds (call it when done): ``enc`` calls itself and this
        encoder's method, a reference cycle that left every encoder - one per save - to the cyclic
        garbage collector, with ``blobs`` (views of the state's arrays) unless cleared."""
        self.blobs = None
        self._release()

    def binary(self, data: Any) -> dict:
        """A ``bytes`` tag for bytes-like data: a blob reference or base64."""
        view = memoryview(data)
        view = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        if self.blobs is not None and view.nbytes >= BLOB_MIN:
            self.blobs.append(view)
            return {TAG: "bytes", "blob": len(self.blobs) - 1}
        return {TAG: "bytes", "b64": base64.b64encode(view).decode()}

    def raw(self, out: dict, data: memoryview) -> dict:
        """``out`` with the raw bytes of an array or tensor: a blob reference or base64."""
        if self.blobs is not None and data.nbytes >= BLOB_MIN:
            self.blobs.append(data)
            out["blob"] = len(self.blobs) - 1
        else:
            out["b64"] = base64.b64encode(data).decode()
        return out

    def encode_other(self, obj: Any, d: int) -> Any:  # ``d``: JSON depth of the value being produced
        t = type(obj)
        if t is str or t is int or t is bool or obj is None:
            return obj
        if t is float:
            if math.isfinite(obj):
                return obj
            return {TAG: "float", "v": repr(obj)}
        if d > MAX_DEPTH:
            raise too_deep()
        if t is dict:
            if all(type(k) is str for k in obj) and TAG not in obj:
                enc, d1 = self.enc, d + 1
                # plain JSON values (most of a state) are kept without a call
                return {k: v if type(v) in _PLAIN else enc(v, d1) for k, v in obj.items()}
            return {TAG: "dict", "items": [[self.enc(k, d + 3), self.enc(v, d + 3)] for k, v in obj.items()]}
        if t is list or t is BufferLog or isinstance(obj, StateList):  # the state's list types (shuffle buffers)
            if t is BufferLog:
                obj = obj.entries()
            enc, d1 = self.enc, d + 1
            return [v if type(v) in _PLAIN else enc(v, d1) for v in obj]
        if t is tuple:
            return {TAG: "tuple", "items": [self.enc(v, d + 2) for v in obj]}
        if t is bytes:
            return self.binary(obj)
        if t is bytearray:
            return {**self.binary(obj), TAG: "bytearray"}
        if t is np.memmap:  # a slice of a memory-mapped token file: its values, back as a plain array
            obj, t = obj.view(np.ndarray), np.ndarray  # (in memory, as np.array(the slice) gives them)
        if t is np.ndarray:
            if obj.dtype == object:
                return {TAG: "ndarray_obj", "shape": list(obj.shape),
                        "items": [self.enc(v, d + 2) for v in obj.ravel().tolist()]}
            if obj.dtype.hasobject:
                raise TypeError(f"cannot store a numpy array of dtype {obj.dtype} (it holds Python objects) in a state")
            arr = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)
            out = {TAG: "ndarray", "dtype": dtype_to_json(arr.dtype), "shape": list(obj.shape)}
            return self.raw(out, array_bytes(arr))
        if isinstance(obj, np.generic) and t is obj.dtype.type:
            if obj.dtype.hasobject:
                raise TypeError(f"cannot store a numpy scalar of dtype {obj.dtype} in a state")
            raw = obj.tobytes()
            if obj.dtype.kind in "SU":  # numpy gives an empty string scalar (dtype <U0 / |S0) one NUL character
                raw = raw[: obj.dtype.itemsize]
            return {TAG: "npscalar", "dtype": dtype_to_json(obj.dtype), "b64": base64.b64encode(raw).decode()}
        if t is decimal.Decimal:
            return {TAG: "decimal", "v": str(obj)}
        if t is complex:  # e.g. the .item() of a numpy complex scalar
            return {TAG: "complex", "v": [repr(obj.real), repr(obj.imag)]}
        timed = encode_time(obj, TAG)
        if timed is not None:
            return timed
        pil = pil_image_class()
        if pil is not None and isinstance(obj, pil):
            return self.image(obj, pil, d)
        if t is tensor_class():
            fields, data = tensor_bytes(obj)
            return self.raw({TAG: "tensor", **fields}, array_bytes(data))
        if t is ifd_rational_class():  # in a TIFF image's info (its dpi)
            return {TAG: "ifd_rational", "v": [self.enc(obj.numerator, d + 2), obj.denominator]}
        if t is png_text_class():  # in a PNG image's info (international text: XMP metadata...)
            return {TAG: "png_itxt", "v": [str(obj), obj.lang, obj.tkey]}
        if t is set or t is frozenset:  # e.g. in an ICO image's info (its sizes)
            return {TAG: t.__name__, "items": [self.enc(v, d + 2) for v in obj]}
        raise TypeError(
            f"cannot store a value of type {_type_name(t)} in a state; supported (these exact "
            "types, not subclasses): JSON types, bytes, bytearray, tuples, sets, numpy arrays/scalars, PIL images, "
            "complex, datetime/date/time/timedelta, pandas Timestamp/Timedelta, Decimal, torch tensors (and "
            "np.memmap slices, stored as arrays). Use buffer_state='replay' or "
            "'drop' on shuffle() for examples that hold other objects."
        )

    def image(self, img: Any, pil: type, d: int) -> dict:
        """An image of its class (PIL's own: ``JpegImageFile``... with what its pickled state
        adds, e.g. the file's name), with its ``info``: PIL's ``==`` compares them all."""
        out: dict[str, Any] = {TAG: "image"}
        cls, pixels = type(img), None
        if cls is not pil:
            module = sys.modules.get(cls.__module__) if cls.__module__.startswith("PIL.") else None
            if getattr(module, cls.__qualname__, None) is not cls:
                raise TypeError(f"cannot store a PIL image of class {_type_name(cls)} in a state: only PIL's own "
                                "image classes are rebuilt")
            state = img.__getstate__()  # [info, mode, size, palette, pixels, *what the class adds]
            pixels = state[4]
            out["class"] = f"{cls.__module__}:{cls.__qualname__}"
            if len(state) > 5:
                out["extra"] = self.enc(state[5:], d + 1)
        if img.info:
            out["info"] = self.enc(img.info, d + 1)
        # a large image in a binary state file: its pixels as a blob, not PNG (encoding one costs
        # milliseconds, about what writing a few MB costs)
        raw = self.blobs is not None and img.width * img.height >= BLOB_MIN
        parts = encode_image(img, raw, pixels)
        for k, v in parts.items():
            if k == "palette":
                out[k] = [v[0], self.binary(v[1])]
            else:
                out[k] = self.binary(v) if type(v) is bytes else v
        return out


# --------------------------------------------------------------------------- decoding


class Decoder:
    __slots__ = ("blobs", "dec", "_release")

    def __init__(self, blobs: Any):
        self.blobs = blobs
        tagged = self.decode_tagged

        def dec(obj: Any, d: int) -> Any:
            """The fast path, a closure: untagged dicts and lists."""
            t = type(obj)
            if t is list:
                if d > MAX_DEPTH:
                    raise too_deep()
                d1 = d + 1
                return [dec(v, d1) if type(v) in _CONTAINERS else v for v in obj]
            if t is not dict:
                return obj
            if d > MAX_DEPTH:
                raise too_deep()
            if TAG not in obj:
                d1 = d + 1
                return {k: dec(v, d1) if type(v) in _CONTAINERS else v for k, v in obj.items()}
            return tagged(obj, d)

        self.dec = dec

        def release() -> None:
            nonlocal dec, tagged
            dec = tagged = None

        self._release = release

    def release(self) -> None:
        """Let go of what the decoder holds (call it when done; see :meth:`Encoder.release`):
        ``blobs``, the file or bytes a binary state was read from, and the reference cycle."""
        self.blobs = None
        self._release()

    def binary(self, obj: Any) -> bytes:
        if "blob" in obj:
            if self.blobs is None:
                raise ValueError("refers to a binary blob, but this is a JSON text state")
            return self.blobs.bytes(obj["blob"])
        return base64.b64decode(obj["b64"], validate=True)

    def decode_tagged(self, obj: dict, d: int) -> Any:
        tag = obj[TAG]
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
                return self.array(obj, dtype_from_json(obj["dtype"]))
            if tag == "tensor":
                dtype, itemsize = tensor_itemsize(obj)
                # its bytes as an array of opaque items of its size, then as the tensor's memory
                data = self.array(obj, np.dtype(f"V{itemsize}")).reshape(-1).view(np.uint8)
                return tensor_from_bytes(obj, dtype, data)
            if tag == "ndarray_obj":
                items = [self.dec(v, d + 2) for v in obj["items"]]
                arr = np.empty(len(items), dtype=object)
                arr[:] = items
                return arr.reshape(obj["shape"])
            if tag == "npscalar":
                dtype = dtype_from_json(obj["dtype"])
                raw = base64.b64decode(obj["b64"], validate=True)
                if dtype.kind in "SU" and dtype.itemsize == 0 and len(raw) <= 4 and not raw.strip(b"\0"):
                    raw = b""  # an empty string scalar, saved with the NUL character numpy gives it
                if len(raw) != dtype.itemsize:
                    raise ValueError(f"{len(raw)} bytes cannot hold a scalar of {dtype}")
                if dtype.kind in "SU":  # built from its value: an array's item would lose trailing NULs
                    return string_scalar(dtype, raw)
                arr = np.empty(1, dtype)
                if raw:
                    array_bytes(arr)[:] = raw  # bytewise: padding bytes of structured dtypes included
                return arr[0]
            if tag == "image":
                info = self.dec(obj["info"], d + 1) if "info" in obj else {}
                extra = self.dec(obj["extra"], d + 1) if "extra" in obj else []
                if type(info) is not dict or type(extra) is not list:
                    raise ValueError("bad image info")
                return decode_image(obj, self.binary_of, info, extra)
            if tag in TIME_KINDS:
                return decode_time(tag, obj)
            if tag == "ifd_rational":
                return decode_ifd_rational(self.dec(obj["v"], d + 1))
            if tag == "png_itxt":
                return decode_png_text(self.dec(obj["v"], d + 1))
            if tag in ("set", "frozenset"):
                items = [self.dec(v, d + 2) for v in obj["items"]]
                return set(items) if tag == "set" else frozenset(items)
            if tag == "bytearray":
                return bytearray(self.binary(obj))
            if tag == "decimal":
                return decimal.Decimal(obj["v"])
            if tag == "complex":
                real, imag = obj["v"]
                if type(real) is not str or type(imag) is not str:
                    raise ValueError(f"bad complex number {obj['v']!r}")
                return complex(float(real), float(imag))
        except DamagedFile:
            raise
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, MemoryError, decimal.InvalidOperation) as e:
            raise ValueError(f"state holds a malformed encoded value of kind '{tag}': {e}") from None
        if tag in STATE_KINDS:  # the state's own object in a plain JSON state, not an encoded value
            return {k: self.dec(v, d + 1) if type(v) in _CONTAINERS else v for k, v in obj.items()}
        raise ValueError(f"state holds an encoded value of unknown kind '{tag}'")

    def array(self, obj: dict, dtype: np.dtype) -> np.ndarray:
        """A new array of ``dtype`` and the shape ``obj`` gives, holding its raw bytes."""
        shape = obj["shape"]
        if "blob" in obj:
            if self.blobs is None:
                raise ValueError("refers to a binary blob, but this is a JSON text state")
            return self.blobs.array(obj["blob"], dtype, shape)
        raw = base64.b64decode(obj["b64"], validate=True)
        check_shape(shape, dtype, len(raw))
        arr = np.empty(shape, dtype)
        if raw:
            array_bytes(arr)[:] = raw
        return arr

    def binary_of(self, obj: Any) -> bytes:
        if type(obj) is not dict or obj.get(TAG) != "bytes":
            raise ValueError("expected encoded bytes")
        return self.binary(obj)


def encode(state: Any, blobs: list | None) -> Any:
    if not isinstance(state, (dict, list)):
        raise TypeError(f"expected a state (a dict) or a list of states, got {type(state).__name__}")
    if isinstance(state, dict):
        state = {k: v for k, v in state.items() if k != "checksum"}
    try:
        encoder = Encoder(blobs)
        try:
            return encoder.enc(state, 1)
        except TypeError as e:
            raise TypeError(f"{e} (at {_where_refused(state)})") from None
        finally:
            encoder.release()
    except RecursionError:
        raise too_deep() from None


def _type_name(t: type) -> str:
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _where_refused(state: Any) -> str:
    """Where in ``state`` the value the encoder refused is, as a subscript path
    (``['state']['buffer'][0][3]['text']``: the last key names the column). Only called once
    encoding failed: it encodes the subtrees again on the way down."""
    probe = Encoder(None)
    try:
        path, node = "", state
        for _ in range(MAX_DEPTH):
            t = type(node)
            if t is dict:
                items: Any = [(k, v) for k, v in node.items()] + [(None, k) for k in node]  # keys last
            elif t in (list, tuple, BufferLog) or isinstance(node, StateList):
                items = enumerate(node.entries() if t is BufferLog else node)
            else:
                break
            for k, v in items:
                try:
                    probe.enc(v, 1)
                except TypeError:
                    path += "[key]" if k is None and t is dict else f"[{k!r}]"
                    node = v
                    break
            else:
                break
    finally:
        probe.release()
    return f"state{path}" if path else "the top of the state"


def decode(value: Any, blobs: Any) -> Any:
    try:
        decoder = Decoder(blobs)
        try:
            return decoder.dec(value, 1)
        finally:
            decoder.release()
    except RecursionError:
        raise too_deep() from None
