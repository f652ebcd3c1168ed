"""A DataLoader worker's shared-memory arena: where the large numpy buffers of the examples in its
shuffle-buffer logs are copied once, for the main process to read in place.

The arena is carved into *extents* of size classes inside 32 MB blocks of shared memory. A
:class:`Record` is one example as the worker took it: its pickle (protocol 5) and its large
buffers' places in an extent. An extent goes back to the arena when its record dies, and is
reused once the main process has let go of every array it rebuilt from it: each block starts
with a *ledger*, one ``int64`` per extent, which only the main process writes (how many messages
naming the extent it has finished with; ``buffers.py`` keeps that side).
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
from typing import Any

import numpy as np
import torch

from ...state import buffer_lock

#: numpy buffers of at least this many bytes go through shared memory instead of the pipe
SHARED_MIN_BYTES = 1 << 14
ALIGN = 64
#: bytes of an arena block (an extent larger than this gets a block of its own)
ARENA_BLOCK = 32 << 20


def size_class(n: int) -> int:
    """Extents come in sizes an eighth to a quarter of a power of two apart, so that examples of
    about the same size reuse each other's extents (at most a quarter of an extent is unused)."""
    step = max(4096, 1 << max(0, (n - 1).bit_length() - 3))
    return max(step, -(-n // step) * step)


class Block:
    """A shared-memory block of a worker's arena, carved into extents front to back. It starts
    with the *ledger*: one ``int64`` per extent, written by the main process only - how many
    messages naming the extent it has finished with.

    Handing a block's handle to another process costs a socket round trip, so the main process
    keeps the blocks it was handed (``buffers._received``) and later messages name a block by ``key``."""

    __slots__ = ("tensor", "mem", "ledger", "used", "extents", "pid", "key", "announced")

    def __init__(self, capacity: int):
        slots = capacity // SHARED_MIN_BYTES + 1  # an extent holds at least one large buffer
        header = -(-8 * slots // ALIGN) * ALIGN
        self.tensor = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(header + capacity))
        self.mem = self.tensor.numpy()
        self.ledger = self.mem[:8 * slots].view(np.int64)  # new shared memory reads as zeros
        self.used, self.extents = header, 0
        self.pid = os.getpid()
        self.key = (self.pid, process_token(), next(block_numbers))
        self.announced = False  # the main process holds the handle


class Extent:
    """``size`` bytes at ``offset`` of ``block``; ``sent``: messages that named it so far."""

    __slots__ = ("block", "offset", "size", "index", "sent")

    def __init__(self, block: Block, offset: int, size: int, index: int):
        self.block, self.offset, self.size, self.index, self.sent = block, offset, size, index, 0

    def released(self) -> bool:
        return int(self.block.ledger[self.index]) == self.sent


class Arena:
    """A worker's extents, by size class: ``free`` ones, and ``retired`` ones that no record uses
    any more but that the main process may still read (reused once it has let them go)."""

    def __init__(self):
        self.pid = None

    def _own(self) -> None:
        if self.pid != os.getpid():  # a forked child never writes its parent's blocks
            self.pid, self.blocks, self.free, self.retired = os.getpid(), [], {}, {}

    def take(self, nbytes: int) -> Extent:
        size = size_class(nbytes)
        with lock:
            self._own()
            free = self.free.get(size)
            if free:
                return free.pop()
            retired = self.retired.get(size)
            if retired:
                # the main process lets extents go about in the order they retired; one it keeps
                # (a state the user holds) moves to the back instead of blocking the others
                for _ in range(min(len(retired), 8)):
                    ext = retired.popleft()
                    if ext.released():
                        return ext
                    retired.append(ext)
            blk = self.blocks[-1] if self.blocks else None
            if blk is None or blk.used + size > len(blk.mem) or blk.extents >= len(blk.ledger):
                blk = Block(max(ARENA_BLOCK, size))
                self.blocks.append(blk)
            ext = Extent(blk, blk.used, size, blk.extents)
            blk.used += size
            blk.extents += 1
        populate(blk.mem, ext.offset, size)
        return ext

    def give_back(self, ext: Extent) -> None:
        with lock:
            if ext.block.pid != os.getpid() or self.pid != ext.block.pid:
                return
            if ext.sent == 0 or ext.released():
                self.free.setdefault(ext.size, []).append(ext)
            else:
                self.retired.setdefault(ext.size, collections.deque()).append(ext)


def madvise_fn() -> Any:
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).madvise
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
        return fn
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None


MADV_POPULATE_WRITE = 23  # Linux >= 5.14
populate_with: list = [madvise_fn()]
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def populate(mem: np.ndarray, offset: int, size: int) -> None:
    """Fault in the pages of a new extent with one call (about a third cheaper than page by page,
    and new shared memory costs several times a copy to touch)."""
    fn = populate_with[0]
    if fn is None:
        return
    start = mem.ctypes.data + offset
    start -= start % PAGE
    if fn(start, mem.ctypes.data + offset + size - start, MADV_POPULATE_WRITE) != 0:
        populate_with[0] = None  # an older kernel: let the copy fault them in


#: records die and messages are pickled in the loader's feeder thread too; reentrant because a
#: record may die (and give its extent back) inside a locked section, when the cyclic garbage
#: collector runs there and frees a discarded pipeline; the lock of the buffers' logs, so that
#: the two never wait for each other
lock = buffer_lock
arena = Arena()
block_numbers = itertools.count()
token: list = [None, None]  # (pid, random token): keys never collide, even if a pid is reused


def process_token() -> int:
    if token[0] != os.getpid():
        token[:] = [os.getpid(), int.from_bytes(os.urandom(8), "little")]
    return token[1]


class Record:
    """One example of a buffer log as the worker took it: ``data`` (pickle protocol 5) and
    its large buffers, at ``spans`` (offset, length) of its arena extent."""

    __slots__ = ("data", "extent", "spans")

    def example(self) -> Any:
        """The example, copied out of shared memory (for a state read in the worker itself)."""
        mem = self.extent.block.mem
        return pickle.loads(self.data, buffers=[bytearray(mem[o:o + n]) for o, n in self.spans])

    def __del__(self):
        try:
            arena.give_back(self.extent)
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


def record_of(example: Any) -> Record | None:
    """``example`` pickled, its large numpy buffers copied into an extent; ``None`` when it has
    none (it then travels in band)."""
    raws: list = []

    def out_of_band(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < SHARED_MIN_BYTES:
            return True  # in band
        raws.append(raw)
        return False

    data = pickle.dumps(example, protocol=5, buffer_callback=out_of_band)
    if not raws:
        return None
    offsets, total = [], 0
    for raw in raws:
        offsets.append(total)
        total += -(-raw.nbytes // ALIGN) * ALIGN
    ext = arena.take(total)
    rec = Record()
    rec.data, rec.extent = data, ext
    rec.spans = [(ext.offset + off, raw.nbytes) for off, raw in zip(offsets, raws)]
    mem = ext.block.mem
    for (off, n), raw in zip(rec.spans, raws):
        mem[off:off + n] = np.frombuffer(raw, dtype=np.uint8)
    return rec
