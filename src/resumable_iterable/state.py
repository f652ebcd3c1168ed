"""The state envelope: format version, pipeline fingerprint, fast copy and a lossless JSON codec.

A pipeline's live state is a tree of plain dicts owned by its nodes (see ``nodes/base.py``).
``state_dict()`` wraps a copy of that tree in an *envelope*::

    {"format": "resumable_iterable.state", "version": 2,
     "fingerprint": "<16 hex>", "pipeline": {<shape of the pipeline>},
     "epoch": 0, "state": {<the node tree>}}

Copying is the hot path (``StatefulDataLoader`` asks for a state after every batch), so
:func:`copy_state` is a hand-written recursive copy of plain containers that copies
:class:`ExampleList` (peeked examples) and :class:`ExampleChunks` (shuffle buffers) *shallowly*:
a new list holding the same example objects; the copy holds plain containers only. A node that
hands out an example a taken state may share gives a copy of it (:func:`copy_example`), so a
consumer that edits it in place cannot change that state. No JSON is encoded at capture time.

Serialising is done once, when the user saves: :func:`dumps_state` encodes values JSON cannot
hold (bytes, numpy arrays and scalars, tuples, non-finite floats, dates) as tagged objects and
adds a SHA-256 checksum of the payload; :func:`loads_state` verifies and decodes. Loading never
runs code: the decoder only rebuilds the few tagged value types listed in ``state_codec.py``
(``state_files.py`` holds the file formats: JSON text, and binary files for large arrays).
The containers nodes keep examples in are in ``state_buffers.py``, the worker-side buffer log in
``state_logs.py`` (both re-exported here).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterator

from .state_buffers import (CHUNK, CHUNK_BITS, DroppedChunks, ExampleChunks, ExampleList,  # noqa: F401
                            HeldExamples, PositionList, copy_example, inline_buffers, is_position, position_entry,
                            replay_journal)
from .state_logs import (BufferLog, Reorder, buffer_lock, journaling, live_buffer_ids,  # noqa: F401
                         prefers_positions, set_buffer_packer)

FORMAT = "resumable_iterable.state"
#: version 2 (0.2): nodes keep what they hold after an error (batch rows, concat row parts,
#: interleave positions), take/skip count per split, concat records its input order
VERSION = 2
#: an elastic-resume plan (see ``loader/plan.py``): what a worker/rank loads when the worker count changed
PLAN_FORMAT = "resumable_iterable.elastic_plan"
#: the data-state file the Trainer callback writes into checkpoints (``integrations/transformers.py``)
TRAINER_FORMAT = "resumable_iterable.trainer"
#: the version of that file the callback writes and reads
TRAINER_VERSION = 1
#: its default name in a checkpoint folder (other processes: ``<stem>.rank<N>.json``)
TRAINER_DATA_FILE = "resumable_iterable_state.json"


#: ``copy_state(..., SNAPSHOT)``: a state copy kept inside a node's state (see ``copy_state``)
SNAPSHOT: dict = {}
#: ``copy_state(..., PRIVATE)``: a copy only loaded back if the pipeline raises before the next one
#: is taken, and where nothing edits buffered examples meanwhile (see ``copy_state``)
PRIVATE: dict = {}


def copy_state(obj: Any, buffers: dict | None = None) -> Any:
    """Copy a state tree: dicts and lists deeply, the live example lists shallowly, scalars as-is.

    This is the hot path of ``state_dict()``: a dict is copied with ``dict.copy()`` and only its
    container values are visited again; scalars (ints, strings, ...) are immutable and shared.
    The copy holds plain containers only (dicts, lists): it pickles without any class of ours
    (``torch.load(weights_only=True)`` reads it).

    ``buffers``: a dict to collect the logs of shuffle buffers instead (DataLoader workers): each
    buffer is replaced in the tree by its key in ``buffers`` (see :func:`inline_buffers`).
    :data:`SNAPSHOT` instead: a copy a node keeps inside its own state (a batched ``map``'s
    ``prev``), where a buffer that a DataLoader worker describes by arithmetic is so described
    (a few integers instead of its examples, which would travel with every state) and any other
    buffer is copied as in a process. :data:`PRIVATE`: a copy as in a process that the shuffle
    buffer's examples do not count as shared (they leave the buffer without being copied), for a
    caller that never hands the copy out and knows nothing edits examples in place meanwhile.
    """
    t = type(obj)
    if t is dict:
        new = obj.copy()
        for k, v in obj.items():
            if type(v) in _CONTAINERS:
                new[k] = copy_state(v, buffers)
        return new
    if t is list:
        return [copy_state(v, buffers) if type(v) in _CONTAINERS else v for v in obj]
    if t is ExampleList:
        return list.copy(obj)
    if t is DroppedChunks:
        return []
    if t is HeldExamples:
        owned = obj.owned
        owned[:] = bytes(len(owned))  # in place: the live node holds this bytearray
        return list.copy(obj)
    if t is ExampleChunks or t is PositionList:
        if buffers is not None and buffers is not PRIVATE:
            if t is ExampleChunks and obj.derived is not None:
                return obj.derived.describe()  # a few integers; lists shared, never changed in place
            if buffers is not SNAPSHOT:
                key = str(len(buffers))
                buffers[key] = obj.log()  # one value, compared by identity: sent only when it changed
                return key
        if t is PositionList:
            return list.copy(obj)
        new = list.copy(obj)
        owned = obj.owned
        owned[:] = bytes(len(owned))  # in place: the live node holds this bytearray
        if buffers is not PRIVATE:
            obj.gen += 1  # the examples buffered now leave the buffer as copies
        return new
    return obj


_CONTAINERS = frozenset((dict, list, ExampleList, PositionList, ExampleChunks, DroppedChunks, HeldExamples))


def find_documents(doc: Any, formats: tuple[str, ...] = (FORMAT,), path: str = "") -> Iterator[tuple[str, dict]]:
    """``(path, obj)`` for each dict nested in ``doc`` (e.g. a DataLoader or Trainer state) whose
    ``"format"`` is one of ``formats``; the search does not descend into those."""
    if isinstance(doc, dict):
        if doc.get("format") in formats:
            yield path or "/", doc
            return
        for k, v in doc.items():
            yield from find_documents(v, formats, f"{path}/{k}")
    elif isinstance(doc, (list, tuple)):
        for i, v in enumerate(doc):
            yield from find_documents(v, formats, f"{path}/{i}")


def fingerprint(shape: Any) -> str:
    """A short stable hash of a pipeline shape (plain JSON data)."""
    text = json.dumps(shape, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: ends the message refusing a state whose pipeline has other steps: resuming after an error with a
#: function fixed is the common case, and adding a step (a filter of the bad examples) breaks it
STEPS_HINT = (" (a state loads into the pipeline it was saved from, step for step; the functions given to "
              "map/filter are not part of it: rebuild the same steps with a function fixed, not with a step "
              "added or removed)")


#: said when a 'map' step is added or removed: the user may not have called map() - a cast is one
_CAST_HINT = (". A cast is a 'map' step too: cast(), cast_column() and features= given to a reader add one "
              "(unless the columns already have those types), so adding or removing one is another pipeline, while "
              "casting to other types is the same one")


#: the calls that make the node kinds whose names users do not write, for a message naming the kind
_CALLS = {"columns": "select_columns, remove_columns or rename_column(s)",
          "shard_interleave": "shuffle(max_buffer_input_shards=...)", "global_shuffle": "shuffle(buffer_size=None)",
          "step": "split_dataset_by_node over fewer shards than ranks", "group": "batch(by_column=...)"}


def _rows_hint(saved: dict, current: dict) -> str:
    """What a global shuffle's other number of rows means: its permutation is of all the rows."""
    a, b = saved.get("rows"), current.get("rows")
    if current.get("node") != "permuted" or a == b:
        return ""
    return (f": the data had {a} rows when the state was saved and has {b} now (data files added, removed or "
            "written again with other rows?), and a global shuffle's order is a permutation of all of them")


