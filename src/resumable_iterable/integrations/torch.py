"""PyTorch support: DataLoader workers, ``set_epoch`` for persistent workers, and
:class:`StatefulDataLoader` with elastic resume.

Importing this module needs ``torch``; :class:`StatefulDataLoader` also needs ``torchdata``.

* The core never imports this module's names: it registers its hooks (the functions below)
  with the loader layer (``loader/hooks.py``), and the package imports it as soon as torch is
  imported, whatever the import order (at the first dataset built, unpickled, given an epoch or
  checked with ``isinstance`` after ``import torch``). The hooks add :class:`TorchDatasetMixin`
  to the bases of ``resumable_iterable.IterableDataset`` (:func:`attach_torch_base`), which makes
  it a ``torch.utils.data.IterableDataset``, and keep the per-dataset state below in the
  dataset's ``IterationSession``.
* **Epochs and persistent workers.** A persistent worker keeps the copy of the dataset it got
  when it started, so a later ``set_epoch`` in the main process would not reach it. Each dataset
  therefore owns a slot in a shared-memory ``int64`` tensor (slots are handed out from chunks of
  512, so thousands of datasets cost a handful of file descriptors). The main process writes its
  epoch there; a worker starting a new pass reads it. Workers never write it. A process that
  inherited a dataset by ``fork`` (not a DataLoader worker) gets its own slot on its first write,
  so sibling processes never see each other's epochs. A copy of a dataset (``pickle``,
  ``copy.deepcopy``, ``copy.copy``) gets its own slot too (:func:`adopt_unpickled`): a slot
  pickled by value is no longer shared memory, and one shared with the original would let
  ``set_epoch`` on either reach the other's workers.
* :class:`StatefulDataLoader` is torchdata's, plus elastic resume (a state saved with W workers
  loads with W′ workers) and an early, clear validation of the state it loads.
"""

from __future__ import annotations

import abc
import collections
import itertools
import os
import pickle
import threading
import weakref
from typing import Any

from multiprocessing.reduction import ForkingPickler

import numpy as np
import torch
import torch.utils.data

from ..distributed import current_worker, warn_too_many_workers
from ..loader import elastic
from ..loader.hooks import WorkerHooks, register_hooks
from ..loader.session import IterationSession
from ..state import JournalList, set_journal_packer

# ============================================================================ shared epochs


class _Slot:
    """One ``int64`` in a shared-memory tensor, owned by the process that allocated it.

    ``alive``: the tensor is still the shared one. Unpickled by ``multiprocessing`` (a spawned
    DataLoader worker) it is; by plain ``pickle`` or ``copy.deepcopy`` it is a private copy."""

    __slots__ = ("tensor", "index", "owner", "alive")

    def __init__(self, tensor: torch.Tensor, index: int, owner: int):
        self.tensor, self.index, self.owner = tensor, index, owner
        self.alive = True

    def get(self) -> int:
        return int(self.tensor[self.index])

    def set(self, value: int) -> None:
        self.tensor[self.index] = int(value)

    def __getstate__(self):
        return (self.tensor, self.index, self.owner)

    def __setstate__(self, st):
        self.tensor, self.index, self.owner = st
        self.alive = self.tensor.is_shared()


class _SlotPool:
    CHUNK = 512

    def __init__(self):
        self.pid = None
        self.free: list = []

    def allocate(self) -> _Slot:
        pid = os.getpid()
        if self.pid != pid:  # a forked child: never hand out the parent's slots
            self.pid, self.free = pid, []
        if not self.free:
            t = torch.zeros(self.CHUNK, dtype=torch.int64).share_memory_()
            self.free = [(t, i) for i in reversed(range(self.CHUNK))]
        t, i = self.free.pop()
        # slots are never reused: a copy of a dataset in a live worker may still read one
        return _Slot(t, i, pid)


_POOL = _SlotPool()


def publish_epoch(session: IterationSession, epoch: int) -> None:
    """Write the main process's epoch of a dataset's ``session`` where its DataLoader workers read it."""
    if current_worker() is not None:
        return  # a worker's epoch is its own; the main process owns the shared value
    slot = session.epoch_slot
    if slot is None or slot.owner != os.getpid() or not slot.alive:
        slot = session.epoch_slot = _POOL.allocate()
    slot.set(epoch)


