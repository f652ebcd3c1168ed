"""Examples held in a state: the live containers nodes keep them in, and how they are copied.

* :class:`ExampleList` - examples copied shallowly by every state copy (``copy_state``).
* :class:`HeldExamples` - one example (or ``None``) per position, with flags telling the node
  which of them a state copy may share.
* :class:`ExampleChunks` / :class:`DroppedChunks` - a shuffle buffer in copy-on-write chunks;
  inside a DataLoader worker it is described as a *journal* of unchanging segments instead, so
  that torchdata's ``StatefulDataLoader`` (which sends only the values that changed since the
  worker's previous state) sends each buffered example about once (:func:`inline_buffers` turns
  a journal back into a buffer when a state is loaded).
* :func:`copy_example` - the copy a node yields when a state may share the example, so that a
  user's function editing it in place cannot change a state taken earlier.
"""

from __future__ import annotations

import copy
import datetime as _dt
import decimal
import itertools
from typing import Any

import numpy as np


class ExampleList(list):
    """A list of examples inside a state; :func:`copy_state` copies it shallowly."""

    __slots__ = ()


CHUNK_BITS = 6
CHUNK = 1 << CHUNK_BITS  # examples per chunk of a shuffle buffer (buffer_state="examples")
#: a buffer journal (see :meth:`ExampleChunks.journal`) keeps at most this many segments, and
#: rewrites a segment once at most ``segment.compact`` of its entries are still current
MAX_SEGMENTS = 24


class HeldExamples(list):
    """Examples a node holds one per position (``None`` where it holds none), e.g. the example
    ``interleave_datasets`` read ahead from each input. :func:`copy_state` copies it shallowly and
    clears ``owned`` (one flag per position), so the node knows which examples a state copy may
    share and yields a copy of those (:func:`copy_example`)."""

    __slots__ = ("owned",)

    def __init__(self, items: Any = ()):
        super().__init__(items)
        self.owned = bytearray(len(self))


class JournalList(list):
    """A list of a buffer journal (one segment): ``[slot, example, slot, example, ...]``, never
    changed once made. A packer (:func:`set_journal_packer`) may hold an example as its own record
    of it: :meth:`entries` gives the examples. It pickles as a plain list of them."""

    __slots__ = ()
    #: rewritten once at most this fraction of its entries are current: writing an example again
    #: costs as much as the first time here (a packer's segments may say otherwise)
    compact = 0.25

    def entries(self) -> list:
        return list(self)

    def __reduce__(self):
        return (list, (self.entries(),))


_journal_packer: list = [None]
#: whether this process has taken a journal (a DataLoader worker): only then do shuffle loops
#: record their writes in ``pending``
_journaling: list = [False]


def journaling() -> bool:
    return _journaling[0]
#: segment numbers, unique in the process: a buffer made again (a new pass, a load) never reuses
#: the key of a segment that a DataLoader's record of the worker's previous state still holds
_segment_numbers = itertools.count(1)


def set_journal_packer(pack: Any) -> None:
    """Install ``pack(list) -> JournalList``, which makes each segment of a buffer journal and
    takes its examples *by value* (``integrations/torch/buffers.py`` pickles them at once, for DataLoader
    workers). Then a journal does not share examples with the live buffer. ``pack`` is also given
    the entries of a compacted segment that are still current, as that segment holds them."""
    _journal_packer[0] = pack


