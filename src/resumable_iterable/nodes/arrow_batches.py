"""Column-wise batches: Arrow tables of ``batch_size`` rows cut straight from an Arrow-backed source.

Used for formatted batches (``with_format("numpy" | "torch" | "arrow" | ...)`` with ``batch`` or
``iter(batch_size)``) when the pipeline is an Arrow-backed source (HF ``Dataset``, ``pyarrow.Table``,
Parquet / Arrow / JSON / CSV files) with only column operations (``select_columns``,
``remove_columns``, ``rename_column(s)``) above it. The batches are zero-copy slices of the source's
tables (with the column operations applied to the table, not to rows), so no Python dict is
built per example; a formatter then turns each table into numpy arrays, tensors, a DataFrame...

State: none of its own. The node drives the *live* pipeline below it (it is built over the node
tree the dataset iterates and reports): it moves the source's ``shard_pos`` / ``offset`` exactly
as the row-by-row path ``batch`` over the same pipeline would, right before each batch is
yielded (telling the source of the shards it passed, ``SourceNode.shards_read``, as that path does). A state taken between batches is therefore the row pipeline's state after the last row
of the batch: it loads into the same pipeline iterated row by row, batched or formatted.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pyarrow as pa

from .arrow import ArrowSource
from .base import Node
from .columns import ColumnsNode, missing_column
from .files import FileSource


def arrow_chain(node: Node) -> tuple[Node, list[ColumnsNode]] | None:
    """``(source, column operations from the source up)`` if ``node`` is an Arrow-backed source under
    column operations only, else ``None``."""
    ops: list[ColumnsNode] = []
    while isinstance(node, ColumnsNode):
        ops.append(node)
        node = node.children[0]
    if type(node) not in (ArrowSource, FileSource):
        return None
    return node, ops[::-1]


def arrow_rooted(node: Node) -> bool:
    """True if ``node`` yields the rows of Arrow-backed sources through nodes HF keeps on its Arrow
    path (shuffle, take, interleave...: :meth:`Node.formats_as_arrow_rows`): HF then formats the rows
    from Arrow tables, which decides the types of formatted values."""
    return node.formats_as_arrow_rows() and all(arrow_rooted(c) for c in node.children)


def apply_column_ops(table: pa.Table, ops: list[ColumnsNode]) -> pa.Table:
    """The column operations ``ops`` (source first) applied to a table, zero-copy."""
    for op in ops:
        names = table.column_names
        cols = op.columns
        if op.op == "remove":  # a column the table lacks: nothing to remove (as HF, and as ColumnsNode)
            table = table.drop_columns([c for c in cols if c in names])
            continue
        for c in cols:
            if c not in names:
                raise missing_column(op.op, c, names)
        if op.op == "select":
            table = table.select(list(cols))
        else:
            op.check_rename(names)
            table = table.rename_columns([cols.get(c, c) for c in names])
    return table


def chain_features(source: Node, ops: list[ColumnsNode]) -> Any:
    """The source's ``datasets.Features`` after the column operations (``None`` if it has none)."""
    features = getattr(source, "features", None)
    if features is None:
        return None
    for op in ops:
        cols = op.columns
        if op.op == "select":
            items = [(c, features[c]) for c in cols if c in features]
        elif op.op == "remove":
            items = [(c, f) for c, f in features.items() if c not in cols]
        else:
            items = [(cols.get(c, c), f) for c, f in features.items()]
        features = features.__class__(dict(items))
    return features


def chain_schema(node: Node) -> pa.Schema | None:
    """The Arrow schema of what an :func:`arrow_chain` pipeline yields, when known without reading
    (an in-memory / memory-mapped table source); else ``None``."""
    chain = arrow_chain(node)
    if chain is None or not isinstance(chain[0], ArrowSource):
        return None
    return apply_column_ops(chain[0].table.schema.empty_table(), chain[1]).schema


