"""Output formats (``with_format``): examples and batches as numpy arrays, torch tensors, Arrow
tables, pandas DataFrames... formatted by HF ``datasets``' own formatters, so the values and
types are the ones ``datasets.IterableDataset.with_format`` yields.

A format is applied on top of the node tree a dataset iterates and owns no state, so it changes
neither the state layout nor the pipeline fingerprint (functions given to ``map``/``filter``
after it receive formatted values through ``formatted_calls.py``, in ordinary map nodes).

Like HF, the input decides the path:

* an **Arrow-backed** pipeline (an Arrow source under column operations only, see
  ``arrow_batches.py``) is formatted from Arrow tables, as HF's ``format_batch`` / ``format_row``
  do, without a Python dict per example. For numpy and torch and the common column types
  (numbers, booleans, strings, equal-length lists of numbers) the arrays are computed here from
  the Arrow columns, with the dtypes and copies HF's formatters produce; any other column is
  left to HF's formatter;
* any other pipeline yields Python examples, formatted with ``recursive_tensorize`` (numpy,
  torch, ...) or converted to an Arrow table first (arrow, pandas, polars). Where every source of
  such a pipeline is Arrow-backed (a shuffle, take, map... over HF ``Dataset`` / Parquet sources),
  HF still formats its rows from Arrow, so numpy values get the types of HF's Arrow path
  (:class:`ArrowRowValues`: numpy scalars, ``np.str_``, float32 lists) rather than those of
  ``recursive_tensorize`` (0-d arrays, ``str``, float64 lists);
* batches made by the dataset's own ``batch()`` hold their strings in object arrays, as HF's
  (whose ``batch()`` is a batched map); ``iter(batch_size)`` over Arrow gives ``'<U'`` arrays.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from .arrow_batches import ArrowBatchesNode, arrow_chain, arrow_rooted, chain_features, chain_schema
from .base import Node
from .batch import BatchNode
from .rows import rows_to_batch


def check_format(type: str | None, format_kwargs: dict) -> str | None:
    """The canonical name of format ``type`` (``None`` for Python objects); ``ValueError`` if it is
    unknown or its library is not installed, ``TypeError`` if the keyword arguments do not fit it."""
    from datasets.formatting import get_format_type_from_alias, get_formatter

    if type is not None and not isinstance(type, str):
        raise TypeError(f"format type must be a string or None, got {type!r}")
    name = get_format_type_from_alias(type)
    if name == "custom":
        raise ValueError("with_format('custom') is not supported; use map() to transform the examples")
    try:
        get_formatter(name, **format_kwargs)
    except TypeError as e:
        raise TypeError(f"with_format({type!r}): bad format arguments {sorted(format_kwargs)}: {e}") from None
    return name


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
    filter after ``with_format``): ints as int64, floats as float32, booleans as ``np.bool_``."""

    def __init__(self, features: Any, format_kwargs: dict, tensorize: Callable[[Any], Any],
                 batch_rows: bool = False):
        self.kwargs, self.tensorize, self.batch_rows = format_kwargs, tensorize, batch_rows
        self.scalars: dict = {}  # column -> numpy scalar type, from a numeric ``Value`` feature
        for name, feature in (() if batch_rows else (features or {}).items()):
            try:
                dtype = np.dtype(getattr(feature, "dtype", None) or "O") if type(feature).__name__ == "Value" else None
            except TypeError:  # "string", "timestamp[s]"...: not a numpy dtype
                dtype = None
            if dtype is not None and dtype.kind in "iuf":
                self.scalars[name] = dtype.type

    def _list(self, values: list) -> Any:
        kinds = {type(v) for v in values}
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
                    out[name] = scalar(v)
                except OverflowError:
                    out[name] = self.tensorize(v)
            elif t is str:
                out[name] = np.str_(v)
            elif t is bool:  # np.bool_ is no np.number: HF makes a 0-d array of it
                out[name] = np.bool_(v) if self.batch_rows else np.asarray(v, **self.kwargs)
            elif t is list:
                out[name] = self._list(v)
            else:
                out[name] = self.tensorize(v)
        return out


def object_strings(batch: Any) -> Any:
    """``batch`` with its ``'<U'`` arrays as object arrays of ``str``, as in the batches of HF's
    ``batch()`` (a batched map, whose string cells reach the formatter as lists)."""
    if isinstance(batch, dict):
        for name, v in batch.items():
            if isinstance(v, np.ndarray) and v.dtype.kind == "U":
                batch[name] = v.astype(object)
    return batch


