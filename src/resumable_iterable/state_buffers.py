"""Examples held in a state: the live containers nodes keep them in, and how they are copied.

* :class:`ExampleList` - examples copied shallowly by every state copy (``copy_state``).
* :class:`HeldExamples` - one example (or ``None``) per position, with flags telling the node
  which of them a state copy may share.
* :class:`ExampleChunks` / :class:`DroppedChunks` - a shuffle buffer in copy-on-write chunks;
  inside a DataLoader worker its state is a ``state_logs.BufferLog`` instead, which the
  DataLoader's pickler sends as the writes since the previous state (so each buffered example
  crosses to the main process once); :func:`inline_buffers` puts the buffers back into the node
  tree.
* :class:`PositionList` - a replay-mode buffer (where each example came from), logged likewise.
* :func:`copy_example` - the copy a node yields when a state may share the example, so that a
  user's function editing it in place cannot change a state taken earlier.
* :func:`position_entry` / :func:`is_position` - a buffer slot held as where its example came
  from (a shuffle in a DataLoader worker may log examples so, ``nodes/shuffle.py``).
"""

from __future__ import annotations

import copy
import datetime as _dt
import decimal
from typing import Any

import numpy as np

from .state_codec import TAG, StateList
from .state_logs import LOG_SLOTS, BufferLog, Logged, take_log


def position_entry(position: list) -> dict:
    """A buffer entry standing for the example read at ``position`` (a provenance, see
    ``nodes/replay.py``): ``{"__ri__": "position", "at": [...]}``, an object like the examples
    beside it, kept as it is by a plain JSON round trip, ``torch.load(weights_only=True)`` and the
    state codec (which escapes examples holding the ``"__ri__"`` key)."""
    return {TAG: "position", "at": position}


def is_position(entry: Any) -> bool:
    return type(entry) is dict and len(entry) == 2 and entry.get(TAG) == "position" and "at" in entry


class ExampleList(StateList):
    """A list of examples inside a state; :func:`copy_state` copies it shallowly."""

    __slots__ = ()


CHUNK_BITS = 6
CHUNK = 1 << CHUNK_BITS  # examples per chunk of a shuffle buffer (buffer_state="examples")


class HeldExamples(StateList):
    """Examples a node holds one per position (``None`` where it holds none), e.g. the example
    ``interleave_datasets`` read ahead from each input. :func:`copy_state` copies it shallowly and
    clears ``owned`` (one flag per position), so the node knows which examples a state copy may
    share and yields a copy of those (:func:`copy_example`)."""

    __slots__ = ("owned",)

    def __init__(self, items: Any = ()):
        super().__init__(items)
        self.owned = bytearray(len(self))


class ExampleChunks(Logged, StateList):
    """A live shuffle buffer held as chunks: ``[[ex, ...], [ex, ...], ...]``, every chunk holding
    :data:`CHUNK` examples except the last.

    Two ways to copy it, both cheap:

    * :func:`copy_state` (``state_dict()`` in a process) copies it in O(chunks): the copy shares
      the chunk lists, and ``owned`` (one flag per chunk, cleared by every copy) tells the live
      buffer which chunks it may still write in place - it copies a shared chunk before writing
      to it (copy-on-write). Loading flattens and re-chunks, so a state's chunking is free.
    * :meth:`log` (``state_dict()`` in a DataLoader worker) gives a :class:`BufferLog`: the
      writes since the previous log, packed once, plus what each slot holds (``refs``), so that
      the DataLoader sends each example about once, not once per batch.

    In a process that takes logs, the node records each write of slot ``i`` in ``pending``
    (slot -> example), the writes since the last log; ``recording`` says whether its running
    loop does (a loop started before the process's first log does not: each log then holds
    every slot). ``born[i]`` is the copy generation in which slot ``i``'s example entered;
    every copy that shares examples starts a new generation (``gen``). An example older than the
    current generation may be shared with a state already taken, so the node hands out a copy
    of it (:func:`copy_example`): what the consumer does to it in place cannot reach that state.
    ``positions`` (per slot, a :func:`position_entry` or ``None``; or ``None``) is kept by a
    shuffle that logs examples as where they came from (``nodes/shuffle.py``): such a slot's log
    entry is its position, and ``pending`` records the position too. ``derived`` (or ``None``)
    describes the buffer of such a pass by arithmetic instead (``nodes/worker_positions.Derived``):
    a worker's state then holds what its ``describe()`` gives in place of a log.
    """

    __slots__ = ("owned", "gen", "born", "positions", "derived") + LOG_SLOTS

    def __init__(self, chunks: Any = ()):
        super().__init__(chunks)
        self.owned = bytearray(len(self))
        self.gen = 0
        self.born: list | None = None  # built by start(): [-1] * n, every example counted as shared
        self.positions: list | None = None  # slot -> position logged instead of its example (or None)
        self.derived: Any = None  # a pass describing its buffer by arithmetic (``nodes/worker_positions.py``)
        self.init_log()

    def start(self) -> list:
        """``born`` for the node's loop; examples already present count as shared (a loaded state
        holds them)."""
        if self.born is None:
            self.born = [-1] * sum(map(len, self))
        return self.born

    def log(self) -> BufferLog:
        """The buffer's state in a DataLoader worker: a new :class:`BufferLog` when the buffer
        changed since the last one, else that same log. A slot with a position in ``positions``
        is logged as that position (see ``nodes/shuffle.py``) instead of its example."""
        log = take_log(self, sum(map(len, self)), self._entries)
        if not self.tracker.packer.by_value:
            self.gen += 1  # the log shares the examples: the live buffer must not hand them out
        return log

    def _entries(self) -> Any:
        """What each slot is logged as, in slot order."""
        examples = (ex for ch in self for ex in ch)
        pos = self.positions
        return examples if pos is None else (ex if p is None else p for p, ex in zip(pos, examples))


