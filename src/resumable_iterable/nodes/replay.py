"""Replay mode of the shuffle buffer: ``shuffle(..., buffer_state="replay")``.

Instead of the buffered examples, the state keeps *where each of them came from* - its
**provenance**, a short list of integers - and a resumed pipeline re-reads the rows from the
sources and re-derives the examples through the nodes between the sources and the shuffle.

Provenance encoding. Each node on the way from the source to the shuffle puts its own integers
in front of its child's list, so the list is read from the outside in:

==========================================  ===============================================
node                                        provenance of an example it yields
==========================================  ===============================================
source (arrow, files, generator)            ``[shard_id, row]`` - row within that shard
``map`` / ``filter`` with ``with_indices``  ``[index, *child]`` - the index the function got
``interleave_datasets``                     ``[input, *child]``
``concatenate_datasets(axis=0)``            ``[input, *child]``
``concatenate_datasets(axis=1)``            ``[child_0, child_1, ...]`` - one provenance per
                                            input; for an exhausted input ``[-1]`` (its
                                            columns are filled with None) or ``[]`` (it was
                                            exhausted before yielding anything: no columns)
per-example ``map``/``filter``, columns,    the child's, unchanged
``skip``, ``take``, ``repeat``, a nested
replay-mode ``shuffle``
==========================================  ===============================================

How a provenance is captured: right after the shuffle pulls an example, every node below it
still describes, in its state, the last example it yielded (a source's ``offset`` is one past
that row, a ``map``'s ``index`` one past its index), so most provenances are read from the
states. The two nodes that read ahead keep track themselves, only when a replay-mode shuffle
asks (:func:`compile_provenance` arms them; other pipelines pay nothing):

* ``interleave_datasets`` peeks one example ahead per input, so it records the provenance of
  the peeked example when it peeks, and keeps it in its state (``peeked_pos``);
* a nested replay-mode shuffle yields from its buffer, whose provenances it holds.

Re-reading (:func:`replay`) groups rows by source and shard and reads each group with one
``read_rows`` call (an Arrow ``take`` for tables and files; a generator shard is re-run up to
its last needed row), then applies the nodes above in a batch per node. Per-example nodes re-run their function on the replayed input with the
original index; a ``filter`` re-checks its predicate, so a non-deterministic predicate or data
that changed is reported instead of silently yielding a row the filter had rejected.

What cannot be replayed is refused when ``shuffle()`` is called (:func:`require_replay_support`):
batched ``map``/``filter`` (a batch's output rows depend on the whole batch), ``batch``, a
``shuffle`` that stores its buffer (``"examples"``/``"drop"``) below the replay-mode one,
and sources without random access.

Integrity: the state of a replay buffer carries a digest of its provenances (the sum of a CRC
per slot), checked on load, so an edited position is rejected instead of re-reading another row.
"""

from __future__ import annotations

import math
import weakref
import zlib
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ..progress import progress
from .base import Node

#: provenance integers are below this (they index rows and inputs)
MAX_INT = 2**63 - 1
DIGEST_MASK = 2**64 - 1

#: interleave nodes armed by a replay-mode shuffle -> provenance functions of their inputs
TRACE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _load_kinds() -> dict:
    # imported lazily: several node modules import this one
    from .batch import BatchNode
    from .columns import ColumnsNode
    from .concat import ConcatNode
    from .interleave import InterleaveNode
    from .map import MapNode
    from .repeat import RepeatNode
    from .shuffle import ShuffleNode
    from .slicing import SkipNode, TakeNode
    from .source import SourceNode
    from .step import StepNode

    return locals()


_KINDS: dict | None = None


def _k() -> dict:
    """The node classes, by name."""
    global _KINDS
    if _KINDS is None:
        _KINDS = _load_kinds()
    return _KINDS


def describe(node: Node) -> str:
    """A short human name of a node: ``map(tokenize, batched=True)``, ``interleave``..."""
    k = _k()
    if isinstance(node, k["MapNode"]):
        name = getattr(node.function, "__qualname__", type(node.function).__name__)
        return f"{node.kind}({name}{', batched=True' if node.batched else ''})"
    if isinstance(node, k["ShuffleNode"]):
        return f"shuffle(buffer_state={node.buffer_state!r})"
    if isinstance(node, k["ConcatNode"]):
        return f"concatenate_datasets(axis={node.axis})"
    if isinstance(node, k["InterleaveNode"]):
        return f"interleave_datasets(stopping_strategy={node.stopping_strategy!r})"
    return node.kind


