"""Output formats (``with_format``): examples and batches as numpy arrays, torch tensors, Arrow
tables, pandas DataFrames... formatted by HF ``datasets``' own formatters, so the values and
types are the ones ``datasets.IterableDataset.with_format`` yields.

A format is applied on top of the node tree a dataset iterates and owns no state, so it changes
neither the state layout nor the pipeline fingerprint (an item it could not hand out - its
formatting raised, a Ctrl-C landed there - goes back to the root of that tree: ``Node.hold``) (functions given to ``map``/``filter``
after it receive formatted values through ``formatted_calls.py``, in ordinary map nodes).

Like HF, the input decides the path:

* an **Arrow-backed** pipeline (an Arrow source under column operations only, see
  ``arrow_batches.py``) is formatted from Arrow tables, as HF's ``format_batch`` / ``format_row``
  do, without a Python dict per example. For numpy and torch and the common column types
  (numbers, booleans, strings, equal-length lists of numbers) the arrays are computed from the
  Arrow columns (``format_values.py``), with the dtypes and copies HF's formatters produce; any
  other column is left to HF's formatter;
* any other pipeline yields Python examples, formatted with ``recursive_tensorize`` (numpy,
  torch, ...) or converted to an Arrow table first (arrow, pandas, polars; with the declared
  features' types). Where such a pipeline's rows come from Arrow-backed sources through the nodes
  HF keeps on its Arrow path (shuffle, take, interleave..., not a Python map or filter:
  ``arrow_batches.arrow_rooted``), HF still formats them from Arrow, so numpy values get its types
  (:class:`ArrowRowValues`: numpy scalars, ``np.str_``, float32 lists) rather than those of
  ``recursive_tensorize`` (0-d arrays, ``str``, float64 lists);
* batches made by the dataset's own ``batch()`` hold their strings in object arrays, as HF's
  (whose ``batch()`` is a batched map); ``iter(batch_size)`` over Arrow gives ``'<U'`` arrays; a
  column of such a batch that no Arrow column holds (complex or datetime arrays, object arrays,
  tensors in some rows and arrays in others...), or that holds PIL images in lists or structs (a
  map's crops), is formatted from its values, as HF formats it (a table would encode the images);
* lists of numbers: under numpy / torch, where the rows of Arrow-backed sources reach the format
  on HF's Arrow path, the sources read lists of 1 KB or more per row as numpy arrays
  (``Node.read_lists_as_arrays``, ``rows.large_list_arrays``), of which the formatter makes HF's
  arrays and tensors; lists of Python numbers become one array or tensor at once
  (``format_rows.list_tensorize``), not number by number as ``recursive_tensorize`` makes them.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from .arrow_batches import ArrowBatchesNode, arrow_chain, arrow_rooted, chain_features, chain_schema
from .base import Node
from .batch import BatchNode
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


def _decoded_columns(features: Any) -> set:
    """The columns whose features HF decodes (``Image``, ``Audio``..., also inside lists and structs)."""
    if features is None:
        return set()
    from datasets.features.features import require_decoding

    return {name for name, f in features.items() if require_decoding(f)}


def _image_columns(batch: dict) -> set:
    """The columns of a Python batch whose first value that is not ``None`` is a PIL image, or a torch
    tensor of a dtype numpy has not (``bfloat16``, which a map may return): formatted from their
    values, as HF formats them (an Arrow table cannot hold them)."""
    import sys

    image = getattr(sys.modules.get("PIL.Image"), "Image", None)
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    if image is None and tensor is None:
        return set()
    kinds = tuple(t for t in (image, tensor) if t is not None)
    out = set()
    for k, v in batch.items():
        first = next((x for x in v if x is not None), None) if type(v) is list else None
        if isinstance(first, kinds) and (image is not None and isinstance(first, image) or _not_numpy(first)):
            out.add(k)
        elif image is not None and type(first) in (list, tuple, dict) and _holds_image(first, image):
            out.add(k)  # images in a list or struct (a map's crops or frames): an Arrow table encodes them
    return out


def _holds_image(value: Any, image: type, depth: int = 4) -> bool:
    """Whether ``value``, a list or dict, holds a PIL image (a list's first value not ``None``, any
    value of a dict, nested up to ``depth`` levels)."""
    if isinstance(value, image):
        return True
    if depth == 0:
        return False
    if type(value) in (list, tuple):
        first = next((x for x in value if x is not None), None)
        return first is not None and _holds_image(first, image, depth - 1)
    if type(value) is dict:
        return any(_holds_image(x, image, depth - 1) for x in value.values() if x is not None)
    return False


def _not_numpy(t: Any) -> bool:
    """Whether numpy cannot hold tensor ``t``'s dtype."""
    try:
        np.asarray(t.reshape(-1)[:0])
    except TypeError:
        return True
    return False


