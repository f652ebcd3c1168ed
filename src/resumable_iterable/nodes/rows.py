"""Rows and columns: the two shapes of a batch of examples, and the C-level transposes between
them (used by sources, ``map``/``filter`` in batched mode, ``batch``, ``group`` and formats); large
lists of numbers of an Arrow column as numpy arrays, one per row; and where rows came from, in
words (error notes)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa


def rows_to_batch(rows: list[dict]) -> dict[str, list]:
    """Rows -> ``{column: [values]}``; a column missing from a row gets ``None`` there."""
    cols = list(rows[0])
    n = len(cols)
    if n > 1:
        get = itemgetter(*cols)
        # fast path: every row has exactly the columns of the first one (same count, none missing)
        if all(len(r) == n for r in rows):
            try:
                return dict(zip(cols, map(list, zip(*map(get, rows)))))
            except KeyError:
                pass
    elif n == 1 and all(len(r) == 1 for r in rows):
        c = cols[0]
        try:
            return {c: list(map(itemgetter(c), rows))}
        except KeyError:
            pass
    seen = set(cols)
    for r in rows:
        if len(r) != len(cols) or any(c not in seen for c in r):
            for c in r:
                if c not in seen:
                    seen.add(c)
                    cols.append(c)
    return {c: [r.get(c) for r in rows] for c in cols}


def batch_to_rows(batch: Mapping[str, Any], num_rows: int = 0) -> list[dict]:
    """``{column: [values]}`` -> rows, in column order (``zip`` stops at the shortest column);
    ``num_rows`` empty rows when there is no column."""
    cols = list(batch)
    if not cols:
        return [{} for _ in range(num_rows)]
    first = cols[0]
    n = min(len(v) for v in batch.values()) if len(cols) > 1 else None
    values = batch[first] if n is None else itertools.islice(batch[first], n)
    rows = [{first: v} for v in values]
    for c in cols[1:]:
        for r, v in zip(rows, batch[c]):
            r[c] = v
    return rows


#: average bytes of numbers per row from which a list column of an Arrow source is read into numpy
#: arrays under a numpy / torch format (``SourceNode.rows_of``): the size from which examples count
#: as large elsewhere too (shared memory, buffers logged as positions), and where a list of Python
#: numbers costs more than the rest of the pipeline
LARGE_LIST_BYTES = 1024


def _numbers(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t)


def large_list_arrays(column: pa.Array | pa.ChunkedArray) -> list | None:
    """The rows of an Arrow column of lists of numbers as numpy arrays of the column's type, each
    its own copy (a buffered row holds no more than its own values), ``None`` for a null row; or
    ``None`` when the column is something else, holds null numbers, or its lists are small (under
    :data:`LARGE_LIST_BYTES` per row on average). ``to_pylist`` would give the same numbers as
    Python lists, at about a microsecond per number more."""
    t = column.type
    fixed = pa.types.is_fixed_size_list(t)
    if not (fixed or pa.types.is_list(t) or pa.types.is_large_list(t)) or not _numbers(t.value_type):
        return None
    chunks = [c for c in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]) if len(c)]
    rows = sum(len(c) for c in chunks)
    if not rows:
        return None
    cuts = []  # per chunk: its values (one zero-copy Arrow slice) and where each row's values start
    for arr in chunks:
        if fixed:
            size = t.list_size
            starts = np.arange(arr.offset, arr.offset + len(arr) + 1, dtype=np.int64) * size
        else:
            starts = arr.offsets.to_numpy()
        lo, hi = int(starts[0]), int(starts[-1])
        values = arr.values.slice(lo, hi - lo)
        if values.null_count:
            return None
        cuts.append((values, starts - lo, arr))
    if sum(len(v) for v, _, _ in cuts) * t.value_type.byte_width < LARGE_LIST_BYTES * rows:
        return None
    out: list = []
    for values, starts, arr in cuts:
        flat = values.to_numpy(zero_copy_only=True)
        bounds = starts.tolist()
        got = [flat[a:b].copy() for a, b in zip(bounds, bounds[1:])]
        if arr.null_count:
            got = [g if ok else None for g, ok in zip(got, arr.is_valid().to_pylist())]
        out.extend(got)
    return out


def rows_read(first: dict | None, last: dict | None) -> str:
    """`` (source S shard N, row R)`` for the positions (``Node.position()``) of the first and last
    rows of what failed (``first`` ``None``: one row); ``""`` when unknown. A position with
    ``"first"`` is that of a batch (``batch()``): where its first row came from."""
    if (last and "first" in last) or (first and "first" in first):  # the items are batches
        first = first.get("first") if first else None  # the first row of the first of them
        last = {k: v for k, v in last.items() if k != "first"} if last else last
    if not last:
        return ""
    if not first or first == last:
        return f" (source {last['source']} shard {last['shard']}, row {last['row']})"
    if (first["source"], first["shard"]) == (last["source"], last["shard"]):
        return f" (source {last['source']} shard {last['shard']}, rows {first['row']}..{last['row']})"
    return (f" (from source {first['source']} shard {first['shard']}, row {first['row']} "
            f"to source {last['source']} shard {last['shard']}, row {last['row']})")
