"""The state of a shuffle buffer in a DataLoader worker: a log per change, sent as the writes since
the last one sent.

torchdata's ``StatefulDataLoader`` asks every worker for its dataset's ``state_dict()`` after
every batch and sends the values that changed to the main process. There a shuffle buffer's state
is one value, a :class:`BufferLog` (compared by identity: not sent when unchanged), which the
DataLoader's pickler sends as the writes since the last log of the same buffer it sent
(``integrations/torch/buffers.py`` installs that reducer and the packer that takes examples by
value); the main process builds the buffer's new list on the one it holds. Nothing here imports
torch: without it, a log refers to the examples themselves and pickles as the whole list.

* :func:`take_log` - the log of a buffer (``state_buffers.ExampleChunks`` and ``PositionList``
  record their writes in ``pending`` for it);
* :class:`BufferTracker` - what a buffer has logged and what was sent of it;
* :func:`set_buffer_packer`, :func:`live_buffer_ids`, :data:`buffer_lock` - for the integration.
"""

from __future__ import annotations

import collections
import itertools
import threading
import weakref
from typing import Any


class BufferLog:
    """A shuffle buffer's state taken in a DataLoader worker (``state["buffers"][k]``): one
    unchanging value per state, compared by identity, so torchdata's ``StatefulDataLoader`` (which
    sends only the values that changed since the worker's previous state) sends it once per
    change and leaves it out when nothing changed.

    ``refs`` holds, slot by slot, what the packer (:func:`set_buffer_packer`) made of each
    example when it entered the buffer; :meth:`entries` gives the examples. Plain pickling
    (``torch.save``, ``copy.deepcopy``) gives a plain list of them; the DataLoader's own pickler
    sends only the writes since the previous state it sent of the same buffer, and the main
    process rebuilds the list (``integrations/torch/buffers.py``)."""

    __slots__ = ("tracker", "seq", "refs")

    def __init__(self, tracker: "BufferTracker", seq: int, refs: tuple):
        self.tracker, self.seq, self.refs = tracker, seq, refs

    def __len__(self) -> int:
        return len(self.refs)

    def entries(self) -> list:
        return self.tracker.packer.decode(self.refs)

    def __reduce__(self):
        return (list, (self.entries(),))


class BufferTracker:
    """What a worker's buffer has described so far: ``unsent`` holds ``(seq, payload, full)`` for
    each :class:`BufferLog` not yet sent, in order (``payload``: the packer's form of its new
    writes, or a :class:`Reorder` before them; ``full``: they are the whole buffer); ``main_seq``
    is the ``seq`` of the last log sent (what the main process now holds), and ``chain`` says
    whether ``unsent`` holds every log taken after that one (so that a later log can be sent as
    the writes since)."""

    __slots__ = ("uid", "packer", "unsent", "main_seq", "chain", "__weakref__")
    #: a buffer whose logs are taken but never sent keeps at most this many of them; the next log
    #: sent is then the whole buffer
    MAX_UNSENT = 256

    def __init__(self, packer: Any):
        self.uid = next(_buffer_numbers)
        self.packer = packer
        self.unsent: collections.deque = collections.deque()
        self.main_seq = 0
        self.chain = True
        with buffer_lock:  # the feeder thread may be listing them
            _live_buffers[self.uid] = self
            _live_ids[0] = None

    def add(self, seq: int, payload: Any, full: bool) -> None:
        with buffer_lock:
            if full:  # what came before it does not matter to any later log
                self.unsent.clear()
            elif len(self.unsent) >= self.MAX_UNSENT:
                self.unsent.clear()
                self.chain = False
            self.unsent.append((seq, payload, full))

    def take(self, seq: int) -> tuple[Any, list] | None:
        """For sending log ``seq``: ``(base, payloads)``, the writes since log ``base`` (``None``:
        from an empty buffer) that make it, or ``None`` when only the whole buffer can say it.
        The caller holds :data:`buffer_lock` and then sends it."""
        found = []
        unsent = self.unsent
        while unsent and unsent[0][0] <= seq:
            found.append(unsent.popleft())
        listed = bool(found) and found[-1][0] == seq
        out = None
        if seq > self.main_seq and listed:
            fulls = [k for k, e in enumerate(found) if e[2]]
            if fulls:
                out = None, [e[1] for e in found[fulls[-1]:]]
            elif self.chain:
                out = self.main_seq, [e[1] for e in found]
        self.chain = listed  # the logs after this one are all still unsent
        self.main_seq = seq
        return out


class SharedRefs:
    """The default packer (no DataLoader support installed): a log refers to the examples
    themselves, so the live buffer hands out copies of those (``by_value`` is false)."""

    by_value = False

    @staticmethod
    def pack(items: list) -> tuple[Any, list]:
        return None, items[1::2]

    @staticmethod
    def decode(refs: tuple) -> list:
        return list(refs)


_buffer_packer: list = [SharedRefs]
#: whether this process has taken a buffer log (a DataLoader worker): only then do shuffle loops
#: record their writes in ``pending``
_journaling: list = [False]


def journaling() -> bool:
    return _journaling[0]


#: logs are taken in a worker's main thread and sent from the loader's feeder thread, where the
#: packer's records may die too (``integrations/torch/buffers.py`` uses this lock for its arena):
#: reentrant, as a record may die inside a locked section when the cyclic collector runs there
buffer_lock = threading.RLock()
#: numbers unique in the process, for buffers and their logs
_buffer_numbers = itertools.count(1)
_log_numbers = itertools.count(1)
#: the trackers of this process's buffers that still exist (a message names them, so that the main
#: process forgets the buffers of passes that ended)
_live_buffers: "weakref.WeakValueDictionary[int, BufferTracker]" = weakref.WeakValueDictionary()
#: ``live_buffer_ids()`` as last listed (every message names them); ``None`` once a buffer came, and
#: a buffer that went shows as a shorter ``_live_buffers``
_live_ids: list = [None]