class ArrowBatchesNode(Node):
    """Yields ``pyarrow.Table`` batches of ``batch_size`` rows (the last one may be shorter unless
    ``drop_last_batch``); ``child`` is a live :func:`arrow_chain` pipeline (not copied).

    With ``per_row`` (a function: table of up to ``batch_size`` rows of one shard -> one item per
    row), it yields the items one by one instead, and the state advances row by row: formatted
    *examples* converted a chunk at a time.
    """

    kind = "arrow_batches"
    read_rows = 4096  # rows taken at a time from a source with an indices mapping (HF select/shuffle)

    def __init__(self, child: Node, batch_size: int, drop_last_batch: bool = False,
                 per_row: Callable[[pa.Table], list] | None = None):
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        chain = arrow_chain(child)
        if chain is None:
            raise ValueError("column-wise batches need an Arrow-backed source under column operations only")
        self.source, self.ops = chain
        self.batch_size = batch_size
        self.drop_last_batch = bool(drop_last_batch)
        self.per_row = per_row
        super().__init__([child])

    def params(self) -> dict:
        return {"batch_size": self.batch_size, "drop_last_batch": self.drop_last_batch}

    def _shard_tables(self, shard_id: int, offset: int) -> Iterator[pa.Table]:
        """The rows of a shard from ``offset`` on, as tables (before the column operations)."""
        src = self.source
        if isinstance(src, ArrowSource):
            start, end = src.bounds[shard_id]
            pos = start + offset
            if src.indices is None:
                if pos < end:
                    yield src.table.slice(pos, end - pos)
                return
            step = max(self.read_rows, self.batch_size)
            while pos < end:
                n = min(step, end - pos)
                yield src.table.take(src.indices.slice(pos, n))
                pos += n
            return
        for batch in src.record_batches(shard_id, offset):
            if batch.num_rows:
                yield pa.Table.from_batches([batch])

    def _iter(self) -> Iterator[Any]:
        return self._iter_batches() if self.per_row is None else self._iter_rows()

    def _iter_rows(self) -> Iterator[Any]:
        src, ops, size, per_row = self.source, self.ops, self.batch_size, self.per_row
        st = src._state_dict
        order = src.shard_order()
        end = src.end()
        pos, off = st["shard_pos"], st["offset"]
        while pos < end:
            for table in self._shard_tables(order[pos], off):
                table = apply_column_ops(table, ops)
                for i in range(0, table.num_rows, size):
                    for item in per_row(table.slice(i, size)):
                        off += 1
                        # shards read to their end since the last row: their fields, stored with the
                        # position (no call between: a Ctrl-C lands before or after both)
                        done = src.shards_read(order, st["shard_pos"], pos) if pos != st["shard_pos"] else None
                        st["shard_pos"], st["offset"] = pos, off  # as the row path, before each yield
                        if done:
                            st.update(done)
                        yield item
            pos += 1
            off = 0
        done = src.shards_read(order, st["shard_pos"], end) if end != st["shard_pos"] else None
        st["shard_pos"], st["offset"] = end, 0
        if done:
            st.update(done)

    def _iter_batches(self) -> Iterator[pa.Table]:
        src, ops, size = self.source, self.ops, self.batch_size
        st = src._state_dict
        order = src.shard_order()
        end = src.end()
        pos, off = st["shard_pos"], st["offset"]
        pieces: list[pa.Table] = []
        have = 0
        while pos < end:
            for table in self._shard_tables(order[pos], off):
                table = apply_column_ops(table, ops)
                i, rows = 0, table.num_rows
                while i < rows:
                    n = min(size - have, rows - i)
                    pieces.append(table.slice(i, n))
                    have += n
                    i += n
                    off += n
                    if have == size:
                        batch = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces, promote_options="default")
                        pieces, have = [], 0
                        # the row path's state right after the last row of this batch (and the
                        # fields of the shards read to their end since the last one, stored with it)
                        done = src.shards_read(order, st["shard_pos"], pos) if pos != st["shard_pos"] else None
                        st["shard_pos"], st["offset"] = pos, off
                        if done:
                            st.update(done)
                        yield batch
            pos += 1
            off = 0
        done = src.shards_read(order, st["shard_pos"], end) if end != st["shard_pos"] else None
        st["shard_pos"], st["offset"] = end, 0
        if done:
            st.update(done)
        if have and not self.drop_last_batch:
            yield pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces, promote_options="default")