# ---------------------------------------------------------------------------- support check


def require_replay_support(child: Node) -> None:
    """Raise ``ValueError`` naming the first node under ``child`` whose examples cannot be replayed."""
    _support(child, "shuffle/" + child.kind)


def _refuse(node: Node, path: str, why: str) -> ValueError:
    return ValueError(
        f"shuffle(buffer_state='replay') cannot re-read its buffer through {describe(node)} at {path}: {why}. "
        "Use buffer_state='examples' (stores the examples, exact) or shuffle before this step of the pipeline."
    )


def _support(node: Node, path: str) -> None:
    k = _k()
    kids = node.children
    if isinstance(node, k["SourceNode"]):
        if not callable(getattr(node, "read_rows", None)):
            raise _refuse(node, path, "this source has no random access to its rows")
        return
    if isinstance(node, k["MapNode"]):  # map and filter
        if node.batched:
            raise _refuse(node, path, "a batched function's output rows depend on the whole batch, so one "
                                      "row cannot be re-derived alone")
    elif isinstance(node, k["BatchNode"]):
        raise _refuse(node, path, "a batch is made of many rows")
    elif isinstance(node, k["ShuffleNode"]):
        if node.buffer_state != "replay":
            raise _refuse(node, path, "its buffered examples are stored, not where they came from; give it "
                                      "buffer_state='replay' too")
    elif not isinstance(node, (k["ConcatNode"], k["InterleaveNode"], k["RepeatNode"], k["ColumnsNode"],
                               k["SkipNode"], k["TakeNode"], k["StepNode"])):
        raise _refuse(node, path, f"'{node.kind}' nodes do not support replay")
    for i, c in enumerate(kids):
        _support(c, f"{path}[{i}]/{c.kind}" if len(kids) > 1 else f"{path}/{c.kind}")


# ---------------------------------------------------------------------------- capture


def compile_provenance(node: Node) -> Callable[[], list]:
    """A function returning the provenance of the last example ``node`` yielded.

    Built when a replay-mode shuffle starts iterating; it arms the interleave nodes below so they
    track the examples they peek. The states are captured by reference (nodes update them in
    place), so the function stays valid while this pipeline instance iterates.
    """
    k = _k()
    if isinstance(node, k["SourceNode"]):
        return _source_provenance(node)
    if isinstance(node, k["ShuffleNode"]):  # a nested replay-mode shuffle records what it yields
        return lambda: node._ri_last
    if isinstance(node, k["InterleaveNode"]):
        TRACE[node] = [compile_provenance(c) for c in node.children]
        return lambda: node._ri_last
    if isinstance(node, k["ConcatNode"]):
        st = node._state_dict
        fns = [compile_provenance(c) for c in node.children]
        if node.axis == 0:
            def current() -> list:
                i = node.current_input()
                return [i, *fns[i]()]

            return current

        def merged() -> list:
            ex, cols = st["exhausted"], st["columns"]
            return [([] if cols[j] is None else [-1]) if ex[j] else f() for j, f in enumerate(fns)]

        return merged
    child = compile_provenance(node.children[0])
    if isinstance(node, k["MapNode"]) and node.with_indices:
        st = node._state_dict
        return lambda: [st["index"] - 1, *child()]
    return child


def _source_provenance(node: Node) -> Callable[[], list]:
    st = node._state_dict
    orders: dict = {}

    def prov() -> list:
        seed = st["shard_seed"]
        order = orders.get(seed)
        if order is None:
            order = orders[seed] = node.shard_order()
        return [order[st["shard_pos"]], st["offset"] - 1]

    return prov


# ---------------------------------------------------------------------------- digest


def slot_hash(slot: int, prov: list) -> int:
    """A 32-bit checksum of one buffer slot (its index and provenance)."""
    return zlib.crc32(repr(prov).encode(), slot & 0xFFFFFFFF)


def buffer_digest(buffer: list) -> int:
    return sum(slot_hash(i, p) for i, p in enumerate(buffer)) & DIGEST_MASK


# ---------------------------------------------------------------------------- validation


