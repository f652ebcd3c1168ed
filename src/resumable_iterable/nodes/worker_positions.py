"""A default shuffle buffer in a DataLoader worker: examples logged as where they came from.

In a DataLoader worker, a shuffle buffer's state crosses to the main process after every batch
(``state_logs.py``). When the examples can be re-read from their positions with nothing but the
sources reading the same rows again, sending where each example came from costs a few integers
where the example costs a copy into shared memory and its bookkeeping (a 256 KB array) or its
pickling (a text row). So a pass of a default shuffle (``buffer_state="examples"``,
``worker_positions=True``) logs positions when

* every node below re-reads plainly (:meth:`Node.rereads_plainly`: no ``map``/``filter`` re-run,
  no ``interleave_datasets`` resumed from a state that does not say where its read-ahead examples
  came from: the pass arms its tracking before the first read). Media files that the shuffle
  buffers undecoded (``Node.deferrable_decoder``) are re-read undecoded, as the buffer held them,
  and decoded as they leave it; and
* the worker's packer would rather not copy the pass's first example (a large array, image or
  file: ``state_logs.prefers_positions``), or every source has random access
  (:func:`sources_random_access`: a resume then takes the buffered rows at once).

A slot is then logged as ``state.position_entry(provenance)`` (the provenance of ``replay.py``);
the main process holds those in the state in place of the examples, and the pipeline that
continues the state re-reads them before it yields anything (:func:`reread_positions`), in a
worker or in a process. Examples a loaded state held by value keep being logged by value. In a
process without workers the state holds the examples: nothing here runs.

**Derived buffers.** Even a log of positions costs the main process - the DataLoader's
bottleneck - some 15-40 µs per batch to rebuild the buffer's list, more than anything else the
state adds. Yet while a pass fills and mixes its buffer, which input sits in which slot follows
from the generator's draws alone, and inputs read straight from sources have positions that
run on by one row at a time. So such a pass (every buffered entry a position, every position a
flat list of integers) describes its buffer by :class:`Derived` instead: the entries it started
from (``base``), the generator state then, the number of inputs since, and the position at each
jump (``runs``) - a few integers that change per batch, the lists only at a shard's end. The
state's ``"buffer"`` is then ``{"__ri__": "derived", ...}``; :func:`derived_entries` turns it back
into the slots' positions when it is loaded, by drawing the same indices again. Every
:data:`REBASE` inputs (or :data:`MAX_RUNS` jumps) the worker writes the slots' positions out as
the new ``base``, so that loading never draws more than that; a pass that drains its buffer, or
meets an input without such a position, goes back to logging slots.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from typing import Any, Iterator

import numpy as np

from ..state import CHUNK, CHUNK_BITS, ExampleChunks, is_position, position_entry, prefers_positions
from ..state_codec import TAG
from .base import Node, add_context
from .checks import check_examples, check_int
from .seeds import rng_from_state
from .replay import replay_buffer

_END = object()
#: the tag of a derived buffer in a state (see the module doc)
DERIVED = "derived"
#: inputs after which a worker writes its derived buffer's positions out as the new base
REBASE = 1 << 16
#: jumps in the positions after which it does so too
MAX_RUNS = 512
#: a pass whose positions jumped this many times, and more often than once per this many inputs,
#: logs its slots instead (see ``Derived.add``)
JUMPY_RUNS = 32
#: the most inputs a derived buffer in a state may count (a load draws one index per input)
MAX_INPUTS = 1 << 26


def rereadable(child: Node) -> bool:
    """Whether the examples ``child`` yields can be re-read from their positions with nothing but
    the sources reading the same rows again (no function of the user's re-run, nothing decoded
    after the buffer)."""
    return all(n.rereads_plainly() for n in child.walk())


def sources_random_access(child: Node) -> bool:
    """Whether every source below ``child`` reads rows by position without reading what comes
    before them (Arrow tables, Parquet and Arrow IPC files; not generators or text formats)."""
    for n in child.walk():
        if not n.children:
            check = getattr(n, "random_access_problem", None)
            if check is None or check() is not None:
                return False
    return True


def pass_input(child: Node, buf: ExampleChunks, reread: list | None, enabled: bool,
               derive: "tuple | None" = None) -> tuple[Iterator, Any]:
    """The input of a shuffle pass over ``child`` and, when the pass logs positions, the function
    giving the position of the example just pulled (else ``None``); sets ``buf.positions`` and
    ``buf.derived``. ``enabled``: in a DataLoader worker, with positions allowed (see the module
    doc); ``reread``: the positions of the slots :func:`reread_positions` just re-read;
    ``derive``: ``(rng state, rng_pos, buffer_size, block)`` of a pass that may derive its buffer
    (it is filling or mixing)."""
    buf.derived = None
    if not enabled:
        buf.positions = None
        return iter(child), None
    provenance = child.provenance_reader()
    it = iter(child)
    first = next(it, _END)
    if first is _END:
        buf.positions = reread
        return iter(()), None
    if not (prefers_positions(first) or sources_random_access(child)):
        buf.positions = None
        return itertools.chain((first,), it), None
    held = sum(map(len, buf))
    if derive is not None and (held == 0 or reread is not None and None not in reread):
        buf.derived = Derived(list(reread or ()), *derive)
        buf.positions = None
    else:
        buf.positions = reread if reread is not None else [None] * held
    return itertools.chain((first,), it), provenance


def reread_positions(child: Node, buf: ExampleChunks) -> list | None:
    """Re-read through ``child`` the examples a loaded state holds as positions, in place in
    ``buf``; the positions by slot (``None`` for the other slots), or ``None`` when it holds none."""
    flat = [ex for ch in buf for ex in ch]
    where = [k for k, ex in enumerate(flat) if is_position(ex)]
    if not where:
        return None
    try:
        got = replay_buffer(child, [flat[k]["at"] for k in where])
    except Exception as e:
        add_context(e, "in shuffle: re-reading the buffered examples the state holds as positions (a DataLoader "
                       "worker logs examples read straight from the sources as where they came from)")
        raise
    positions: list = [None] * len(flat)
    owned = buf.owned
    for k, ex in zip(where, got):
        c = k >> CHUNK_BITS
        if not owned[c]:  # shared with a state copy taken since the load
            buf[c] = buf[c].copy()
            owned[c] = 1
        buf[c][k & (CHUNK - 1)] = ex
        positions[k] = flat[k]
    return positions


def stop_deriving(buf: ExampleChunks) -> list:
    """A derived buffer goes back to logging its slots: their positions, as ``buf.positions``."""
    buf.positions = buf.derived.entries()
    buf.derived = None
    buf.refs = None  # the next log holds every slot
    buf.recording = True
    return buf.positions


def buffer_entries(buffer: Any, size: int, block: int, where: str) -> Any:
    """A state's ``buffer`` as it is, or a derived buffer's entries worked out (a shuffle of
    ``size`` drawing ``block`` indices at a time); ``ValueError`` names what is wrong with one."""
    if not is_derived(buffer):
        return buffer
    check_derived(buffer, size, block, where)
    return derived_entries(buffer, size, block)


class Derived:
    """A buffer described by arithmetic (see the module doc): ``base`` (the slots' entries when
    it was last written out), ``rng`` / ``rng_pos`` (the shuffle's generator state and position
    then), ``inputs`` (examples read since) and ``runs`` (``[input, position]`` where the
    positions jumped; in between each input's position is the previous one's plus one row).
    ``base``, ``rng`` and ``runs`` are never changed in place (a state shares them). The shuffle
    calls :meth:`rebase` before an input once ``inputs`` reaches ``limit``."""

    __slots__ = ("base", "rng", "rng_pos", "size", "block", "inputs", "runs", "expect", "limit")

    def __init__(self, base: list, rng: dict, rng_pos: int, size: int, block: int):
        self.base, self.rng, self.rng_pos, self.size, self.block = base, pcg64_list(rng), rng_pos, size, block
        self.inputs = 0
        self.runs: list = []
        self.expect: list | None = None  # the position the next input has if the run goes on
        self.limit = REBASE

    def add(self, p: Any) -> bool:
        """Count the input at position ``p``; ``False`` (nothing counted) when ``p`` is not a
        flat list of integers, or when the positions jump too often for runs to describe them
        (an ``interleave_datasets`` below switches input every few rows, and a list of runs
        re-sent after every batch would cost more than logging the slots): the pass must log its
        slots from now on."""
        expect = self.expect
        if p != expect:
            if type(p) is not list or not p or not all(type(v) is int for v in p):
                return False
            if len(self.runs) >= JUMPY_RUNS and len(self.runs) * JUMPY_RUNS > self.inputs:
                return False
            self.runs = [*self.runs, [self.inputs, p]]  # a new list: states taken share the old one
            if len(self.runs) >= MAX_RUNS:
                self.limit = self.inputs + 1  # written out before the next input
            expect = self.expect = [*p[:-1], p[-1]]
        expect[-1] += 1
        self.inputs += 1
        return True

    def rebase(self, rng: dict, rng_pos: int) -> None:
        """Write the slots' positions out as the new base (the shuffle's generator is now at ``rng``
        / ``rng_pos``)."""
        self.base = self.entries()
        self.rng, self.rng_pos = pcg64_list(rng), rng_pos
        self.inputs, self.runs, self.expect, self.limit = 0, [], None, REBASE

    def describe(self) -> "dict | list":
        """The buffer in a state: ``{"__ri__": "derived", ...}`` (``[]`` while it is empty)."""
        if not self.inputs and not self.base:
            return []
        return {TAG: DERIVED, "base": self.base, "rng": self.rng, "rng_pos": self.rng_pos,
                "inputs": self.inputs, "runs": self.runs}

    def entries(self) -> list:
        """The slots' entries now."""
        return derived_entries(self.describe(), self.size, self.block) if self.inputs else list(self.base)


