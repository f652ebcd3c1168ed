"""Where an example out of a shuffle buffer of stored examples was read, worked out after the fact
for the note of an error raised on it above (``shuffle(...).map(f)``): a pass of ``nodes/shuffle.py``
in its ``"examples"`` / ``"drop"`` modes records nothing per example, but keeps a :class:`Trail` -
the generator's state at the start of each block of draws, outside the state - from which the draws
are made again, only when a note is written, to tell which slot the example left, since when that
slot held it and so how many inputs came after it; the input then counts that many back
(``Node.position_back``). ``"replay"`` mode has the provenance in its state instead."""

from __future__ import annotations

import weakref
from collections import deque
from threading import get_ident
from typing import Any, Callable

import numpy as np

from .seeds import rng_from_state

#: what an error's note says of where an example out of a buffer of stored examples was read when it
#: cannot be worked out (``ShuffleNode.position``)
UNKNOWN_ROW = ("source row not known: it came out of a shuffle buffer, which keeps its examples without where they "
               "were read; shuffle(..., buffer_state='replay') keeps that too, and the note then names it")
#: random indices are drawn in blocks of this many (a state's ``rng_pos`` counts the draws used of the
#: block that starts at its ``rng``); also ``nodes.shuffle.BLOCK``
BLOCK = 1024
#: the most block starts a pass keeps for ``position`` (a slot last drawn before them is not traced)
MAX_TRAIL = 4096


class Resolve:
    """``Trail.resolve``: calls ``traced(trail, *at)`` (the node's ``_traced_position``) for the pass of
    ``trail``, holding both weakly. The node holds its trail, so a strong reference back would make
    each pass a reference cycle: a pass that ended, or was left part-way (a loop that breaks off, a
    DataLoader worker reset, a state loaded over it), would keep its buffer - up to ``buffer_size``
    examples - until the cyclic garbage collector ran, which a process with a large heap of
    long-lived objects (a model) does rarely. A pass no longer alive resolves nothing (``None``), as
    ``_traced_position`` answers for a pass that is no longer the node's."""

    __slots__ = ("traced", "trail")

    def __init__(self, traced: Callable[..., Any], trail: "Trail"):
        self.traced = weakref.WeakMethod(traced)
        self.trail = weakref.ref(trail)

    def __call__(self, *at: Any) -> dict | None:
        traced, trail = self.traced(), self.trail()
        return None if traced is None or trail is None else traced(trail, *at)


