"""Formatted values: the numpy arrays, torch tensors and numpy scalars HF ``datasets``' numpy /
torch formatters give, computed directly - from Arrow columns (column-wise batches and the rows
of an Arrow chunk) and from Python rows of Arrow-backed pipelines (:class:`ArrowRowValues`), with
HF's dtypes, copies and types. ``format.py`` (the format node) decides which applies where;
anything not covered here goes to HF's formatters.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa

from .typed import value_dtype


# ---------------------------------------------------------------------- column-wise numpy / torch batches
# HF's ``format_batch`` costs about a millisecond per batch whatever its size (it walks every value
# through generic helpers, and starts a progress bar per call). For the column types below the
# result is computed directly from the Arrow column - the same arrays, dtypes and copies HF returns
# (the tests compare both). Any other column (nulls, NaN, nested, ragged lists, binary, extension
# types, features to decode) sends the whole batch to HF's formatter.

_NUMERIC = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)


def _numeric(t: pa.DataType) -> bool:
    return any(f(t) for f in _NUMERIC) and not pa.types.is_uint64(t)


def _column_to_numpy(col: pa.ChunkedArray) -> Any:
    """The column as HF's numpy extraction builds it (a fresh array), or ``None`` if not a simple case."""
    t = col.type
    if col.null_count:
        return None
    if _numeric(t):
        out = np.array(col.to_numpy())
        if pa.types.is_floating(t) and np.isnan(out).any():
            return None  # HF returns an object array there
        return out
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if (pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type):
        arr = col.combine_chunks()
        flat = arr.flatten()
        if flat.null_count:
            return None
        n = len(arr)
        if pa.types.is_fixed_size_list(t):
            k = t.list_size
        else:
            offsets = np.asarray(arr.offsets)
            lengths = np.diff(offsets)
            if n == 0 or (lengths != lengths[0]).any():
                return None  # ragged: HF returns an object array of arrays
            k = int(lengths[0])
        out = np.array(flat.to_numpy(zero_copy_only=False)).reshape(n, k)
        if pa.types.is_floating(t.value_type) and np.isnan(out).any():
            return None
        return out
    return None


def fast_tensor_batch(table: pa.Table, format_type: str, format_kwargs: dict) -> dict | None:
    """``format_batch`` of HF's numpy / torch formatter for tables of simple columns, else ``None``.

    Torch batches of numeric columns (no ``format_kwargs``) are views of one storage: a DataLoader
    worker then hands the main process one shared-memory block per batch instead of one per
    column, which is most of what a small batch costs to move."""
    out = {}
    torch_parts: dict = {}
    for name, col in zip(table.column_names, table.columns):
        values = _column_to_numpy(col)
        if values is None:
            return None
        if isinstance(values, str):  # strings: a '<U' array (numpy) or a list (torch), as HF
            strings = col.to_pylist()
            out[name] = np.array(strings) if format_type == "numpy" else strings
            continue
        kind = values.dtype.kind
        if format_type == "numpy":
            default = {"dtype": np.int64} if kind in "iu" else {"dtype": np.float32} if kind == "f" else {}
            out[name] = np.asarray(values, **{**default, **format_kwargs})
        elif format_kwargs:
            import torch

            if values.dtype in (np.uint16, np.uint32):
                values = values.astype(np.int64)
            default = {"dtype": torch.int64} if kind in "iu" else {"dtype": torch.float32} if kind == "f" else {}
            out[name] = torch.tensor(values, **{**default, **format_kwargs})
        else:
            # HF's defaults: integers as int64, floats as float32, booleans as they are
            target = np.int64 if kind in "iu" else np.float32 if kind == "f" else None
            torch_parts[name] = values if target is None else values.astype(target, copy=False)
            out[name] = None  # keeps the column order
    if torch_parts:
        out.update(_one_storage(torch_parts))
    return out


