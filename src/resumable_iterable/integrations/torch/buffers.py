"""How a DataLoader worker's shuffle buffer reaches the main process, sent once and read in place.

In a DataLoader worker, a shuffle buffer's state is a ``state_buffers.BufferLog``: one value per
state, which torchdata's loader sends only when it changed. The DataLoader's pickler sends a log
as the writes since the last log of the same buffer it sent (:func:`_reduce_log`); the main
process keeps each buffer's examples as last received and builds the new list on them
(:func:`_receive_log`). So each example crosses to the main process once, when it enters the
buffer, with no compaction and no segments to compare.

Each example is packed when its log is taken (so the main process gets it as it was then,
whatever the consumer does to it later): small ones pickled together, an example with large
numpy buffers pickled once with those buffers copied once into an *extent* of the worker's
shared-memory arena, which the main process maps instead of reading them through the pipe. An
extent is reused once the worker's buffer no longer holds its record and the main process has
dropped every array it rebuilt from it (it counts those in the block's ledger).

Importing this module installs the packer (``state_buffers.set_buffer_packer``) and the reducer
``multiprocessing`` uses for buffer logs.
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from ...state import BufferLog, buffer_lock, live_buffer_ids, set_buffer_packer

#: numpy buffers of at least this many bytes go through shared memory instead of the pipe
SHARED_MIN_BYTES = 1 << 14
_ALIGN = 64
#: bytes of an arena block (an extent larger than this gets a block of its own)
ARENA_BLOCK = 32 << 20


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
#: collector runs there and frees a discarded pipeline; the lock of the buffers' logs, so that
#: the two never wait for each other
_lock = buffer_lock
_arena = _Arena()
_block_numbers = itertools.count()
_token: list = [None, None]  # (pid, random token): keys never collide, even if a pid is reused
_received: dict = {}  # main process: key -> (block tensor, its bytes, its ledger)
_logs: dict = {}  # main process: (pid, token, buffer) -> (seq, the buffer's examples as last sent)


def _process_token() -> int:
    if _token[0] != os.getpid():
        _token[:] = [os.getpid(), int.from_bytes(os.urandom(8), "little")]
    return _token[1]


class _Record:
    """One example of a buffer log as the worker took it: ``data`` (pickle protocol 5) and
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