def check_provenance(node: Node, prov: Any, where: str) -> None:
    """Raise ``ValueError`` unless ``prov`` is a well-formed provenance of an example of ``node``."""
    k = _k()
    if type(prov) is not list:
        raise ValueError(f"{where}: a position must be a list of integers, got {type(prov).__name__}")
    if isinstance(node, k["SourceNode"]):
        if len(prov) != 2 or not all(type(v) is int for v in prov):
            raise ValueError(f"{where}: a position in a source ({node.kind}) is [shard, row], got {prov!r}")
        sid, row = prov
        if sid not in node.shard_ids:
            raise ValueError(f"{where}: shard {sid} is not one of this {node.kind} source's shards")
        if not 0 <= row <= MAX_INT:
            raise ValueError(f"{where}: row {row} of shard {sid} is out of range")
        length = node.shard_length(sid)
        if length is not None and row >= length:
            raise ValueError(f"{where}: row {row} is past the end of shard {sid} ({length} rows)")
        return
    if isinstance(node, k["ConcatNode"]) and node.axis == 1:
        n = len(node.children)
        if len(prov) != n:
            raise ValueError(f"{where}: a concatenate(axis=1) position has one entry per input ({n}), got {prov!r}")
        exhausted = [type(p) is list and (p == [] or (len(p) == 1 and type(p[0]) is int and p[0] == -1))
                     for p in prov]
        if all(exhausted):
            raise ValueError(f"{where}: a concatenate(axis=1) position names no input")
        for j, (c, p, done) in enumerate(zip(node.children, prov, exhausted)):
            if not done:
                check_provenance(c, p, f"{where}[{j}]")
        return
    if isinstance(node, (k["InterleaveNode"], k["ConcatNode"])):
        n = len(node.children)
        if not prov or type(prov[0]) is not int or not 0 <= prov[0] < n:
            raise ValueError(f"{where}: a {node.kind} position starts with an input index in [0, {n}), got {prov!r}")
        check_provenance(node.children[prov[0]], prov[1:], f"{where}/{node.kind}[{prov[0]}]")
        return
    if isinstance(node, k["MapNode"]) and node.with_indices:
        if not prov or type(prov[0]) is not int or not 0 <= prov[0] <= MAX_INT:
            raise ValueError(f"{where}: a {node.kind} position starts with a non-negative example index, got {prov!r}")
        check_provenance(node.children[0], prov[1:], where)
        return
    if len(node.children) != 1:
        raise ValueError(f"{where}: '{node.kind}' nodes do not support replay")
    check_provenance(node.children[0], prov, where)


# ---------------------------------------------------------------------------- re-reading


def replay(node: Node, provs: list[list], bar: Any = None) -> list[Any]:
    """Re-derive the examples ``node`` yielded at positions ``provs`` (validated), in that order."""
    if not provs:
        return []
    k = _k()
    if isinstance(node, k["SourceNode"]):
        return _replay_source(node, provs, bar)
    if isinstance(node, k["ShuffleNode"]):
        return replay(node.children[0], provs, bar)
    if isinstance(node, k["ConcatNode"]) and node.axis == 1:
        return _replay_concat_columns(node, provs, bar)
    if isinstance(node, (k["InterleaveNode"], k["ConcatNode"])):
        out: list = [None] * len(provs)
        groups: dict[int, list[int]] = {}
        for j, p in enumerate(provs):
            groups.setdefault(p[0], []).append(j)
        for i, js in groups.items():
            for j, ex in zip(js, replay(node.children[i], [provs[j][1:] for j in js], bar)):
                out[j] = ex
        return out
    if isinstance(node, k["MapNode"]):
        if node.with_indices:
            indices = [p[0] for p in provs]
            inputs = replay(node.children[0], [p[1:] for p in provs], bar)
        else:
            indices = [0] * len(provs)
            inputs = replay(node.children[0], provs, bar)
        return [_reapply(node, ex, i) for ex, i in zip(inputs, indices)]
    if isinstance(node, k["ColumnsNode"]):
        return [node._apply_one(ex) for ex in replay(node.children[0], provs, bar)]
    return replay(node.children[0], provs, bar)  # skip, take, repeat, step: examples pass through