def _shards_hint(saved: dict, current: dict) -> str:
    """What a source's other number of shards means (``total_shards``: its data files, the lists of a
    generator's ``gen_kwargs``, a table's ``num_shards``), said after its first parameter that differs."""
    a, b = saved.get("total_shards"), current.get("total_shards")
    if a == b or not isinstance(a, int) or not isinstance(b, int):
        return ""
    kind = current.get("node")
    if kind == "files" and "row_groups" in current:
        return (f": the source had {a} shards (row groups of its Parquet files: reshard()) when the state was saved "
                f"and has {b} now: its files hold other row groups, or files were added or removed")
    if kind in ("files", "generator"):
        what = "data files" if kind == "files" else "shards (entries of the gen_kwargs lists)"
        d = abs(b - a)
        change = f"{d} {'was' if d == 1 else 'were'} {'added' if b > a else 'removed'}"
        if kind == "files" and b > a:
            change += " (a glob matching more files?)"
        return (f": the source had {a} {what} when the state was saved and has {b} now, so {change}; a state "
                "resumes only over the same ones")
    return f": the source had {a} shards when the state was saved and has {b} now (another num_shards?)"


def shape_difference(saved: Any, current: Any, path: str = "pipeline") -> str | None:
    """Describe the first place where two pipeline shapes differ, or ``None`` if they are equal."""
    if isinstance(saved, dict) and isinstance(current, dict):
        kinds = (saved.get("node"), current.get("node"))
        if kinds[0] != kinds[1]:
            return (f"{path}: the state has a '{saved.get('node')}' node where this pipeline has "
                    f"'{current.get('node')}'{STEPS_HINT}" + (_CAST_HINT if "map" in kinds else "")
                    + "".join(f". '{k}' is made by {_CALLS[k]}" for k in dict.fromkeys(kinds) if k in _CALLS))
        for key in sorted(set(saved) | set(current)):
            if key == "children":
                continue
            if saved.get(key) != current.get(key):
                hint = _shards_hint(saved, current) if key in ("shard_ids", "total_shards") else _rows_hint(saved, current)
                return (f"{path} ({current.get('node')}): parameter '{key}' is {saved.get(key)!r} in the state "
                        f"but {current.get(key)!r} in this pipeline{hint}")
        sc, cc = saved.get("children", []), current.get("children", [])
        if len(sc) != len(cc):
            return f"{path} ({current.get('node')}): {len(sc)} inputs in the state, {len(cc)} in this pipeline"
        for i, (s, c) in enumerate(zip(sc, cc)):
            d = shape_difference(s, c, f"{path}/{current.get('node')}[{i}]")
            if d:
                return d
        return None
    if saved != current:
        return f"{path}: {saved!r} in the state but {current!r} in this pipeline"
    return None


