"""Formatted values of Python rows: what HF ``datasets``' numpy / torch formatters make of the
examples a pipeline yields, computed directly where HF's way is slow.

* :class:`ArrowRowValues` - rows of Arrow-backed pipelines, which HF formats from Arrow (its types:
  numpy scalars, ``np.str_``, float32 lists, typed empty lists, NaN for a null number, float32
  arrays of lists of lists and ``Array2D``..., ``datetime64`` / ``timedelta64`` times);
* :func:`list_tensorize` - HF's ``recursive_tensorize`` for any other Python rows and batches,
  with lists of numbers converted at once instead of number by number;
* :func:`lists_back` - lists that sources read as numpy arrays under a tensor format
  (``SourceNode.read_lists_as_arrays``), given back as Python lists without one.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

import numpy as np

from .value_checks import value_dtype


class ArrowRowValues:
    """A Python example of an Arrow-backed pipeline as numpy values of the types HF's Arrow path gives
    (HF formats such rows from Arrow tables; ``_row_values`` computes the same from Arrow columns):
    ints and floats as numpy scalars (of the column's type when ``features`` say it), strings as
    ``np.str_``, booleans as 0-d arrays, flat lists of numbers as int64 / float32 arrays
    (``format_kwargs`` apply to arrays, as in HF). Any other value goes to ``tensorize`` (HF's
    ``recursive_tensorize``), which is also what values already formatted get, and so do all the
    values of a ``Json`` column (HF decodes their JSON text to Python values first: 0-d arrays, ``str``).

    ``batch_rows``: the values of one row of HF's formatted *batch* instead (what HF gives a map or
    filter after ``with_format``): ints as int64, floats as float32, booleans as ``np.bool_``.

    ``torch``: ``tensorize`` is HF's torch formatter's, and the values are made what HF's torch
    formatter makes of Arrow rows: numbers and lists go to it as the numpy values above (lists of
    numbers as one int64 / float64 array: HF's dtypes, with the format's keyword arguments, are
    applied by ``tensorize``; an empty list with the type its features give), strings and booleans
    as they are. Lists of numbers read as numpy arrays (``SourceNode.read_lists_as_arrays``) go to
    ``tensorize`` in both formats: HF makes its arrays and tensors of them."""

    def __init__(self, features: Any, format_kwargs: dict, tensorize: Callable[[Any], Any],
                 batch_rows: bool = False, torch: bool = False):
        self.kwargs, self.tensorize, self.batch_rows, self.torch = format_kwargs, tensorize, batch_rows, torch
        self.scalars: dict = {}  # column -> numpy scalar type, from a numeric ``Value`` feature
        self.lists: dict = {}  # column -> numpy dtype of HF's array for a list of numeric ``Value``s
        self.numbers: set = set()  # the columns of numeric ``Value``s (a null is NaN)
        self.nested: dict = {}  # column -> (dtype, depth, shape) of lists of lists of numbers (``Array2D``...)
        self.times: dict = {}  # column -> numpy datetime64 / timedelta64 dtype of a temporal ``Value`` (or list of)
        self.time_lists: dict = {}
        #: column -> the features of a struct holding lists of numbers (at any depth of structs): its
        #: empty lists are typed by them, as in HF's Arrow column (a list has no values to tell its type)
        self.structs: dict = {}
        #: the columns of HF 5.2's ``Json`` features: HF decodes their JSON text to Python values, which
        #: its formatter tensorizes (0-d arrays, ``str``), whatever the Arrow path
        self.json = frozenset(name for name, feature in (features or {}).items() if type(feature).__name__ == "Json")
        for name, feature in (features or {}).items():  # (a batch's numbers are int64 / float32 whatever the type)
            dtype = value_dtype(feature) if type(feature).__name__ != "ClassLabel" else np.dtype(np.int64)
            time = _time_dtype(feature)
            if time is not None:
                self.times[name] = time
                continue
            time = _time_dtype(getattr(feature, "feature", None)) if _list_dtype(feature) is None else None
            if time is not None and type(feature).__name__ in ("List", "Sequence", "LargeList"):
                self.time_lists[name] = time
                continue
            if isinstance(feature, dict) and _holds_number_lists(feature):
                self.structs[name] = feature
            if dtype is not None and dtype.kind in "iuf":
                self.numbers.add(name)
                if not batch_rows:
                    self.scalars[name] = dtype.type
            else:
                inner = _list_dtype(feature)
                if inner is not None:
                    self.lists[name] = np.int64 if inner.kind in "iu" else np.float32 if inner.kind == "f" else inner
                leaf = _nested_dtype(feature)
                if leaf is not None:
                    self.nested[name] = leaf

        if self.json:  # (a subclass: the rows of other columns pay nothing for it)
            self.__class__ = _JsonRowValues

    def _list(self, name: str, values: list) -> Any:
        kinds = set(map(type, values))
        if _NONE in kinds and kinds <= _NUMBERS_OR_NONE and (len(kinds) > 1 or np.dtype(self.lists.get(name, object)).kind in "iuf"):
            # null numbers: NaN in floats, as in the array Arrow's numpy conversion makes of such a list
            return self.tensorize(np.array([np.nan if v is None else v for v in values], dtype=np.float64))
        nested = self.nested.get(name)
        if nested is not None and kinds <= {list, _NONE}:
            # HF's Arrow path gives the innermost lists as numpy arrays of the column's type, which its
            # formatter makes float32 / int64 arrays and tensors and stacks (float32 for float64 too)
            dtype, depth, shape = nested
            if not values and shape is not None:  # an ArrayXD of no rows keeps its other dimensions
                return self.tensorize(np.zeros((0, *shape[1:]), dtype=dtype))
            return self.tensorize(_leaf_arrays(values, dtype, depth))
        if self.torch:
            return self.tensorize(_number_array(values, kinds, self.lists.get(name)))
        if not values and name in self.lists:  # (an empty list has no values to tell its type)
            return np.asarray(values, **{"dtype": self.lists[name], **self.kwargs})
        if kinds == {int}:
            try:
                return np.asarray(values, **{"dtype": np.int64, **self.kwargs})
            except OverflowError:  # uint64 values past int64: HF's uint64 array, cast by the formatter
                return self.tensorize(_number_array(values, kinds))
        if kinds and kinds <= {int, float}:
            return np.asarray(values, **{"dtype": np.float32, **self.kwargs})
        if kinds == {bool}:
            return np.asarray(values, **self.kwargs)
        return self.tensorize(values)

    def __call__(self, example: dict) -> dict:
        out = {}
        for name, v in example.items():
            t = type(v)
            if t is int or t is float:
                scalar = self.scalars.get(name)
                if scalar is None or (t is float and not issubclass(scalar, np.floating)):
                    scalar = np.int64 if t is int else np.float32 if self.batch_rows else np.float64
                try:
                    value = scalar(v)
                except OverflowError:
                    out[name] = self.tensorize(v)
                else:
                    out[name] = self.tensorize(value) if self.torch else value
            elif t is str:
                out[name] = v if self.torch else np.str_(v)
            elif t is bool:  # np.bool_ is no np.number: HF makes a 0-d array of it
                out[name] = (self.tensorize(v) if self.torch else np.bool_(v) if self.batch_rows
                             else np.asarray(v, **self.kwargs))
            elif name in self.times:  # Arrow's numpy conversion: datetime64 / timedelta64 (UTC, NaT for a null)
                value = _time_value(v, self.times[name])
                out[name] = value if self.batch_rows else self.tensorize(value)
            elif t is list and name in self.time_lists:
                out[name] = self.tensorize(np.array([_time_value(x, self.time_lists[name]) for x in v],
                                                    dtype=self.time_lists[name]))
            elif t is list:
                out[name] = self._list(name, v)
            elif v is None and name in self.numbers:  # a null number: NaN, as Arrow's numpy column holds it
                scalar = self.scalars.get(name, np.float32)  # (in a row of a batch: float32, as HF's)
                value = scalar("nan") if issubclass(scalar, np.floating) else np.float64("nan")
                out[name] = self.tensorize(value) if self.torch else value
            elif t is dict:
                struct = self.structs.get(name)
                if struct is not None:
                    v = _typed_empty_lists(v, struct)
                out[name] = self.tensorize(v) if self.torch else self._struct(v)
            else:
                out[name] = self.tensorize(v)
        return out

    def _struct(self, value: dict) -> dict:
        """A struct's values as HF's numpy formatter gives them from Arrow: its lists come as numpy
        arrays (float64 for floats), which the formatter makes float32; its numbers are Python
        values (0-d arrays, float64 for a float)."""
        out = {}
        for k, v in value.items():
            if type(v) is dict:
                out[k] = self._struct(v)
                continue
            v = self.tensorize(v)
            if type(v) is np.ndarray and v.ndim and v.size and v.dtype.kind == "f" and "dtype" not in self.kwargs:
                v = v.astype(np.float32)
            out[k] = v
        return out


class _JsonRowValues(ArrowRowValues):
    """:class:`ArrowRowValues` of rows with ``Json`` columns, whose values HF formats as the decoded
    Python values they are: tensorized (0-d arrays, ``str``); in a row of a batch (a map after
    ``with_format``, whose one-row batch HF stacks), a 0-d array is that row's numpy scalar."""

    def __call__(self, example: dict) -> dict:
        json = self.json
        out = super().__call__({k: v for k, v in example.items() if k not in json})
        return {k: self._json(v) if k in json else out[k] for k, v in example.items()}

    def _json(self, value: Any) -> Any:
        out = self.tensorize(value)
        return out[()] if self.batch_rows and type(out) is np.ndarray and out.ndim == 0 else out