def ensure_epoch_slot(session: IterationSession) -> None:
    """Give ``session`` a shared epoch slot now (before DataLoader workers start)."""
    slot = session.epoch_slot
    if slot is None or slot.owner != os.getpid() or not slot.alive:
        publish_epoch(session, session.epoch)


def prepare_for_workers(session: IterationSession) -> None:
    """In the main process, before DataLoader workers start: the dataset's shared epoch slot and,
    for a state loaded with ``load_state_dict`` before torch was imported, the shared record of
    which workers took their part of it (made at load time when torch is already imported)."""
    ensure_epoch_slot(session)
    if session.claims is None and session.loaded is not None and current_worker() is None:
        session.claims = new_claims()


def adopt_unpickled(session: IterationSession) -> None:
    """Called when a dataset's ``session`` was just unpickled or copied (``__setstate__``).

    Sent to another process by ``multiprocessing`` (a spawned DataLoader worker), it keeps the
    sender's shared slots: set_epoch in the main process must reach the worker. Anything else is
    a copy, which behaves like a fresh dataset with the copied epoch: its own epoch slot, and its
    own record of which DataLoader workers took a state loaded before the copy.
    """
    slot = session.epoch_slot
    if slot is not None and slot.alive and slot.owner != os.getpid():
        return
    session.epoch_slot = None
    if session.claims is not None:
        session.claims = new_claims().copy_(session.claims)
    prepare_for_workers(session)


def shared_epoch(session: IterationSession) -> int | None:
    slot = session.epoch_slot
    return None if slot is None or not slot.alive else slot.get()


class TorchDatasetMixin(torch.utils.data.IterableDataset):
    """Added to ``resumable_iterable.IterableDataset``'s bases once torch is imported (its epoch
    is published to DataLoader workers by ``IterationSession.set_epoch``)."""


class _CacheReset(abc.ABC):
    """Registering a new class with any ABC invalidates every ABC's cache of negative answers."""


def attach_torch_base(cls: type) -> None:
    """Make ``cls`` a ``torch.utils.data.IterableDataset`` by adding :class:`TorchDatasetMixin` to
    its bases. ``isinstance(ds, torch.utils.data.IterableDataset)`` may already have answered "no"
    for ``cls`` (torch's ABC caches that answer), so the ABC caches are invalidated too."""
    if TorchDatasetMixin not in cls.__mro__:
        cls.__bases__ += (TorchDatasetMixin,)
    _CacheReset.register(type("_Fresh", (), {}))


# ============================================================================ pending states claimed by workers


MAX_WORKERS = 1024


def new_claims() -> torch.Tensor:
    """Shared record of which DataLoader workers took their part of a state loaded in the main
    process: ``[num_workers of that pass, claimed by worker 0, claimed by worker 1, ...]``."""
    return torch.zeros(1 + MAX_WORKERS, dtype=torch.int64).share_memory_()


def claim(claims: torch.Tensor, worker: int, num_workers: int) -> bool:
    """Worker ``worker`` of ``num_workers`` takes its part; ``False`` if the state was already
    used by an earlier pass (so this pass starts from scratch)."""
    if num_workers > MAX_WORKERS:
        raise ValueError(f"at most {MAX_WORKERS} DataLoader workers can share a state loaded in the main process")
    seen = int(claims[0])
    if seen == 0:
        claims[0] = num_workers  # every worker of the first pass writes the same value
        seen = num_workers
    if seen != num_workers or int(claims[1 + worker]) != 0:
        return False
    claims[1 + worker] = 1  # each worker writes only its own cell: no lost update
    return True


def claimed(claims: torch.Tensor) -> bool:
    return int(claims[0]) != 0


