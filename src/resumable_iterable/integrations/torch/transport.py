"""How a DataLoader worker's batches reach the main process: small tensors travel inside the
message, by value, instead of through shared memory.

torch sends every tensor a worker puts on its queue through shared memory: the worker moves the
tensor's storage into a new shared-memory segment, and the main process receives it with a socket
handshake that passes the file descriptor (torch's default ``file_descriptor`` strategy) or opens
it by name (``file_system``). That is the right way to move megabytes. For the 256-byte ``id``
column of a batch of 32 text rows it costs some hundred times the copy, and it is paid in the main
process, which all workers share: there it took about half the time of a text pipeline, and the
loader moved no more than 1-2k batches a second whatever the workers did.

:class:`InlineSmallTensors` wraps the loader's ``collate_fn``. In a worker it pickles the collated
batch at once with torch's own pickler for the queue (``ForkingPickler`` and torch's reductions),
changing one thing: the storage of a CPU tensor, when it holds at most ``max_bytes`` (and at most
``max(INLINE_BUDGET, max_bytes)`` bytes of such storages per batch), is pickled as its bytes
instead of being moved into shared memory. Everything else is torch's: the tensors rebuilt in the
main process have the same values, dtype, shape, strides and storage offset, tensors that shared
a storage still share one, ``nn.Parameter``, ``requires_grad``, nested and sparse tensors and
tensor subclasses pickle as torch pickles them, and the batch's containers (of any kind:
dataclasses, ``BatchEncoding``, named tuples, ``PackedSequence``) are rebuilt by pickle, an object
met twice as one object. The only difference a user can see: a small tensor's storage is not in
shared memory (``is_shared()`` is ``False``). The worker's queue then carries the batch's pickle;
the main process unpickles it as the batch. If pickling fails here (an object that cannot be
pickled), the batch is handed to the queue as it is, so torch reports the error as it would have.

Measured on 2 cores, one tensor per batch, 2 workers: 2.8-3.2x the batches per second up to
16 KB, 2.2x at 64 KB, 1.3x at 256 KB, half from 1 MB on (with ``file_system``: 2.0-2.4x, 1.5x,
1.1x, 0.5x). A small tensor that is a view into a large storage (a slice of a big array) goes
through shared memory with its whole storage, as in torch.

The dataset gets the same in any DataLoader (torch's, torchdata's), whose ``collate_fn`` it
cannot wrap: in a worker, each ``dict`` it yields is handed out as a :class:`WorkerDict` (the
loader layer's ``handoff`` hook, :func:`handoff`), a ``dict`` whose copies stay ``WorkerDict``
(``default_convert`` and ``default_collate`` build the batch from a copy of the first item) and
which the worker's queue pickles with :func:`inline_small_tensors`. The main process receives a
plain ``dict``, as it would have. A numpy batch of three small columns then crosses without any
shared-memory handshake (the loader makes each array a tensor of its own storage: three handshakes
per batch before, 5-6x fewer batches a second). A loader told not to send them by value over a
dataset that is not ours but iterates ours (a ``ChainDataset``) starts its workers with
:class:`WithoutHandoff`, in which our datasets hand their dicts out as they are.
"""

from __future__ import annotations

import io
import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.multiprocessing  # noqa: F401 - registers torch's reductions with ForkingPickler
from torch.utils.data import get_worker_info

#: storages of at most this many bytes travel inside the worker's message by default
INLINE_MAX_BYTES = 64 << 10
#: at most this many bytes of storages travel inside one message (or one storage's limit, if larger);
#: the rest go through shared memory
INLINE_BUDGET = 256 << 10


def check_inline_bytes(value: Any) -> int:
    """``value`` if it is a valid ``inline_tensor_bytes`` (an ``int`` >= 0), else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"inline_tensor_bytes must be a number of bytes (an int >= 0, 0 turns sending "
                         f"small tensors by value off), got {value!r}")
    return value


def storage_from_bytes(data: bytes) -> torch.UntypedStorage:
    """A CPU storage pickled by :class:`_InliningPickler`: a new storage holding ``data``."""
    t = torch.empty(len(data), dtype=torch.uint8)
    if data:
        t.numpy()[:] = np.frombuffer(data, dtype=np.uint8)
    return t.untyped_storage()


def storage_bytes(storage: torch.UntypedStorage) -> bytes:
    """The bytes a CPU storage holds."""
    n = storage.nbytes()
    if n == 0:
        return b""
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (n,)).numpy().tobytes()


class _InliningPickler(ForkingPickler):
    """torch's pickler for the worker's queue, but small CPU storages are pickled by value."""

    def __init__(self, file: io.BytesIO, max_bytes: int, budget: int):
        super().__init__(file)
        self.max_bytes, self.left = max_bytes, budget

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is WorkerDict:  # its storages are this pickler's already
            return dict, (dict(obj),)
        if type(obj) is not torch.UntypedStorage or obj.device.type != "cpu":
            return NotImplemented
        n = obj.nbytes()
        if n > self.max_bytes or n > self.left:
            return NotImplemented
        self.left -= n
        return storage_from_bytes, (storage_bytes(obj),)


class _Pickled:
    """A batch already pickled in the worker; it unpickles as the batch itself."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def __reduce__(self):
        return pickle.loads, (self.data,)


