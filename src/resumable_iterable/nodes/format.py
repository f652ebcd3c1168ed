"""Output formats (``with_format``): examples and batches as numpy arrays, torch tensors, Arrow
tables, pandas DataFrames... formatted by HF ``datasets``' own formatters, so the values and
types are the ones ``datasets.IterableDataset.with_format`` yields.

A format is applied on top of the node tree a dataset iterates and owns no state, so it changes
neither the state layout nor the pipeline fingerprint (an item it could not hand out - its
formatting raised, a Ctrl-C landed there - goes back to the root of that tree: ``Node.hold``) (functions given to ``map``/``filter``
after it receive formatted values through ``formatted_calls.py``, in ordinary map nodes).

This module holds the node, :class:`FormatNode`, and :class:`RowFormatter` (the rows of an Arrow
chunk formatted at once); ``format_plan.py`` decides which of them formats a pipeline, and how
(the paths HF takes), ``format_columns.py`` which columns of a Python batch are formatted from their
values rather than through an Arrow table, ``format_values.py`` / ``format_rows.py`` the values.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from .base import Node
from .format_columns import (NOT_ARROW, array_columns, decoded_columns, image_columns, needs_decoding, scalar_columns,
                             unfit_columns)
from .format_rows import ArrowRowValues, list_tensorize, lists_back
from .format_values import (fast_tensor_batch, fast_tensor_rows, format_table, json_text_encoder, object_strings,
                            python_batch_to_table, table_batch)
from .rows import rows_read, rows_to_batch


def check_format(type: str | None, format_kwargs: dict) -> str | None:
    """The canonical name of format ``type`` (``None`` for Python objects); ``ValueError`` if it is
    unknown or its library is not installed, ``TypeError`` if the keyword arguments do not fit it."""
    from datasets.formatting import get_format_type_from_alias, get_formatter

    if type is not None and not isinstance(type, str):
        raise TypeError(f"format type must be a string or None, got {type!r}")
    name = get_format_type_from_alias(type)
    given = [k for k in ("columns", "output_all_columns") if k in format_kwargs]
    if given:  # the map-style Dataset's arguments: HF's iterable refuses them (TypeError); numpy and torch
        # would take them for np.asarray / torch.tensor options, ignored or failing when iterated
        raise TypeError(f"with_format({type!r}) got {', '.join(given)}=, arguments of the map-style "
                        "datasets.Dataset.with_format that an IterableDataset does not take (HF's neither): "
                        "call select_columns(...) to keep some columns, then with_format")
    if name == "custom":
        raise ValueError("with_format('custom') is not supported; use map() to transform the examples")
    try:
        get_formatter(name, **format_kwargs)
    except TypeError as e:
        raise TypeError(f"with_format({type!r}): bad format arguments {sorted(format_kwargs)}: {e}") from None
    return name


class RowFormatter:
    """Formats the rows of an Arrow table chunk (for :class:`ArrowBatchesNode`'s ``per_row``): the fast
    numpy / torch conversion where it applies, else HF's ``format_row`` on each one-row slice."""

    def __init__(self, format_type: str, format_kwargs: dict, features: Any):
        self.format_type, self.format_kwargs, self.features = format_type, format_kwargs, features
        self.fast = format_type in ("numpy", "torch") and not needs_decoding(features)
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
    ``batch()`` (numpy strings in object arrays). No state of its own (see :meth:`_iter` for an item
    whose formatting raised);
    ``child`` is iterated as is (not copied), and a batch is assembled inside one ``next()``, so
    between yields the child's state counts every example of the yielded batch."""

    kind = "format"
    SOURCES = ("rows", "batches", "table_batches", "batch_dicts")

    def __init__(self, child: Node, format_type: str, format_kwargs: dict | None = None,
                 source: str = "rows", features: Any = None, batch_size: int = 1, drop_last_batch: bool = False,
                 schema: pa.Schema | None = None, arrow_rows: bool = False, dataset_batches: bool = False,
                 formatted_again: bool = False):
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
        self.arrow_rows = arrow_rows and format_type in ("numpy", "torch")
        # Python examples of Arrow-backed rows: lists read as arrays (by a state saved in a numpy / torch
        # format) are given back as lists
        self.lists_back = (lists_back(features) if arrow_rows and (format_type is None or source == "batch_dicts")
                           else None)
        self.dataset_batches = dataset_batches and format_type == "numpy"
        #: numpy batches of a ``batch()`` given after ``with_format`` (``BatchNode.after_format``) of rows
        #: HF formats from Python values (not on its Arrow path): HF formats each batch its map yields once
        #: more, as a row, which makes decoded media of integers int64 arrays and of floats float32
        #: (``batch().with_format("numpy")``, and rows on HF's Arrow path, keep an image's uint8, as HF)
        self.formatted_again = formatted_again and self.dataset_batches
        super().__init__([child])

    def params(self) -> dict:
        return {"type": self.format_type, "source": self.source, "batch_size": self.batch_size,
                "drop_last_batch": self.drop_last_batch}

    def _to_table(self, batch: dict) -> pa.Table:
        schema = self.schema
        if schema is not None and schema.names != list(batch):
            # the batch's own columns (decoded media are left out of the table), typed where known
            schema = pa.schema([schema.field(k) for k in batch]) if set(schema.names).issuperset(batch) else None
        return python_batch_to_table(batch, schema)

    def _batches(self) -> Iterator[list]:
        it = iter(self.children[0])
        size = self.batch_size
        while True:
            rows = list(itertools.islice(it, size))
            if not rows or (self.drop_last_batch and len(rows) < size):
                return
            yield rows

    def _iter(self) -> Iterator[Any]:
        """A Ctrl-C (``KeyboardInterrupt``, raised as the next call returns) or an error can land
        while an item is formatted, after the input counted it: the item is then handed back to the
        input (:meth:`Node.hold`; a state taken now yields it again first, in any format), or, for
        the tables of :class:`ArrowBatchesNode` (not part of any state), the pipeline below is put
        back where it stood before the table was read. Batches that this node groups itself
        (``"batches"``: ``iter(batch_size)``) are put back by the :class:`~.batch.Rewind` around it."""
        from datasets.formatting import TableFormatter, TensorFormatter

        child = self.children[0]
        source = self.source
        if source in ("table_batches", "batch_dicts"):
            yield from self._iter_batches()
            return
        formatter = _formatter(self.format_type, self.format_kwargs)
        if isinstance(formatter, TensorFormatter):
            tensorize = list_tensorize(formatter)
            row = (ArrowRowValues(self.features, self.format_kwargs, tensorize, torch=self.format_type == "torch")
                   if self.arrow_rows else tensorize)
            if source == "rows":
                yield from _handed_back_on_error(child, row)
            elif self.arrow_rows:
                # like HF's Arrow path: the batch as an Arrow table, formatted column-wise; columns HF
                # decodes (images...) are decoded already: their values are formatted as HF formats them
                # once decoded (not encoded again for the table: a JPEG would change)
                media = decoded_columns(self.features)
                plain = (None if self.features is None else
                         self.features.__class__({k: f for k, f in self.features.items() if k not in media}))
                schema = plain.arrow_schema if plain is not None else None
                format_batch = functools.partial(format_table, _formatter(self.format_type, self.format_kwargs, plain))
                for rows in self._batches():
                    columns = rows_to_batch(rows)
                    batch = table_batch({k: v for k, v in columns.items() if k not in media} if media else columns,
                                        schema, self.format_type, self.format_kwargs, format_batch)
                    if batch is None:
                        yield tensorize(rows_to_batch([row(x) for x in rows]))
                    elif media:
                        yield {k: tensorize(v) if k in media else batch[k] for k, v in columns.items()}
                    else:
                        yield batch
            else:  # like HF: each example is formatted, then the batch of formatted examples
                for rows in self._batches():
                    yield tensorize(rows_to_batch([row(x) for x in rows]))
        elif isinstance(formatter, TableFormatter):
            from datasets.features.features import cast_to_python_objects
            from datasets.table import cast_table_to_features

            schema = self.features.arrow_schema if self.features is not None else None
            # with the features, as HF's: pandas / polars decode media columns (an Image is a PIL image)
            formatter = _formatter(self.format_type, self.format_kwargs, self.features)
            json_text = json_text_encoder(self.features)  # Json values back to the text HF's Arrow rows hold

            def table(rows: list) -> pa.Table:  # with the types the features declare, where they fit
                if json_text is not None:
                    rows = [json_text(x) for x in rows]
                rows = cast_to_python_objects(rows, only_1d_for_numpy=True)
                if schema is None:
                    return pa.Table.from_pylist(rows)
                try:
                    return pa.Table.from_pylist(rows, schema=schema)
                except (pa.ArrowException, TypeError, ValueError, KeyError):
                    pass
                inferred = pa.Table.from_pylist(rows)
                try:  # HF casts the table to the features: a ClassLabel's name becomes its id
                    return cast_table_to_features(inferred, self.features)
                except pa.ArrowInvalid as e:
                    if sorted(inferred.column_names) != sorted(self.features):
                        return inferred  # features of other columns (not known to hold for these rows)
                    # the values of the declared features' columns do not fit them (a map(features=)
                    # whose function returns other types): HF's cast raises this, as here
                    where = rows_read(None, child.position()) if len(rows) == 1 else ""
                    e.add_note(f"with_format({self.format_type!r}): the values of the example{where} do not fit "
                               f"the declared features {dict(self.features)}")
                    raise
                except (pa.ArrowException, TypeError, ValueError, KeyError):
                    return inferred

            if source == "rows":
                fmt = formatter.format_row
                yield from _handed_back_on_error(child, lambda x: fmt(table([x])))
            else:
                fmt = formatter.format_batch
                for rows in self._batches():
                    yield fmt(table(rows))
        elif source == "rows":  # python objects: nothing to do
            if self.lists_back is None:
                yield from child
            else:
                yield from _handed_back_on_error(child, self.lists_back)
        else:
            lists = self.lists_back
            for rows in self._batches():
                yield rows_to_batch(rows if lists is None else [lists(x) for x in rows])

    def _iter_batches(self) -> Iterator[Any]:
        """``"table_batches"`` and ``"batch_dicts"``: each batch formatted like an Arrow batch table."""
        child = self.children[0]
        source = self.source
        back = self.lists_back if source == "batch_dicts" else None  # a resumed state's arrays, as lists
        if back is not None:
            def back(b: dict) -> dict:
                return {k: [x.tolist() if type(x) is np.ndarray else x for x in v] if type(v) is list else v
                        for k, v in b.items()}

            if self.format_type is None:
                yield from _handed_back_on_error(child, back)
                return
        name, kwargs, strings = self.format_type, self.format_kwargs, self.dataset_batches
        tensors = name in ("numpy", "torch")
        tensorize = list_tensorize(_formatter(name, kwargs)) if tensors else None
        # decoded images (by the features, or after a map of unknown features) are formatted from their
        # values, as HF's formatter formats them; an Arrow table would encode them (a path, a JPEG
        # again) and give {"bytes", "path"} where the features are unknown
        decoded = decoded_columns(self.features) if source == "batch_dicts" and tensors else None
        fmt = functools.partial(format_table, _formatter(self.format_type, self.format_kwargs, self.features))
        fast = tensors and not needs_decoding(self.features)
        again = _formatter(name, kwargs).recursive_tensorize if self.formatted_again and decoded is not None else None

        def one(b: Any) -> Any:
            media = arrays = None
            if source == "table_batches":
                table = b
            else:
                if back is not None:
                    b = back(b)
                if decoded is not None:
                    media = decoded | image_columns(b)
                    arrays, mixed = array_columns(b, self.schema, media)
                    if arrays or mixed:
                        media = media | arrays | mixed
                    if name == "numpy":  # (torch casts them as the table's path does)
                        media = media | scalar_columns(b, self.schema, media)
                try:
                    table = self._to_table({k: v for k, v in b.items() if k not in media} if media else b)
                except NOT_ARROW:
                    if decoded is None:
                        raise
                    # values no Arrow column holds (complex or datetime arrays, object arrays, numpy
                    # scalars mixed with 0-d arrays, tensors with arrays): formatted from the values,
                    # as HF's formatter formats every Python batch
                    unfit = unfit_columns(b, media, self._to_table)
                    media, arrays = media | unfit, (arrays or set()) | unfit
                    table = self._to_table({k: v for k, v in b.items() if k not in media})
            batch = fast_tensor_batch(table, name, kwargs) if fast else None
            batch = fmt(table) if batch is None else batch
            if media:
                batch = {k: tensorize(v) if k in media else batch[k] for k, v in b.items()}
                if again is not None:
                    batch = {k: again(v) if k in media and k not in arrays else v for k, v in batch.items()}
            return object_strings(batch, table) if strings else batch

        if source == "batch_dicts":
            yield from _handed_back_on_error(child, one)
            return
        # the tables of an ArrowBatchesNode, which is part of no state: the pipeline it drives is
        # put back where it stood before the table was read (its state is small: a source, columns)
        below = child.children[0]
        it = iter(child)
        while True:
            start = below.state_dict()
            try:
                for table in it:
                    break
                else:
                    return
                out = one(table)
            except BaseException:
                below.load(start)
                raise
            yield out


def _handed_back_on_error(child: Node, fn: Any) -> Iterator[Any]:
    """``fn(x)`` for each item ``x`` of ``child``; an item whose ``fn`` raises (a Ctrl-C landing in it,
    or its own error) is handed back to ``child`` (:meth:`Node.hold`), which yields it again first."""
    for x in child:
        try:
            out = fn(x)
        except BaseException:
            child.hold([x])
            raise
        yield out
