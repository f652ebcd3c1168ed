"""A DataLoader worker's shared-memory arena: where the large buffers of the examples in its
shuffle-buffer logs (numpy arrays, the storages of torch tensors, the pixels of PIL images,
``bytes`` such as encoded images or audio) are copied once, for the main process to read in place.

The arena is carved into *extents* of size classes inside 32 MB blocks of shared memory. A
:class:`Record` is one example as the worker took it: its pickle (protocol 5) and its large
buffers' places in an extent. An extent goes back to the arena when its record dies, and is
reused once the main process has let go of every array it rebuilt from it: each block starts
with a *ledger*, one ``int64`` per extent, which only the main process writes (how many messages
naming the extent it has finished with; ``buffers.py`` keeps that side).
"""

from __future__ import annotations

import collections
import io
import itertools
import multiprocessing.util
import os
import pickle
from typing import Any, Callable

import numpy as np
import torch

from ...state import buffer_lock
from ...state_images import pil_image_class

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
            # run when the process ends (a DataLoader worker ends through multiprocessing, which
            # runs these, not atexit hooks)
            multiprocessing.util.Finalize(None, self.release, exitpriority=0)

    def release(self) -> None:
        """Let go of this process's blocks (at its exit). Python frees nothing at a process's exit:
        with torch's ``file_system`` sharing strategy a block's file in ``/dev/shm`` is removed
        when the last process that maps it lets go of it, so without this every DataLoader worker
        that ended left its blocks (32 MB and more each) in ``/dev/shm`` until the main process
        exited. The main process lets go of its side when the loader's iterator is freed
        (``buffers.forget_workers_when_freed``); arrays it still uses keep their block."""
        # never waited for: the queue's feeder thread may hold the lock, blocked on a pipe that
        # the main process no longer reads (a loader dropped part-way); the blocks then stay
        if not lock.acquire(blocking=False):
            return
        try:
            if self.pid != os.getpid():
                return
            blocks, self.blocks, self.free, self.retired = self.blocks, [], {}, {}
            for blk in blocks:
                blk.tensor = blk.mem = blk.ledger = None
        finally:
            lock.release()

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


def image_nbytes(image: Any) -> int:
    """About how many bytes a PIL image's pixels take."""
    return image.width * image.height * len(image.getbands())


def _rebuild_image(cls: type, state: list) -> Any:
    """A PIL image from its pickled state, its pixels read (copied) from ``state[4]``, any buffer."""
    image = cls.__new__(cls)
    image.__setstate__(state)
    return image


_PICKLING = ("__getstate__", "__setstate__", "__reduce__", "__reduce_ex__")
_pils_own: dict = {}  # image class -> whether PIL's own code pickles it


def pils_own_pickling(cls: type) -> bool:
    """Whether only PIL's classes define how ``cls`` pickles (``Image``, ``ImageFile`` and the
    plugins' classes such as ``JpegImageFile``): their state keeps the pixels at index 4 and reads
    them with ``frombytes``, which takes any buffer. A class of the user's that pickles its own
    way is left to it."""
    own = _pils_own.get(cls)
    if own is None:
        own = _pils_own[cls] = all(
            k.__module__.startswith("PIL.") for k in cls.__mro__[:-1] if any(m in k.__dict__ for m in _PICKLING))
    return own


def _rebuild_typed_storage(dtype: Any, data: Any) -> Any:
    """A CPU ``TypedStorage`` of ``dtype`` holding ``data`` (see :func:`_untyped_holding`)."""
    return torch.storage.TypedStorage(wrap_storage=_untyped_holding(data), dtype=dtype, _internal=True)


def _untyped_holding(data: Any) -> Any:
    """A CPU ``UntypedStorage`` holding ``data``: a storage of its own (as torch's pickle makes) for
    the ``bytes`` or ``bytearray`` of an in-band pickle or of a record read in the worker; over the
    memory of an array (an example's extent of the worker's shared memory in the main process),
    which it keeps alive and reads in place, like a numpy array."""
    if isinstance(data, np.ndarray):
        return torch.from_numpy(data.view(np.uint8).reshape(-1)).untyped_storage()
    if len(data):  # a copy (one memcpy; a storage numpy ever saw cannot be resized)
        return torch.UntypedStorage.from_buffer(data, dtype=torch.uint8)
    return torch.UntypedStorage(0)


def _storage_buffer(untyped: Any, part: Any = None) -> pickle.PickleBuffer:
    """The bytes of a CPU ``UntypedStorage`` as a pickle buffer (no copy); only those of the
    contiguous tensor ``part`` of it, if given."""
    n = untyped.nbytes()
    flat = torch.empty(0, dtype=torch.uint8)
    if n:
        flat = flat.set_(untyped, 0, (n,))
    mem = flat.numpy()
    if part is not None:
        size = part.element_size()
        mem = mem[part.storage_offset() * size:(part.storage_offset() + part.numel()) * size]
    return pickle.PickleBuffer(mem)