def _one_storage(columns: dict) -> dict:
    """Torch tensors of ``columns`` (numpy int64, float32 or bool arrays), each a view of one new storage."""
    import torch

    dtypes = {np.dtype(np.int64): torch.int64, np.dtype(np.float32): torch.float32, np.dtype(np.bool_): torch.bool}
    offsets, total = [], 0
    for v in columns.values():
        offsets.append(total)
        total += -(-v.nbytes // 64) * 64
    buf = torch.empty(total, dtype=torch.uint8)
    mem = buf.numpy()
    out = {}
    for (name, v), off in zip(columns.items(), offsets):
        mem[off:off + v.nbytes].view(v.dtype).reshape(v.shape)[...] = v
        out[name] = buf[off:off + v.nbytes].view(dtypes[v.dtype]).view(v.shape)
    return out


def _row_values(col: pa.ChunkedArray, format_type: str, kwargs: dict) -> list | None:
    """One column of a chunk as the values HF's ``format_row`` gives, row by row, or ``None``."""
    t = col.type
    if col.null_count:
        return None
    torch_ = format_type == "torch"
    if torch_:
        import torch
    if _numeric(t):
        values = col.to_numpy()
        if pa.types.is_boolean(t):  # not a numpy number: HF makes a 0-d array / tensor of it
            return [torch.tensor(v, **kwargs) for v in values] if torch_ else [np.asarray(v, **kwargs) for v in values]
        if not torch_:  # numpy scalars of the column's dtype, never cast (HF leaves scalars as they are)
            return list(values)
        if values.dtype in (np.uint16, np.uint32):
            values = values.astype(np.int64)
        opts = {"dtype": torch.int64 if values.dtype.kind in "iu" else torch.float32, **kwargs}
        return [torch.tensor(v, **opts) for v in values]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        strings = col.to_pylist()
        return strings if torch_ else [np.str_(x) for x in strings]
    if (pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type):
        arr = col.combine_chunks()
        flat = arr.flatten()
        if flat.null_count:
            return None
        values = np.array(flat.to_numpy(zero_copy_only=False))
        if pa.types.is_fixed_size_list(t):
            k = t.list_size
            cuts = range(0, len(arr) * k + 1, k)
        else:
            offsets = np.asarray(arr.offsets)
            cuts = (offsets - offsets[0]).tolist()
        kind = values.dtype.kind
        if torch_:
            if values.dtype in (np.uint16, np.uint32):
                values = values.astype(np.int64)
            opts = {**({"dtype": torch.int64} if kind in "iu" else {"dtype": torch.float32} if kind == "f" else {}),
                    **kwargs}
            return [torch.tensor(values[a:b], **opts) for a, b in zip(cuts, cuts[1:])]
        opts = {**({"dtype": np.int64} if kind in "iu" else {"dtype": np.float32} if kind == "f" else {}), **kwargs}
        return [np.asarray(values[a:b], **opts) for a, b in zip(cuts, cuts[1:])]
    return None


def fast_tensor_rows(table: pa.Table, format_type: str, format_kwargs: dict) -> list[dict] | None:
    """``format_row`` of HF's numpy / torch formatter for each row of a table of simple columns, else ``None``."""
    names, columns = table.column_names, []
    for col in table.columns:
        values = _row_values(col, format_type, format_kwargs)
        if values is None:
            return None
        columns.append(values)
    return [dict(zip(names, row)) for row in zip(*columns)] if columns else [{} for _ in range(table.num_rows)]


class ArrowRowValues:
    """A Python example of an Arrow-backed pipeline as numpy values of the types HF's Arrow path gives
    (HF formats such rows from Arrow tables; ``_row_values`` computes the same from Arrow columns):
    ints and floats as numpy scalars (of the column's type when ``features`` say it), strings as
    ``np.str_``, booleans as 0-d arrays, flat lists of numbers as int64 / float32 arrays
    (``format_kwargs`` apply to arrays, as in HF). Any other value goes to ``tensorize`` (HF's
    ``recursive_tensorize``), which is also what values already formatted get.

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
        for name, feature in (() if batch_rows else (features or {}).items()):
            dtype = value_dtype(feature)
            if dtype is not None and dtype.kind in "iuf":
                self.scalars[name] = dtype.type
            else:
                inner = _list_dtype(feature)
                if inner is not None:
                    self.lists[name] = np.int64 if inner.kind in "iu" else np.float32 if inner.kind == "f" else inner

    def _list(self, name: str, values: list) -> Any:
        kinds = set(map(type, values))
        if _NONE in kinds and kinds <= _NUMBERS_OR_NONE and (len(kinds) > 1 or np.dtype(self.lists.get(name, object)).kind in "iuf"):
            # null numbers: NaN in floats, as in the array Arrow's numpy conversion makes of such a list
            return self.tensorize(np.array([np.nan if v is None else v for v in values], dtype=np.float64))
        if self.torch:
            return self.tensorize(_number_array(values, kinds, self.lists.get(name)))
        if not values and name in self.lists:  # (an empty list has no values to tell its type)
            return np.asarray(values, **{"dtype": self.lists[name], **self.kwargs})
        if kinds == {int}:
            return np.asarray(values, **{"dtype": np.int64, **self.kwargs})
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
            elif t is list:
                out[name] = self._list(name, v)
            elif v is None and name in self.scalars:  # a null number: NaN, as Arrow's numpy column holds it
                scalar = self.scalars[name]
                value = scalar("nan") if issubclass(scalar, np.floating) else np.float64("nan")
                out[name] = self.tensorize(value) if self.torch else value
            else:
                out[name] = self.tensorize(v)
        return out


def _list_dtype(feature: Any) -> np.dtype | None:
    """The numpy dtype of the values of a list feature of ``Value``s (``None``: another feature)."""
    if type(feature).__name__ in ("List", "Sequence", "LargeList"):
        return value_dtype(getattr(feature, "feature", None))
    return None


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

    def one(v: Any) -> Any:
        if type(v) is not list or not v:
            return recursive(v)
        first = type(v[0])
        if first is list:
            if all(type(x) is list for x in v):
                return consolidate([one(x) for x in v])
        elif (first is int or first is float or first is bool) and len(set(map(type, v))) == 1:
            try:
                return flat(v, first)
            except (OverflowError, RuntimeError, ValueError, TypeError):
                pass
        return recursive(v)

    def tensorize(data: Any) -> Any:
        if type(data) is not dict:
            return one(data)
        return {k: tensorize(v) if type(v) is dict else one(v) for k, v in data.items()}

    return tensorize


def object_strings(batch: Any) -> Any:
    """A copy of ``batch`` with its ``'<U'`` arrays as object arrays of ``str``, as in the batches of
    HF's ``batch()`` (a batched map, whose string cells reach the formatter as lists)."""
    if not isinstance(batch, dict):
        return batch
    return {name: v.astype(object) if isinstance(v, np.ndarray) and v.dtype.kind == "U" else v
            for name, v in batch.items()}


def _null_led_lists(table: pa.Table) -> list[str]:
    """The columns of lists of numbers (or booleans, dates...) of ``table`` whose first row is null
    and another is not: HF's numpy / torch ``format_batch`` fails on them (it compares the shape of
    every row's array with the first row's). Lists of strings, structs or lists are object arrays
    there, which it formats; nothing here needs decoding."""
    if table.num_rows < 2:
        return []
    return [name for name, col in zip(table.column_names, table.columns)
            if (pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type))
            and pa.types.is_primitive(col.type.value_type) and 0 < col.null_count < len(col) and not col[0].is_valid]