class ExampleChunks(list):
    """A live shuffle buffer held as chunks: ``[[ex, ...], [ex, ...], ...]``, every chunk holding
    :data:`CHUNK` examples except the last.

    Two ways to copy it, both cheap:

    * :func:`copy_state` (``state_dict()`` in a process) copies it in O(chunks): the copy shares
      the chunk lists, and ``owned`` (one flag per chunk, cleared by every copy) tells the live
      buffer which chunks it may still write in place - it copies a shared chunk before writing
      to it (copy-on-write). Loading flattens and re-chunks, so a state's chunking is free.
    * :meth:`journal` (``state_dict()`` in a DataLoader worker) describes the buffer as numbered
      *segments* of ``[slot, example, ...]`` writes, each an unchanging list, so that torchdata's
      ``StatefulDataLoader`` (which sends only the values that changed since the worker's
      previous state) sends each example about once, not once per batch.

    In a process that takes journals, the node records each write of slot ``i`` in ``pending``
    (slot -> example), the writes since the last journal; ``recording`` says whether its running
    loop does (a loop started before the process's first journal does not: its journals then
    describe every slot). ``born[i]`` is the copy generation in which slot ``i``'s example entered;
    every copy that shares examples starts a new generation (``gen``). An example older than the
    current generation may be shared with a state already taken, so the node hands out a copy
    of it (:func:`copy_example`): what the consumer does to it in place cannot reach that state.
    """

    __slots__ = ("owned", "gen", "born", "pending", "recording", "slot_seg", "log", "seg_live", "seg_size")

    def __init__(self, chunks: Any = ()):
        super().__init__(chunks)
        self.owned = bytearray(len(self))
        self.gen = 0
        self.born: list | None = None  # built by start(): [-1] * n, every example counted as shared
        self.pending: dict = {}
        self.recording = False
        self.slot_seg: list | None = None  # journal: the segment holding each slot's example
        self.log: dict = {}  # journal: "<seq>" -> segment
        self.seg_live: dict = {}  # journal: seq -> entries still current
        self.seg_size: dict = {}

    def start(self) -> list:
        """``born`` for the node's loop; examples already present count as shared (a loaded state
        holds them)."""
        if self.born is None:
            self.born = [-1] * sum(map(len, self))
        return self.born

    def reordered(self) -> None:
        """The node rewrote the whole buffer (the final permutation): the next journal starts over."""
        self.pending.clear()
        self.slot_seg = None

    def journal(self) -> dict:
        """``{"log": {"<seq>": [slot, ex, slot, ex, ...], ...}, "size": n}``: example ``i`` of the
        buffer is the last one written to slot ``i`` in ``seq`` order; slots from ``size`` on are
        gone. A segment, once made, is never changed; one whose entries are mostly overwritten is
        dropped and its current entries written again in the new segment."""
        _journaling[0] = True
        if not self.recording:
            self.slot_seg = None  # the writes were not recorded: describe every slot
        n = sum(map(len, self))
        pack = _journal_packer[0] or JournalList
        pending, slot_seg, seg_live = self.pending, self.slot_seg, self.seg_live
        new = next(_segment_numbers)
        writes: dict = {}
        if slot_seg is None:  # the first journal, or after a reorder: every slot
            slot_seg = self.slot_seg = [new] * n
            self.log.clear()
            seg_live.clear()
            self.seg_size.clear()
            writes = {i: ex for i, ex in enumerate(ex for ch in self for ex in ch)}
        else:
            for i in range(n, len(slot_seg)):  # popped while draining
                seg_live[slot_seg[i]] -= 1
            del slot_seg[n:]
            for i, ex in pending.items():
                if i >= n:
                    continue
                if i < len(slot_seg):
                    seg_live[slot_seg[i]] -= 1
                    slot_seg[i] = new
                else:
                    slot_seg.append(new)  # filling: slots are written in order
                writes[i] = ex
            size = self.seg_size
            doomed = {s for s, live in seg_live.items() if live <= size[s]}
            extra = len(seg_live) - len(doomed) + 1 - MAX_SEGMENTS
            if extra > 0:
                doomed.update(sorted((s for s in seg_live if s not in doomed), key=seg_live.__getitem__)[:extra])
            for s in doomed:
                old = self.log.pop(str(s))
                for p in range(0, len(old), 2):
                    i = old[p]
                    if i < n and slot_seg[i] == s:  # still current: write it again, as the
                        writes[i] = old[p + 1]  # segment holds it (the packer's record, if any)
                        slot_seg[i] = new
                del seg_live[s], size[s]
        pending.clear()  # in place: the node's loop holds this dict
        if writes:
            seg = self.log[str(new)] = pack([x for kv in writes.items() for x in kv])
            seg_live[new] = len(writes)
            self.seg_size[new] = len(writes) * seg.compact  # the live count at which it is rewritten
        if pack is JournalList:
            self.gen += 1  # the journal shares the examples: the live buffer must not hand them out
        return {"log": dict(self.log), "size": n}


class DroppedChunks(ExampleChunks):
    """A chunked shuffle buffer that state copies leave out (``buffer_state="drop"``, HF's lossy
    behaviour): its copies are empty, so the live buffer never shares a chunk or an example."""

    __slots__ = ()



