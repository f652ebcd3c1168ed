"""The state envelope: format version, pipeline fingerprint, fast copy and a lossless JSON codec.

A pipeline's live state is a tree of plain dicts owned by its nodes (see ``nodes/base.py``).
``state_dict()`` wraps a copy of that tree in an *envelope*::

    {"format": "resumable_iterable.state", "version": 1,
     "fingerprint": "<16 hex>", "pipeline": {<shape of the pipeline>},
     "epoch": 0, "state": {<the node tree>}}

Copying is the hot path (``StatefulDataLoader`` asks for a state after every batch), so
:func:`copy_state` is a hand-written recursive copy of plain containers that copies
:class:`ExampleList` (shuffle buffers, peeked examples) *shallowly*: a new list holding the
same example objects. No JSON is encoded at capture time.

Serialising is done once, when the user saves: :func:`dumps_state` encodes values JSON cannot
hold (bytes, numpy arrays and scalars, tuples, non-finite floats, dates) as tagged objects and
adds a SHA-256 checksum of the payload; :func:`loads_state` verifies and decodes. Loading never
runs code: the decoder only rebuilds the few tagged value types listed here.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import hashlib
import json
import math
import os
from typing import Any, Iterator

import numpy as np

FORMAT = "resumable_iterable.state"
VERSION = 1
#: an elastic-resume plan (see ``plan.py``): what a worker/rank loads when the worker count changed
PLAN_FORMAT = "resumable_iterable.elastic_plan"
#: the data-state file the Trainer callback writes into checkpoints (``integrations/transformers.py``)
TRAINER_FORMAT = "resumable_iterable.trainer"
_TAG = "__ri__"


class ExampleList(list):
    """A list of examples inside a state; :func:`copy_state` copies it shallowly."""

    __slots__ = ()


CHUNK_BITS = 6
CHUNK = 1 << CHUNK_BITS  # examples per chunk of a shuffle buffer (buffer_state="examples")


class ExampleChunks(list):
    """A shuffle buffer held as chunks: ``[[ex, ...], [ex, ...], ...]``, every chunk holding
    :data:`CHUNK` examples except the last. :func:`copy_state` copies it in O(chunks): the copy
    shares the chunk lists, and ``owned`` (one flag per chunk, cleared by every copy) tells the
    live buffer which chunks it may still write in place - it copies a shared chunk before
    writing to it (copy-on-write). Loading flattens and re-chunks, so a state's chunking is free."""

    __slots__ = ("owned",)

    def __init__(self, chunks: Any = ()):
        super().__init__(chunks)
        self.owned = bytearray(len(self))


class DroppedChunks(ExampleChunks):
    """A chunked shuffle buffer that state copies leave out (``buffer_state="drop"``, HF's lossy
    behaviour): its copies are empty, so the live buffer never shares a chunk."""

    __slots__ = ()


def copy_state(obj: Any) -> Any:
    """Copy a state tree: dicts and lists deeply, :class:`ExampleList` shallowly, scalars as-is.

    This is the hot path of ``state_dict()``: a dict is copied with ``dict.copy()`` and only its
    container values are visited again; scalars (ints, strings, ...) are immutable and shared.
    """
    t = type(obj)
    if t is dict:
        new = obj.copy()
        for k, v in obj.items():
            if type(v) in _CONTAINERS:
                new[k] = copy_state(v)
        return new
    if t is list:
        return [copy_state(v) if type(v) in _CONTAINERS else v for v in obj]
    if t is ExampleList:
        # building a list subclass from another subclass takes CPython's slow, item by item path;
        # from the plain ``list.copy`` (a C-level slice) it is a block copy. The result stays an
        # ExampleList so that later copies of this copy are shallow too.
        return ExampleList(list.copy(obj))
    if t is DroppedChunks:
        return []
    if t is ExampleChunks:
        new = ExampleChunks(list.copy(obj))
        owned = obj.owned
        owned[:] = bytes(len(owned))  # in place: the live node holds this bytearray
        return new
    return obj


_CONTAINERS = frozenset((dict, list, ExampleList, ExampleChunks, DroppedChunks))


def find_documents(doc: Any, formats: tuple[str, ...] = (FORMAT,), path: str = "") -> Iterator[tuple[str, dict]]:
    """``(path, obj)`` for each dict nested in ``doc`` (e.g. a DataLoader or Trainer state) whose
    ``"format"`` is one of ``formats``; the search does not descend into those."""
    if isinstance(doc, dict):
        if doc.get("format") in formats:
            yield path or "/", doc
            return
        for k, v in doc.items():
            yield from find_documents(v, formats, f"{path}/{k}")
    elif isinstance(doc, (list, tuple)):
        for i, v in enumerate(doc):
            yield from find_documents(v, formats, f"{path}/{i}")


