"""What DataLoader workers share with the main process: the torch base class, epochs for
persistent workers, and the record of which workers took their part of a loaded state.

* The core never imports these names: :func:`register` hands them to the loader layer
  (``loader/hooks.py``), and the package imports ``integrations.torch`` as soon as torch is
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
* **A state loaded in the main process** is split among the DataLoader workers of the next pass:
  each takes its part once (:func:`claim`), so a later pass starts from scratch.
* **A worker outlives no killed main process** (:func:`worker_started`). When the main process
  dies without shutting its loader down (``SIGKILL``, the out-of-memory killer), torch's worker
  loop notices and returns, but the worker can then hang for ever at exit: ``multiprocessing``
  waits for its queue's feeder thread, which blocks on a full pipe that no one reads (our
  workers send more through it than torch's: states, small tensors by value). A thread in each
  worker ends the process if it is still alive some seconds after its main process died.
"""

from __future__ import annotations

import abc
import multiprocessing
import os
import threading
import time

import torch
import torch.utils.data

from ...distributed import current_worker
from ...loader.hooks import WorkerHooks, register_hooks
from ...loader.session import IterationSession
from .transport import handoff
from .worker_rng import decode_worker_rng, rng_state, set_rng_state

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


# ============================================================================ workers of a killed main process

ORPHAN_POLL = 1.0  # seconds between two looks at the main process
ORPHAN_GRACE = 10.0  # seconds an orphaned worker is given to exit by itself (torch's loop looks every 5 s)
_watching: list = [None]  # the pid of the process whose worker watch is running


def worker_started() -> None:
    """In a DataLoader worker: start (once per process) the daemon thread that ends the process
    ``ORPHAN_GRACE`` seconds after its main process died, if it is still there then.

    The main process is dead when the worker is re-parented (its parent is the main process with
    ``fork`` and ``spawn``) or when the main process's pid is gone or a zombie (with
    ``forkserver`` the parent is the fork server, which outlives the main process: torch's own
    watch never fires there)."""
    pid = os.getpid()
    main = multiprocessing.parent_process()
    if _watching[0] == pid or main is None:
        return
    _watching[0] = pid
    threading.Thread(target=_watch_main_process, args=(os.getppid(), main.pid), daemon=True,
                     name="resumable_iterable worker watch").start()


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:  # Linux: a zombie is dead, only not reaped yet
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _watch_main_process(parent_pid: int, main_pid: int) -> None:
    while os.getppid() == parent_pid and not _dead(main_pid):
        time.sleep(ORPHAN_POLL)
    time.sleep(ORPHAN_GRACE)
    os._exit(1)  # nothing is left to deliver to, and exiting normally may block for ever (see above)


def register() -> None:
    """Hand the hooks above to the loader layer (done once, when ``integrations.torch`` is imported)."""
    register_hooks(WorkerHooks(attach_base=attach_torch_base, publish_epoch=publish_epoch, shared_epoch=shared_epoch,
                               new_claims=new_claims, claim=claim, claimed=claimed,
                               prepare_for_workers=prepare_for_workers, adopt_unpickled=adopt_unpickled,
                               worker_started=worker_started, handoff=handoff, rng_state=rng_state, check_rng_state=decode_worker_rng,
                               set_rng_state=set_rng_state))