def _holds_number_lists(struct: dict) -> bool:
    """Whether the features of a struct hold a list of numbers, or a struct that does."""
    for f in struct.values():
        d = _list_dtype(f)
        if d is not None and d.kind in "biuf" or isinstance(f, dict) and _holds_number_lists(f):
            return True
    return False


def _typed_empty_lists(value: dict, struct: dict) -> dict:
    """The struct ``value`` with its empty lists of numbers (by its features ``struct``, structs in
    it included) as empty numpy arrays of their type, which the formatter makes int64 / float32
    arrays and tensors, as HF's Arrow path gives them (``[]`` alone is an object array, or a list)."""
    out = value
    for k, v in value.items():
        f = struct.get(k)
        if type(v) is list:
            if v:
                continue
            d = _list_dtype(f)
            if d is None or d.kind not in "biuf":
                continue
            v = np.empty(0, dtype=d)
        elif type(v) is dict and isinstance(f, dict):
            new = _typed_empty_lists(v, f)
            if new is v:
                continue
            v = new
        else:
            continue
        if out is value:
            out = dict(value)
        out[k] = v
    return out


def _list_dtype(feature: Any) -> np.dtype | None:
    """The numpy dtype of the values of a list feature of ``Value``s (``None``: another feature)."""
    if type(feature).__name__ in ("List", "Sequence", "LargeList"):
        return value_dtype(getattr(feature, "feature", None))
    return None