class PositionList(Logged, ExampleList):
    """The buffer of a replay-mode shuffle: where each buffered example came from (a short list of
    integers per slot). Copied shallowly like an :class:`ExampleList`; in a DataLoader worker its
    state is a :class:`BufferLog`, like a stored buffer's (see :func:`take_log`)."""

    __slots__ = LOG_SLOTS

    def __init__(self, items: Any = ()):
        super().__init__(items)
        self.init_log()

    def log(self) -> BufferLog:
        return take_log(self, len(self), lambda: iter(self))


class DroppedChunks(ExampleChunks):
    """A chunked shuffle buffer that state copies leave out (``buffer_state="drop"``, HF's lossy
    behaviour): its copies are empty, so the live buffer never shares a chunk or an example."""

    __slots__ = ()



def inline_buffers(state: Any) -> Any:
    """The usual layout of a state taken in a DataLoader worker; any other value is returned as
    it is. There ``state_dict()`` leaves in the node's ``buffer`` field a key ``k`` and puts the
    buffer in ``state["buffers"]["k"]``: a list of its examples (a :class:`BufferLog` in the
    worker itself). States saved by version 0.2 hold a *journal* there instead, ``"k/size"`` (its
    size) and ``"k/<seq>"`` (segments of ``[slot, example, ...]`` writes), which is replayed.
    Raises ``ValueError`` naming a malformed buffer."""
    if not isinstance(state, dict) or "buffers" not in state:
        return state
    buffers = state["buffers"]
    if not isinstance(buffers, dict):
        raise ValueError(f"state 'buffers' must be an object, got {type(buffers).__name__}")
    journals: dict = {}
    whole: dict = {}
    for name, value in buffers.items():
        ref, slash, part = name.partition("/") if type(name) is str else ("", "", "")
        if ref and not slash:
            if isinstance(value, BufferLog):
                value = value.entries()
            if not isinstance(value, list):
                raise ValueError(f"state 'buffers' {name!r} must be a list of examples, got {type(value).__name__}")
            whole[ref] = value
            continue
        if not ref or not (part == "size" or part.isdigit()):
            raise ValueError(f"state 'buffers' holds {name!r}, which is neither '<buffer>', '<buffer>/size' "
                             "nor '<buffer>/<segment>'")
        j = journals.setdefault(ref, {"log": {}})
        if part == "size":
            j["size"] = value
        else:
            j["log"][part] = value
    if set(whole) & set(journals):
        raise ValueError(f"state 'buffers' holds buffers {sorted(set(whole) & set(journals))} both whole and "
                         "as journals")
    used: set = set()
    tree = _inline_tree(state.get("state"), "state", whole, journals, used)
    if used != set(journals) | set(whole):
        raise ValueError(f"state 'buffers' holds buffers {sorted(set(journals) | set(whole) - used)} that no "
                         "node refers to")
    out = {k: v for k, v in state.items() if k != "buffers"}
    if "state" in state:
        out["state"] = tree
    return out


def _inline_tree(node: Any, where: str, whole: dict, journals: dict, used: set) -> Any:
    """``node`` (a node's state) and its children's, with each ``buffer`` key replaced by the
    buffer's examples (for :func:`inline_buffers`; a module function, not a nested one, since a
    nested function that calls itself is a reference cycle, which kept the buffers it saw until the
    cyclic collector ran)."""
    if not isinstance(node, dict):
        return node
    new = dict(node)
    ref = node.get("buffer")
    if type(ref) is str:
        if (ref not in journals and ref not in whole) or ref in used:
            raise ValueError(f"{where}: 'buffer' refers to {ref!r}, which is not a buffer of the state")
        used.add(ref)
        new["buffer"] = (list(whole[ref]) if ref in whole
                         else replay_journal(journals[ref], f"state 'buffers' {ref!r}"))
    kids = node.get("children")
    if isinstance(kids, list):
        new["children"] = [_inline_tree(k, f"{where}/{i}", whole, journals, used) for i, k in enumerate(kids)]
    return new


def replay_journal(journal: Any, where: str) -> list:
    """The examples a buffer journal (the worker layout of version 0.2, see :func:`inline_buffers`)
    describes, in order."""
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
        if _SHARED.issuperset(map(type, obj)):  # token ids, floats, strings: one C-level pass, 2x faster
            return obj.copy()
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