def fingerprint(shape: Any) -> str:
    """A short stable hash of a pipeline shape (plain JSON data)."""
    text = json.dumps(shape, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def shape_difference(saved: Any, current: Any, path: str = "pipeline") -> str | None:
    """Describe the first place where two pipeline shapes differ, or ``None`` if they are equal."""
    if isinstance(saved, dict) and isinstance(current, dict):
        if saved.get("node") != current.get("node"):
            return f"{path}: the state has a '{saved.get('node')}' node where this pipeline has '{current.get('node')}'"
        for key in sorted(set(saved) | set(current)):
            if key == "children":
                continue
            if saved.get(key) != current.get(key):
                return (f"{path} ({current.get('node')}): parameter '{key}' is {saved.get(key)!r} in the state "
                        f"but {current.get(key)!r} in this pipeline")
        sc, cc = saved.get("children", []), current.get("children", [])
        if len(sc) != len(cc):
            return f"{path} ({current.get('node')}): {len(sc)} inputs in the state, {len(cc)} in this pipeline"
        for i, (s, c) in enumerate(zip(sc, cc)):
            d = shape_difference(s, c, f"{path}/{current.get('node')}[{i}]")
            if d:
                return d
        return None
    if saved != current:
        return f"{path}: {saved!r} in the state but {current!r} in this pipeline"
    return None


# --------------------------------------------------------------------------- lossless JSON codec


def _encode(obj: Any) -> Any:
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:
        return obj
    if t is float:
        if math.isfinite(obj):
            return obj
        return {_TAG: "float", "v": repr(obj)}
    if t is dict or isinstance(obj, dict):
        if all(type(k) is str for k in obj) and _TAG not in obj:
            return {k: _encode(v) for k, v in obj.items()}
        return {_TAG: "dict", "items": [[_encode(k), _encode(v)] for k, v in obj.items()]}
    if t is list or t is ExampleList or t is ExampleChunks or t is DroppedChunks:
        return [_encode(v) for v in obj]
    if isinstance(obj, list):
        return [_encode(v) for v in obj]
    if t is tuple:
        return {_TAG: "tuple", "items": [_encode(v) for v in obj]}
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {_TAG: "bytes", "b64": base64.b64encode(bytes(obj)).decode()}
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return {_TAG: "ndarray_obj", "shape": list(obj.shape), "items": [_encode(v) for v in obj.ravel().tolist()]}
        arr = np.ascontiguousarray(obj)
        return {_TAG: "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape),
                "b64": base64.b64encode(arr.tobytes()).decode()}
    if isinstance(obj, np.generic):
        return {_TAG: "npscalar", "dtype": obj.dtype.str, "b64": base64.b64encode(obj.tobytes()).decode()}
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return _encode(float(obj))
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
    raise TypeError(
        f"cannot store a value of type {type(obj).__name__} in a JSON state; supported: JSON types, bytes, "
        "tuples, numpy arrays/scalars, datetime/date/time/timedelta, Decimal. Use buffer_state='replay' "
        "or 'drop' on shuffle() for examples that hold other objects."
    )


def _decode(obj: Any) -> Any:
    t = type(obj)
    if t is list:
        return [_decode(v) for v in obj]
    if t is not dict:
        return obj
    tag = obj.get(_TAG)
    if tag is None:
        return {k: _decode(v) for k, v in obj.items()}
    try:
        if tag == "float":
            return float(obj["v"])
        if tag == "dict":
            return {_decode(k) if not isinstance(k, list) else tuple(_decode(k)): _decode(v) for k, v in obj["items"]}
        if tag == "tuple":
            return tuple(_decode(v) for v in obj["items"])
        if tag == "bytes":
            return base64.b64decode(obj["b64"], validate=True)
        if tag == "ndarray":
            dtype = np.dtype(obj["dtype"])
            if dtype.hasobject:
                raise ValueError("object dtype")
            return np.frombuffer(base64.b64decode(obj["b64"], validate=True), dtype=dtype).reshape(obj["shape"]).copy()
        if tag == "ndarray_obj":
            arr = np.empty(len(obj["items"]), dtype=object)
            arr[:] = [_decode(v) for v in obj["items"]]
            return arr.reshape(obj["shape"])
        if tag == "npscalar":
            dtype = np.dtype(obj["dtype"])
            if dtype.hasobject:
                raise ValueError("object dtype")
            return np.frombuffer(base64.b64decode(obj["b64"], validate=True), dtype=dtype)[0]
        if tag == "datetime":
            return _dt.datetime.fromisoformat(obj["v"])
        if tag == "date":
            return _dt.date.fromisoformat(obj["v"])
        if tag == "time":
            return _dt.time.fromisoformat(obj["v"])
        if tag == "timedelta":
            d, s, us = obj["v"]
            return _dt.timedelta(days=d, seconds=s, microseconds=us)
        if tag == "decimal":
            return decimal.Decimal(obj["v"])
    except (KeyError, TypeError, ValueError, decimal.InvalidOperation, base64.binascii.Error) as e:
        raise ValueError(f"state holds a malformed encoded value of kind '{tag}': {e}") from None
    raise ValueError(f"state holds an encoded value of unknown kind '{tag}'")


def _checksum(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def dumps_state(state: dict, indent: int | None = None) -> str:
    """Encode a state (as returned by ``state_dict()``) to JSON text with a checksum."""
    if not isinstance(state, dict):
        raise TypeError(f"expected a state dict, got {type(state).__name__}")
    payload = _encode({k: v for k, v in state.items() if k != "checksum"})
    payload["checksum"] = _checksum(payload)
    return json.dumps(payload, indent=indent, allow_nan=False)


def loads_state(text: str | bytes) -> dict:
    """Decode JSON text written by :func:`dumps_state`, verifying its checksum."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"state is not valid JSON (truncated or damaged?): {e}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"state must be a JSON object, got {type(raw).__name__}")
    if "checksum" in raw:
        body = {k: v for k, v in raw.items() if k != "checksum"}
        try:
            expected = _checksum(body)
        except ValueError as e:
            raise ValueError(f"state holds values JSON does not allow: {e}") from None
        if raw["checksum"] != expected:
            raise ValueError("state checksum does not match its content: the state was damaged or edited")
    return _decode({k: v for k, v in raw.items() if k != "checksum"})


def save_state(state: dict, path: str | os.PathLike) -> None:
    """Write a state to ``path`` atomically (write to a temporary file, then rename)."""
    write_atomic(path, dumps_state(state))


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash leaves either the old file or the new one."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_state(path: str | os.PathLike) -> dict:
    """Read a state written by :func:`save_state`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"state file {os.fspath(path)!r} is not UTF-8 JSON: {e}") from None
    try:
        return loads_state(text)
    except ValueError as e:
        raise ValueError(f"cannot load state file {os.fspath(path)!r}: {e}") from None


def check_envelope(state: Any) -> None:
    """Validate the envelope of a state (not its node payload)."""
    if not isinstance(state, dict):
        raise TypeError(f"a state must be a dict, got {type(state).__name__}")
    if type(state.get("format")) is not str or state.get("format") != FORMAT:
        raise ValueError(
            f"not a resumable_iterable state (format is {state.get('format')!r}, expected {FORMAT!r})"
        )
    version = state.get("version")
    if type(version) is not int or version != VERSION:  # 1.0 and True compare equal to 1
        raise ValueError(f"unsupported state version {version!r}: this library reads version {VERSION}")
    for key in ("fingerprint", "pipeline", "state", "epoch"):
        if key not in state:
            raise ValueError(f"state is missing its '{key}' entry")
    if type(state["fingerprint"]) is not str:
        raise ValueError(f"state 'fingerprint' must be a string, got {type(state['fingerprint']).__name__}")
    if not isinstance(state["pipeline"], dict):
        raise ValueError(f"state 'pipeline' must be an object, got {type(state['pipeline']).__name__}")
    if type(state["epoch"]) is not int or state["epoch"] < 0:
        raise ValueError(f"state 'epoch' must be a non-negative integer, got {state['epoch']!r}")
    if not isinstance(state["state"], dict):
        raise ValueError("state 'state' entry must be an object")


# --------------------------------------------------------------------------- copying held examples

_SHARED_AS_IS = frozenset((str, int, float, bool, bytes, complex, type(None), decimal.Decimal, _dt.datetime,
                           _dt.date, _dt.time, _dt.timedelta))


def copy_example(obj: Any) -> Any:
    """A copy of an example that shares nothing mutable with it: dicts, lists, tuples, sets,
    bytearrays and numpy arrays are copied (recursively), immutable values are shared, anything
    else is deep-copied.

    Nodes that keep examples in their state (a batch's partial rows, an interleave's peeked
    examples, a map's failed input) yield such a copy when a state copy may share the example:
    the user's functions may then edit it in place without changing a state taken earlier.
    """
    t = type(obj)
    if t in _SHARED_AS_IS or isinstance(obj, np.generic):
        return obj
    if t is dict:
        return {k: copy_example(v) for k, v in obj.items()}
    if t is list:
        return [copy_example(v) for v in obj]
    if t is tuple:
        return tuple(copy_example(v) for v in obj)
    if t is np.ndarray and not obj.dtype.hasobject:
        return obj.copy()
    if t is set:
        return {copy_example(v) for v in obj}
    if t is bytearray:
        return bytearray(obj)
    import copy

    return copy.deepcopy(obj)
