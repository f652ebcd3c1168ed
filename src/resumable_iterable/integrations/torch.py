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

#: a journal list whose numpy arrays hold at least this many bytes goes through shared memory
SHARED_MIN_BYTES = 1 << 16
_ALIGN = 64
_HEADER = 64  # a block starts with an int64: how many times the main process has read it
_POOL_MAX = 64


class _Block:
    """A shared-memory block a worker reuses: creating and first touching shared memory costs
    several times a copy, so a block goes back to the worker's pool once the segment using it is
    gone in the worker and, in the main process, every array rebuilt from every message that
    carried it (the main process counts those in the block's header).

    Handing a block's handle to another process costs a socket round trip, so the main process
    keeps the blocks it was handed (``_received``) and later messages name the block by ``key``;
    the worker says when it lets a block go (``_forget``)."""

    __slots__ = ("tensor", "mem", "count", "sent", "pid", "key", "announced")

    def __init__(self, capacity: int):
        self.tensor = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(_HEADER + capacity))
        self.mem = self.tensor.numpy()
        self.count = self.mem[:8].view(np.int64)  # written by the main process only
        self.sent = 0
        self.pid = os.getpid()
        self.key = (self.pid, _process_token(), next(_block_numbers))
        self.announced = False  # the main process holds the handle

    @property
    def capacity(self) -> int:
        return len(self.mem) - _HEADER


_block_numbers = itertools.count()
_token: list = [None, None]  # (pid, random token): keys never collide, even if a pid is reused
_forget: list = []  # keys of blocks this worker let go, told to the main process with the next message
_received: dict = {}  # main process: key -> block tensor


def _process_token() -> int:
    if _token[0] != os.getpid():
        _token[:] = [os.getpid(), int.from_bytes(os.urandom(8), "little")]
    return _token[1]


_pool: list = []
_pool_lock = threading.Lock()  # segments die in the loader's feeder thread too


def _take_block(size: int) -> _Block:
    pid = os.getpid()
    with _pool_lock:
        for k, blk in enumerate(_pool):
            if blk.pid == pid and size <= blk.capacity <= 4 * size and int(blk.count[0]) == blk.sent:
                return _pool.pop(k)
    return _Block(-(-(size * 3 // 2) // (1 << 20)) << 20)  # room for the next, larger segments


def _give_back(blk: _Block) -> None:
    if blk.pid == os.getpid():
        with _pool_lock:
            _pool.append(blk)
            if len(_pool) > _POOL_MAX:
                old = _pool.pop(0)
                if old.announced:
                    _forget.append(old.key)


class PackedList(JournalList):
    """A segment of a shuffle buffer's journal (``state.ExampleChunks.journal``) in a DataLoader
    worker, pickled when it is made: ``payload`` holds the pickle (protocol 5) and ``block`` a
    shared-memory block with the examples' numpy arrays when they are large. What the main
    process receives is therefore the examples as they were when the state was taken, even if
    the consumer edits them in place afterwards - and large arrays do not go through the pipe."""

    __slots__ = ("payload", "block")

    def __del__(self):
        blk = getattr(self, "block", None)
        if blk is not None:
            try:
                _give_back(blk)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass


def pack_journal_list(items: list) -> PackedList:
    out = PackedList(items)
    out.block = None
    raws: list = []
    data = pickle.dumps(list(items), protocol=5, buffer_callback=lambda b: raws.append(b.raw()))
    spans, total = [], 0
    for r in raws:
        spans.append((_HEADER + total, r.nbytes))
        total += -(-r.nbytes // _ALIGN) * _ALIGN
    if total < SHARED_MIN_BYTES:
        out.payload = pickle.dumps(list(items), protocol=5) if raws else data  # arrays in-band
        return out
    blk = _take_block(total)
    mem = blk.mem
    for (off, n), r in zip(spans, raws):
        mem[off:off + n] = np.frombuffer(r, dtype=np.uint8)
    out.payload, out.block = (data, spans), blk
    return out


def _reduce_packed_list(p: PackedList):
    blk = p.block
    if blk is None:
        return (_unpack_journal_list, (p.payload, None))
    with _pool_lock:
        blk.sent += 1
        handle = None if blk.announced else blk.tensor
        blk.announced = True
        forget = _forget[:]
        _forget.clear()
    return (_unpack_journal_list, (p.payload, (blk.key, handle, forget)))


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
    """The main process's view of a block: the arrays rebuilt from it are views of it (numpy stops
    collapsing a view's base at a change of type), so it lives exactly as long as one of them."""


def _count_read(count: np.ndarray) -> None:
    count[0] += 1  # every array from this message is gone: the worker may reuse the block


def _unpack_journal_list(payload: Any, block: tuple | None) -> list:
    if block is None:
        return pickle.loads(payload)
    key, handle, forget = block
    for k in forget:
        _received.pop(k, None)
    if handle is not None:
        _drop_blocks_of_dead_workers()
        _received[key] = handle
    try:
        tensor = _received[key]
    except KeyError:
        raise RuntimeError("a DataLoader worker's shuffle buffer names a shared-memory block this process "
                           "was never handed (were messages from the worker lost?)") from None
    data, spans = payload
    mem = tensor.numpy()
    owner = mem.view(_Owner)
    items = pickle.loads(data, buffers=[owner[off:off + n] for off, n in spans])
    weakref.finalize(owner, _count_read, mem[:8].view(np.int64))
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