#: numpy dtype kinds of the arrays :func:`_array_columns` takes: bool, signed / unsigned integers,
#: floats, and fixed-width strings and bytes (``'<U2'``, ``'|S2'``: HF stacks those too)
_ARRAY_KINDS = frozenset("biufUS")
#: numpy dtype kinds of the scalars :func:`_scalar_columns` takes: bool, signed / unsigned integers, floats
_NUMBER_KINDS = frozenset("biuf")


def _array_columns(batch: dict, schema: pa.Schema | None, skip: set) -> tuple[set, set]:
    """The columns of a Python batch holding numpy arrays (``ndim >= 1``) of numbers or fixed-width
    strings (a map's pixel or feature arrays) whose Arrow type no ``schema`` declares, as two sets:

    * all values such arrays: HF's formatter makes them one array or tensor (or a list of them
      where the shapes or dtypes differ) straight from the arrays, with the dtypes it gives any
      number; string arrays stay ``'<U'`` / ``'S'``. Through an Arrow table they were turned into
      nested Python lists, then read back number row by number row - 5-20 times slower than
      decoding a small JPEG (``benchmarks/bench_pipelines.py``, vision) - and strings came back
      as object arrays;
    * such arrays next to other values (Python lists, PIL images; ``None`` aside): formatted from
      the values too, as HF's formatter does - a table would make the arrays lists of the same
      type as the lists and stack them all (HF stacks them only where each value's own array
      has the same dtype and shape: Python floats are float64, a numpy formatter's arrays
      float32)."""
    names = schema.names if schema is not None else ()
    arrays, mixed = set(), set()
    kinds = _ARRAY_KINDS
    for k, v in batch.items():
        if k in skip or k in names or type(v) is not list or not v:
            continue
        array = other = none = False
        for x in v:
            if type(x) is np.ndarray and x.ndim and x.dtype.kind in kinds:
                array = True
            elif x is None:
                none = True
            else:
                other = True
                if array:
                    break
        if array:
            if other:
                mixed.add(k)
            elif not none:
                arrays.add(k)
    return arrays, mixed


#: what building an Arrow table of Python values raises when a value has no Arrow type
_NOT_ARROW = (pa.ArrowException, TypeError, ValueError, OverflowError)


def _unfit_columns(batch: dict, skip: set, to_table: Any) -> set:
    """The columns of a Python batch (other than ``skip``) that ``to_table`` cannot make an Arrow
    column of, each tried alone (only after the whole batch failed)."""
    out = set()
    for k, v in batch.items():
        if k in skip:
            continue
        try:
            to_table({k: v})
        except _NOT_ARROW:
            out.add(k)
    return out


def _scalar_columns(batch: dict, schema: pa.Schema | None, skip: set) -> set:
    """The columns of a Python batch whose values are all numpy scalars of numbers (a map's
    ``np.float64(score)`` or ``np.int32(label)``) and whose Arrow type no ``schema`` declares: HF's
    formatter keeps their dtype (a float64 score stays float64 in a numpy batch), which an Arrow
    table would make the dtype it gives any number (float32, int64)."""
    names = schema.names if schema is not None else ()
    out = set()
    for k, v in batch.items():
        if k in skip or k in names or type(v) is not list or not v:
            continue
        for x in v:
            if not isinstance(x, np.generic) or x.dtype.kind not in _NUMBER_KINDS:
                break
        else:
            out.add(k)
    return out


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
                media = _decoded_columns(self.features)
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
        decoded = _decoded_columns(self.features) if source == "batch_dicts" and tensors else None
        fmt = functools.partial(format_table, _formatter(self.format_type, self.format_kwargs, self.features))
        fast = tensors and not _needs_decoding(self.features)
        again = _formatter(name, kwargs).recursive_tensorize if self.formatted_again and decoded is not None else None

        def one(b: Any) -> Any:
            media = arrays = None
            if source == "table_batches":
                table = b
            else:
                if back is not None:
                    b = back(b)
                if decoded is not None:
                    media = decoded | _image_columns(b)
                    arrays, mixed = _array_columns(b, self.schema, media)
                    if arrays or mixed:
                        media = media | arrays | mixed
                    if name == "numpy":  # (torch casts them as the table's path does)
                        media = media | _scalar_columns(b, self.schema, media)
                try:
                    table = self._to_table({k: v for k, v in b.items() if k not in media} if media else b)
                except _NOT_ARROW:
                    if decoded is None:
                        raise
                    # values no Arrow column holds (complex or datetime arrays, object arrays, numpy
                    # scalars mixed with 0-d arrays, tensors with arrays): formatted from the values,
                    # as HF's formatter formats every Python batch
                    unfit = _unfit_columns(b, media, self._to_table)
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


