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


#: bytes of numbers from which a row's list (of a list column of an Arrow source) is read into a
#: numpy array under a numpy / torch format (``SourceNode.rows_of``): where a list of Python numbers
#: costs more than the rest of the pipeline, and where a plain JSON state would grow by kilobytes
LARGE_LIST_BYTES = 1024


def _numbers(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t)


def large_list_arrays(column: pa.Array | pa.ChunkedArray) -> list | None:
    """The rows of an Arrow column of lists of numbers, each list of :data:`LARGE_LIST_BYTES` or
    more as a numpy array of the column's type (its own copy: a buffered row holds no more than its
    own values), any other as ``to_pylist`` gives it (a Python list, ``None`` for a null row, a
    list holding a null number as a list); ``None`` when the column is something else or no list
    is that large. Which rows are arrays depends on each row alone, not on the rows read with it
    (a resume reads them in other groups)."""
    t = column.type
    fixed = pa.types.is_fixed_size_list(t)
    if not (fixed or pa.types.is_list(t) or pa.types.is_large_list(t)) or not _numbers(t.value_type):
        return None
    width = t.value_type.byte_width
    parts = []  # per chunk: the chunk, its values (nulls filled), where each row starts, which rows are large
    for arr in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]):
        if not len(arr):
            continue
        if fixed:
            starts = np.arange(arr.offset, arr.offset + len(arr) + 1, dtype=np.int64) * t.list_size
        else:
            starts = arr.offsets.to_numpy().astype(np.int64)
        lo, hi = int(starts[0]), int(starts[-1])
        cuts = starts - lo
        large = np.diff(cuts) * width >= LARGE_LIST_BYTES
        if arr.null_count:
            large &= arr.is_valid().to_numpy(zero_copy_only=False)
        values = arr.values.slice(lo, hi - lo)
        if values.null_count:  # a list holding a null number stays a Python list
            nulls = np.concatenate(([0], np.cumsum(values.is_null().to_numpy(zero_copy_only=False))))
            large &= nulls[cuts[1:]] == nulls[cuts[:-1]]
            values = values.fill_null(0)
        parts.append((arr, values, cuts, large))
    if not any(large.any() for *_, large in parts):
        return None
    out: list = []
    for arr, values, cuts, large in parts:
        if not large.any():
            out.extend(arr.to_pylist())
            continue
        flat = values.to_numpy(zero_copy_only=False)
        bounds = cuts.tolist()
        for i, big in enumerate(large.tolist()):
            out.append(flat[bounds[i]:bounds[i + 1]].copy() if big else arr[i].as_py())
    return out


def rows_read(first: dict | None, last: dict | None) -> str:
    """`` (source S shard N, row R)`` (``, file F`` added for data files) for the positions (``Node.position()``) of the first and last
    rows of what failed (``first`` ``None``: one row); ``""`` when unknown. A position with
    ``"first"`` is that of a batch (``batch()``): where its first row came from (one batch failing:
    its first and last rows). Out of an ``interleave_datasets`` (``"interleave_input"``), the input
    comes first: `` from interleave_datasets input I (source S shard N, row R)``, or
    `` (interleave_datasets input I)`` where the input cannot tell its row; for a batch
    `` (first row from interleave_datasets input I: source S shard N, row R, last row from
    interleave_datasets input J...)``, never a range (the inputs' rows alternate).
    A position ``{"unknown": why}`` gives `` (why)`` (with ``"resolve"``: unless that works it out); rows taken out of a shuffle buffer (``"shuffled"``) are
    named as the first and the last, never as a range."""
    if (last and "first" in last) or (first and "first" in first):  # the items are batches
        # the first row of the first of them (of the one batch that failed, when ``first`` is ``None``)
        first = first.get("first") if first else last.get("first") if last else None
        last = {k: v for k, v in last.items() if k != "first"} if last else last
    first, last = _resolved(first), _resolved(last)
    if not last:
        return ""
    if "unknown" in last:  # why it is not known (out of a shuffle buffer of stored examples)
        return f" ({last['unknown']})"
    if first and "unknown" in first:
        first = None
    if not first or (first == last and "source" in last):  # (an interleave's input names no row: two rows)
        if "source" in last and "interleave_input" in last:
            return f" from interleave_datasets input {last['interleave_input']} ({_at(last, False)})"
        return f" ({_at(last)})"
    if ("source" not in first or "source" not in last or "shuffled" in last  # not a run of rows: the two ends
            or "interleave_input" in first or "interleave_input" in last):
        return f" (first row from {_at(first)}, last row from {_at(last)})"
    if (first["source"], first["shard"]) == (last["source"], last["shard"]):
        return f" (source {last['source']} shard {last['shard']}, rows {first['row']}..{last['row']}{_file(last)})"
    return f" (from {_at(first)} to {_at(last)})"


def _resolved(position: dict | None) -> dict | None:
    """A position worked out only when a note is written (``"resolve"``, called with ``"at"``: a shuffle
    buffer of stored examples, ``nodes/shuffle.py``), worked out; its ``"unknown"`` if that fails (it
    only writes a note)."""
    if not position or "resolve" not in position:
        return position
    try:
        got = position["resolve"](*position["at"])
    except Exception:
        got = None
    return got or {"unknown": position["unknown"]}


def _at(position: dict, with_input: bool = True) -> str:
    """Where ``position`` is, in words (``with_input``: the interleave's input first, if there is one)."""
    if "source" not in position:
        return f"interleave_datasets input {position['interleave_input']}"
    at = f"source {position['source']} shard {position['shard']}, row {position['row']}{_file(position)}"
    if with_input and "interleave_input" in position:
        return f"interleave_datasets input {position['interleave_input']}: {at}"
    return at


def _file(position: dict) -> str:
    """``, file '...'`` for a position in a data file (a file source's shards are its files)."""
    return f", file {position['file']!r}" if "file" in position else ""