def _has_large_buffers(items: list) -> tuple[bytes, bool]:
    large = [False]

    def probe(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes >= SHARED_MIN_BYTES:
            large[0] = True
            return False  # not copied: this pickle is then thrown away
        return True  # in band: this pickle is the payload when nothing is large

    return pickle.dumps(items, protocol=5, buffer_callback=probe), large[0]


def _has_large_array(example: Any) -> bool:
    """Whether a dict example holds a large numpy array at its top level (the usual case, seen
    without pickling it)."""
    if type(example) is not dict:
        return False
    for v in example.values():
        if type(v) is np.ndarray and v.nbytes >= SHARED_MIN_BYTES and not v.dtype.hasobject:
            return True
    return False


class TorchPacker:
    """Packs the new writes of a worker's buffer log by value, at once: small examples pickled
    together (a slot's ref is ``(data, position)``), an example with large numpy buffers as its
    own :class:`_Record` (the ref). The payload, ``(data, records)``, is what a message sends."""

    by_value = True

    @staticmethod
    def pack(items: list) -> tuple[tuple, list]:
        """``items``: ``[slot, example-or-record, ...]``, the caller's new list (used up)."""
        vals = items[1::2]
        # the first example tells the usual case apart without pickling it (a guess: the probe
        # below finds large buffers anywhere, and the record path keeps small examples in band)
        if _Record not in set(map(type, vals)) and not (vals and _has_large_array(vals[0])):
            data, large = _has_large_buffers(items)
            if not large:  # small examples (text rows, ...): one pickle
                return (data, ()), [(data, p) for p in range(1, len(items), 2)]
        for p in range(1, len(items), 2):
            if type(items[p]) is not _Record:
                rec = _record_of(items[p])
                if rec is not None:
                    items[p] = rec  # the worker no longer holds the example itself
        records = tuple((p, x) for p, x in enumerate(items) if p % 2 and type(x) is _Record)
        in_band = items.copy()
        for p, _ in records:
            in_band[p] = None
        data = pickle.dumps(in_band, protocol=5)
        return (data, records), [x if type(x) is _Record else (data, p) for p, x in enumerate(items) if p % 2]

    @staticmethod
    def decode(refs: tuple, keep_records: bool = False) -> list:
        """The examples ``refs`` stand for, copied out of the worker's packed form (records kept
        as they are with ``keep_records``)."""
        unpickled: dict = {}
        out = []
        for r in refs:
            if type(r) is _Record:
                out.append(r if keep_records else r.example())
                continue
            data, p = r
            got = unpickled.get(id(data))
            if got is None:
                got = unpickled[id(data)] = (pickle.loads(data), data)
            out.append(got[0][p])
        return out


def _whole(refs: tuple) -> tuple:
    """The payload of a message holding the whole buffer (records sent again by reference)."""
    vals = TorchPacker.decode(refs, keep_records=True)
    return TorchPacker.pack([x for kv in enumerate(vals) for x in kv])[0]


def _wire(payloads: list) -> tuple:
    """``(handles, parts)`` of a message: the blocks it names (a block's handle only the first time
    it is sent) and, per payload, its data and its records' places in those blocks."""
    blocks: dict = {}
    handles: list = []
    parts: list = []
    for data, records in payloads:
        refs = []
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
        parts.append((data, refs))
    return handles, parts


def _reduce_log(log: BufferLog):
    """A worker's buffer log as the DataLoader sends it: the writes since the last log of the same
    buffer that was sent (or the whole buffer, when that cannot be said), its size, and the
    buffers still alive in the worker."""
    t = log.tracker
    if t.packer is not TorchPacker:
        return log.__reduce__()
    seq = log.seq
    with _lock:
        if seq == t.main_seq:
            base, payloads = "same", []
        else:
            got = t.take(seq)
            # an older log than one sent already, or logs were dropped unsent: the whole buffer
            base, payloads = got if got is not None else (None, [_whole(log.refs)])
        wire = _wire(payloads)
    sender = (os.getpid(), _process_token())
    return (_receive_log, (sender, t.uid, base, seq, len(log.refs), wire, live_buffer_ids()))


def _drop_dead_workers(table: dict) -> None:
    """Workers that exited (a finished epoch without persistent workers) say nothing: forget what
    they sent when a new one starts (arrays still in use keep their block themselves)."""
    alive: dict = {}
    for key in list(table):
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
            del table[key]


class _Owner(np.ndarray):
    """The main process's view of a block for one example: the arrays rebuilt from the example are
    views of it (numpy stops collapsing a view's base at a change of type), so it lives exactly as
    long as one of them; when it dies it counts the example's extent as read in the block's ledger
    (``ledger_slot``: the ledger and the extent's index; views of it have none)."""

    def __del__(self):
        read = self.__dict__.get("ledger_slot")
        if read is not None:
            try:
                with _lock:  # the worker may reuse the extent once every message naming it is read
                    read[0][read[1]] += 1
            except Exception:  # pragma: no cover - interpreter shutdown
                pass


def _unwire(handles: list, parts: list) -> list:
    """The ``[slot, example, ...]`` lists of a message's parts, large arrays as views of shared memory."""
    blocks = []
    for key, handle in handles:
        if handle is not None:
            _drop_dead_workers(_received)
            mem = handle.numpy()
            # the whole block as int64s: its ledger comes first (blocks are a multiple of 64 bytes)
            _received[key] = (handle, mem, memoryview(mem).cast("q"))
        try:
            blocks.append(_received[key])
        except KeyError:
            raise RuntimeError("a DataLoader worker's shuffle buffer names a shared-memory block this process "
                               "was never handed (were messages from the worker lost?)") from None
    out = []
    for data, refs in parts:
        items = pickle.loads(data)
        for p, payload, k, spans, index in refs:
            _, mem, ledger = blocks[k]
            owner = mem.view(_Owner)  # one per example: its extent is let go as soon as it is unused
            owner.ledger_slot = (ledger, index)
            items[p] = pickle.loads(payload, buffers=[owner[o:o + n] for o, n in spans])
        out.append(items)
    return out


def _receive_log(sender: tuple, uid: int, base: Any, seq: int, size: int, wire: tuple, alive: tuple) -> list:
    """The main process's side of :func:`_reduce_log`: the buffer's examples as a new plain list,
    built on the previous message of the same buffer."""
    parts = _unwire(*wire)
    key = (*sender, uid)
    with _lock:
        for k in [k for k in _logs if k[:2] == sender and k[2] not in alive]:
            del _logs[k]  # buffers of passes that ended in that worker
        held = _logs.get(key)
        if base == "same":
            if held is None or held[0] != seq:
                raise _out_of_sequence(held, seq)
            return list(held[1])
        if base is None:
            if held is None:
                _drop_dead_workers(_logs)
            slots: list = []
        elif held is None or held[0] != base:
            raise _out_of_sequence(held, base)
        else:
            slots = held[1]  # this process's own list (it hands out copies): changed in place
        n = len(slots)
        for items in parts:
            for p in range(0, len(items), 2):
                i = items[p]
                if i < n:
                    slots[i] = items[p + 1]
                elif i == n:
                    slots.append(items[p + 1])
                    n += 1
                else:
                    del _logs[key]  # half applied: nothing can build on it
                    raise RuntimeError(f"a DataLoader worker's shuffle buffer wrote slot {i} of {n}")
        del slots[size:]
        _logs[key] = (seq, slots)
    return list(slots)


def _out_of_sequence(held: Any, base: Any) -> RuntimeError:
    return RuntimeError(
        f"a DataLoader worker's shuffle buffer state arrived out of sequence (this process holds its state "
        f"{held[0] if held else 'none'}, the message builds on {base}): were messages from the worker lost, or "
        "was a worker state sent through another queue?")


ForkingPickler.register(BufferLog, _reduce_log)
set_buffer_packer(TorchPacker)