def _time_dtype(feature: Any) -> np.dtype | None:
    """The numpy dtype Arrow converts a ``timestamp`` / ``date`` / ``duration`` ``Value`` to
    (``datetime64[unit]``, UTC for a time zone; ``timedelta64[unit]``), else ``None``."""
    if type(feature).__name__ != "Value" or not str(feature.dtype).startswith(("timestamp", "date", "duration")):
        return None
    import pyarrow as pa

    try:
        return pa.array([], type=feature.pa_type).to_numpy(zero_copy_only=False).dtype
    except (pa.ArrowException, TypeError, ValueError):
        return None


def _time_value(v: Any, dtype: np.dtype) -> Any:
    """A Python date, datetime (aware: in UTC), ``pandas.Timestamp`` or timedelta as a numpy
    ``dtype`` scalar, as Arrow's numpy conversion gives it; ``NaT`` for ``None``."""
    if v is None:
        return np.array("NaT", dtype=dtype)[()]
    to_numpy = getattr(v, "to_datetime64", None) or getattr(v, "to_timedelta64", None)  # pandas: nanoseconds
    if to_numpy is not None:
        v = to_numpy()
    elif isinstance(v, datetime.datetime) and v.tzinfo is not None:
        v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    try:
        return np.array(v, dtype=dtype)[()]
    except (TypeError, ValueError):
        return v


def _nested_dtype(feature: Any) -> tuple | None:
    """``(dtype, depth, shape)`` for a feature of lists of lists of numeric ``Value``s (``depth``
    levels of lists, ``shape`` ``None``) or an ``Array2D`` ... ``Array5D`` of numbers (``depth``
    its dimensions, ``shape`` its shape); ``None`` for any other feature."""
    name = type(feature).__name__
    if name in ("Array2D", "Array3D", "Array4D", "Array5D"):
        try:
            dtype = np.dtype(feature.dtype)
        except TypeError:
            return None
        return (dtype, len(feature.shape), tuple(feature.shape)) if dtype.kind in "iuf" else None
    if name not in ("List", "Sequence", "LargeList"):
        return None
    inner = getattr(feature, "feature", None)
    dtype = _list_dtype(inner)
    if dtype is not None:
        return (dtype, 2, None) if dtype.kind in "iuf" else None
    nested = _nested_dtype(inner)
    return None if nested is None or nested[2] is not None else (nested[0], nested[1] + 1, None)


def _leaf_arrays(values: list, dtype: np.dtype, depth: int) -> Any:
    """``depth`` levels of lists of Python numbers (of a column of ``dtype`` numbers) with the
    innermost lists made the numpy arrays Arrow's numpy conversion makes of them (a null number:
    NaN in a float array); null lists stay ``None``."""
    if depth > 1:
        return [None if v is None else _leaf_arrays(v, dtype, depth - 1) for v in values]
    kinds = set(map(type, values))
    if not kinds <= _NUMBERS_OR_NONE:
        return values
    if _NONE in kinds:
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    try:
        return np.asarray(values, dtype=dtype)
    except (OverflowError, ValueError, TypeError):
        return values


