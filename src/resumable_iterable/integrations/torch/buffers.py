"""How a DataLoader worker's shuffle buffer reaches the main process, sent once and read in place.

In a DataLoader worker, a shuffle buffer's state is a ``state_logs.BufferLog``: one value per
state, which torchdata's loader sends only when it changed. The DataLoader's pickler sends a log
as the writes since the last log of the same buffer it sent (:func:`_reduce_log`); the main
process keeps each buffer's examples as last received and builds the new list on them
(:func:`_receive_log`). So each example crosses to the main process once, when it enters the
buffer, with no compaction and no segments to compare.

Each example is packed when its log is taken (so the main process gets it as it was then,
whatever the consumer does to it later): small ones pickled together, an example with large
numpy buffers, torch tensors, PIL images or ``bytes`` pickled once with those buffers copied once into an
*extent* of the worker's shared-memory arena (``arena.py``), which the main process maps instead
of reading them through the pipe. An extent is reused once the worker's
buffer no longer holds its record and the main process has dropped every array it rebuilt from
it (it counts those in the block's ledger; a PIL image copies its pixels out at once).

Importing this module installs the packer (``state_logs.set_buffer_packer``) and the reducer
``multiprocessing`` uses for buffer logs.
"""

from __future__ import annotations

import os
import pickle
import weakref
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from ...state import BufferLog, Reorder, live_buffer_ids, set_buffer_packer
from ...state_images import pil_image_class
from .arena import SEARCHED_LIST, SHARED_MIN_BYTES, Record, dumps, image_nbytes, lock, process_token, record_of

_received: dict = {}  # main process: key -> (block tensor, its bytes, its ledger)
_logs: dict = {}  # main process: (pid, token, buffer) -> (seq, the buffer's examples as last sent)