class Trail:
    """What a pass of a buffer of stored examples leaves for :meth:`ShuffleNode.position` to work
    out, after the fact, which input the example it yielded last was - kept by the pass, never in
    the state, and nothing per example: the buffer (``buf``, to know the pass still runs on the
    node's state), the entries it started with (``n0``), the inputs that filled it (``filled``),
    the generator state at the start of each block of draws (``blocks``: the first one where the
    pass started, at draw ``pos0``; at most :data:`MAX_TRAIL` of the last, ``count`` in all) and,
    once it drains, the draws it made (``steps``), the entries then (``drain_len``) and their
    permutation (``order``), the thread running it (``thread``) and ``resolve``, the node's
    ``_traced_position`` for this pass (which checks the pass still runs, then asks :meth:`position`)."""

    __slots__ = ("buf", "n0", "pos0", "block", "filled", "blocks", "count", "steps", "drain_len", "order", "thread",
                 "resolve", "__weakref__")

    def __init__(self, buf, n0: int, rng: dict, pos0: int, size: int, block: int):
        self.buf, self.n0, self.pos0, self.block = buf, n0, pos0, block
        self.thread = get_ident()  # the thread running the pass (``prefetch`` runs it in its own)
        self.filled = 0
        self.blocks = deque([rng], maxlen=min(MAX_TRAIL, 2 + 32 * size // block))
        self.count = 1
        self.steps = self.drain_len = self.order = None

    def add(self, start: dict) -> None:
        """A new block of draws, from generator state ``start`` (once per ``block`` examples)."""
        self.blocks.append(start)
        self.count += 1

    def block_start(self, b: int) -> int:
        """The draw (counted from the pass's first) at the start of block ``b`` (counted likewise)."""
        return 0 if b == 0 else self.block - self.pos0 + (b - 1) * self.block

    def steps_at(self, rng: dict, rng_pos: int) -> int | None:
        """The draws made, given the state's generator fields (``rng`` is one of ``blocks``)."""
        for j in range(len(self.blocks) - 1, -1, -1):
            if self.blocks[j] is rng:
                b = self.count - len(self.blocks) + j
                return self.block_start(b) + rng_pos - (self.pos0 if b == 0 else 0)
        return None

    def last_draw_of(self, slot: int, before: int, size: int) -> int | None | bool:
        """The last draw before draw ``before`` that picked ``slot``; ``None`` if none did since the
        pass started, ``False`` if it may have been made before the blocks kept."""
        first = self.count - len(self.blocks)  # the first block kept
        b = self.count - 1
        while b >= first and self.block_start(b) >= before:
            b -= 1
        while b >= first:
            lo = self.block_start(b)
            offset = self.pos0 if b == 0 else 0
            block = rng_from_state(self.blocks[b - first]).integers(0, size, size=self.block)
            draws = block[offset:offset + before - lo]
            hits = np.flatnonzero(draws == slot)
            if len(hits):
                return lo + int(hits[-1])
            before, b = lo, b - 1
        return None if first == 0 else False

    def position(self, st: dict, size: int, child: Any, rng: dict, rng_pos: int, left: int | bool,
                 back: int = 0) -> dict | None:
        """Where the example the pass yielded was read, given the node's state ``st`` (of this pass),
        its buffer ``size``, its input ``child`` and what the state said then (its generator fields;
        ``left``: the entries left in a draining buffer, else ``False``) - or the example it yielded
        ``back`` examples before that one (a shuffle above asks this: :meth:`Node.position_back`): the
        draws tell which slot it left and since when that slot held it, so how many inputs the pass
        had read before it; the input can tell where the example yielded that many before its last
        one was read (:meth:`Node.position_back`: a source reading its shards, and nodes yielding one
        example per input, such as ``map``).
        ``None``: not known (the slot held the example since before the pass, or the input cannot tell)."""
        if left is not False:  # draining: the entries are popped from the end
            if self.drain_len is None or self.steps is None or left >= self.drain_len:
                return None
            drained = self.drain_len - left  # popped so far, the example yielded last included
            if back < drained:
                before, slot = self.steps, self.order[left + back]
            else:  # yielded while the buffer mixed, by one of its last draws
                back -= drained
                left, steps = False, self.steps
        else:
            steps = self.steps_at(rng, rng_pos)
            if steps is None:
                return None
        if left is False:  # mixing: the draw ``back`` before the last one made
            if steps - back <= 0:
                return None  # yielded before this pass
            before, slot = steps - 1 - back, None
        if slot is None:
            b = self.count - 1
            while self.block_start(b) > before:
                b -= 1
            first = self.count - len(self.blocks)
            if b < first:
                return None
            offset = self.pos0 if b == 0 else 0
            slot = int(rng_from_state(self.blocks[b - first]).integers(0, size, size=self.block)[
                offset + before - self.block_start(b)])
        t = self.last_draw_of(slot, before, size)
        if t is False:
            return None
        if t is None:  # in the slot since the buffer filled, or from before the pass
            if slot < self.n0:
                return None
            came = slot - self.n0
        else:
            came = self.filled + t
        steps = self.steps if st["draining"] else self.steps_at(st["rng"], st["rng_pos"])
        if steps is None:
            return None
        pos = child.position_back(self.filled + steps - 1 - came)  # the last input read, counted back
        if pos is not None:
            pos["shuffled"] = True
        return pos
