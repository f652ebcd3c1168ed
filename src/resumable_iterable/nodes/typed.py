"""Per-example functions the facade runs through an ordinary per-example ``map`` node, so that
they get everything a map has (exactness at every cut point, worker/rank splits, elastic
resume, replay and global-shuffle support) without a node kind of their own:

* :class:`ApplyFeatures` - HF ``features`` applied to an example the way HF ``datasets`` applies
  them (``cast``, ``cast_column``, ``decode``, ``from_generator(features=...)``): a column the
  example lacks is filled with ``None``, then the example is encoded with the features (e.g. a
  ``ClassLabel`` name becomes its id, ``Value("float32")`` turns ints into floats) and decoded
  (e.g. ``Image()`` bytes become a PIL image, unless ``decode=False``); a column the features
  lack is dropped.
* :class:`AddColumn` - ``add_column(name, column)``: value ``column[index]`` for example ``index``.

Both are plain picklable objects (DataLoader workers receive them).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np


def value_dtype(feature: Any) -> np.dtype | None:
    """The numpy dtype of a numeric or boolean ``Value`` feature, else ``None``."""
    if type(feature).__name__ != "Value":
        return None
    try:
        dtype = np.dtype(getattr(feature, "dtype", None) or "O")
    except (TypeError, ValueError):  # "string", "timestamp[s]", "decimal128(12, 3)"...: not a numpy dtype
        return None
    return dtype if dtype.kind in "iufb" else None


def _number_check(name: str, feature: Any) -> Callable[[Any], Any] | None:
    """For a numeric ``Value`` column: a function that gives a number the column's type as
    Arrow's safe cast does (HF casts Arrow tables so) or raises ``ValueError`` naming the column:
    an integer out of range, a float with a fraction for an integer type. ``None`` otherwise."""
    np_dtype, dtype = value_dtype(feature), getattr(feature, "dtype", None)
    if np_dtype is None:
        return None
    if np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)

        def check_int(v: Any) -> Any:
            if isinstance(v, np.ndarray) and v.ndim == 0:
                v = v.item()
            if isinstance(v, str):  # as Arrow's cast reads a string: digits, nothing around them
                if not re.fullmatch(r"[+-]?[0-9]+", v):
                    raise ValueError(f"cast: column {name!r} is {dtype}: string {v!r} is not an integer")
                v = int(v)
            if isinstance(v, (float, np.floating)):
                if not float(v).is_integer():
                    raise ValueError(f"cast: column {name!r} is {dtype}: float value {v!r} would be truncated")
                v = int(v)
            if isinstance(v, (int, np.integer)) and not info.min <= v <= info.max:
                raise ValueError(f"cast: column {name!r} is {dtype}: value {v!r} is out of its range "
                                 f"[{info.min}, {info.max}]")
            return v

        return check_int
    if np_dtype.kind == "f" and np_dtype.itemsize < 8:
        scalar = np_dtype.type

        def check_float(v: Any) -> Any:  # the value the narrower float holds, as Arrow's cast gives it
            if not isinstance(v, (int, float, np.number)) or isinstance(v, bool):
                return v
            with np.errstate(over="ignore"):  # past the type's range: inf, as Arrow's cast gives
                return float(scalar(v))

        return check_float
    return None


def _time_check(name: str, feature: Any) -> Callable[[Any], Any] | None:
    """For a ``timestamp`` / ``date`` / ``time`` / ``duration`` ``Value`` column: a function that
    casts a value as Arrow's safe cast does (a date cast to ``timestamp[s]`` becomes a datetime, a
    datetime cast to ``date32`` a date) or raises ``ValueError`` naming the column. ``None`` otherwise."""
    dtype = str(getattr(feature, "dtype", ""))
    if type(feature).__name__ != "Value" or not dtype.startswith(("timestamp", "date", "time", "duration")):
        return None
    import pyarrow as pa

    import datetime

    pa_type = feature.pa_type
    # a value the cast leaves as it is (the common case: a column read with this type), without Arrow
    keep = datetime.date if dtype.startswith("date") else None
    digits = {"s": 1_000_000, "ms": 1000, "us": 1}.get(getattr(pa_type, "unit", None))
    if pa.types.is_timestamp(pa_type) and pa_type.tz is None and digits is not None:
        keep = datetime.datetime

    def check_time(v: Any) -> Any:
        if type(v) is keep and (digits is None or (v.tzinfo is None and v.microsecond % digits == 0)):
            return v
        try:
            return pa.array([v]).cast(pa_type).to_pylist()[0]
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise ValueError(f"cast: column {name!r} is {dtype}: value {v!r} cannot be cast: {e}") from None

    return check_time


def _text_check(name: str, feature: Any) -> Callable[[Any], Any] | None:
    """For a ``string`` / ``binary`` ``Value`` column: a function that converts a value between text
    and bytes as Arrow's cast does (HF casts Arrow tables so): ``bytes`` for a string column decoded
    as UTF-8 (``ValueError`` naming the column when they are not UTF-8, as Arrow's ``ArrowInvalid``),
    a ``str`` for a binary column encoded as UTF-8. HF's Python encoding would give ``str(b'x')``,
    ``"b'x'"``, and keep a ``str`` in a binary column. ``None`` for other features."""
    dtype = getattr(feature, "dtype", None)
    if type(feature).__name__ != "Value" or dtype not in ("string", "large_string", "binary", "large_binary"):
        return None
    if "binary" in dtype:
        def check_bytes(v: Any) -> Any:
            return v.encode("utf-8") if isinstance(v, str) else v

        return check_bytes

    def check_text(v: Any) -> Any:
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return v
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError as e:
            shown = repr(bytes(v))
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise ValueError(f"cast: column {name!r} is {dtype}: value {shown} is not valid UTF-8 ({e})") from None

    return check_text


def _length_check(name: str, feature: Any, inner: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """For a fixed-length ``List(..., length=n)``: ``TypeError`` naming the column for a list of
    another length (HF's Arrow cast raises ``TypeError``: "Couldn't cast array of type ..."), then
    ``inner`` (the check of its values, if any) on each value."""
    length = feature.length

    def check_length(v: Any) -> Any:
        if isinstance(v, (list, tuple)) or getattr(v, "ndim", 0) == 1:
            if len(v) != length:
                raise TypeError(f"cast: column {name!r} is {feature}: a list of {len(v)} values does not fit "
                                f"its length {length}")
            if inner is not None:
                return [None if x is None else inner(x) for x in v]
        return v

    return check_length


def _arrow_value_check(name: str, feature: Any) -> Callable[[Any], Any] | None:
    """For a ``bool`` ``Value`` column: a string value cast as Arrow's cast reads it (``"false"`` is
    ``False``, where Python's ``bool("false")`` is ``True``); for a ``decimal`` one: every value cast by
    Arrow (a float becomes a ``Decimal``, an integer needs the precision Arrow asks for). A value
    Arrow cannot cast raises ``ValueError`` naming the column, as HF's ``ArrowInvalid``. ``None``
    for other features."""
    dtype = str(getattr(feature, "dtype", ""))
    if type(feature).__name__ != "Value" or not (dtype == "bool" or dtype.startswith("decimal")):
        return None
    import pyarrow as pa

    pa_type = feature.pa_type
    only_strings = dtype == "bool"

    def check_arrow(v: Any) -> Any:
        if only_strings and not isinstance(v, str):
            return v
        try:
            return pa.array([v]).cast(pa_type).to_pylist()[0]
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise ValueError(f"cast: column {name!r} is {dtype}: value {v!r:.60} cannot be cast: {e}") from None

    return check_arrow


def _shape_check(name: str, feature: Any) -> Callable[[Any], Any]:
    """For an ``Array2D`` ... ``Array5D`` column: ``ValueError`` naming the column for a value of
    another shape (HF's Arrow cast raises ``ValueError``: "cannot reshape array ..."). An array's
    shape is read; nested lists are measured level by level down to their rows, with ``len`` over
    each level (a ``None`` dimension takes any length, the same for every row of the level)."""
    from itertools import chain

    dims = tuple(feature.shape)

    def fail(shown: str) -> ValueError:
        return ValueError(f"cast: column {name!r} is {type(feature).__name__} of shape {dims}: the value has {shown}")

    def check_shape(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            if v.ndim != len(dims) or any(d is not None and d != n for d, n in zip(dims, v.shape)):
                raise fail(f"shape {v.shape}")
            return v
        level, found = [v], []
        for depth, d in enumerate(dims):
            try:
                lengths = set(map(len, level))
            except TypeError:  # a number where a list should be
                raise fail(f"{depth} dimension(s)") from None
            if len(lengths) > 1:
                raise fail("rows of different lengths")
            n = lengths.pop() if lengths else 0
            if d is not None and n != d and level:
                raise fail(f"shape {(*found, n)}")
            found.append(n)
            if depth < len(dims) - 1:
                level = list(chain.from_iterable(level))
        return v

    return check_shape


def _value_check(name: str, feature: Any) -> Callable[[Any], Any] | None:
    """The check of a ``Value``'s values by their type (number, time, text, bool or decimal), if any."""
    return (_number_check(name, feature) or _time_check(name, feature) or _text_check(name, feature)
            or _arrow_value_check(name, feature))


def _feature_check(name: str, feature: Any) -> Callable[[Any], Any] | None:
    """:func:`_number_check` (or the time, text, bool and decimal checks) for a feature, looking into
    lists (``List`` / ``Sequence``) and structs (dicts of features) for the ``Value`` s inside, and
    refusing what HF's Arrow cast refuses there: a string for a list (``TypeError``; Python would
    make a list of its characters), a struct with fields the feature lacks (``TypeError``; Python
    would drop them). ``None`` for a feature that needs no check."""
    kind = type(feature).__name__
    if kind == "Value":
        base = _value_check(name, feature)

        def check_value(v: Any) -> Any:
            if isinstance(v, (list, tuple, dict)) or (isinstance(v, np.ndarray) and v.ndim > 0):
                what = "a struct" if isinstance(v, dict) else "a list"
                raise TypeError(f"cast: column {name!r} is {feature.dtype}: value {v!r:.60} is {what} (HF's Arrow "
                                "cast refuses it; Python would give its text or its truth)")
            return v if base is None else base(v)

        return check_value
    if kind in ("Array2D", "Array3D", "Array4D", "Array5D"):
        return _shape_check(name, feature)
    if kind in ("List", "Sequence", "LargeList"):
        # the values of a list of numbers are not looked at for being lists themselves: one call per value
        inner = (_value_check(name, feature.feature) if type(feature.feature).__name__ == "Value"
                 else _feature_check(name, feature.feature))
        length = getattr(feature, "length", -1)
        if length is not None and length >= 0:
            inner = _length_check(name, feature, inner)

            def check_fixed(v: Any) -> Any:
                if isinstance(v, (str, bytes, dict)):
                    raise TypeError(f"cast: column {name!r} is {feature}: value {v!r:.60} is not a list")
                return inner(v)

            return check_fixed

        def check_list(v: Any) -> Any:
            # a list of structs given as a struct of lists too: HF's Arrow cast refuses it (TypeError),
            # its Python encoding fails on it (AttributeError: 'str' object has no attribute 'get')
            if isinstance(v, (str, bytes, dict)):
                raise TypeError(f"cast: column {name!r} is {feature}: value {v!r:.60} is not a list")
            if inner is None:
                return v
            return [None if x is None else inner(x) for x in v] if isinstance(v, (list, tuple)) or (
                hasattr(v, "ndim") and getattr(v, "ndim", 0) == 1) else v

        return check_list
    if isinstance(feature, dict):
        inner = {k: c for k, c in ((k, _feature_check(f"{name}.{k}", f)) for k, f in feature.items()) if c is not None}
        fields = set(feature)

        def check_struct(v: Any) -> Any:
            if not isinstance(v, dict):
                raise TypeError(f"cast: column {name!r} is a struct of fields {list(feature)}: value {v!r:.60} is "
                                "not one (HF's Arrow cast refuses it)")
            extra = [k for k in v if k not in fields]
            if extra:
                raise TypeError(f"cast: column {name!r} is a struct of fields {list(feature)}: the value has "
                                f"fields {extra} too, which a cast would drop (HF's Arrow cast refuses it): "
                                "list them in the feature, or remove them with a map first")
            if not inner:
                return v
            return {k: (inner[k](x) if k in inner and x is not None else x) for k, x in v.items()}

        return check_struct
    return None


def _audio_storage(value: Any) -> dict | None:
    """The ``{bytes, path}`` that HF's ``Audio`` stores for a file path, the file's bytes or such a
    dict (what its Arrow cast gives, and its ``encode_example`` when ``torchcodec`` is installed),
    or ``None`` for a value only ``Audio.encode_example`` encodes (an array, a decoder, a PCM file).
    Computed here because that method needs ``torchcodec`` for every value, where HF's Arrow cast
    of paths and bytes needs nothing (``cast_column(..., Audio(decode=False))`` without it)."""
    import os

    if isinstance(value, str):
        return {"bytes": None, "path": value}
    if isinstance(value, os.PathLike):
        return {"bytes": None, "path": os.path.abspath(os.fspath(value))}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": value, "path": None}
    if isinstance(value, dict) and value.keys() <= {"bytes", "path"}:
        path = value.get("path")
        if isinstance(path, str) and path.endswith("pcm"):
            return None
        if path is not None and os.path.isfile(path):
            return {"bytes": None, "path": path}
        if value.get("bytes") is not None or path is not None:
            return {"bytes": value.get("bytes"), "path": path}
    return None


class ApplyFeatures:
    keeps_arrow_rows = True  # HF's cast stays on its Arrow path (``arrow_batches.arrow_rooted``)

    def __init__(self, features: Any, json_text: tuple = (), keep_other_columns: bool = False):
        self.features = features
        #: columns cast from HF's ``Json`` to a string: their values become their JSON text, as
        #: HF's Arrow cast of the JSON text storage gives (not Python's ``str`` of a dict)
        self.json_text = tuple(json_text)
        #: keep the columns the features lack (``cast_column`` of a dataset whose columns are unknown)
        self.keep_other_columns = bool(keep_other_columns)
        self._checks: dict | None = None
        self._times: list = []  # the columns of time ``Value`` s (with ``_checks``)
        self._audio: dict | None = None  # the ``Audio`` columns, and features without them

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_checks": None, "_times": [], "_audio": None}

    def checks(self) -> dict:
        """column -> the check of the numbers (and times) its feature holds (see :func:`_feature_check`)."""
        if self._checks is None:
            found = ((name, _feature_check(name, f)) for name, f in self.features.items())
            self._checks = {name: check for name, check in found if check is not None}
            self._times = [name for name, f in self.features.items() if _time_check(name, f) is not None]
        return self._checks

    def __call__(self, example: dict) -> None:
        features = self.features
        for name in features:
            if name not in example:
                example[name] = None
        if self.json_text:
            from datasets.utils.json import ujson_dumps

            for name in self.json_text:
                if example[name] is not None:
                    example[name] = ujson_dumps(example[name])
        for name, check in self.checks().items():  # before encoding: HF's encoding truncates floats to ints
            v = example[name]
            if v is not None:
                example[name] = check(v)
        try:
            encoded = self._encode(example)
        except (TypeError, ValueError, KeyError) as e:
            raise type(e)(self._which(example, e)) from e
        decoded = features.decode_example(encoded)
        for name in self._times:  # the cast's value: encoding makes a pandas Timestamp (ns) a datetime
            decoded[name] = example[name]
        # the example becomes the features' columns, in their order, and nothing else (as HF: a cast
        # of a dataset whose columns are unknown, e.g. after a map, keeps only the features' columns).
        # Edited in place and returned as None: a map keeps such an example as it is, where a
        # returned dict would go onto the example's other columns
        if not self.keep_other_columns:
            example.clear()
        example.update(decoded)
        return None

    def _encode(self, example: dict) -> dict:
        """``features.encode_example(example)``, with the paths and bytes of ``Audio`` columns
        encoded by :func:`_audio_storage` (as HF's Arrow cast does)."""
        features = self.features
        if self._audio is None:
            audio = [name for name, f in features.items() if type(f).__name__ == "Audio"]
            self._audio = {"columns": audio, "rest": type(features)({k: f for k, f in features.items() if k not in audio})}
        stored = {}
        for name in self._audio["columns"]:
            value = _audio_storage(example[name])
            if value is None and example[name] is not None:
                return features.encode_example(example)  # HF's encoder (torchcodec) for this value
            stored[name] = value
        if not stored:
            return features.encode_example(example)
        encoded = self._audio["rest"].encode_example(example)
        return {name: stored[name] if name in stored else encoded[name] for name in features}

    def _which(self, example: dict, error: Exception) -> str:
        """``error`` of encoding ``example``, naming the column whose value does not fit its feature."""
        from datasets.features.features import encode_nested_example

        for name, feature in self.features.items():
            value = example.get(name)
            if type(feature).__name__ == "Audio" and _audio_storage(value) is not None:
                continue  # encoded without HF's encoder (see ``_encode``)
            try:
                encode_nested_example(feature, value)
            except Exception:  # noqa: BLE001 - this column is the one
                shown = repr(value)
                shown = shown if len(shown) <= 80 else shown[:77] + "..."
                return f"cast: column {name!r}: value {shown} does not fit {feature}: {error}"
        return f"cast: {error}"

    def __repr__(self) -> str:
        return f"ApplyFeatures({list(self.features)})"


class AddColumn:
    def __init__(self, name: str, column: Any):
        self.name = name
        self.column = column

    def __call__(self, example: dict, index: int) -> dict:
        if self.name in example:
            raise ValueError(f"add_column: column {self.name!r} is already in the dataset")
        try:
            value = self.column[index]
        except IndexError:
            raise IndexError(f"add_column({self.name!r}): the column has {len(self.column)} values but the dataset "
                             f"has more examples (example #{index})") from None
        return {self.name: value}

    def __repr__(self) -> str:
        return f"AddColumn({self.name!r})"