def _has_large_buffers(items: list) -> tuple[bytes, bool]:
    large = [False]

    def probe(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes >= SHARED_MIN_BYTES:
            large[0] = True
            return False  # not copied: this pickle is then thrown away
        return True  # in band: this pickle is the payload when nothing is large

    return dumps(items, probe), large[0]


def _is_large(v: Any, image: type | None) -> bool:
    """Whether ``v`` is a large numpy array, CPU torch tensor, ``bytes`` value or PIL image."""
    t = type(v)
    if t is np.ndarray:
        return v.nbytes >= SHARED_MIN_BYTES and not v.dtype.hasobject
    if t is bytes:
        return len(v) >= SHARED_MIN_BYTES
    if t is torch.Tensor:
        return v.device.type == "cpu" and v.numel() * v.element_size() >= SHARED_MIN_BYTES
    return image is not None and isinstance(v, image) and image_nbytes(v) >= SHARED_MIN_BYTES


def _has_large_array(example: Any) -> bool:
    """Whether a dict example holds a large numpy array, torch tensor, ``bytes`` value or PIL image at its top
    level or one level deeper (in a dict - HF's undecoded images and audio are ``{"bytes": ...,
    "path": ...}`` - or a short list): the usual cases, seen without pickling it."""
    if type(example) is not dict:
        return False
    image = pil_image_class()
    for v in example.values():
        t = type(v)
        if t is dict:
            if any(_is_large(x, image) for x in v.values()):
                return True
        elif t is list or t is tuple:
            if len(v) <= SEARCHED_LIST and any(_is_large(x, image) for x in v):
                return True
        elif _is_large(v, image):
            return True
    return False


class TorchPacker:
    """Packs the new writes of a worker's buffer log by value, at once: small examples pickled
    together (a slot's ref is ``(data, position)``), an example with large numpy buffers, torch tensors, PIL
    images or ``bytes`` as its own :class:`Record` (the ref). The payload, ``(data, records)``,
    is what a message sends."""

    by_value = True
    #: examples with large buffers are cheaper logged as positions, when the shuffle can re-read them
    prefers_positions = staticmethod(_has_large_array)

    @staticmethod
    def pack(items: list) -> tuple[tuple, list]:
        """``items``: ``[slot, example-or-record, ...]``, the caller's new list (used up)."""
        vals = items[1::2]
        # the first example tells the usual case apart without pickling it (a guess: the probe
        # below finds large buffers anywhere, and the record path keeps small examples in band)
        if Record not in set(map(type, vals)) and not (vals and _has_large_array(vals[0])):
            data, large = _has_large_buffers(items)
            if not large:  # small examples (text rows, ...): one pickle
                return (data, ()), [(data, p) for p in range(1, len(items), 2)]
        for p in range(1, len(items), 2):
            if type(items[p]) is not Record:
                rec = record_of(items[p])
                if rec is not None:
                    items[p] = rec  # the worker no longer holds the example itself
        records = tuple((p, x) for p, x in enumerate(items) if p % 2 and type(x) is Record)
        in_band = items.copy()
        for p, _ in records:
            in_band[p] = None
        data = dumps(in_band)
        return (data, records), [x if type(x) is Record else (data, p) for p, x in enumerate(items) if p % 2]

    @staticmethod
    def decode(refs: tuple, keep_records: bool = False) -> list:
        """The examples ``refs`` stand for, copied out of the worker's packed form (records kept
        as they are with ``keep_records``)."""
        unpickled: dict = {}
        out = []
        for r in refs:
            if type(r) is Record:
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
    for payload in payloads:
        if type(payload) is Reorder:
            parts.append(payload)  # the slots' new order: a list of integers
            continue
        data, records = payload
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
    with lock:
        if seq == t.main_seq:
            base, payloads = "same", []
        else:
            got = t.take(seq)
            # an older log than one sent already, or logs were dropped unsent: the whole buffer
            base, payloads = got if got is not None else (None, [_whole(log.refs)])
        wire = _wire(payloads)
    sender = (os.getpid(), process_token())
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


def _forget_workers(pids: frozenset) -> None:
    """Drop what this process keeps of the DataLoader workers ``pids``: the last buffer each sent
    (up to ``buffer_size`` examples) and the shared-memory blocks they handed over (arrays still in
    use keep their block themselves). Called when the iterator that ran them is freed."""
    with lock:
        for table in (_logs, _received):
            for k in list(table):  # (a copy taken at once: nothing runs while it is made)
                if k[0] in pids:
                    table.pop(k, None)


def forget_workers_when_freed(it: Any) -> Any:
    """``it``, a DataLoader iterator: once it is freed (its workers shut down), this process forgets
    what its workers sent (:func:`_forget_workers`). Without this, the last buffers of a loader's
    workers stayed in this process after the loader was dropped, until the workers of another
    loader sent theirs."""
    workers = getattr(it, "_workers", None)
    if workers:
        weakref.finalize(it, _forget_workers, frozenset(w.pid for w in workers)).atexit = False
    return it


class _Owner(np.ndarray):
    """The main process's view of a block for one example: the arrays rebuilt from the example are
    views of it (numpy stops collapsing a view's base at a change of type), so it lives exactly as
    long as one of them; when it dies it counts the example's extent as read in the block's ledger
    (``ledger_slot``: the ledger and the extent's index; views of it have none)."""

    def __del__(self):
        read = self.__dict__.get("ledger_slot")
        if read is not None:
            try:
                with lock:  # the worker may reuse the extent once every message naming it is read
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
    for part in parts:
        if type(part) is Reorder:
            out.append(part)
            continue
        data, refs = part
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
    with lock:
        for k in [k for k in list(_logs) if k[:2] == sender and k[2] not in alive]:
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
            if type(items) is Reorder:  # the final permutation: the examples held, moved
                slots[:] = items.apply(slots)
                n = len(slots)
                continue
            for p in range(0, len(items), 2):
                i = items[p]
                if i < n:
                    slots[i] = items[p + 1]
                elif i == n:
                    slots.append(items[p + 1])
                    n += 1
                else:
                    _logs.pop(key, None)  # half applied: nothing can build on it
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