def inline_buffers(state: Any) -> Any:
    """The usual layout of a state taken in a DataLoader worker; any other value is returned as
    it is. There ``state_dict()`` leaves in the node's ``buffer`` field a key ``k`` and puts the
    buffer's journal (:meth:`ExampleChunks.journal`) in ``state["buffers"]`` as ``"k/size"`` (its
    size) and ``"k/<seq>"`` (its segments). Raises ``ValueError`` naming a malformed journal."""
    if not isinstance(state, dict) or "buffers" not in state:
        return state
    buffers = state["buffers"]
    if not isinstance(buffers, dict):
        raise ValueError(f"state 'buffers' must be an object, got {type(buffers).__name__}")
    journals: dict = {}
    for name, value in buffers.items():
        ref, _, part = name.partition("/") if type(name) is str else ("", "", "")
        if not ref or not (part == "size" or part.isdigit()):
            raise ValueError(f"state 'buffers' holds {name!r}, which is neither '<buffer>/size' nor "
                             "'<buffer>/<segment>'")
        j = journals.setdefault(ref, {"log": {}})
        if part == "size":
            j["size"] = value
        else:
            j["log"][part] = value
    used: set = set()

    def walk(node: Any, where: str) -> Any:
        if not isinstance(node, dict):
            return node
        new = dict(node)
        ref = node.get("buffer")
        if type(ref) is str:
            if ref not in journals or ref in used:
                raise ValueError(f"{where}: 'buffer' refers to {ref!r}, which is not a buffer of the state")
            used.add(ref)
            new["buffer"] = replay_journal(journals[ref], f"state 'buffers' {ref!r}")
        kids = node.get("children")
        if isinstance(kids, list):
            new["children"] = [walk(k, f"{where}/{i}") for i, k in enumerate(kids)]
        return new

    tree = walk(state.get("state"), "state")
    if used != set(journals):
        raise ValueError(f"state 'buffers' holds buffers {sorted(set(journals) - used)} that no node refers to")
    out = {k: v for k, v in state.items() if k != "buffers"}
    if "state" in state:
        out["state"] = tree
    return out


def replay_journal(journal: Any, where: str) -> list:
    """The examples a buffer journal (:meth:`ExampleChunks.journal`) describes, in order."""
    if not isinstance(journal, dict) or set(journal) != {"log", "size"}:
        raise ValueError(f"{where}: a buffer journal must be an object with 'log' and 'size'")
    log, size = journal["log"], journal["size"]
    if not isinstance(log, dict):
        raise ValueError(f"{where}: 'log' must be an object")
    if type(size) is not int or size < 0:
        raise ValueError(f"{where}: 'size' must be a non-negative integer, got {size!r}")
    for k in log:
        if type(k) is not str or not k.isdigit():
            raise ValueError(f"{where}: 'log' keys must be decimal numbers, got {k!r}")
    slots: dict = {}
    for seq, seg in sorted(log.items(), key=lambda kv: int(kv[0])):
        if isinstance(seg, JournalList):
            seg = seg.entries()
        if not isinstance(seg, list) or len(seg) % 2:
            raise ValueError(f"{where}: log segment {seq} must be a list of slot, example pairs")
        for p in range(0, len(seg), 2):
            i = seg[p]
            if type(i) is not int or i < 0:
                raise ValueError(f"{where}: log segment {seq} writes slot {i!r}")
            slots[i] = seg[p + 1]
    missing = [i for i in range(size) if i not in slots]
    if missing:
        raise ValueError(f"{where}: no example for slot {missing[0]} of {size}")
    return [slots[i] for i in range(size)]


# immutable values an example copy shares (numpy scalars, dates and Decimals are checked apart)
_SHARED = frozenset((str, int, float, bool, bytes, complex, type(None), _dt.date, _dt.datetime, _dt.time,
                     _dt.timedelta, decimal.Decimal))


def copy_example(obj: Any) -> Any:
    """A copy of an example that shares nothing mutable with it: dicts, lists, sets, bytearrays and
    numpy arrays are copied, immutable values (strings, numbers, bytes, tuples of those, numpy
    scalars) shared, any other object deep-copied. Much faster than ``copy.deepcopy`` for the usual
    examples.

    Nodes that keep examples in their state (a shuffle buffer, a batch's partial rows, an
    interleave's peeked examples, a map's failed input) yield such a copy when a state copy may
    share the example: the user's functions may then edit it in place without changing a state
    taken earlier."""
    t = type(obj)
    if t is dict:
        new = obj.copy()
        for k, v in obj.items():
            if type(v) not in _SHARED:
                new[k] = copy_example(v)
        return new
    if t in _SHARED:
        return obj
    if t is list:
        return [v if type(v) in _SHARED else copy_example(v) for v in obj]
    if t is np.ndarray:
        if obj.dtype.hasobject:
            return copy.deepcopy(obj)
        return obj.copy()
    if t is tuple:
        items = [v if type(v) in _SHARED else copy_example(v) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj)) else tuple(items)
    if isinstance(obj, np.generic) and not isinstance(obj, np.object_):
        return obj
    if t is set:
        return {copy_example(v) for v in obj}
    if t is bytearray:
        return bytearray(obj)
    return copy.deepcopy(obj)
