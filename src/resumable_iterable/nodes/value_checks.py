"""The checks of the values a cast types, one per kind of HF feature, built once per column and
called on each value before HF's Python encoding: they give a value the type HF's Arrow cast gives
it, or raise what that cast raises (``ValueError`` / ``TypeError`` naming the column) where
Python's encoding would pass garble (``"b'x'"`` for ``b"x"``, ``True`` for ``"false"``, a list of
a string's characters, an integer out of its type's range). :func:`feature_check` builds the check
of a column's feature, looking into lists and structs; :func:`time_check` that of a time ``Value``
(whose cast value ``nodes/typed.py``'s ``ApplyFeatures`` keeps past the encoding); :func:`value_dtype`
is a ``Value``'s numpy dtype. A check is a closure over its feature: the per-example path is one
call per column (and per value of a list), no lookups."""

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


def _arrow_cast(v: Any, pa_type: Any, name: str, dtype: str, width: int | None = None) -> Any:
    """``v`` cast by Arrow to ``pa_type`` (HF casts Arrow tables so); a value Arrow cannot cast raises
    ``ValueError`` naming the column (its repr cut to ``width`` characters, if given)."""
    import pyarrow as pa

    try:
        return pa.array([v]).cast(pa_type).to_pylist()[0]
    except (pa.ArrowException, TypeError, ValueError) as e:
        shown = repr(v) if width is None else f"{v!r:.{width}}"
        raise ValueError(f"cast: column {name!r} is {dtype}: value {shown} cannot be cast: {e}") from None


def time_check(name: str, feature: Any) -> Callable[[Any], Any] | None:
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
        return _arrow_cast(v, pa_type, name, dtype)

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
    pa_type = feature.pa_type
    only_strings = dtype == "bool"

    def check_arrow(v: Any) -> Any:
        if only_strings and not isinstance(v, str):
            return v
        return _arrow_cast(v, pa_type, name, dtype, width=60)

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
    return (_number_check(name, feature) or time_check(name, feature) or _text_check(name, feature)
            or _arrow_value_check(name, feature))


def _class_id_check(name: str, feature: Any) -> Callable[[Any], Any]:
    """For a ``ClassLabel`` of rows HF casts on its Arrow path (``class_ids``): a name becomes its id
    (``ValueError`` for an unknown name, as HF's ``str2int``), an integer (or a float without a
    fraction) stays as it is, out of the labels' range too: HF's Arrow cast keeps such an id."""
    str2int = feature.str2int

    def check_class_id(v: Any) -> Any:
        if isinstance(v, str):
            try:
                return str2int(v)
            except ValueError as e:
                raise ValueError(f"cast: column {name!r}: value {v!r:.60} does not fit {feature}: {e}") from None
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            return int(v)
        return v.item() if isinstance(v, np.integer) else v

    return check_class_id


def class_ids(feature: Any) -> Any:
    """``feature`` with each ``ClassLabel`` in it an ``int64`` ``Value``: what a value checked by
    :func:`_class_id_check` is encoded with (``ClassLabel.encode_example`` refuses an id out of range)."""
    from datasets import ClassLabel, LargeList, List, Value

    if isinstance(feature, ClassLabel):
        return Value("int64")
    if isinstance(feature, dict):
        return type(feature)({k: class_ids(f) for k, f in feature.items()})
    if isinstance(feature, (List, LargeList)):
        inner = class_ids(feature.feature)
        if inner is feature.feature:
            return feature
        return List(inner, length=feature.length) if isinstance(feature, List) else LargeList(inner)
    return feature


def feature_check(name: str, feature: Any, ids: bool = False) -> Callable[[Any], Any] | None:
    """:func:`_number_check` (or the time, text, bool and decimal checks) for a feature, looking into
    lists (``List`` / ``Sequence``) and structs (dicts of features) for the ``Value`` s inside, and
    refusing what HF's Arrow cast refuses there: a string for a list (``TypeError``; Python would
    make a list of its characters), a struct with fields the feature lacks (``TypeError``; Python
    would drop them). ``ids``: a ``ClassLabel`` inside gets :func:`_class_id_check` (rows HF casts
    on its Arrow path). ``None`` for a feature that needs no check."""
    kind = type(feature).__name__
    if kind == "ClassLabel" and ids:
        return _class_id_check(name, feature)
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
                 else feature_check(name, feature.feature, ids))
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
        inner = {k: c for k, c in ((k, feature_check(f"{name}.{k}", f, ids)) for k, f in feature.items()) if c is not None}
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
