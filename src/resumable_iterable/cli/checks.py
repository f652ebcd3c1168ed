"""What ``load_state_dict`` would refuse in a saved state, told from the pipeline shape alone
(no data, no nodes built): counters out of range or of the wrong type, offsets past the end of
shards whose length the shape records, a shard seed present without a ``shuffle`` above (or
missing with one), a shuffle buffer over its size, a batched map holding more rows than a batch, a fresh
plan segment starting past its shards; and in a (torchdata) ``StatefulDataLoader`` state, a worker
count that does not match the worker snapshots it holds, a worker snapshot without a dataset state,
or one holding the state another worker saved.

Each problem is one line appended to a ``problems`` list; ``inspect`` shows the state anyway and
prints them after it. The bounds per node kind are in :func:`_int_fields`; the checks themselves
are the nodes' own (``nodes.base.check_int``).
"""

from __future__ import annotations

from typing import Any

from ..distributed import effective_worker
from ..loader.loader_state import (DATASET_STATE, MAIN_SNAPSHOT, NUM_WORKERS, NUM_YIELDED, SNAPSHOT,
                                   WORKER_SNAPSHOTS, worker_key)
from ..nodes.checks import check_int
from ..nodes.interleave import BLOCK as INTERLEAVE_BLOCK
from ..nodes.shuffle import BLOCK as SHUFFLE_BLOCK
from ..nodes.source import shard_order
from ..nodes.worker_positions import buffer_entries
from ..state import FORMAT, MAX_EPOCH, PLAN_FORMAT
from .tree import SOURCE_FIELDS, buffer_fill, leaf_of, shard_rows, shuffle_below

_U64 = 2**64 - 1
_SOURCE_KEYS = SOURCE_FIELDS | {"node", "stop"}
#: held by some kinds of sources only: ``files`` (the digest of a file source's names, checked on load),
#: ``sizes`` (a file source's digest of the sizes of the files it read to their end, checked on load),
#: ``shards`` (a generator source's, of the lists of its ``gen_kwargs``)
_OPTIONAL_SOURCE_KEYS = {"files", "sizes", "shards"}


def _param_int(params: dict, key: str) -> int | None:
    v = params.get(key)
    return v if type(v) is int else None


def _int_fields(kind: Any, params: dict, nkids: int) -> dict[str, tuple[int, int | None]]:
    """The integer fields of a node's state, with the bounds ``(lo, hi)`` the pipeline shape gives."""
    if kind == "skip":
        return {"skipped": (0, _param_int(params, "n"))}
    if kind == "take":
        return {"taken": (0, _param_int(params, "n"))}
    if kind == "repeat":
        return {"round": (0, _param_int(params, "num_times"))}
    if kind == "shuffle":
        fields = {"seed": (0, _U64), "epoch": (0, MAX_EPOCH), "rng_pos": (0, SHUFFLE_BLOCK)}
        if params.get("buffer_state") == "replay":
            fields["digest"] = (0, _U64)
        return fields
    if kind == "global_shuffle":
        return {"seed": (0, _U64), "epoch": (0, MAX_EPOCH)}
    if kind == "permuted":
        return {"pos": (0, _param_int(params, "count"))}
    if kind == "concat" and params.get("axis") == 0:
        return {"index": (0, nkids)}
    if kind == "interleave":
        return {"rng_pos": (0, INTERLEAVE_BLOCK), "cycle": (0, max(nkids - 1, 0))}
    if kind in ("map", "filter"):
        return {"index": (0, None), "skip": (0, None)}
    if kind == "step":
        return {"seen": (0, None)}
    return {}


def _int_ok(state: dict, key: str, where: str, problems: list[str], lo: int = 0, hi: int | None = None,
            none_ok: bool = False) -> bool:
    """Check one integer field as loading the state would; record the problem, if any."""
    if key not in state:
        problems.append(f"{where}: state field '{key}' is missing")
        return False
    try:
        check_int(state, key, where, lo=lo, hi=hi, none_ok=none_ok)
    except ValueError as e:
        problems.append(str(e))
        return False
    return True