def live_buffer_ids() -> tuple:
    """The buffers of this process that still exist (a message names them)."""
    ids = _live_ids[0]
    if ids is None or len(ids) != len(_live_buffers):
        with buffer_lock:
            ids = _live_ids[0] = tuple(_live_buffers.keys())
    return ids


def set_buffer_packer(packer: Any) -> None:
    """Install the packer of buffer logs: ``pack([slot, example, ...]) -> (payload, refs)`` takes
    the examples *by value* when ``packer.by_value`` (``integrations/torch/buffers.py`` pickles
    them at once), and ``decode(refs) -> examples``. Optional: ``prefers_positions(example)``,
    whether logging such examples as where they came from is cheaper than sending them (a
    shuffle that can re-read its examples asks it about the first example of a pass)."""
    _buffer_packer[0] = packer


def prefers_positions(example: Any) -> bool:
    """Whether the installed packer would rather log examples like ``example`` as positions."""
    ask = getattr(_buffer_packer[0], "prefers_positions", None)
    return ask is not None and bool(ask(example))


#: the slots a buffer kept in a list (``state_buffers.ExampleChunks``, ``PositionList``) declares
#: for :class:`Logged` (a mixin cannot hold slots beside ``list``'s layout)
LOG_SLOTS = ("pending", "recording", "refs", "tracker", "last", "perm")


class Logged:
    """What a buffer needs to be logged: ``pending`` (slot -> example written since the last log,
    filled by the node's loop while ``recording``), ``refs``, ``tracker`` and ``last`` (kept by
    :func:`take_log` from one log to the next)."""

    __slots__ = ()

    def init_log(self) -> None:
        self.pending: dict = {}
        self.recording = False
        self.refs: list | None = None
        self.tracker: BufferTracker | None = None
        self.last: BufferLog | None = None
        self.perm: Reorder | None = None  # set by reordered(), sent by the next log

    def reordered(self, order: list | None = None) -> None:
        """The node permuted the buffer (the final permutation before it drains): slot ``k`` now
        holds what slot ``order[k]`` held. The next log says so as a :class:`Reorder` of what the
        receiver already holds, plus the writes not logged yet (moved with their slots), instead
        of every slot again: a buffer of large examples would otherwise cross to the main process
        a second time at the end of every pass. Without ``order`` (or when a slot's content is not
        known from the last log) the next log holds every slot."""
        refs, pending = self.refs, self.pending
        self.perm = None
        if order is None or refs is None or not self.recording:
            pending.clear()
            self.refs = None
            return
        n = len(refs)
        source: list = []
        moved: dict = {}
        for k, i in enumerate(order):
            if i in pending:
                moved[k] = pending[i]
                source.append(-1)
            elif i < n:
                source.append(i)
            else:  # not logged and not recorded: only the whole buffer can say it
                pending.clear()
                self.refs = None
                return
        pending.clear()  # in place: the node's loop holds this dict
        pending.update(moved)
        self.refs = [None if i < 0 else refs[i] for i in source]
        self.perm = Reorder(source)


class Reorder:
    """A payload of a log after :meth:`Logged.reordered`, sent before its writes: the receiver's
    slot ``k`` takes what its slot ``source[k]`` held (``-1``: written by the writes after it)."""

    __slots__ = ("source",)

    def __init__(self, source: list):
        self.source = source

    def apply(self, slots: list) -> list:
        """``slots`` (the receiver's list, as of the log before) reordered, a new list."""
        return [None if i < 0 else slots[i] for i in self.source]


def take_log(buf: Any, n: int, every: Any) -> BufferLog:
    """A :class:`BufferLog` of ``buf`` (``n`` items; ``every()`` iterates them in slot order),
    which records its writes in ``buf.pending`` while ``buf.recording``; ``buf.refs``,
    ``buf.tracker`` and ``buf.last`` are kept on ``buf`` from one log to the next."""
    _journaling[0] = True
    refs, pending, last, perm = buf.refs, buf.pending, buf.last, buf.perm
    buf.perm = None
    full = refs is None or not buf.recording
    if full:  # the first log, a reorder not followed, or the writes were not recorded: every slot
        refs = buf.refs = [None] * n
        writes = [x for kv in enumerate(every()) for x in kv]
    elif pending:
        writes = [x for kv in pending.items() if kv[0] < n for x in kv]
    elif perm is None and last is not None and len(last.refs) == n:
        return last  # unchanged
    else:
        writes = []
    pending.clear()  # in place: the node's loop holds this dict
    if len(refs) > n:
        del refs[n:]  # popped while draining
    elif len(refs) < n:
        refs.extend([None] * (n - len(refs)))  # filled: slots are written in order
    packer = _buffer_packer[0]
    tracker = buf.tracker
    if tracker is None or tracker.packer is not packer:
        tracker = buf.tracker = BufferTracker(packer)
    payload, made = packer.pack(writes)
    for i, r in zip(writes[::2], made):
        refs[i] = r
    seq = next(_log_numbers)
    if perm is not None and not full:
        tracker.add(seq, perm, False)  # applied before the writes of the same log
    tracker.add(seq, payload, full)
    buf.last = log = BufferLog(tracker, seq, tuple(refs))
    return log
