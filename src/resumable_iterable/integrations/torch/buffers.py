"""How a DataLoader worker's shuffle buffer reaches the main process, sent once and read in place.

A DataLoader worker describes its shuffle buffer as a journal of unchanging segments
(``state_buffers.ExampleChunks.journal``); torchdata sends each new segment to the main process
once. Each example is pickled once, when it first enters a segment (so the main process gets it
as it was when the state was taken, whatever the consumer does to it later), and its large
numpy buffers are copied once into an *extent* of the worker's shared-memory arena, which the
main process maps instead of reading them through the pipe. When a segment is compacted its
still-current examples are written again by reference to the same record: no data is copied or
sent twice. An extent is reused once no segment of the worker refers to its record and the main
process has dropped every array it rebuilt from it (it counts those in the block's ledger).

Importing this module installs the journal packer (``state_buffers.set_journal_packer``) and the
reducer ``multiprocessing`` uses for journal segments.
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
import threading
import weakref
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from ...state import JournalList, set_journal_packer

#: numpy buffers of at least this many bytes go through shared memory instead of the pipe
SHARED_MIN_BYTES = 1 << 14
_ALIGN = 64
#: bytes of an arena block (an extent larger than this gets a block of its own)
ARENA_BLOCK = 32 << 20
#: a segment of records is rewritten once at most this fraction of them are current
RECORD_COMPACT = 0.5


def _size_class(n: int) -> int:
    """Extents come in sizes an eighth to a quarter of a power of two apart, so that examples of
    about the same size reuse each other's extents (at most a quarter of an extent is unused)."""
    step = max(4096, 1 << max(0, (n - 1).bit_length() - 3))
    return max(step, -(-n // step) * step)


class _Block:
    """A shared-memory block of a worker's arena, carved into extents front to back. It starts
    with the *ledger*: one ``int64`` per extent, written by the main process only - how many
    messages naming the extent it has finished with.

    Handing a block's handle to another process costs a socket round trip, so the main process
    keeps the blocks it was handed (``_received``) and later messages name a block by ``key``."""

    __slots__ = ("tensor", "mem", "ledger", "used", "extents", "pid", "key", "announced")

    def __init__(self, capacity: int):
        slots = capacity // SHARED_MIN_BYTES + 1  # an extent holds at least one large buffer
        header = -(-8 * slots // _ALIGN) * _ALIGN
        self.tensor = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(header + capacity))
        self.mem = self.tensor.numpy()
        self.ledger = self.mem[:8 * slots].view(np.int64)  # new shared memory reads as zeros
        self.used, self.extents = header, 0
        self.pid = os.getpid()
        self.key = (self.pid, _process_token(), next(_block_numbers))
        self.announced = False  # the main process holds the handle


class _Extent:
    """``size`` bytes at ``offset`` of ``block``; ``sent``: messages that named it so far."""

    __slots__ = ("block", "offset", "size", "index", "sent")

    def __init__(self, block: _Block, offset: int, size: int, index: int):
        self.block, self.offset, self.size, self.index, self.sent = block, offset, size, index, 0

    def released(self) -> bool:
        return int(self.block.ledger[self.index]) == self.sent


class _Arena:
    """A worker's extents, by size class: ``free`` ones, and ``retired`` ones that no record uses
    any more but that the main process may still read (reused once it has let them go)."""

    def __init__(self):
        self.pid = None

    def _own(self) -> None:
        if self.pid != os.getpid():  # a forked child never writes its parent's blocks
            self.pid, self.blocks, self.free, self.retired = os.getpid(), [], {}, {}

    def take(self, nbytes: int) -> _Extent:
        size = _size_class(nbytes)
        with _lock:
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
                blk = _Block(max(ARENA_BLOCK, size))
                self.blocks.append(blk)
            ext = _Extent(blk, blk.used, size, blk.extents)
            blk.used += size
            blk.extents += 1
        _populate(blk.mem, ext.offset, size)
        return ext

    def give_back(self, ext: _Extent) -> None:
        with _lock:
            if ext.block.pid != os.getpid() or self.pid != ext.block.pid:
                return
            if ext.sent == 0 or ext.released():
                self.free.setdefault(ext.size, []).append(ext)
            else:
                self.retired.setdefault(ext.size, collections.deque()).append(ext)


def _madvise() -> Any:
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).madvise
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
        return fn
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None


_MADV_POPULATE_WRITE = 23  # Linux >= 5.14
_populate_with: list = [_madvise()]
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _populate(mem: np.ndarray, offset: int, size: int) -> None:
    """Fault in the pages of a new extent with one call (about a third cheaper than page by page,
    and new shared memory costs several times a copy to touch)."""
    fn = _populate_with[0]
    if fn is None:
        return
    start = mem.ctypes.data + offset
    start -= start % _PAGE
    if fn(start, mem.ctypes.data + offset + size - start, _MADV_POPULATE_WRITE) != 0:
        _populate_with[0] = None  # an older kernel: let the copy fault them in


#: records die and messages are pickled in the loader's feeder thread too; reentrant because a
#: record may die (and give its extent back) inside a locked section, when the cyclic garbage
#: collector runs there and frees a discarded pipeline
_lock = threading.RLock()
_arena = _Arena()
_block_numbers = itertools.count()
_token: list = [None, None]  # (pid, random token): keys never collide, even if a pid is reused
_received: dict = {}  # main process: key -> block tensor


def _process_token() -> int:
    if _token[0] != os.getpid():
        _token[:] = [os.getpid(), int.from_bytes(os.urandom(8), "little")]
    return _token[1]


class _Record:
    """One example of a journal segment as the worker took it: ``data`` (pickle protocol 5) and
    its large buffers, at ``spans`` (offset, length) of its arena extent."""

    __slots__ = ("data", "extent", "spans")

    def example(self) -> Any:
        """The example, copied out of shared memory (for a state read in the worker itself)."""
        mem = self.extent.block.mem
        return pickle.loads(self.data, buffers=[bytearray(mem[o:o + n]) for o, n in self.spans])

    def __del__(self):
        try:
            _arena.give_back(self.extent)
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


def _record_of(example: Any) -> _Record | None:
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
        total += -(-raw.nbytes // _ALIGN) * _ALIGN
    ext = _arena.take(total)
    rec = _Record()
    rec.data, rec.extent = data, ext
    rec.spans = [(ext.offset + off, raw.nbytes) for off, raw in zip(offsets, raws)]
    mem = ext.block.mem
    for (off, n), raw in zip(rec.spans, raws):
        mem[off:off + n] = np.frombuffer(raw, dtype=np.uint8)
    return rec


class PackedList(JournalList):
    """A segment of a shuffle buffer's journal in a DataLoader worker: ``[slot, entry, ...]`` where
    an entry is a small example or the :class:`_Record` of one with large arrays. ``payload`` is
    what is sent: the small examples pickled when the segment was made, and the records."""

    __slots__ = ("payload", "compact")

    def entries(self) -> list:
        return [x.example() if type(x) is _Record else x for x in self]


def _has_large_buffers(items: list) -> tuple[bytes, bool]:
    large = [False]

    def probe(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes >= SHARED_MIN_BYTES:
            large[0] = True
            return False  # not copied: this pickle is then thrown away
        return True  # in band: this pickle is the payload when nothing is large

    return pickle.dumps(items, protocol=5, buffer_callback=probe), large[0]


def pack_journal_list(items: list) -> PackedList:
    """Make a journal segment from ``[slot, example-or-record, ...]`` (a record: the entry of a
    compacted segment, written again). ``items`` is the caller's new list: it is used up."""
    if _Record not in set(map(type, items[1::2])):
        data, large = _has_large_buffers(items)
        if not large:  # small examples (text rows, ...): one pickle
            out = PackedList(items)
            out.payload, out.compact = (data, ()), JournalList.compact
            return out
    for p in range(1, len(items), 2):
        if type(items[p]) is not _Record:
            rec = _record_of(items[p])
            if rec is not None:
                items[p] = rec  # the worker no longer holds the example itself
    records = tuple((p, x) for p, x in enumerate(items) if p % 2 and type(x) is _Record)
    in_band = items.copy()
    for p, _ in records:
        in_band[p] = None
    out = PackedList(items)
    out.payload = (pickle.dumps(in_band, protocol=5), records)
    # writing a record again sends a few bytes, not its arrays: compact early, so that few extents
    # are held by examples no longer in the buffer
    out.compact = RECORD_COMPACT if len(records) * 2 >= len(items) else JournalList.compact
    return out


def _reduce_packed_list(seg: PackedList):
    data, records = seg.payload
    if not records:
        return (_unpack_journal_list, (data, None))
    blocks: dict = {}
    handles: list = []
    refs: list = []
    with _lock:
        for p, rec in records:
            ext = rec.extent
            blk = ext.block
            k = blocks.get(blk.key)
            if k is None:
                k = blocks[blk.key] = len(handles)
                handles.append((blk.key, None if blk.announced else blk.tensor))
                blk.announced = True
            ext.sent += 1
            refs.append((p, rec.data, k, rec.spans, ext.index))
    return (_unpack_journal_list, (data, (handles, refs)))


def _drop_blocks_of_dead_workers() -> None:
    """Workers that exited (a finished epoch without persistent workers) say nothing: forget their
    blocks when a new one is handed over (arrays still in use keep their block themselves)."""
    alive: dict = {}
    for key in list(_received):
        pid = key[0]
        if pid not in alive:
            try:
                os.kill(pid, 0)
                alive[pid] = True
            except ProcessLookupError:
                alive[pid] = False
            except OSError:
                alive[pid] = True
        if not alive[pid]:
            del _received[key]


class _Owner(np.ndarray):
    """The main process's view of a block for one message: the arrays rebuilt from the message are
    views of it (numpy stops collapsing a view's base at a change of type), so it lives exactly as
    long as one of them."""


def _count_read(ledger: np.ndarray, indices: list) -> None:
    with _lock:  # every array of this message from this block is gone: the worker may reuse the extents
        for i in indices:
            ledger[i] += 1


def _unpack_journal_list(data: bytes, shared: tuple | None) -> list:
    items = pickle.loads(data)
    if shared is None:
        return items
    handles, refs = shared
    owners, ledgers, counts = [], [], []
    for key, handle in handles:
        if handle is not None:
            _drop_blocks_of_dead_workers()
            _received[key] = handle
        try:
            tensor = _received[key]
        except KeyError:
            raise RuntimeError("a DataLoader worker's shuffle buffer names a shared-memory block this process "
                               "was never handed (were messages from the worker lost?)") from None
        owners.append(tensor.numpy().view(_Owner))
        ledgers.append(tensor)
        counts.append([])
    for p, payload, k, spans, index in refs:
        owner = owners[k]
        items[p] = pickle.loads(payload, buffers=[owner[o:o + n] for o, n in spans])
        counts[k].append(index)
    for owner, tensor, indices in zip(owners, ledgers, counts):
        ledger = tensor.numpy()[:8 * (max(indices) + 1)].view(np.int64)  # not a view of the owner
        weakref.finalize(owner, _count_read, ledger, indices)
    return items


ForkingPickler.register(PackedList, _reduce_packed_list)
set_journal_packer(pack_journal_list)