# --------------------------------------------------------------------------- lossless JSON codec
# The codec lives in ``state_codec.py``, the file formats in ``state_files.py``, atomic writes in
# ``atomic_files.py``; the public names are re-exported here.

from .atomic_files import write_atomic  # noqa: E402,F401
from .state_files import dumps_state, load_state, loads_state, save_state  # noqa: E402,F401


#: the top-level entries a state may hold: the envelope, the shuffle buffers a DataLoader worker
#: logs, the seeds a pipeline built without one adopts, a worker's generators; and "checksum",
#: which a file's text holds when a user reads it with ``json.load`` instead of ``load_state``
ENVELOPE_KEYS = frozenset({"format", "version", "fingerprint", "pipeline", "epoch", "state", "split",
                           "buffers", "seeds", "rng", "checksum"})

#: the largest epoch a state may hold: epochs seed numpy generators and travel to DataLoader
#: workers in a shared ``int64``, so they must fit in one
MAX_EPOCH = 2**63 - 1


def _inside(doc: Any) -> str:
    """What a document given in place of a pipeline state holds, when it holds pipeline states
    (a list of per-rank states, a DataLoader's or a Trainer checkpoint's state): the end of the
    message that refuses it."""
    try:
        found = [path for path, _ in find_documents(doc, (FORMAT, PLAN_FORMAT))]
    except RecursionError:
        return ""
    if not found:
        return ""
    where = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    if isinstance(doc, (list, tuple)):
        return (f": it is a list holding {len(found)} pipeline state(s) (at {where}), one per rank as "
                "save_state writes them: load the one of this rank, or redistribute_states for another world size")
    return (f": it is a document holding {len(found)} pipeline state(s) (at {where}) - a DataLoader's state "
            "loads into the DataLoader (loader.load_state_dict), a Trainer checkpoint's through "
            "ResumableDataCallback")


#: the end of the message refusing a state of HF ``datasets``' ``IterableDataset.state_dict()``
#: (``{"examples_iterable": ..., "epoch": ...}``), met when a script switched from HF resumes a checkpoint
_HF_STATE = (": it is a state of HF datasets' IterableDataset.state_dict(), which describes HF's own iterables, "
             "not this pipeline, so it cannot be resumed here: start this dataset afresh (to leave out the "
             "examples already trained on, skip(n) them) and save its own state_dict() from then on")


def check_envelope(state: Any) -> None:
    """Validate the envelope of a state (not its node payload)."""
    if not isinstance(state, dict):
        raise TypeError(f"a state must be a dict, got {type(state).__name__}{_inside(state)}")
    if type(state.get("format")) is not str or state.get("format") != FORMAT:
        raise ValueError(
            f"not a resumable_iterable state (format is {state.get('format')!r}, expected {FORMAT!r})"
            + (_HF_STATE if "format" not in state and "examples_iterable" in state else _inside(state)))
    version = state.get("version")
    if type(version) is not int or version != VERSION:  # 1.0 and True compare equal to 1
        older = (" (version 1 states were written by resumable_iterable 0.1, whose node states had other fields;"
                 " resume them with that release)") if version == 1 else ""
        raise ValueError(f"unsupported state version {version!r}: this library reads version {VERSION}{older}")
    for key in ("fingerprint", "pipeline", "state", "epoch"):
        if key not in state:
            raise ValueError(f"state is missing its '{key}' entry")
    unknown = [k for k in state if k not in ENVELOPE_KEYS]
    if unknown:  # e.g. a damaged "checksum" key name, which hid the checksum from loads_state
        raise ValueError(f"state has unknown top-level entries {unknown[:3]!r}: it was damaged or edited, "
                         f"or written by another version (a state holds only {sorted(ENVELOPE_KEYS)!r})")
    if type(state["fingerprint"]) is not str:
        raise ValueError(f"state 'fingerprint' must be a string, got {type(state['fingerprint']).__name__}")
    if not isinstance(state["pipeline"], dict):
        raise ValueError(f"state 'pipeline' must be an object, got {type(state['pipeline']).__name__}")
    epoch = state["epoch"]
    if type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"state 'epoch' must be an integer in [0, 2**63 - 1], got {type(epoch).__name__} {epoch!r}")
    if not isinstance(state["state"], dict):
        raise ValueError("state 'state' entry must be an object")