def _part_of_larger_storage(t: Any) -> bool:
    """Whether tensor ``t`` (of the exact class ``torch.Tensor``) is a plain contiguous CPU view of
    part of a larger storage, such as one row of a batched ``map``'s output (a tokenizer called
    with ``return_tensors="pt"``): torch's pickle would send the whole storage with each row."""
    return (t.layout is torch.strided and t.device.type == "cpu" and not t.is_nested
            and t.untyped_storage().nbytes() > t.numel() * t.element_size()  # (the usual case stops here)
            and not t.requires_grad and not t.is_conj() and not t.is_neg() and not t.is_quantized
            and t.dtype not in _whole_storage_dtypes() and t.is_contiguous() and not t.__dict__)


def _whole_storage_dtypes() -> tuple:
    return (torch.uint16, torch.uint32, torch.uint64)  # torch pickles these by an untyped storage


def _rebuild_part(dtype: Any, shape: tuple, data: Any) -> Any:
    """A contiguous tensor of ``dtype`` and ``shape`` over a storage holding ``data``."""
    return torch.empty((0,), dtype=dtype).set_(_untyped_holding(data), 0, shape)


class _Pickler(pickle.Pickler):
    """Pickles with the pixels of large PIL images and the bytes of torch tensors' CPU storages as
    out-of-band buffers. PIL's own pickle puts the pixels in band, so they would go through the
    pipe; torch's own pickle of a tensor (outside its ``ForkingPickler`` reductions, which move it
    to shared memory) writes each storage with ``torch.save`` into a ``bytes`` value, some hundred
    microseconds a tensor in the worker and as much to load it in the main process. The tensor
    itself still pickles as torch pickles it (dtype, shape, strides, offset, ``requires_grad``,
    subclasses such as ``nn.Parameter``); only its storage's bytes travel as a buffer, rebuilt as a
    storage over that buffer."""

    def reducer_override(self, obj: Any) -> Any:
        t = type(obj)
        if t is torch.Tensor and _part_of_larger_storage(obj):
            return _rebuild_part, (obj.dtype, tuple(obj.shape), _storage_buffer(obj.untyped_storage(), obj))
        if t is torch.storage.TypedStorage:
            untyped = obj._untyped_storage  # (its own ``device`` warns that TypedStorage is deprecated)
            if untyped.device.type != "cpu":
                return NotImplemented
            return _rebuild_typed_storage, (obj.dtype, _storage_buffer(untyped))
        image = pil_image_class()
        if image is None or not isinstance(obj, image):
            return NotImplemented
        cls = type(obj)
        if obj.width * obj.height * 4 < SHARED_MIN_BYTES or not pils_own_pickling(cls):
            return NotImplemented  # small for sure (at most 4 bytes a pixel): no export of its pixels twice
        state = obj.__getstate__()  # [info, mode, size, palette, pixels, ...]
        if len(state[4]) < SHARED_MIN_BYTES:
            return NotImplemented
        state[4] = pickle.PickleBuffer(state[4])
        return _rebuild_image, (cls, state)


class _OutOfBand:
    """A large ``bytes`` value pickled as an out-of-band buffer (pickle keeps ``bytes`` in band)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def __reduce_ex__(self, protocol: int) -> tuple:
        return bytes, (pickle.PickleBuffer(self.data),)


#: lists longer than this are not searched for large ``bytes`` (a list of token ids holds none)
SEARCHED_LIST = 64
_SEARCHED = frozenset((bytes, dict, list, tuple))  # the types large_bytes_out_of_band looks into


def large_bytes_out_of_band(obj: Any, depth: int = 0) -> Any:
    """``obj`` with its large ``bytes`` values (in dicts, short lists and tuples, a few levels deep)
    marked to be pickled out of band; the same object when it holds none."""
    t = type(obj)
    if t is bytes:
        return _OutOfBand(obj) if len(obj) >= SHARED_MIN_BYTES else obj
    if depth >= 4:
        return obj
    if t is dict:
        new = None
        for k, v in obj.items():
            w = large_bytes_out_of_band(v, depth + 1) if type(v) in _SEARCHED else v
            if w is not v:
                if new is None:
                    new = obj.copy()
                new[k] = w
        return obj if new is None else new
    if (t is list or t is tuple) and len(obj) <= SEARCHED_LIST:
        items = [large_bytes_out_of_band(v, depth + 1) if type(v) in _SEARCHED else v for v in obj]
        if any(w is not v for w, v in zip(items, obj)):
            return items if t is list else tuple(items)
    return obj


def dumps(obj: Any, buffer_callback: Callable[[pickle.PickleBuffer], bool] | None = None) -> bytes:
    """``pickle.dumps(obj, protocol=5, buffer_callback=...)``, with the pixels of large PIL images
    and the bytes of torch tensors' storages as buffers too (in band without ``buffer_callback``)."""
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=buffer_callback).dump(obj)
    return out.getvalue()


def record_of(example: Any) -> Record | None:
    """``example`` pickled, its large buffers (numpy arrays, torch tensors' storages, PIL images'
    pixels, ``bytes``) copied
    into an extent; ``None`` when it has none (it then travels in band)."""
    raws: list = []

    def out_of_band(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < SHARED_MIN_BYTES:
            return True  # in band
        raws.append(raw)
        return False

    data = dumps(large_bytes_out_of_band(example), out_of_band)
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