ROW_CHUNK = 256  # rows of an Arrow source formatted at a time when iterating formatted examples


def _rows_schema(node: Node, features: Any) -> pa.Schema | None:
    """The Arrow types of the rows ``node`` yields, for the tables of their batches: an Arrow chain's
    schema, or, for rows that HF keeps on its Arrow path (a shuffle, take, interleave... of Arrow
    sources), the features' types, which HF's Arrow batches have: a number column that is null in a
    whole batch is then NaN, as in HF, not an object array of ``None`` (an untyped null column)."""
    schema = chain_schema(node)
    if schema is None and features is not None and arrow_rooted(node):
        try:
            schema = features.arrow_schema
        except Exception:  # features with no Arrow type: the values' types
            return None
    return schema


def present(node: Node, fmt: tuple | None, batch: tuple | None = None, template: Node | None = None,
            features: Any = None, resumed: bool = False) -> Node:
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

    Under a numpy or torch format, the sources of rows that only the formatter sees read large
    lists of numbers as numpy arrays (:meth:`Node.read_lists_as_arrays`). A state taken then
    holds those arrays; ``resumed`` (``node`` continues a loaded state) without such a format
    gives them back as lists.
    """
    live_batches = node if batch is None and isinstance(node, BatchNode) else None
    own_batches = live_batches is not None or (batch is None and isinstance(template, BatchNode))
    if live_batches is not None:
        node, batch = node.children[0], (node.batch_size, node.drop_last_batch)
    # a resumed state may hold arrays read under a tensor format: without one, lists are given back
    back = resumed and arrow_rooted(node) and lists_back(features) is not None
    if fmt is None or fmt[0] is None:
        if back and live_batches is not None:
            return FormatNode(live_batches, None, {}, "batch_dicts", features=features, arrow_rows=True)
        if back:
            return FormatNode(node, None, {}, "rows" if batch is None else "batches", features=features,
                              batch_size=batch[0] if batch else 1, drop_last_batch=bool(batch and batch[1]),
                              arrow_rows=True)
        return live_batches or (node if batch is None else BatchNode(node, *batch))
    name, kwargs = fmt
    tensors = name in ("numpy", "torch")
    if live_batches is not None and _columnwise(node, tensors) is None:
        # rows batched by the pipeline's own batch node: iterate that node, whose state holds the
        # rows of a batch interrupted by an error, and format its batches
        if tensors and arrow_rooted(node):
            node.read_lists_as_arrays()  # the batches reach nothing but the formatter
        return FormatNode(live_batches, name, kwargs, "batch_dicts", features=features,
                          schema=_rows_schema(node, features), dataset_batches=True, arrow_rows=back and not tensors,
                          formatted_again=live_batches.after_format and not arrow_rooted(node))
    if batch is None and isinstance(template, BatchNode):
        rows = template.children[0]
        chain = _columnwise(rows, tensors)
        return FormatNode(node, name, kwargs, "batch_dicts",
                          features=chain_features(*chain) if chain else features,
                          schema=_rows_schema(rows, features), dataset_batches=True,
                          formatted_again=template.after_format and not arrow_rooted(node))
    chain = _columnwise(node, tensors)
    if chain is not None:
        features = chain_features(*chain)
        if batch is None:
            return ArrowBatchesNode(node, ROW_CHUNK, per_row=RowFormatter(name, kwargs, features))
        return FormatNode(ArrowBatchesNode(node, *batch), name, kwargs, "table_batches", features,
                          dataset_batches=own_batches)
    arrow_rows = arrow_rooted(node)
    if arrow_rows and tensors:
        node.read_lists_as_arrays()  # nothing but the formatter sees the rows: see ArrowRowValues
    if batch is None:
        return FormatNode(node, name, kwargs, "rows", features=features, arrow_rows=arrow_rows)
    return FormatNode(node, name, kwargs, "batches", features=features, batch_size=batch[0],
                      drop_last_batch=batch[1], arrow_rows=arrow_rows)


def _columnwise(node: Node, tensors: bool) -> Any:
    """:func:`arrow_chain` of ``node``, read column-wise, except under a numpy / torch format over a
    source whose rows HF formats from Python values (``imagefolder``: its builder yields examples):
    HF's types there are those of its Python path (a label a 0-d array, not a numpy scalar). Arrow
    and pandas output is the same either way, and typed by the features column-wise."""
    chain = arrow_chain(node)
    if chain is not None and tensors and not chain[0].formats_as_arrow_rows():
        return None
    return chain
