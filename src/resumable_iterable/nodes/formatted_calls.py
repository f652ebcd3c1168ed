"""Functions given to ``map``/``filter`` after ``with_format`` receive formatted values, as in HF.

The examples flowing between nodes stay Python dicts (states, fingerprints and resumption are
those of the same pipeline without a format); :class:`FormattedCall` wraps the user's function so
that it sees what HF gives it, and turns what it returns back into what the map or filter node
takes. It runs through an ordinary ``map``/``filter`` node, so exactness at every cut point,
worker and rank splits and elastic resume are those of any map.

* **Tensor formats** (``numpy``, ``torch``, ``jax``, ``tensorflow``): the example or batch goes
  through the formatter's ``recursive_tensorize``, as HF does (``format_rows.list_tensorize``:
  the same values, lists of numbers converted at once); with ``input_columns`` too, the function
  then getting those columns' values (the node gives this call the whole example:
  ``takes_whole_input``). HF formats Python rows, then the batch it builds of them once more: a
  numpy batch of Python rows is made so (float32 arrays), and a batch of Arrow-backed rows holds
  its strings as ``np.str_`` objects. A map's columns the function leaves alone keep the
  formatted values it was given, as in HF. Tensors returned by a map become numpy arrays (a
  batch's columns are then split into rows by the node), except after ``with_format("torch")``,
  where they stay tensors of their dtype, as in HF; a filter's answer is read with ``bool``.
* **Table formats** (``arrow``, ``pandas``, ``polars``): the function gets a table of the batch
  (one row when not batched) in that format, or the batch's ``input_columns`` as pyarrow arrays,
  and a map returns a table of the same kind, which replaces the batch (HF does not merge it with
  the input columns; ``remove_columns`` are dropped from it). The facade runs these as batched
  maps (one row at a time when ``batched=False``) that replace their input.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from .format_values import object_strings

TABLE_FORMATS = ("arrow", "pandas", "polars")
_TABLE_TYPES = {"arrow": "pyarrow.Table", "pandas": "pandas.DataFrame", "polars": "polars.DataFrame"}


def _table_to_arrow(output: Any) -> Any:
    """A table returned by a map as a ``pyarrow.Table`` (other values unchanged)."""
    if isinstance(output, pa.Table):
        return output
    module = type(output).__module__.split(".")[0]
    if module == "pandas":
        import pandas as pd

        if isinstance(output, pd.Series):
            output = output.to_frame()
        return pa.Table.from_pandas(output, preserve_index=False)
    if module == "polars":
        return output.to_arrow()
    return output


def _mask(output: Any) -> list:
    """A batched filter's answer as a list of truth values."""
    if isinstance(output, (pa.Array, pa.ChunkedArray)):
        return output.to_pylist()
    if hasattr(output, "tolist"):  # numpy, pandas, torch
        return output.tolist()
    if hasattr(output, "to_list"):  # polars
        return output.to_list()
    return list(output)


def _to_numpy(value: Any) -> Any:
    if isinstance(value, (np.ndarray, np.generic)) or not hasattr(value, "__array__") or isinstance(value, (str, bytes)):
        return value
    try:
        return np.asarray(value)
    except TypeError:  # a tensor of a dtype numpy has not (torch.bfloat16): kept as it is (states store tensors)
        return value


def _same_length(formatted: dict, out: dict, batched: bool) -> bool:
    if not batched:
        return True
    lengths = {len(v) for v in (*formatted.values(), *out.values()) if hasattr(v, "__len__")}
    return len(lengths) <= 1


