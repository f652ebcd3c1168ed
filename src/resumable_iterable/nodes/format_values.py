"""Formatted values from Arrow: the numpy arrays, torch tensors and numpy scalars HF ``datasets``'
numpy / torch formatters give, computed directly from Arrow columns (column-wise batches and the
rows of an Arrow chunk), with HF's dtypes, copies and types; and the batch-level helpers around
HF's formatters (tables of Python batches, null-led list columns, object strings). Python rows
are formatted in ``format_rows.py``; ``format_plan.py`` decides which applies where;
anything not covered here goes to HF's formatters.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import pyarrow as pa



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
        chunks = col.chunks
        arr = chunks[0] if len(chunks) == 1 else col.combine_chunks()
        n = len(arr)
        if pa.types.is_fixed_size_list(t):
            k = t.list_size
            start = arr.offset * k
        else:
            offsets = np.asarray(arr.offsets)
            lengths = np.diff(offsets)
            if n == 0 or (lengths != lengths[0]).any():
                return None  # ragged: HF returns an object array of arrays
            k, start = int(lengths[0]), int(offsets[0])
        # the slice of the child array the rows cover (what flatten() gives, without its copy of offsets:
        # the rows hold no nulls, checked above)
        flat = arr.values.slice(start, n * k)
        if flat.null_count:
            return None
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
        chunks = col.chunks
        arr = chunks[0] if len(chunks) == 1 else col.combine_chunks()
        if pa.types.is_fixed_size_list(t):
            k = t.list_size
            cuts = range(0, len(arr) * k + 1, k)
            flat = arr.values.slice(arr.offset * k, len(arr) * k)
        else:
            offsets = np.asarray(arr.offsets)
            cuts = (offsets - offsets[0]).tolist()
            flat = arr.values.slice(int(offsets[0]), cuts[-1])
        if flat.null_count:  # the child array's slice the rows cover (as _column_to_numpy)
            return None
        values = np.array(flat.to_numpy(zero_copy_only=False))
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


def object_strings(batch: Any, table: pa.Table | None = None, scalars: bool = False) -> Any:
    """A copy of ``batch`` with its ``'<U'`` arrays as object arrays of ``str``, as in the batches of
    HF's ``batch()`` (a batched map, whose string cells reach the formatter as lists) - of
    ``np.str_`` with ``scalars`` (the batch a batched map or filter after ``with_format`` gets from
    HF: the rows of a formatted batch, formatted again as a batch) -, and its
    ``'S'`` arrays of the binary columns of ``table`` (the batch's) as object arrays of the
    ``bytes`` read from it: numpy's fixed-width bytes drop trailing NUL bytes (``b"ab\\0"`` read as
    ``b"ab"``), which HF's ``batch()`` keeps."""
    if not isinstance(batch, dict):
        return batch
    out = {}
    for name, v in batch.items():
        if isinstance(v, np.ndarray) and v.ndim == 1:
            if v.dtype.kind == "U":
                if scalars:
                    cells = np.empty(len(v), dtype=object)
                    cells[:] = list(v)
                    v = cells
                else:
                    v = v.astype(object)
            elif (v.dtype.kind == "S" and table is not None and name in table.column_names
                  and (pa.types.is_binary(table.schema.field(name).type)
                       or pa.types.is_large_binary(table.schema.field(name).type))):
                whole = np.empty(len(v), dtype=object)
                whole[:] = table.column(name).to_pylist()
                v = whole
        out[name] = v
    return out


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


def json_text_encoder(features: Any) -> Callable[[dict], dict] | None:
    """A function giving an example with its HF 5.2 ``Json`` values (decoded: Python values) as their
    JSON text, the storage of a ``Json`` column, so that the example converts to the features' Arrow
    types (a Python ``1`` or ``"s"`` does not fit pyarrow's ``json`` type); ``None`` when the
    features hold no ``Json`` (or ``datasets`` has none). Values of ``Json(decode=False)`` are
    text already. ``Json`` inside lists and dicts are encoded; other containers are left alone."""
    try:
        from datasets import Json
        from datasets.utils.json import ujson_dumps
    except ImportError:  # datasets < 5.2
        return None

    columns = {k: f for k, f in (features or {}).items() if _holds_json(f, Json)}
    if not columns:
        return None
    return functools.partial(_json_encoded, columns, Json, ujson_dumps)


# (module functions: nested ones calling themselves were a reference cycle, holding the features,
# that each pass left to the cyclic garbage collector)
def _json_encoded(columns: dict, json_type: type, dumps: Callable, example: dict) -> dict:
    return {k: _json_encode(columns[k], v, json_type, dumps) if k in columns else v for k, v in example.items()}


def _json_encode(feature: Any, value: Any, json_type: type, dumps: Callable) -> Any:
    if value is None:
        return None
    if isinstance(feature, json_type):
        return dumps(value) if feature.decode else value
    if isinstance(feature, dict) and isinstance(value, dict):
        return {k: _json_encode(feature[k], v, json_type, dumps) if k in feature else v for k, v in value.items()}
    inner = feature[0] if isinstance(feature, list) and len(feature) == 1 else (
        getattr(feature, "feature", None) if hasattr(feature, "__dataclass_fields__") else None)
    if inner is not None and isinstance(value, list):
        return [_json_encode(inner, v, json_type, dumps) for v in value]
    return value


def _holds_json(feature: Any, json_type: type) -> bool:
    if isinstance(feature, json_type):
        return True
    if isinstance(feature, dict):
        return any(_holds_json(f, json_type) for f in feature.values())
    if isinstance(feature, (list, tuple)):
        return any(_holds_json(f, json_type) for f in feature)
    inner = getattr(feature, "feature", None) if hasattr(feature, "__dataclass_fields__") else None
    return inner is not None and _holds_json(inner, json_type)