def is_derived(buffer: Any) -> bool:
    return type(buffer) is dict and buffer.get(TAG) == DERIVED


def pcg64_list(rng: dict) -> list:
    """A numpy PCG64 ``bit_generator.state`` as ``[state, inc, has_uint32, uinteger]``: one value
    for torchdata (it flattens dicts into leaves and rebuilds them in the main process after every
    batch, for every worker). A list, because a dict-valued leaf does not survive that rebuild:
    torchdata's ``_unflatten`` recurses into it and splits its string keys into characters."""
    return [rng["state"]["state"], rng["state"]["inc"], rng["has_uint32"], rng["uinteger"]]


def derived_entries(d: dict, size: int, block: int) -> list:
    """The entries of a derived buffer ``d`` (validated: :func:`check_derived`), slot by slot:
    the shuffle's draws since ``d["rng"]`` tell which input each slot holds last, ``d["runs"]``
    where that input came from."""
    base, inputs, runs = d["base"], d["inputs"], d["runs"]
    n0 = len(base)
    fill = min(inputs, size - n0)
    steps = inputs - fill
    holder = np.empty(n0 + fill, dtype=np.int64)  # the input each slot holds; -1: its base entry
    holder[:n0] = -1
    holder[n0:] = np.arange(fill)
    if steps:  # the buffer is full: input fill + t replaced the slot of draw t, as the loop draws them
        s, inc, has32, u32 = d["rng"]
        rng = rng_from_state({"bit_generator": "PCG64", "state": {"state": s, "inc": inc}, "has_uint32": has32,
                              "uinteger": u32})
        pos, t = d["rng_pos"], 0
        while t < steps:
            draws = rng.integers(0, size, size=block)[pos:][:steps - t]
            pos = 0
            slots, first = np.unique(draws[::-1], return_index=True)  # each slot's last draw here
            holder[slots] = fill + t + len(draws) - 1 - first
            t += len(draws)
    starts = [r[0] for r in runs]
    out = []
    for j, k in enumerate(holder.tolist()):
        if k < 0:
            out.append(base[j])
            continue
        start, p = runs[bisect_right(starts, k) - 1]
        out.append(position_entry([*p[:-1], p[-1] + k - start]))
    return out


