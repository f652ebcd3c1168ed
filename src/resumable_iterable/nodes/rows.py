"""Rows and columns: the two shapes of a batch of examples, and the C-level transposes between
them (used by sources, ``map``/``filter`` in batched mode, ``batch``, ``group`` and formats); and
where rows came from, in words (error notes)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from operator import itemgetter
from typing import Any


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