class RowFormatter:
    """Formats the rows of an Arrow table chunk (for :class:`ArrowBatchesNode`'s ``per_row``): the fast
    numpy / torch conversion where it applies, else HF's ``format_row`` on each one-row slice."""

    def __init__(self, format_type: str, format_kwargs: dict, features: Any):
        self.format_type, self.format_kwargs, self.features = format_type, format_kwargs, features
        self.fast = format_type in ("numpy", "torch") and not _needs_decoding(features)
        self._format_row = None

    def __call__(self, table: pa.Table) -> list:
        if self.fast:
            rows = fast_tensor_rows(table, self.format_type, self.format_kwargs)
            if rows is not None:
                return rows
        if self._format_row is None:
            self._format_row = _formatter(self.format_type, self.format_kwargs, self.features).format_row
        fmt = self._format_row
        return [fmt(table.slice(i, 1)) for i in range(table.num_rows)]


def _needs_decoding(features: Any) -> bool:
    if features is None:
        return False
    from datasets.features.features import require_decoding

    return any(require_decoding(f) for f in features.values())


def _formatter(name: str, format_kwargs: dict, features: Any = None):
    from datasets.formatting import get_formatter

    return get_formatter(name, features=features, **format_kwargs)


class FormatNode(Node):
    """Formats what ``child`` yields. ``source`` says what that is: Python examples, formatted one by
    one (``"rows"``) or grouped into batches of ``batch_size`` first (``"batches"``), Arrow batch
    tables (``"table_batches"``) or Python batches ``{column: [values]}`` (``"batch_dicts"``,
    formatted like Arrow batch tables). Formatted examples of an Arrow source are made by
    :class:`ArrowBatchesNode` with a :class:`RowFormatter`. ``arrow_rows``: the Python examples
    come from Arrow-backed sources (numpy values as :class:`ArrowRowValues` makes them, with the
    types of ``features``); ``dataset_batches``: the batches are those of the dataset's own
    ``batch()`` (numpy strings in object arrays). No state of its own;
    ``child`` is iterated as is (not copied), and a batch is assembled inside one ``next()``, so
    between yields the child's state counts every example of the yielded batch."""

    kind = "format"
    SOURCES = ("rows", "batches", "table_batches", "batch_dicts")

    def __init__(self, child: Node, format_type: str, format_kwargs: dict | None = None,
                 source: str = "rows", features: Any = None, batch_size: int = 1, drop_last_batch: bool = False,
                 schema: pa.Schema | None = None, arrow_rows: bool = False, dataset_batches: bool = False):
        if source not in self.SOURCES:
            raise ValueError(f"unknown input {source!r}; expected one of {self.SOURCES}")
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.format_type = format_type
        self.format_kwargs = dict(format_kwargs or {})
        self.source = source
        self.features = features
        self.batch_size = batch_size
        self.drop_last_batch = bool(drop_last_batch)
        self.schema = schema
        self.arrow_rows = arrow_rows and format_type == "numpy"
        self.dataset_batches = dataset_batches and format_type == "numpy"
        super().__init__([child])

    def params(self) -> dict:
        return {"type": self.format_type, "source": self.source, "batch_size": self.batch_size,
                "drop_last_batch": self.drop_last_batch}

    def _to_table(self, batch: dict) -> pa.Table:
        return python_batch_to_table(batch, self.schema)

    def _batches(self) -> Iterator[list]:
        it = iter(self.children[0])
        size = self.batch_size
        while True:
            rows = list(itertools.islice(it, size))
            if not rows or (self.drop_last_batch and len(rows) < size):
                return
            yield rows

    def _iter(self) -> Iterator[Any]:
        from datasets.formatting import TableFormatter, TensorFormatter

        child = self.children[0]
        source = self.source
        if source in ("table_batches", "batch_dicts"):
            if source == "batch_dicts":
                child = (self._to_table(b) for b in child)
            fmt = _formatter(self.format_type, self.format_kwargs, self.features).format_batch
            if self.dataset_batches:
                fmt = (lambda format_batch: lambda table: object_strings(format_batch(table)))(fmt)
            if self.format_type in ("numpy", "torch") and not _needs_decoding(self.features):
                name, kwargs, strings = self.format_type, self.format_kwargs, self.dataset_batches
                for table in child:
                    batch = fast_tensor_batch(table, name, kwargs)
                    yield fmt(table) if batch is None else object_strings(batch) if strings else batch
            else:
                for table in child:
                    yield fmt(table)
            return
        formatter = _formatter(self.format_type, self.format_kwargs)
        if isinstance(formatter, TensorFormatter):
            tensorize = formatter.recursive_tensorize
            row = ArrowRowValues(self.features, self.format_kwargs, tensorize) if self.arrow_rows else tensorize
            if source == "rows":
                for x in child:
                    yield row(x)
            elif self.arrow_rows and not _needs_decoding(self.features):
                # like HF's Arrow path: the batch as an Arrow table, formatted column-wise
                schema = self.features.arrow_schema if self.features is not None else None
                for rows in self._batches():
                    batch = table_batch(rows_to_batch(rows), schema, self.format_kwargs)
                    yield tensorize(rows_to_batch([row(x) for x in rows])) if batch is None else batch
            else:  # like HF: each example is formatted, then the batch of formatted examples
                for rows in self._batches():
                    yield tensorize(rows_to_batch([row(x) for x in rows]))
        elif isinstance(formatter, TableFormatter):
            from datasets.features.features import cast_to_python_objects

            schema = self.features.arrow_schema if self.features is not None else None

            def table(rows: list) -> pa.Table:  # with the types the features declare, where they fit
                rows = cast_to_python_objects(rows, only_1d_for_numpy=True)
                if schema is not None:
                    try:
                        return pa.Table.from_pylist(rows, schema=schema)
                    except (pa.ArrowException, TypeError, ValueError, KeyError):
                        pass
                return pa.Table.from_pylist(rows)

            if source == "rows":
                fmt = formatter.format_row
                for x in child:
                    yield fmt(table([x]))
            else:
                fmt = formatter.format_batch
                for rows in self._batches():
                    yield fmt(table(rows))
        elif source == "rows":  # python objects: nothing to do
            yield from child
        else:
            for rows in self._batches():
                yield rows_to_batch(rows)