def formatted_function(function: Any, fmt: tuple, kind: str, batched: bool, batch_size: Any, input_columns: Any,
                       schema: Any, arrow_rows: Any = None, remove_columns: Any = None) -> tuple:
    """``(function, batched, batch_size, replace_input)`` for the map/filter node of a dataset
    formatted as ``fmt`` (``(type, kwargs)``): the function wrapped; a table format runs it
    batched (one row at a time when ``batched=False``), a map's output replacing the batch.
    ``arrow_rows``: the features (``{}`` if unknown) of the rows the node gets when they come from
    Arrow-backed sources on HF's Arrow path; ``None`` otherwise."""
    from .calls import is_async_function

    name, kwargs = fmt
    is_async = is_async_function(function)
    if is_async and name in TABLE_FORMATS:
        raise TypeError(f"{kind}() after with_format({name!r}) takes a plain function, not an async one (HF "
                        f"datasets cannot await it either): call with_format() after {kind}()")
    columns = [input_columns] if isinstance(input_columns, str) else (list(input_columns) if input_columns else None)
    wrapped = (AsyncFormattedCall if is_async else FormattedCall)(function, name, kwargs, kind, bool(batched), columns,
                                                                 schema, arrow_rows, remove_columns)
    if name in TABLE_FORMATS:
        return wrapped, True, batch_size if batched else 1, kind == "map"
    return wrapped, batched, batch_size, False