def format_table(formatter: Any, table: pa.Table) -> Any:
    """``formatter.format_batch(table)`` (HF's formatter), except for list columns led by a null row,
    which HF's numpy / torch formatters fail on: those are what HF's ``batch()`` gives, the
    formatted row of a one-row table holding the column's values as one list (numpy: an object
    array of ``None`` and arrays; torch: a list of ``None`` and tensors)."""
    from datasets.formatting import TensorFormatter

    bad = _null_led_lists(table) if isinstance(formatter, TensorFormatter) else []
    if not bad:
        return formatter.format_batch(table)
    rest = table.drop_columns(bad)
    out = dict(formatter.format_batch(rest)) if rest.num_columns else {}
    for name in bad:
        col = table.column(name)
        out[name] = formatter.format_row(pa.table({name: pa.array([col.to_pylist()], type=pa.list_(col.type))}))[name]
    return {name: out[name] for name in table.column_names}


def table_batch(batch: dict, schema: pa.Schema | None, format_type: str, format_kwargs: dict,
                format_batch: Callable[[pa.Table], Any]) -> dict | None:
    """A Python ``batch`` (``{column: values}``) as HF's numpy / torch formatter makes the Arrow
    table of it (computed here for simple columns, else by ``format_batch``, HF's), or ``None`` when
    the values make no Arrow table."""
    try:
        table = python_batch_to_table(batch, schema)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    fast = fast_tensor_batch(table, format_type, format_kwargs)
    return format_batch(table) if fast is None else fast


def python_batch_to_table(batch: dict, schema: pa.Schema | None = None) -> pa.Table:
    """A batch of Python values as an Arrow table, with ``schema``'s types when they fit (the
    types the column-wise path has for these columns)."""
    from datasets.features.features import cast_to_python_objects

    batch = cast_to_python_objects(batch, only_1d_for_numpy=True)
    if schema is not None:
        try:
            return pa.Table.from_pydict(batch, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, ValueError):
            pass
    return pa.Table.from_pydict(batch)