def inline_small_tensors(batch: Any, max_bytes: int = INLINE_MAX_BYTES, budget: int = INLINE_BUDGET) -> Any:
    """``batch`` pickled now with the storages of its small tensors by value (see the module's
    docstring), as an object that unpickles as the batch; ``batch`` itself when it cannot be pickled
    (torch's own path then reports why). The pickle is kept even when nothing went by value:
    pickling a large tensor hands its shared memory to the main process, once per message."""
    out = io.BytesIO()
    pickler = _InliningPickler(out, max_bytes, max(budget, max_bytes))
    try:
        pickler.dump(batch)
    except Exception:
        return batch
    return _Pickled(out.getvalue())


class InlineSmallTensors:
    """A ``collate_fn`` that calls ``collate_fn`` and, in a DataLoader worker, lets the small tensors
    of its result travel to the main process by value (:func:`inline_small_tensors`). In the main
    process it returns ``collate_fn``'s result untouched."""

    def __init__(self, collate_fn: Callable[[Any], Any], max_bytes: int = INLINE_MAX_BYTES):
        self.collate_fn = collate_fn
        self.max_bytes = max_bytes

    def __call__(self, batch: Any) -> Any:
        out = self.collate_fn(batch)
        if get_worker_info() is None or type(out) is _Pickled:  # main process, or wrapped twice
            return out
        if type(out) is WorkerDict and self.max_bytes == INLINE_MAX_BYTES:
            return out  # the queue pickles it so (once, not here and again there)
        return inline_small_tensors(out, self.max_bytes)

    def __repr__(self) -> str:
        return f"InlineSmallTensors({self.collate_fn!r}, max_bytes={self.max_bytes})"


class WorkerDict(dict):
    """A ``dict`` item of the dataset in a DataLoader worker (see the module's docstring): the
    worker's queue sends its small tensors by value, and the main process receives a plain ``dict``."""

    __slots__ = ()


def _holds_tensor(value: Any, depth: int = 2) -> bool:
    """Whether ``value`` is a tensor or holds one (``depth`` levels down): any value of a dict, the
    first item of a list or tuple (a row's 2 048 token ids are not looked through one by one; a
    tensor after other items then crosses as torch sends it)."""
    if isinstance(value, torch.Tensor):
        return True
    if depth == 0:
        return False
    t = type(value)
    if t is list or t is tuple:
        return len(value) > 0 and _holds_tensor(value[0], depth - 1)
    if isinstance(value, dict):
        return any(_holds_tensor(v, depth - 1) for v in value.values())
    return False


def _reduce_worker_dict(item: WorkerDict) -> tuple:
    """How the worker's queue pickles a :class:`WorkerDict`: a plain ``dict``, its small tensors by value."""
    plain = dict(item)
    if _holds_tensor(plain):
        packed = inline_small_tensors(plain)
        if type(packed) is _Pickled:
            return packed.__reduce__()
    return dict, (plain,)  # (without tensors, or unpicklable: as pickle sends a dict)


ForkingPickler.register(WorkerDict, _reduce_worker_dict)


#: ``False`` in the DataLoader workers of a loader told not to send small tensors by value whose
#: dataset is not ours (set by :class:`WithoutHandoff`): our datasets iterated there, inside it,
#: then hand their dicts out as they are
_handoff_here = True


def handoff(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, in a DataLoader worker: each ``dict`` as a :class:`WorkerDict` (``items`` as they
    are in a worker started by :class:`WithoutHandoff`)."""
    return _handed_off(items) if _handoff_here else items


def _handed_off(items: Iterator[Any]) -> Iterator[Any]:
    """Closing this closes ``items`` at once (a pass left part-way puts its pipeline back as it
    would without the handoff)."""
    try:
        for x in items:
            yield WorkerDict(x) if type(x) is dict else x
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


class WithoutHandoff:
    """The ``worker_init_fn`` of a loader told not to send small tensors by value
    (``ri.StatefulDataLoader(inline_tensor_bytes=0)``) whose dataset is not ours but may iterate
    ours (``torch.utils.data.ChainDataset``, a dataset of the user's): in its workers our datasets
    hand their dicts out as they are, as ``ds.session.small_tensors_by_value = False`` would on each
    of them. Then it calls ``worker_init_fn`` (the user's, or ``None``)."""

    def __init__(self, worker_init_fn: Callable[[int], Any] | None):
        self.worker_init_fn = worker_init_fn

    def __call__(self, worker_id: int) -> None:
        global _handoff_here
        _handoff_here = False  # this worker process only; it serves this loader alone
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)

    def __repr__(self) -> str:
        return f"WithoutHandoff({self.worker_init_fn!r})"