class FormattedCall:
    """The user's ``function`` called with formatted values (see the module doc). Picklable, like
    the function it wraps (DataLoader workers receive it).

    ``n_data``: how many leading arguments are data (1, or one per input column); ``columns``:
    the input column names (table formats build a table of those columns). ``arrow_rows`` (numpy, torch):
    the features of Arrow-backed input rows, which HF formats from Arrow (``format.ArrowRowValues``
    for an example, a table for a batch), as iterating them would."""

    @property
    def takes_whole_input(self) -> bool:
        """With ``input_columns`` and a tensor format, the map or filter node gives this call the whole
        example (batch), as without them: HF formats all of it and gives the function the input
        columns' values from it, and a map's other columns keep their formatted values."""
        return self.columns is not None and not self.table

    @property
    def keeps_arrow_rows(self) -> bool:
        """A filter passes Arrow-backed rows on as HF's does (``arrow_batches.arrow_rooted``); a map's
        rows carry the formatted values it was given, and HF formats what it adds as Python values."""
        return self.kind == "filter"

    def __init__(self, function: Any, format_type: str, format_kwargs: dict, kind: str, batched: bool,
                 columns: list[str] | None, schema: Any = None, arrow_rows: Any = None, remove_columns: Any = None):
        self.function = function
        self.format_type = format_type
        self.format_kwargs = dict(format_kwargs)
        self.kind = kind
        self.batched = batched
        self.columns = columns
        # a map's remove_columns: the formatted input it keeps for the columns a new dict leaves alone
        # leaves these out (HF removes them from the input before merging the output)
        self.remove_columns = frozenset([remove_columns] if isinstance(remove_columns, str) else remove_columns or ())
        self.schema = schema
        self.table = format_type in TABLE_FORMATS
        self.arrow_rows = arrow_rows if format_type in ("numpy", "torch") else None
        if self.table and schema is None and arrow_rows:
            # rows HF keeps on its Arrow path (a shuffle, take... of Arrow sources): its tables have
            # the features' types
            try:
                self.schema = arrow_rows.arrow_schema
            except Exception:  # noqa: BLE001 - features with no Arrow type: the values' types
                pass
        self.__qualname__ = getattr(function, "__qualname__", type(function).__name__)
        self._formatter = None
        self._tensorize = None  # the formatter's recursive_tensorize, lists converted at once
        self._rows: dict = {}  # batch_rows -> the ArrowRowValues of this call's input rows (built once)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_formatter": None, "_tensorize": None, "_rows": {}}

    def _format(self) -> Any:
        if self._formatter is None:
            from datasets.formatting import get_formatter

            from .format_rows import list_tensorize

            self._formatter = get_formatter(self.format_type, **self.format_kwargs)
            self._tensorize = list_tensorize(self._formatter)
        return self._formatter

    def _tensorize_of(self) -> Any:
        self._format()
        return self._tensorize

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        data, rest, call = self._inputs(args)
        return self._output(self.function(*data, *rest, **kwargs), args, data, call)

    def _inputs(self, args: tuple) -> tuple:
        """``(data, rest, call)``: the formatted data arguments and the others for the function, and
        what :meth:`_output` needs of this call (``(whole, kept, before)``)."""
        whole = self.takes_whole_input
        n = len(self.columns) if self.columns is not None and not whole else 1
        data, rest = list(args[:n]), list(args[n:])
        kept = None  # the formatted values a map's untouched columns keep, when not those given
        if self.table:
            data = self._tables(data)
            if rest and not self.batched:
                rest[0] = rest[0][0]  # run one row at a time: HF passes that row's index
        elif self.arrow_rows is not None:
            kept = self._arrow_data(data[0])
            data = [object_strings(kept, scalars=True) if self.batched else kept]
        elif self.batched and self.format_type == "numpy" and isinstance(data[0], dict):
            data = [self._rows_then_batch(data[0])]
        else:
            tensorize = self._tensorize_of()
            data = [tensorize(d) for d in data]
        if whole:  # HF formats the whole example (batch), then passes the input columns' values
            kept = kept if kept is not None else data[0]
            data = [data[0][c] for c in self.columns]
        # a map's formatted example (batch) as given, before the function could pop its columns
        before = dict(data[0]) if self.kind == "map" and self.columns is None and isinstance(data[0], dict) else None
        return data, rest, (whole, kept, before)

    def _output(self, out: Any, args: tuple, data: list, call: tuple) -> Any:
        """What the node takes of the function's answer ``out`` to a call of :meth:`_inputs`."""
        whole, kept, before = call
        if self.kind == "filter":
            return self._filter_output(out)
        if whole:
            return self._map_output(out, kept)
        if self.columns is None and not self.table:
            given = data[0]  # what the function was given
            if before is not None and isinstance(args[0], dict) and (out is None or out is given):
                # it edited the example (batch) it was given and returned it, or nothing: the map
                # node then works on its own input dict, which takes the function's edits (so a
                # column in remove_columns goes, as when a function returns its input in HF, and
                # edits made in place are kept, as without a format); a column it popped and
                # returned without comes back formatted, as in HF ({**input, **output})
                args[0].clear()
                keep = self._kept_value
                args[0].update({k: keep(v) for k, v in (given if out is None else {**before, **given}).items()})
                return None if out is None else args[0]
            return self._map_output(out, kept or given)
        return self._map_output(out, None)

    def _rows_then_batch(self, batch: dict) -> dict:
        """A batch of Python rows formatted as HF's numpy formatter gives it to a batched map or
        filter: each row formatted (HF formats the examples before the map), then the batch of
        them formatted again (HF formats the batch it builds), so float arrays are float32 (a
        Python float list of a row is float64, then its array float32) and int arrays int64."""
        tensorize = self._tensorize_of()
        kwargs = self._format().np_array_kwargs
        out = {}
        for name, column in batch.items():
            kind = type(column[0]) if column else None
            if (kind is int or kind is float or kind is bool) and all(type(v) is kind for v in column):
                # a column of Python numbers: the same as below (each a 0-d array, stacked), at once
                values = np.asarray(column)
                if values.dtype.kind in "iufb" and (kind is not int or values.dtype == np.int64):
                    default = {"dtype": np.int64} if kind is int else {"dtype": np.float32} if kind is float else {}
                    out[name] = np.asarray(values, **{**default, **kwargs})
                    continue
            cells = [tensorize(v) for v in column]
            first = cells[0] if cells else None
            if (type(first) is np.ndarray and first.dtype.kind in "iufb"
                    and all(type(c) is np.ndarray and c.shape == first.shape and c.dtype == first.dtype
                            for c in cells)):
                # what HF's second pass makes, at once: each array to int64 / float32 (or the
                # format's dtype), then stacked
                kind = first.dtype.kind
                default = {"dtype": np.int64} if kind in "iu" else {"dtype": np.float32} if kind == "f" else {}
                out[name] = np.asarray(np.stack(cells), **{**default, **kwargs})
            else:
                out[name] = tensorize(cells)
        return out

    def _row_values(self, batch_rows: bool) -> Any:
        row = self._rows.get(batch_rows)
        if row is None:
            from .format_rows import ArrowRowValues

            row = self._rows[batch_rows] = ArrowRowValues(self.arrow_rows or None, self.format_kwargs,
                                                          self._tensorize_of(), batch_rows=batch_rows,
                                                          torch=self.format_type == "torch")
        return row

    def _arrow_data(self, data: dict) -> Any:
        from .format_values import format_table, table_batch
        from .rows import rows_to_batch

        tensorize = self._tensorize_of()
        features = self.arrow_rows or None
        if not self.batched:  # HF: a row of the formatted batch
            return self._row_values(True)(data)
        batch = table_batch(data, features.arrow_schema if features is not None else None, self.format_type,
                            self.format_kwargs,
                            functools.partial(format_table, self._format()))
        if batch is not None:
            if self.format_type == "numpy":  # HF's map formats the rows of its formatted batch once more:
                recursive = self._format().recursive_tensorize  # (structs: their floats float32)
                batch = {k: recursive(v) if type(v) is np.ndarray and v.dtype == object else v for k, v in batch.items()}
            return batch  # (the function gets its strings as objects, as from HF: see __call__)
        n = len(next(iter(data.values()), ()))
        rows = [{k: v[i] for k, v in data.items()} for i in range(n)]
        row = self._row_values(False)
        return tensorize(rows_to_batch([row(r) for r in rows]))

    def _tables(self, data: list) -> list:
        from .format_values import format_table, python_batch_to_table

        if self.columns is not None:  # HF passes the input columns as pyarrow arrays (of the columns' types)
            schema = self.schema
            if schema is not None:
                names = set(schema.names)
                schema = pa.schema([schema.field(c) for c in self.columns]) if names.issuperset(self.columns) else None
            table = python_batch_to_table(dict(zip(self.columns, data)), schema)
            return [table[c] for c in self.columns]
        return [format_table(self._format(), python_batch_to_table(data[0], self.schema))]

    def _map_output(self, out: Any, formatted: Any = None) -> Any:
        """What the map node takes from the function's output ``out``. Like HF, the columns the
        function leaves alone keep the values it was given (``formatted``, the formatted example or
        batch): HF's map updates the formatted example with the output (a batch only when the
        output has its length: else the map node's own rules for row counts apply)."""
        if self.table:
            table = _table_to_arrow(out)
            if not isinstance(table, pa.Table):
                raise TypeError(f"map function applied to a {_TABLE_TYPES[self.format_type]} (with_format("
                                f"{self.format_type!r})) returned {type(out).__name__}: return a "
                                f"{_TABLE_TYPES[self.format_type]} to update the dataset, as HF datasets requires")
            return table.to_pydict()
        if isinstance(out, Mapping):  # a dict, or a tokenizer's BatchEncoding (a UserDict)
            keep = self._kept_value
            out = {k: keep(v) for k, v in out.items()}
            if isinstance(formatted, dict) and _same_length(formatted, out, self.batched):
                removed = self.remove_columns
                out = {**{k: keep(v) for k, v in formatted.items() if k not in removed}, **out}
            return out
        return out

    def _kept_value(self, value: Any) -> Any:
        """A value a map returned (or left), as the rows keep it: numpy arrays for tensors, except the
        tensors of a torch format, kept with their dtype (HF keeps them: an int32 or float16 tensor
        stays one, where numpy values would be made int64 / float32 tensors again)."""
        if self.format_type == "torch" and type(value).__module__.startswith("torch") and hasattr(value, "dtype"):
            return value
        return _to_numpy(value)

    def _filter_output(self, out: Any) -> Any:
        if self.table and isinstance(out, (bool, np.bool_, pa.BooleanScalar)):
            # one answer, as HF takes it for a table (one row at a time; a batch of more rows
            # then fails the node's count of answers)
            return [bool(out.as_py() if isinstance(out, pa.BooleanScalar) else out)]
        if self.table or self.batched:
            try:
                return [bool(v) for v in _mask(out)]
            except TypeError:
                given = (f"a {_TABLE_TYPES[self.format_type]} (with_format({self.format_type!r}))" if self.table
                         else f"a batch (with_format({self.format_type!r}))")
                raise TypeError(f"filter function applied to {given} must return "
                                f"{'a boolean or ' if self.table else ''}a list (or array) of booleans, one per row, "
                                f"got {type(out).__name__}") from None
        return bool(out)


class AsyncFormattedCall(FormattedCall):
    """:class:`FormattedCall` of an ``async def`` function (tensor formats, as HF awaits them there):
    an ``async`` callable, which the map or filter node awaits as it awaits the function alone."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        data, rest, call = self._inputs(args)
        return self._output(await self.function(*data, *rest, **kwargs), args, data, call)