def lists_back(features: Any) -> Callable[[dict], dict] | None:
    """For Python examples of Arrow-backed rows: a function giving back as Python lists the numpy
    arrays that sources read lists of numbers into under a numpy / torch format
    (``SourceNode.read_lists_as_arrays``: a state saved then holds them, and may be resumed
    without the format); ``None`` when ``features`` have no list of numbers."""
    if features is None:
        columns = None
    else:
        columns = [name for name, f in features.items() if (d := _list_dtype(f)) is not None and d.kind in "iuf"]
        if not columns:
            return None

    def row(example: dict) -> dict:
        for name in (example if columns is None else columns):
            if type(example.get(name)) is np.ndarray:
                return {k: v.tolist() if type(v) is np.ndarray else v for k, v in example.items()}
        return example

    return row


_NONE = type(None)
_NUMBERS_OR_NONE = {int, float, _NONE}


def _number_array(values: list, kinds: set, empty_dtype: Any = None) -> Any:
    """A list of Python numbers (or booleans) of one type (``kinds``: the types of its values) as
    one numpy array of that kind (int64, float64 - which holds any float32 or float64 value exactly
    - or bool), an empty list as an array of ``empty_dtype`` when given; anything else as it is."""
    if not values:
        return values if empty_dtype is None else np.asarray(values, dtype=empty_dtype)
    if len(kinds) != 1 or not kinds <= {int, float, bool}:
        return values
    if kinds == {int}:  # int64, or uint64 for Arrow's uint64 values past int64 (numpy's own pick may be float64)
        for dtype in (np.int64, np.uint64):
            try:
                return np.asarray(values, dtype=dtype)
            except OverflowError:
                pass
        return values
    try:
        out = np.asarray(values)
    except (OverflowError, ValueError):
        return values
    return out if out.dtype.kind in "ifb" else values


def list_tensorize(formatter: Any) -> Callable[[Any], Any] | None:
    """``formatter.recursive_tensorize`` (HF's numpy or torch formatter; any other's is returned as
    it is, ``None`` for a formatter without one) for Python examples and batches, with each non-empty flat list of Python numbers of one
    type (``int``, ``float`` or ``bool``) made into one array or tensor at once, and lists of such
    lists stacked as HF stacks them. HF makes a 0-d array or tensor of every number, then stacks
    them: the same values and dtypes, at a microsecond or more per number (a row of 2 048 token
    ids took milliseconds)."""
    recursive = getattr(formatter, "recursive_tensorize", None)  # (table formatters have none)
    consolidate = getattr(formatter, "_consolidate", None)
    name = type(formatter).__name__
    if recursive is None or consolidate is None or name not in ("NumpyFormatter", "TorchFormatter"):
        return recursive
    if name == "TorchFormatter":
        import torch

        kwargs = formatter.torch_tensor_kwargs

        def flat(values: list, kind: type) -> Any:
            return torch.tensor(values, **kwargs)  # a number's own dtype, as torch.tensor(number) gives
    else:
        kwargs = formatter.np_array_kwargs

        def flat(values: list, kind: type) -> Any:
            out = np.asarray(values)
            if kind is int and out.dtype != np.int64:
                raise OverflowError  # beyond int64, each number gets a dtype of its own
            return np.asarray(out, **kwargs) if kwargs else out

    tensor_type = None
    if name == "TorchFormatter" and not kwargs:
        tensor_type = torch.Tensor  # imported above, for this formatter

    return _ListTensorize(recursive, consolidate, flat, tensor_type)


class _ListTensorize:
    """What :func:`list_tensorize` returns: a class, not nested functions calling themselves (a
    reference cycle, holding the formatter, that each pass left to the cyclic garbage collector)."""

    __slots__ = ("recursive", "consolidate", "flat", "tensor_type")

    def __init__(self, recursive: Callable, consolidate: Callable, flat: Callable, tensor_type: type | None):
        self.recursive, self.consolidate, self.flat, self.tensor_type = recursive, consolidate, flat, tensor_type

    def one(self, v: Any) -> Any:
        if type(v) is not list or not v:
            if type(v) is np.ndarray and v.dtype == object and v.ndim == 0:
                return v  # formatted already (a value HF's formatter cannot iterate: a time, a 0-d object)
            tensor_type = self.tensor_type
            if tensor_type is not None and isinstance(v, tensor_type):
                return v.detach().clone()  # what HF's torch.tensor(v) makes, without its copy warning
            return self.recursive(v)
        first = type(v[0])
        if first is list:
            if all(type(x) is list for x in v):
                one = self.one
                return self.consolidate([one(x) for x in v])
        elif (first is int or first is float or first is bool) and len(set(map(type, v))) == 1:
            try:
                return self.flat(v, first)
            except (OverflowError, RuntimeError, ValueError, TypeError):
                pass
        return self.recursive(v)

    def __call__(self, data: Any) -> Any:
        one = self.one
        if type(data) is not dict:
            return one(data)
        return {k: self(v) if type(v) is dict else one(v) for k, v in data.items()}