def check_derived(d: dict, size: int, block: int, where: str) -> None:
    """Raise ``ValueError`` naming what is wrong with derived buffer ``d`` (its entries are checked
    once :func:`derived_entries` made them)."""
    keys = {TAG, "base", "rng", "rng_pos", "inputs", "runs"}
    if set(d) != keys:
        raise ValueError(f"{where}: a derived buffer holds {sorted(keys)}, got {sorted(d)}")
    check_examples(d["base"], where, "buffer.base")
    if len(d["base"]) > size:
        raise ValueError(f"{where}: the derived buffer's base holds {len(d['base'])} entries, more than "
                         f"buffer_size={size}")
    rng = d["rng"]
    if not (type(rng) is list and len(rng) == 4 and all(type(v) is int and v >= 0 for v in rng)
            and rng[0] < 2**128 and rng[1] < 2**128 and rng[2] in (0, 1) and rng[3] < 2**32):
        raise ValueError(f"{where}: 'buffer.rng' must be a PCG64 generator state as [state, inc, has_uint32, "
                         f"uinteger], got {rng!r}")
    check_int(d, "rng_pos", where, hi=block)
    check_int(d, "inputs", where, hi=MAX_INPUTS)  # a worker writes its base out long before
    runs = d["runs"]
    if type(runs) is not list:
        raise ValueError(f"{where}: 'buffer.runs' must be a list, got {type(runs).__name__}")
    prev = -1
    for i, run in enumerate(runs):
        ok = (type(run) is list and len(run) == 2 and type(run[0]) is int and type(run[1]) is list and run[1]
              and all(type(v) is int for v in run[1]))
        if not ok or not prev < run[0] < max(d["inputs"], 1) or (i == 0 and run[0] != 0):
            raise ValueError(f"{where}: buffer.runs[{i}] must be [input, position] with inputs counted from 0, "
                             f"increasing and below 'inputs' ({d['inputs']}), got {run!r}")
        prev = run[0]
    if d["inputs"] and not runs:
        raise ValueError(f"{where}: a derived buffer with inputs needs 'runs' saying where they came from")