def _reapply(node: Node, ex: dict, index: int) -> dict:
    try:
        out = node._apply_one(ex, index)
    except Exception as e:
        e.add_note(f"while re-deriving a buffered example through {describe(node)} (example #{index}) "
                   "to resume a replay-mode shuffle")
        raise
    if out is None:
        raise ValueError(
            f"resuming a replay-mode shuffle: {describe(node)} now rejects example #{index} it had kept when the "
            "state was saved: the predicate is not deterministic, or the data changed since then"
        )
    return out


def _replay_concat_columns(node: Node, provs: list[list], bar: Any) -> list[dict]:
    n = len(node.children)
    columns = list(node._state_dict["columns"])
    per_child: list[dict] = []
    for j in range(n):
        js = [i for i, p in enumerate(provs) if p[j] != [] and p[j] != [-1]]
        exs = replay(node.children[j], [provs[i][j] for i in js], bar)
        per_child.append(dict(zip(js, exs)))
        if columns[j] is None and any(p[j] == [-1] for p in provs):
            columns[j] = _first_columns(node.children[j])
    out = []
    for i, prov in enumerate(provs):
        merged: dict = {}
        for j in range(n):
            ex = per_child[j].get(i)
            if ex is not None:
                merged.update(ex)
            elif prov[j] == [-1]:  # exhausted after yielding: its columns are None (as when it ran)
                for c in columns[j]:
                    merged.setdefault(c, None)
        out.append(merged)
    return out


def _first_columns(child: Node) -> list[str]:
    """The columns of the first example ``child`` yields in a pass: what ``concatenate(axis=1)``
    fills with None once that input is exhausted. Needed when the example was buffered in an
    earlier pass (a ``repeat`` or an interleave restarted the input since, and forgot them)."""
    fresh = child.clone()
    fresh.load(child.state_dict())  # the shard order chosen above lives in the state
    fresh.reset()
    first = next(iter(fresh), None)
    if first is None:
        raise ValueError("cannot re-derive a buffered concatenate(axis=1) row: the input that was exhausted "
                         "now yields nothing (did the data change?)")
    return list(first)


def _source_label(node: Node, sid: int) -> str:
    paths = getattr(node, "paths", None)
    if paths is not None:
        return f"{node.kind} source shard {sid} (file {paths[sid]!r})"
    return f"{node.kind} source shard {sid}"


def _replay_source(node: Node, provs: list[list], bar: Any) -> list[dict]:
    by_shard: dict[int, list[int]] = {}
    for p in provs:
        by_shard.setdefault(p[0], []).append(p[1])
    rows_of: dict[tuple[int, int], dict] = {}
    for sid, rows in by_shard.items():
        wanted = sorted(set(rows))
        try:
            got = node.read_rows(sid, wanted)
        except ValueError as e:
            raise ValueError(f"cannot re-read the shuffle buffer from {_source_label(node, sid)}: {e}") from None
        except (OSError, IndexError, pa.ArrowException, OverflowError) as e:
            raise ValueError(
                f"cannot re-read rows {_rows_text(wanted)} of {_source_label(node, sid)} to resume a replay-mode "
                f"shuffle: {type(e).__name__}: {e} (did the data change since the state was saved?)"
            ) from None
        if len(got) != len(wanted):
            raise ValueError(f"{_source_label(node, sid)} returned {len(got)} rows for {len(wanted)} requested")
        for r, ex in zip(wanted, got):
            rows_of[sid, r] = ex
        if bar is not None:
            bar.update(len(wanted))
    # each buffered example gets its own dict: the pipeline may edit examples in place
    return [dict(rows_of[p[0], p[1]]) for p in provs]


def _rows_text(rows: list[int]) -> str:
    return ", ".join(map(str, rows[:5])) + (f", ... ({len(rows)} rows)" if len(rows) > 5 else "")


def replay_buffer(child: Node, buffer: list[list]) -> list[dict]:
    """Re-read every example of a replay-mode shuffle buffer (with a progress bar when large)."""
    with progress(len(buffer), "re-reading the shuffle buffer") as bar:
        return replay(child, list(buffer), bar)


# ---------------------------------------------------------------------------- comparing


def same_example(a: Any, b: Any) -> bool:
    """Equality of examples that treats NaN as equal to itself and compares numpy arrays by value."""
    if type(a) is not type(b):
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):  # a plain JSON round trip makes lists
            return len(a) == len(b) and all(same_example(x, y) for x, y in zip(a, b))
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
            return a == b
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_example(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_example(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare are different
        return False