def _check_source(shape: dict, state: dict, where: str, shuffled: bool | None, problems: list[str]) -> None:
    ids = shape.get("shard_ids")
    if not isinstance(ids, list):
        ids = list(range(_param_int(shape, "total_shards") or 0))
    n = len(ids)
    if set(state) - _OPTIONAL_SOURCE_KEYS != _SOURCE_KEYS:
        problems.append(f"{where}: source state fields {sorted(state)} are not {sorted(_SOURCE_KEYS)}")
        return
    ok = _int_ok(state, "shard_seed", where, problems, hi=_U64, none_ok=True)
    if ok and shuffled is True and state["shard_seed"] is None:
        problems.append(f"{where}: 'shard_seed' is null, but a shuffle above this source sets its shard order")
        ok = False
    elif ok and shuffled is False and state["shard_seed"] is not None:
        problems.append(f"{where}: 'shard_seed' is {state['shard_seed']}, but no shuffle above this source sets "
                        "its shard order (it must be null)")
        ok = False
    ok = _int_ok(state, "shard_pos", where, problems, hi=n) and ok
    ok = _int_ok(state, "offset", where, problems, hi=2**63 - 1) and ok
    if ok:
        ok = _int_ok(state, "stop", where, problems, lo=state["shard_pos"], hi=n, none_ok=True)
    if not ok:
        return
    end = n if state["stop"] is None else state["stop"]
    if state["shard_pos"] < end:
        sid = shard_order(ids, state["shard_seed"])[state["shard_pos"]]
        rows = shard_rows(shape, shape.get("node"), sid)
        if rows is not None and state["offset"] > rows:
            problems.append(f"{where}: 'offset' = {state['offset']} is past the end of shard {sid} ({rows} rows)")
    elif state["offset"] != 0:
        problems.append(f"{where}: 'offset' must be 0 once every shard is read, got {state['offset']}")


def check_node(shape: dict, state: dict, where: str, problems: list[str], shuffled: bool | None = False) -> None:
    """Record in ``problems`` what ``load_state_dict`` would refuse in a node state, as far as the
    pipeline shape tells without the pipeline itself: counters out of range or of the wrong type,
    offsets past the end of shards whose length the shape records, a shard seed present without a
    ``shuffle`` above (or missing with one), a shuffle buffer over its size. ``shuffled`` says whether
    a shuffle above sets the shard order here (``None``: not applicable)."""
    kind = shape.get("node")
    here = f"{where} ({kind})"
    params = {k: v for k, v in shape.items() if k not in ("node", "children")}
    kids_shape = shape.get("children") or []
    kids_state = state.get("children") or []
    if not kids_shape and _SOURCE_KEYS & set(state) - {"node"}:
        _check_source(shape, state, here, shuffled, problems)
        return
    fields = _int_fields(kind, params, len(kids_shape))
    for key, (lo, hi) in fields.items():
        _int_ok(state, key, here, problems, lo=lo, hi=hi)
    for key, v in state.items():  # every other counter of a state is non-negative too
        if key not in fields and type(v) is int and v < 0:
            problems.append(f"{here}: '{key}' = {v} is negative")
    if "draining" in state and type(state["draining"]) is not bool:
        problems.append(f"{here}: 'draining' must be true or false, got {state['draining']!r}")
    if kind == "shuffle":
        size, buf = params.get("buffer_size"), state.get("buffer")
        if type(size) is int and params.get("buffer_state", "examples") == "examples":
            try:  # a DataLoader worker may describe it by arithmetic (``nodes/worker_positions.py``)
                buf = buffer_entries(buf, size, SHUFFLE_BLOCK, here)
            except ValueError as e:
                problems.append(str(e))
                buf = []
        if not isinstance(buf, list):
            problems.append(f"{here}: 'buffer' must be a list, got {type(buf).__name__}")
        elif type(size) is int:
            fill = buffer_fill(buf, params.get("buffer_state", "examples"))
            if fill > size:
                problems.append(f"{here}: the buffer holds {fill} examples, more than buffer_size={size}")
    if kind in ("interleave", "concat") and "exhausted" in state:
        ex = state["exhausted"]
        if not isinstance(ex, list) or len(ex) != len(kids_shape) or not all(type(b) is bool for b in ex):
            problems.append(f"{here}: 'exhausted' must be a list of {len(kids_shape)} booleans")
    if kind in ("map", "filter") and params.get("batched") and isinstance(state.get("retry"), list):
        size, held = params.get("batch_size"), len(state["retry"])
        if held and size is None:
            problems.append(f"{here}: 'retry' holds rows, but this {kind} reads its whole input as one batch "
                            "(batch_size=None)")
        elif type(size) is int and held > size:
            problems.append(f"{here}: 'retry' holds {held} rows, more than a batch of this {kind} "
                            f"(batch_size={size})")
    below = shuffle_below(kind, params, shuffled)
    if kind in ("map", "filter") and isinstance(state.get("prev"), dict) and kids_shape:
        check_node(kids_shape[0], state["prev"], f"{where}.prev", problems, below)
    for i, (s, t) in enumerate(zip(kids_shape, kids_state)):
        if isinstance(s, dict) and isinstance(t, dict):
            check_node(s, t, f"{where}/{kind}[{i}]", problems, below)


