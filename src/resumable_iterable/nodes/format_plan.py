"""Which node formats a pipeline shown with ``with_format`` (:func:`present`), grouped into batches
or not: HF ``datasets`` formats a pipeline's rows from Arrow or from Python values depending on
the pipeline, and the types it yields differ accordingly, so the plan follows HF's.

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
  map's crops), or numpy arrays (alone, or beside lists or images), is formatted from its values, as
  HF formats it (a table would encode the images; ``format_columns.py``);
* lists of numbers: under numpy / torch, where the rows of Arrow-backed sources reach the format
  on HF's Arrow path, the sources read lists of 1 KB or more per row as numpy arrays
  (``Node.read_lists_as_arrays``, ``rows.large_list_arrays``), of which the formatter makes HF's
  arrays and tensors; lists of Python numbers become one array or tensor at once
  (``format_rows.list_tensorize``), not number by number as ``recursive_tensorize`` makes them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .arrow_batches import ArrowBatchesNode, arrow_chain, arrow_rooted, chain_features, chain_schema
from .base import Node
from .batch import BatchNode
from .format import FormatNode, RowFormatter
from .format_rows import lists_back


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
