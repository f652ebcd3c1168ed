"""The batched pass of ``map`` and ``filter`` (``nodes/map.py``, ``batched=True``): read a batch,
call the function on it as columns, check and merge its output in HF's order, yield its rows.
A batch in progress keeps either a copy of the child's state from its start (``prev``) or its
input rows (``retry``), and ``skip`` the rows already yielded; rows of the output that would
share one object are given their own copies.

A mixin of :class:`~resumable_iterable.nodes.map.MapNode`, which owns the parameters, the state
schema (see its module doc), validation, loading and calling the function; this module iterates
that state by batches."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Iterator

from ..state import SNAPSHOT, copy_example
from .base import add_context
from .rows import batch_to_rows, rows_to_batch


class BatchPass:
    """The batched pass of :class:`~resumable_iterable.nodes.map.MapNode` (a mixin: ``self`` is
    the node)."""

    def _apply_batch(self, rows: list[dict], index: int) -> list[dict]:
        batch = rows_to_batch(rows)
        arg = dict(batch)
        out = self._call(arg, list(range(index, index + len(rows))))
        if out is None:
            out = arg
        elif not isinstance(out, Mapping):
            raise TypeError(f"batched {self.kind} function must return a dict of lists or None, "
                            f"got {type(out).__name__}")
        if (out is arg or self.replace_input) and self.remove_columns:
            # it edited and returned its input, or its output replaces the batch: removed columns go (as in HF)
            out = {c: v for c, v in out.items() if c not in self.remove_columns}
        kept = {} if self.replace_input else {
            c: v for c, v in batch.items() if c not in self.remove_columns and c not in out}
        lengths = {c: len(v) for c, v in out.items()}
        # HF's messages first (code matching them keeps working), then ours
        if len(set(lengths.values())) > 1:
            first, n = next(iter(lengths.items()))
            bad = [c for c, k in lengths.items() if k != n]
            raise ValueError(f"Column lengths mismatch: columns {bad} have length {[lengths[c] for c in bad]} while "
                             f"{first} has length {n}. (The batched {self.kind} function returned columns of "
                             f"different lengths: {lengths}.)")
        n_out = next(iter(lengths.values())) if lengths else len(rows)
        if n_out != len(rows) and kept:
            raise ValueError(
                f"Column lengths mismatch: columns {list(kept)} have length {[len(v) for v in kept.values()]} while "
                f"{next(iter(out))} has length {n_out}. Make sure the mapped function returns all columns at the "
                f"same length, or drop the offending input columns with `remove_columns`. (The batched {self.kind} "
                f"function returned {n_out} rows for {len(rows)} input rows, so the input columns it did not "
                f"return cannot be kept: add them to remove_columns or return them.)"
            )
        if not (kept or out):
            # no column at all: no row, as in HF (a table a function returned keeps its rows' count)
            return [{} for _ in range(n_out)] if self.replace_input else []
        # the function's columns that may hold one object in two rows (not only numbers and strings)
        shared = [c for c, v in out.items() if not (type(v) is list and _FLAT.issuperset(map(type, v)))]
        if not self.replace_input:  # as HF, {**input columns, **out}: the input's columns keep their order
            out = {**{c: v for c, v in batch.items() if c not in self.remove_columns}, **out}
        rows = batch_to_rows(out)
        if shared and _may_alias(out, shared):
            _unaliased(rows, shared)
        return rows

    def _iter_batched(self) -> Iterator[dict]:
        st = self._state_dict
        child = self.children[0]
        skip = st["skip"]
        if st["prev"] is not None:
            child.load(st["prev"])
        held = st["retry"]  # the rows of the batch in progress, when kept by value (see the module doc)
        it = iter(child)
        size = self.batch_size
        while True:
            # a batch keeps its rows when the copy of its input's state would hold as many examples
            # or more (a buffer of stored examples below): that copy would travel with every state
            # taken during the batch, and be copied deeply by each. Otherwise it keeps the copy (in a
            # DataLoader worker, a buffer the worker describes by arithmetic stays a few integers in it)
            keep_rows = bool(held) or (not skip and size is not None and child.examples_held_by_value() >= size)
            snapshot = None if keep_rows else child.state_dict(SNAPSHOT)
            first = None  # for an error's note: where the batch's first row was read
            try:
                if keep_rows:
                    rows = [copy_example(ex) for ex in held]  # the function may edit its input in place
                    if not skip:  # a batch cut short by an error, or not yet computed: read the rest
                        for ex in itertools.islice(it, size - len(rows)):
                            if not held:
                                first = child.position()
                            held.append(copy_example(ex))
                            rows.append(ex)
                else:
                    rows = list(itertools.islice(it, 1))
                    first = child.position() if rows else None
                    if rows and size != 1:
                        rows.extend(itertools.islice(it, size - 1) if size else it)
            except BaseException:
                if snapshot is not None:
                    child.load(snapshot)  # the input raised part-way: a state taken now re-reads the whole batch
                raise  # (or: the rows read are kept, and the rest is read on resume)
            if not rows or (self.drop_last_batch and size and len(rows) < size):
                st["prev"], st["skip"] = None, 0
                held.clear()
                return
            try:
                outputs = self._apply_batch(rows, st["index"])
            except BaseException as e:
                what = self._describe(f"example #{st['index']}" if len(rows) == 1 else
                                      f"the batch of examples #{st['index']}..#{st['index'] + len(rows) - 1}", first)
                if snapshot is not None:
                    child.load(snapshot)  # the batch is not consumed: a state taken now retries it
                add_context(e, what)
                raise
            st["prev"] = snapshot
            for j in range(skip, len(outputs)):
                st["skip"] = j + 1
                yield outputs[j]
            skip = 0
            st["index"] += len(rows)
            st["prev"], st["skip"] = None, 0
            held.clear()


_IMMUTABLE = (str, int, float, bytes, type(None))
_FLAT = frozenset((str, int, float, bool, bytes, type(None)))  # the exact types of values never unaliased


def _may_alias(batch: dict, columns: list) -> bool:
    """Whether an object may be in two rows of ``columns`` of ``batch`` (a C-level pass over ids: a
    tokenizer's lists of ids, one list per row, are told apart without a loop)."""
    ids: set = set()
    total = 0
    for c in columns:
        ids.update(map(id, batch[c]))
        total += len(batch[c])
    return len(ids) != total


def _unaliased(outputs: list, columns: list) -> None:
    """Give each row of a batched function's output its own copy of a value another row of the batch
    holds too (``{"mask": [m] * n}``, a row repeated), in ``columns`` (those that may hold one): a
    later function that edits its input in place would otherwise edit the rows still to come, which
    a resume recomputes unedited (the run would depend on where it was resumed)."""
    seen: set = set()
    for row in outputs:
        for k in columns:
            v = row[k]
            if isinstance(v, _IMMUTABLE):
                continue
            if id(v) in seen:
                row[k] = copy_example(v)
            else:
                seen.add(id(v))