# ============================================================================ shuffle buffers sent by workers
#
# A DataLoader worker describes its shuffle buffer as a journal of unchanging segments
# (``state_buffers.ExampleChunks.journal``); torchdata sends each new segment to the main process
# once. Each example is pickled once, when it first enters a segment (so the main process gets it
# as it was when the state was taken, whatever the consumer does to it later), and its large
# numpy buffers are copied once into an *extent* of the worker's shared-memory arena, which the
# main process maps instead of reading them through the pipe. When a segment is compacted its
# still-current examples are written again by reference to the same record: no data is copied or
# sent twice. An extent is reused once no segment of the worker refers to its record and the main
# process has dropped every array it rebuilt from it (it counts those in the block's ledger).

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


_lock = threading.Lock()  # records die and messages are pickled in the loader's feeder thread too
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
    compacted segment, written again)."""
    items = list(items)
    if not any(type(x) is _Record for x in items[1::2]):
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
register_hooks(WorkerHooks(attach_base=attach_torch_base, publish_epoch=publish_epoch, shared_epoch=shared_epoch,
                           new_claims=new_claims, claim=claim, claimed=claimed,
                           prepare_for_workers=prepare_for_workers, adopt_unpickled=adopt_unpickled))


# ============================================================================ StatefulDataLoader

try:
    from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader
except ImportError as _e:  # pragma: no cover - torchdata is part of the [torch] extra
    _TorchdataLoader = None
    _IMPORT_ERROR = _e


def _is_ours(dataset: Any) -> bool:
    return isinstance(getattr(dataset, "session", None), IterationSession)


if _TorchdataLoader is not None:

    class StatefulDataLoader(_TorchdataLoader):
        """``torchdata.stateful_dataloader.StatefulDataLoader`` with **elastic resume**.

        Used exactly like torchdata's. In addition, ``load_state_dict`` accepts a state saved
        with any number of workers (0 = main process): with a ``resumable_iterable`` dataset the
        rest of the saved epoch then yields every example the saved loader had not yet yielded,
        exactly once (shuffle buffers included), and the next epoch is an ordinary one.

        Ordering after a change of worker count: what each old worker had left is continued in
        its own order, as a *segment*, by one new worker; segments are dealt to the new workers
        round-robin, starting with the old worker that was due next, and a new worker runs its
        segments one after another (a batch may join the end of one segment and the start of
        the next). With fewer segments than workers, simple pipelines hand their untouched shards
        to the workers that would idle. With the same worker count nothing changes: the
        continuation is identical to the uninterrupted run.

        Needs ``snapshot_every_n_steps=1`` (the default) in the loader that saved the state when
        the worker count changes. With ``drop_last=True`` each worker drops its last incomplete
        batch, so which examples are dropped can differ after an elastic resume.
        """

        def __init__(self, dataset: Any, *args: Any, **kwargs: Any):
            if _is_ours(dataset):
                prepare_for_workers(dataset.session)
            super().__init__(dataset, *args, **kwargs)

        def _get_iterator(self):
            if _is_ours(self.dataset):
                prepare_for_workers(self.dataset.session)  # before the workers fork
                if self.num_workers > 1:
                    shards = self.dataset.session.process_node(worker=None).num_shards
                    if self.num_workers > shards:
                        warn_too_many_workers(self.num_workers, shards)
            return super()._get_iterator()

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            """Load a state saved by a ``StatefulDataLoader`` with any number of workers."""
            if not _is_ours(self.dataset) or state_dict == {}:
                return super().load_state_dict(state_dict)
            new = elastic.remap_loader_state(state_dict, self.num_workers)
            epoch = self.dataset.session.validate_loader_state(new, self.num_workers)
            super().load_state_dict(new)
            if self.num_workers > 0:
                # as with num_workers=0 (where the main-process dataset loads the state itself),
                # the dataset's epoch becomes the saved one
                self.dataset.set_epoch(epoch)

else:  # pragma: no cover

    def __getattr__(name: str):
        if name == "StatefulDataLoader":
            raise ImportError(f"resumable_iterable.StatefulDataLoader needs torchdata (pip install torchdata): {_IMPORT_ERROR}")
        raise AttributeError(name)


__all__ = ["StatefulDataLoader", "TorchDatasetMixin"]