ROW_CHUNK = 256  # rows of an Arrow source formatted at a time when iterating formatted examples


def table_batch(batch: dict, schema: pa.Schema | None, format_kwargs: dict) -> dict | None:
    """A Python ``batch`` (``{column: values}``) as HF's numpy formatter makes the Arrow table of it,
    or ``None`` when it does not make a table of simple columns."""
    try:
        table = python_batch_to_table(batch, schema)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    return fast_tensor_batch(table, "numpy", format_kwargs)


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


def present(node: Node, fmt: tuple | None, batch: tuple | None = None, template: Node | None = None,
            features: Any = None) -> Node:
    """The node to iterate for the live pipeline ``node`` shown in format ``fmt`` (``(type, kwargs)``
    or ``None``), grouped into batches when ``batch`` is ``(batch_size, drop_last_batch)``.

    A ``node`` that is itself a :class:`BatchNode` (``.batch()``) is formatted batch by batch. Where
    the rows come from an Arrow-backed pipeline the batches are built column-wise
    (:class:`ArrowBatchesNode`); otherwise rows are batched and then formatted. If the dataset's
    unsplit pipeline ``template`` is a :class:`BatchNode` but ``node`` is not (a ``.batch()``
    pipeline split by rank with a step, or resumed elastically), ``node`` still yields batches:
    they are formatted as batches, with the column types of the column-wise path where known.
    ``features`` are those of the rows a ``.batch()`` pipeline groups: batches of rows that are not
    Arrow-backed are decoded with them, as HF does (an ``Image`` column becomes one array or tensor);
    for any other dataset they are its own features (the numpy types of :class:`ArrowRowValues`).
    """
    live_batches = node if batch is None and isinstance(node, BatchNode) else None
    own_batches = live_batches is not None or (batch is None and isinstance(template, BatchNode))
    if live_batches is not None:
        node, batch = node.children[0], (node.batch_size, node.drop_last_batch)
    if fmt is None or fmt[0] is None:
        return live_batches or (node if batch is None else BatchNode(node, *batch))
    name, kwargs = fmt
    if live_batches is not None and arrow_chain(node) is None:
        # rows batched by the pipeline's own batch node: iterate that node, whose state holds the
        # rows of a batch interrupted by an error, and format its batches
        return FormatNode(live_batches, name, kwargs, "batch_dicts",
                          features=features, schema=chain_schema(node), dataset_batches=True)
    if batch is None and isinstance(template, BatchNode):
        rows = template.children[0]
        chain = arrow_chain(rows)
        return FormatNode(node, name, kwargs, "batch_dicts",
                          features=chain_features(*chain) if chain else features,
                          schema=chain_schema(rows), dataset_batches=True)
    chain = arrow_chain(node)
    if chain is not None:
        features = chain_features(*chain)
        if batch is None:
            return ArrowBatchesNode(node, ROW_CHUNK, per_row=RowFormatter(name, kwargs, features))
        return FormatNode(ArrowBatchesNode(node, *batch), name, kwargs, "table_batches", features,
                          dataset_batches=own_batches)
    arrow_rows = arrow_rooted(node)
    if batch is None:
        return FormatNode(node, name, kwargs, "rows", features=features, arrow_rows=arrow_rows)
    return FormatNode(node, name, kwargs, "batches", features=features, batch_size=batch[0],
                      drop_last_batch=batch[1], arrow_rows=arrow_rows)