def check_start(pipeline: dict, start: dict, where: str, problems: list[str]) -> None:
    """A fresh plan segment's start (already type-checked by ``check_plan_envelope``)."""
    leaf, shuffled = leaf_of(pipeline)
    ids = leaf.get("shard_ids")
    n = len(ids) if isinstance(ids, list) else None
    if n is not None and start["stop"] > n:
        problems.append(f"{where}: 'stop' = {start['stop']} is past the {n} shards of the segment")
    if shuffled is True and start["shard_seed"] is None:
        problems.append(f"{where}: 'shard_seed' is null, but a shuffle above the source sets its shard order")
    elif shuffled is False and start["shard_seed"] is not None:
        problems.append(f"{where}: 'shard_seed' is {start['shard_seed']}, but no shuffle above the source sets "
                        "its shard order (it must be null)")



def _saved_worker(ds_state: Any) -> tuple[bool, tuple[int, int] | None]:
    """``(known, worker)``: the DataLoader worker a dataset state (or elastic plan) says it belongs to
    (``known`` is false when it does not say, or says it in a malformed way: other checks tell)."""
    if not isinstance(ds_state, dict):
        return False, None
    where = ds_state.get("split") if ds_state.get("format") == FORMAT else (
        ds_state.get("target") if ds_state.get("format") == PLAN_FORMAT else None)
    if not isinstance(where, dict) or "worker" not in where:
        return False, None
    w = where["worker"]
    if w is None:
        return True, None
    if isinstance(w, list) and len(w) == 2 and all(type(x) is int for x in w) and 0 <= w[0] < w[1]:
        return True, effective_worker((w[0], w[1]))
    return False, None


def _check_worker_state(ds_state: Any, worker: tuple[int, int] | None, where: str, problems: list[str]) -> None:
    known, saved = _saved_worker(ds_state)
    want = effective_worker(worker)
    if known and saved != want:
        def words(w):
            return f"DataLoader worker {w[0]} of {w[1]}" if w else "the main process (no DataLoader worker split)"
        problems.append(f"{where} holds the state of {words(saved)}, but the loader runs it in {words(want)}: "
                        "loading refuses a worker's state in another worker (was the file edited?)")


def check_loader(loader: Any, where: str, problems: list[str]) -> None:
    """Record in ``problems`` what loading the (torchdata) ``StatefulDataLoader`` state ``loader``
    would refuse at the loader level: a worker count that is not a positive integer or does not
    match the worker snapshots held, a worker snapshot without a dataset state, a dataset state
    saved by another worker (or process) than the one it would be loaded in, workers that saved
    different epochs."""
    if not isinstance(loader, dict):
        return
    if SNAPSHOT not in loader:
        if NUM_YIELDED in loader and DATASET_STATE in loader:  # a loader without workers
            _check_worker_state(loader[DATASET_STATE], None, f"{where}: its dataset state", problems)
        return
    snap = loader[SNAPSHOT]
    main = snap.get(MAIN_SNAPSHOT) if isinstance(snap, dict) else None
    n = main.get(NUM_WORKERS) if isinstance(main, dict) else None
    if type(n) is not int or n < 1:
        problems.append(f"{where}: '{SNAPSHOT}.{MAIN_SNAPSHOT}.{NUM_WORKERS}' must be a positive number of "
                        f"workers, got {n!r}: loading cannot tell how many workers saved it")
        return
    held = snap.get(WORKER_SNAPSHOTS)
    keys = [worker_key(i) for i in range(n)]
    if not isinstance(held, dict) or sorted(held) != sorted(keys):
        got = sorted(map(str, held)) if isinstance(held, dict) else type(held).__name__
        problems.append(f"{where}: the loader had {n} worker(s) ({NUM_WORKERS}), but its '{WORKER_SNAPSHOTS}' "
                        f"are {got}, not {keys}: loading refuses it")
        return
    epochs: dict[int, list[int]] = {}
    for j in range(n):
        ws = held.get(worker_key(j))
        if not isinstance(ws, dict) or not isinstance(ws.get(DATASET_STATE), dict):
            problems.append(f"{where}: worker {j}'s snapshot holds no dataset state: loading refuses it")
            continue
        ds = ws[DATASET_STATE]
        _check_worker_state(ds, (j, n), f"{where}: worker {j}'s snapshot", problems)
        if type(ds.get("epoch")) is int:
            epochs.setdefault(ds["epoch"], []).append(j)
    if len(epochs) > 1:
        problems.append(f"{where}: its workers saved different epochs ("
                        + ", ".join(f"{e} by worker(s) {ws}" for e, ws in sorted(epochs.items()))
                        + "): loading refuses it")
