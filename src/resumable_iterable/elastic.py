"""Elastic resume: continue an epoch saved with W DataLoader workers / R ranks with W′ / R′.

The idea ("segment plan")
-------------------------
The state a worker (or rank) saved is an exact description of the rest of *its* stream for the
epoch: the pipeline it iterated (the dataset split for that worker/rank) plus the state of every
node in it - shuffle buffer, batched map mid-batch, interleave peeks included. Call that pair a
**segment**. Running a segment - rebuilding that split pipeline, loading the state, iterating to
the end - yields exactly the examples that worker had not yet yielded.

So moving an epoch from W to W′ workers never merges node states. The saved segments are dealt
to the new workers (segment *i*, in the order the old loader would have visited them, goes to new
worker *i mod W′*); a new worker runs its segments one after another, and the epoch ends. The
next epoch is a plain epoch with the new split. This holds for every composition of nodes.

When there are fewer segments than new workers, some would idle. For simple pipelines - one
source under per-example or batched ``map``/``filter`` (without ``with_indices``), column
operations, ``shuffle`` (``buffer_state`` ``"examples"`` or ``"drop"``) and ``batch`` - a
segment's **untouched shards** (after the shard it is reading, in its shard order) are known from
the source state. They are carved off into new *fresh* segments (the same split pipeline started
from scratch, reading only those shards), and the donor segment gets a ``stop`` position so it
ends before them. Every example is still yielded exactly once.

The plan state
--------------
A worker's dataset receives (and, while the elastic epoch runs, produces) a *plan*::

    {"format": "resumable_iterable.elastic_plan", "version": 1,
     "base": "<fingerprint of the unsplit pipeline>", "epoch": 3,
     "target": {"ranks": [[rank, world_size], ...], "worker": [id, num_workers] | null},
     "segments": [{"fingerprint", "pipeline", "split": {"ranks", "worker"},
                   "state": {...} | null, "start": null | {"shard_pos", "stop", "shard_seed"}}, ...]}

``target`` names the process the plan was dealt to; loading it anywhere else raises. A segment
has either a node ``state`` or, for a fresh carved segment, a ``start`` position.

Public entry points: :func:`redistribute_states` (ranks) and
``resumable_iterable.StatefulDataLoader`` (workers; see ``integrations/torch.py``), which uses
:func:`remap_loader_state`.
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Iterator

from . import state as _state
from .distributed import effective_worker, split_ranks, split_workers
from .nodes.base import Node, check_int
from .nodes.source import SourceNode

PLAN_FORMAT = "resumable_iterable.elastic_plan"
PLAN_VERSION = 1

#: node kinds through which untouched shards can be handed to another worker (see module doc)
_CARVABLE = {"map", "filter", "columns", "shuffle", "batch"}
_SOURCE_KEYS = {"node", "shard_seed", "shard_pos", "offset", "stop"}


# ============================================================================ the node


class SegmentsNode(Node):
    """Runs segments one after another (the pipeline of one process during an elastic epoch).

    State: ``{"node", "current", "children"}`` - the segment being run; those before are done.
    """

    kind = "segments"

    def __init__(self, segments: list[Node], splits: list[dict], base: str, target: dict):
        self.splits = splits
        self.base = base
        self.target = target
        super().__init__(segments)

    def _own_state(self) -> dict:
        return {"current": 0}

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "current", where, hi=len(self.children))

    def _iter(self) -> Iterator[Any]:
        st = self._state_dict
        kids = self.children
        while st["current"] < len(kids):
            yield from kids[st["current"]]
            st["current"] += 1

    @property
    def num_shards(self) -> int:
        return sum(c.num_shards for c in self.children)

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        raise ValueError("an elastic plan is already the pipeline of one process; it cannot be split further")

    def position(self) -> dict | None:
        st = self._state_dict
        return self.children[st["current"]].position() if st["current"] < len(self.children) else None


# ============================================================================ envelopes


def is_plan(state: Any) -> bool:
    return isinstance(state, dict) and state.get("format") == PLAN_FORMAT


def make_plan(base: str, epoch: int, target: dict, segments: list[dict]) -> dict:
    return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "base": base, "epoch": epoch,
            "target": {"ranks": [list(r) for r in target["ranks"]],
                       "worker": list(target["worker"]) if target["worker"] is not None else None},
            "segments": segments}


def _check_ranks(value: Any, where: str) -> list[list[int]]:
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(type(x) is int for x in p) and 0 <= p[0] < p[1]
            for p in value):
        raise ValueError(f"{where}: 'ranks' must be a list of [rank, world_size] pairs, got {value!r}")
    return value


def _check_worker(value: Any, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(type(x) is int for x in value)
            and 0 <= value[0] < value[1]):
        raise ValueError(f"{where}: 'worker' must be null or [worker_id, num_workers], got {value!r}")
    return (value[0], value[1])


def _check_split(split: Any, where: str) -> dict:
    if not isinstance(split, dict) or set(split) - {"base"} != {"ranks", "worker"}:
        raise ValueError(f"{where}: 'split' must be an object with 'ranks' and 'worker'")
    _check_ranks(split["ranks"], where)
    _check_worker(split["worker"], where)
    return split


def describe_split(ranks: list, worker) -> str:
    parts = [f"rank {r} of {n}" for r, n in ranks]
    eff = effective_worker(tuple(worker) if worker is not None else None)
    parts.append(f"DataLoader worker {eff[0]} of {eff[1]}" if eff else "no DataLoader worker split")
    return ", ".join(parts)


def state_segments(dataset_state: Any, where: str = "state") -> tuple[str, int, dict, list[dict]]:
    """``(base, epoch, target, segments)`` of a dataset state (a plain state or a plan)."""
    if is_plan(dataset_state):
        check_plan_envelope(dataset_state, where)
        segs = [copy.deepcopy(s) for s in dataset_state["segments"]]
        return dataset_state["base"], dataset_state["epoch"], dataset_state["target"], segs
    if not isinstance(dataset_state, dict):
        raise ValueError(f"{where}: expected a resumable_iterable state, got {type(dataset_state).__name__} "
                         "(was the loader's dataset a resumable_iterable.IterableDataset?)")
    _state.check_envelope(dataset_state)
    split = dataset_state.get("split")
    if split is None or "base" not in split:
        raise ValueError(f"{where}: the state has no 'split' entry (saved by an older version?): it cannot be "
                         "moved to another number of workers or ranks")
    _check_split(split, where)
    seg = {"fingerprint": dataset_state["fingerprint"], "pipeline": copy.deepcopy(dataset_state["pipeline"]),
           "split": {"ranks": copy.deepcopy(split["ranks"]), "worker": copy.deepcopy(split["worker"])},
           "state": _state.copy_state(dataset_state["state"]), "start": None}
    target = {"ranks": split["ranks"], "worker": split["worker"]}
    return split["base"], dataset_state["epoch"], target, [seg]


def check_plan_envelope(plan: Any, where: str = "plan") -> None:
    if not isinstance(plan, dict):
        raise TypeError(f"a state must be a dict, got {type(plan).__name__}")
    if plan.get("format") != PLAN_FORMAT:
        raise ValueError(f"{where}: not an elastic plan (format {plan.get('format')!r})")
    if plan.get("version") != PLAN_VERSION:
        raise ValueError(f"{where}: unsupported elastic plan version {plan.get('version')!r}: this library reads "
                         f"version {PLAN_VERSION}")
    missing = [k for k in ("base", "epoch", "target", "segments") if k not in plan]
    if missing:
        raise ValueError(f"{where}: the elastic plan is missing {missing}")
    if type(plan["epoch"]) is not int or plan["epoch"] < 0:
        raise ValueError(f"{where}: 'epoch' must be a non-negative integer, got {plan['epoch']!r}")
    if not isinstance(plan["base"], str):
        raise ValueError(f"{where}: 'base' must be a pipeline fingerprint string")
    t = plan["target"]
    if not isinstance(t, dict) or set(t) != {"ranks", "worker"}:
        raise ValueError(f"{where}: 'target' must be an object with 'ranks' and 'worker'")
    _check_ranks(t["ranks"], f"{where} target")
    _check_worker(t["worker"], f"{where} target")
    if not isinstance(plan["segments"], list):
        raise ValueError(f"{where}: 'segments' must be a list")
    for i, seg in enumerate(plan["segments"]):
        w = f"{where} segment {i}"
        if not isinstance(seg, dict) or set(seg) != {"fingerprint", "pipeline", "split", "state", "start"}:
            raise ValueError(f"{w}: expected an object with fingerprint, pipeline, split, state and start")
        _check_split(seg["split"], w)
        if (seg["state"] is None) == (seg["start"] is None):
            raise ValueError(f"{w}: exactly one of 'state' and 'start' must be set")
        if seg["start"] is not None:
            st = seg["start"]
            if not isinstance(st, dict) or set(st) != {"shard_pos", "stop", "shard_seed"}:
                raise ValueError(f"{w}: 'start' must hold shard_pos, stop and shard_seed")
            check_int(st, "shard_pos", w)
            check_int(st, "stop", w, lo=st["shard_pos"])
            check_int(st, "shard_seed", w, hi=2**64 - 1, none_ok=True)
        elif not isinstance(seg["state"], dict):
            raise ValueError(f"{w}: 'state' must be an object")


# ============================================================================ loading a plan


def _leaf_source(node: Node) -> SourceNode | None:
    while not isinstance(node, SourceNode):
        if len(node.children) != 1:
            return None
        node = node.children[0]
    return node


def build_plan_node(template: Node, plan: dict, current_ranks: list, current_worker, base: str) -> SegmentsNode:
    """Validate ``plan`` against a dataset (its unsplit pipeline ``template``) and the process it
    is loaded in; return the loaded :class:`SegmentsNode`. Raises ``ValueError`` naming the problem."""
    from .dataset import _shape_of

    check_plan_envelope(plan)
    if plan["base"] != base:
        raise ValueError("this elastic plan was made for a different pipeline (its base fingerprint "
                         f"{plan['base']} is not this dataset's {base})")
    t = plan["target"]
    here_w = effective_worker(current_worker)
    want_w = effective_worker(tuple(t["worker"]) if t["worker"] is not None else None)
    if [list(r) for r in t["ranks"]] != [list(r) for r in current_ranks] or here_w != want_w:
        raise ValueError(f"this elastic plan was dealt to {describe_split(t['ranks'], t['worker'])}, but it is "
                         f"loaded in {describe_split(current_ranks, current_worker)}: each worker/rank must load "
                         "its own state")
    epoch = plan["epoch"]
    nodes, splits = [], []
    for i, seg in enumerate(plan["segments"]):
        where = f"elastic plan segment {i}"
        worker = _check_worker(seg["split"]["worker"], where)
        node = split_workers(split_ranks(template, seg["split"]["ranks"]), worker).clone()
        shape, fp = _shape_of(node)
        if seg["fingerprint"] != fp:
            diff = _state.shape_difference(seg["pipeline"], shape)
            raise ValueError(f"{where} ({describe_split(seg['split']['ranks'], worker)}) was saved from a different "
                             "pipeline: " + (diff or "its fingerprint does not match (was the state edited?)"))
        node.set_epoch(epoch)
        if seg["state"] is not None:
            node.validate(seg["state"], f"{where} state")
            node.load(seg["state"])
        else:
            node.reset()
            src = _leaf_source(node)
            start = seg["start"]
            if src is None:
                raise ValueError(f"{where}: a fresh segment needs a pipeline with a single source")
            if start["shard_seed"] != src._state_dict["shard_seed"]:
                raise ValueError(f"{where}: the shard order seed {start['shard_seed']} does not match this pipeline's "
                                 f"{src._state_dict['shard_seed']} for epoch {epoch}")
            if start["stop"] > src.num_shards:
                raise ValueError(f"{where}: 'stop' = {start['stop']} is past the {src.num_shards} shards of the segment")
            src._state_dict["shard_pos"] = start["shard_pos"]
            src._state_dict["stop"] = start["stop"]
        nodes.append(node)
        splits.append({"ranks": seg["split"]["ranks"], "worker": seg["split"]["worker"]})
    return SegmentsNode(nodes, splits, base, {"ranks": t["ranks"], "worker": t["worker"]})


def plan_state(node: SegmentsNode, epoch: int) -> dict:
    """The plan state of a running :class:`SegmentsNode` (segments already finished are left out)."""
    from .dataset import _shape_of

    segs = []
    for i in range(node._state_dict["current"], len(node.children)):
        child = node.children[i]
        shape, fp = _shape_of(child)
        segs.append({"fingerprint": fp, "pipeline": _state.copy_state(shape),
                     "split": {"ranks": [list(r) for r in node.splits[i]["ranks"]],
                               "worker": list(node.splits[i]["worker"]) if node.splits[i]["worker"] else None},
                     "state": _state.copy_state(child._state_dict), "start": None})
    return make_plan(node.base, epoch, node.target, segs)


# ============================================================================ carving untouched shards


def _source_states(state: dict) -> Iterator[dict]:
    """Every source state in a node-state tree (children and batched-map rewind copies)."""
    if not isinstance(state, dict):
        return
    if _SOURCE_KEYS <= set(state) and "children" not in state:
        yield state
        return
    for c in state.get("children") or ():
        yield from _source_states(c)
    if isinstance(state.get("prev"), dict):
        yield from _source_states(state["prev"])


def _carvable_shape(shape: dict) -> dict | None:
    """The source shape if the pipeline is a chain of carvable nodes over one source."""
    node = shape
    while True:
        kids = node.get("children")
        if not kids:
            return node if "shard_ids" in node else None
        if len(kids) != 1:
            return None
        kind = node.get("node")
        if kind not in _CARVABLE:
            return None
        if kind in ("map", "filter") and node.get("with_indices"):
            return None
        if kind == "shuffle" and node.get("buffer_state") not in ("examples", "drop"):
            return None
        node = kids[0]


def _untouched(seg: dict) -> tuple[int, int, bool] | None:
    """``(first, stop, in_progress)``: the shard positions ``[first, stop)`` that a segment has not
    touched, and whether it has work besides them; ``None`` if it cannot hand shards over."""
    src_shape = _carvable_shape(seg["pipeline"])
    if src_shape is None:
        return None
    n = len(src_shape["shard_ids"])
    if seg["state"] is None:
        st = seg["start"]
        return st["shard_pos"], st["stop"], False
    live = seg["state"]
    held = False  # examples held above the source: a shuffle buffer, a batch being re-read
    while "children" in live:
        held = (held or bool(live.get("buffer")) or live.get("draining") is True or live.get("prev") is not None
                or bool(live.get("retry")))
        live = live["children"][0]
    if not _SOURCE_KEYS <= set(live):
        return None
    stop = n if live["stop"] is None else live["stop"]
    first = min(live["shard_pos"] + (1 if live["offset"] > 0 else 0), stop)
    return first, stop, held or live["offset"] > 0


def _carve(seg: dict, first: int, stop: int, in_progress: bool) -> tuple[dict, dict]:
    """Split a segment: it keeps its work before the cut, a fresh segment takes ``[cut, stop)``
    (at least one shard each when the segment has nothing in progress)."""
    size = stop - first
    cut = first + (size // 2 if in_progress else max(size // 2, 1))
    kept = copy.deepcopy(seg)
    if seg["state"] is None:
        kept["start"]["stop"] = cut
        seed = seg["start"]["shard_seed"]
    else:
        seed = None
        for s in _source_states(kept["state"]):
            s["stop"] = cut
            seed = s["shard_seed"]
    fresh = {"fingerprint": seg["fingerprint"], "pipeline": copy.deepcopy(seg["pipeline"]),
             "split": copy.deepcopy(seg["split"]), "state": None,
             "start": {"shard_pos": cut, "stop": stop, "shard_seed": seed}}
    return kept, fresh


def deal(units: list[dict], bins: int, carve: bool = True) -> list[list[dict]]:
    """Deal segments to ``bins`` new workers/ranks: unit *i* goes to bin *i mod bins*. With ``carve``,
    first hand untouched shards to bins that would otherwise idle (see the module doc)."""
    units = list(units)
    while carve and len(units) < bins:
        best, best_size = None, 0
        for i, u in enumerate(units):
            info = _untouched(u)
            if info is None:
                continue
            first, stop, busy = info
            size = stop - first
            if size >= (1 if busy else 2) and size + busy > best_size:
                best, best_size = (i, first, stop, busy), size + busy
        if best is None:
            break
        i, first, stop, busy = best
        kept, fresh = _carve(units[i], first, stop, busy)
        units[i:i + 1] = [kept, fresh]
    out: list[list[dict]] = [[] for _ in range(bins)]
    for i, u in enumerate(units):
        out[i % bins].append(u)
    return out


# ============================================================================ DataLoader states


def _loader_keys():
    try:
        from torchdata.stateful_dataloader import stateful_dataloader as sdl
        from torchdata.stateful_dataloader.incremental_state import (_DATASET_ITER_STATE, _DATASET_STATE,
                                                                     _FETCHER_ENDED, _FETCHER_STATE, _WORKER_ID)
    except ImportError:  # pragma: no cover - the names torchdata 0.8-0.11 use
        sdl = None
        _DATASET_ITER_STATE, _DATASET_STATE, _FETCHER_ENDED, _FETCHER_STATE, _WORKER_ID = (
            "dataset_iter_state", "dataset_state", "fetcher_ended", "fetcher_state", "worker_id")
    g = (lambda name, default: getattr(sdl, name, default)) if sdl else (lambda name, default: default)
    return {
        "index_sampler": g("_INDEX_SAMPLER_STATE", "_index_sampler_state"),
        "sampler_iter": g("_SAMPLER_ITER_STATE", "_sampler_iter_state"),
        "sampler_yielded": g("_SAMPLER_ITER_YIELDED", "_sampler_iter_yielded"),
        "len_called": g("_ITERABLEDATASET_LEN_CALLED", "_IterableDataset_len_called"),
        "shared_seed": g("_SHARED_SEED", "_shared_seed"),
        "finished": g("_ITERATOR_FINISHED", "_iterator_finished"),
        "dataset_iter": _DATASET_ITER_STATE, "dataset": _DATASET_STATE, "ended": _FETCHER_ENDED,
        "fetcher": _FETCHER_STATE, "worker_id": _WORKER_ID,
        "num_yielded": "_num_yielded", "snapshot": "_snapshot", "main": "_main_snapshot",
        "workers": "_worker_snapshots", "step": "_snapshot_step", "since": "_steps_since_snapshot",
        "last": "_last_yielded_worker_id", "num_workers": "_num_workers", "base_seed": "_base_seed",
    }


def loader_num_workers(state: Any) -> int:
    """How many workers the ``StatefulDataLoader`` that saved ``state`` had (0: main process)."""
    K = _loader_keys()
    if not isinstance(state, dict):
        raise TypeError(f"a DataLoader state must be a dict, got {type(state).__name__}")
    if K["snapshot"] in state:
        try:
            n = state[K["snapshot"]][K["main"]][K["num_workers"]]
        except (KeyError, TypeError):
            raise ValueError("DataLoader state: '_snapshot' has no '_main_snapshot._num_workers'") from None
        if type(n) is not int or n < 1:
            raise ValueError(f"DataLoader state: '_num_workers' must be a positive integer, got {n!r}")
        return n
    if K["num_yielded"] in state:
        return 0
    raise ValueError("not a StatefulDataLoader state: it has neither '_snapshot' (worker processes) nor "
                     "'_num_yielded' (main process)")


def parse_loader_state(state: dict, where: str = "DataLoader state") -> dict:
    """The parts of a ``StatefulDataLoader`` state that elastic resume needs.

    ``units`` lists the saved segments in the order the old loader would have continued: its
    workers starting with the one that was due next, each worker's segments in order. Workers
    that had finished the epoch contribute nothing.
    """
    K = _loader_keys()
    num_workers = loader_num_workers(state)
    info: dict = {"num_workers": num_workers, "finished": bool(state.get(K["finished"], False))}
    bases, epochs, targets, units = set(), set(), [], []

    def take(ds_state: Any, w: str) -> None:
        base, epoch, target, segs = state_segments(ds_state, w)
        bases.add(base)
        epochs.add(epoch)
        targets.append(target)
        units.extend(segs)

    if num_workers == 0:
        for key in (K["num_yielded"], K["dataset"]):
            if key not in state:
                raise ValueError(f"{where}: missing '{key}'")
        take(state[K["dataset"]], f"{where} (main process)")
        info["num_yielded"] = state[K["num_yielded"]]
        info["main"] = {k: state.get(K[k]) for k in ("index_sampler", "sampler_iter", "sampler_yielded",
                                                      "len_called", "shared_seed")}
    else:
        snap = state[K["snapshot"]]
        since = state.get(K["since"], 0)
        if since:
            raise ValueError(f"{where}: it was taken {since} batch(es) after the loader's last snapshot "
                             "(snapshot_every_n_steps > 1); elastic resume needs snapshot_every_n_steps=1")
        for key in (K["step"], K["last"], K["main"], K["workers"]):
            if key not in snap:
                raise ValueError(f"{where}: '_snapshot' is missing '{key}'")
        wstates = snap[K["workers"]]
        keys = [f"worker_{i}" for i in range(num_workers)]
        if not isinstance(wstates, dict) or sorted(wstates) != sorted(keys):
            raise ValueError(f"{where}: expected worker snapshots {keys}, got {sorted(wstates) if isinstance(wstates, dict) else wstates!r}")
        last = snap[K["last"]]
        if type(last) is not int or not 0 <= last < num_workers:
            raise ValueError(f"{where}: '_last_yielded_worker_id' = {last!r} is not a worker id")
        for j in range(num_workers):
            w = (last + 1 + j) % num_workers
            ws = wstates[f"worker_{w}"]
            if not isinstance(ws, dict) or K["dataset"] not in ws:
                raise ValueError(f"{where}: worker {w} snapshot has no dataset state")
            fetcher = ws.get(K["fetcher"]) or {}
            base, epoch, target, segs = state_segments(ws[K["dataset"]], f"{where} worker {w}")
            bases.add(base)
            epochs.add(epoch)
            targets.append(target)
            if not fetcher.get(K["ended"], False):  # a worker that ended has nothing left
                units.extend(segs)
        info["num_yielded"] = snap[K["step"]]
        main = snap[K["main"]]
        info["main"] = {k: main.get(K[k]) for k in ("index_sampler", "sampler_iter", "sampler_yielded",
                                                     "len_called", "shared_seed")}
        info["base_seed"] = main.get(K["base_seed"])
    if len(bases) != 1 or len(epochs) != 1:
        raise ValueError(f"{where}: its workers saved states of different pipelines or epochs")
    ranks = {tuple(map(tuple, t["ranks"])) for t in targets}
    if len(ranks) != 1:
        raise ValueError(f"{where}: its workers belong to different ranks")
    info.update(base=bases.pop(), epoch=epochs.pop(), ranks=[list(r) for r in ranks.pop()], units=units)
    return info


def build_loader_state(info: dict, plans: list[dict], num_workers: int, base_seed: int | None = None) -> dict:
    """A ``StatefulDataLoader`` state for ``num_workers`` workers (0: main process) whose worker
    ``j`` continues with ``plans[j]``; the next batch comes from worker 0."""
    K = _loader_keys()
    main = info["main"]
    n = info["num_yielded"]
    fetcher = {K["dataset_iter"]: None, K["ended"]: False}
    if num_workers == 0:
        (plan,) = plans
        return {K["index_sampler"]: main.get("index_sampler"), K["sampler_iter"]: main.get("sampler_iter"),
                K["sampler_yielded"]: n, K["num_yielded"]: n, K["len_called"]: main.get("len_called"),
                K["shared_seed"]: main.get("shared_seed"), K["fetcher"]: fetcher, K["dataset"]: plan,
                K["finished"]: info["finished"]}
    if len(plans) != num_workers:
        raise ValueError(f"expected {num_workers} plans, got {len(plans)}")
    if base_seed is None:
        base_seed = info.get("base_seed")
    if base_seed is None:
        import random

        base_seed = random.getrandbits(63)
    main_snapshot = {K["num_workers"]: num_workers, K["sampler_iter"]: main.get("sampler_iter"),
                     K["index_sampler"]: main.get("index_sampler"), K["sampler_yielded"]: n,
                     K["len_called"]: main.get("len_called"), K["shared_seed"]: main.get("shared_seed"),
                     K["base_seed"]: base_seed}
    workers = {f"worker_{j}": {K["worker_id"]: j, K["dataset"]: plans[j], K["fetcher"]: dict(fetcher)}
               for j in range(num_workers)}
    return {K["snapshot"]: {K["step"]: n, K["last"]: num_workers - 1, K["main"]: main_snapshot,
                            K["workers"]: workers},
            K["since"]: 0, K["finished"]: info["finished"]}


def remap_loader_state(state: dict, num_workers: int, carve: bool = True) -> dict:
    """Rewrite a ``StatefulDataLoader`` state saved with W workers for ``num_workers`` workers.

    The rest of the epoch yields every example the saved loader had not yet yielded, exactly once
    (see the module doc for the order). A state saved with ``num_workers`` workers is returned
    unchanged. ``num_workers=0`` means the main process.
    """
    if type(num_workers) is not int or num_workers < 0:
        raise ValueError(f"num_workers must be a non-negative integer, got {num_workers!r}")
    if loader_num_workers(state) == num_workers:
        return state
    info = parse_loader_state(state)
    bins = deal(info["units"], max(num_workers, 1), carve=carve and not info["finished"])
    plans = []
    for j, segs in enumerate(bins):
        worker = [j, num_workers] if num_workers > 0 else None
        plans.append(make_plan(info["base"], info["epoch"], {"ranks": info["ranks"], "worker": worker},
                               segs if not info["finished"] else []))
    return build_loader_state(info, plans, num_workers)


# ============================================================================ ranks


def redistribute_states(states: list[dict], world_size: int, num_workers: int | None = None,
                        carve: bool = True) -> list[dict]:
    """States saved by ``R = len(states)`` ranks → states for ``world_size`` ranks.

    ``states[r]`` is what rank ``r`` saved: either the dataset's ``state_dict()`` (the rank
    iterated ``split_dataset_by_node(ds, r, R)`` itself) or its ``StatefulDataLoader``'s
    ``state_dict()``. The result has one state of the same kind per new rank; new rank ``r′``
    loads ``result[r′]`` into ``split_dataset_by_node(ds, r′, world_size)`` (or its loader).
    Together, the new ranks yield every example the old ranks had not yet yielded in the epoch,
    exactly once; the epoch after is a normal epoch split ``world_size`` ways.

    Order: what is left of each old rank (and of each of its DataLoader workers) is continued as
    is, in its own order, by one new rank (and worker); these pieces are dealt round-robin. When
    there are fewer pieces than new ranks x workers, the untouched shards of simple pipelines
    (see ``elastic.py``) are handed to the ranks that would idle, unless ``carve=False``.

    ``num_workers`` sets the worker count of the returned DataLoader states (default: the saved
    one, which must then be the same on every rank); ``resumable_iterable.StatefulDataLoader``
    loads them with any worker count.
    """
    if not isinstance(states, (list, tuple)) or not states:
        raise ValueError("redistribute_states expects the non-empty list of per-rank states, in rank order")
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    old = len(states)
    loader = [isinstance(s, dict) and ("_snapshot" in s or "_num_yielded" in s) for s in states]
    if any(loader) and not all(loader):
        raise ValueError("redistribute_states: mix of DataLoader states and dataset states")
    if all(loader):
        infos = [parse_loader_state(s, f"rank {r} DataLoader state") for r, s in enumerate(states)]
        units, prefix = [], None
    else:
        infos, units, prefix = None, [], None
    metas = []
    for r in range(old):
        if infos is not None:
            info = infos[r]
            base, epoch, ranks, segs, finished = info["base"], info["epoch"], info["ranks"], info["units"], info["finished"]
        else:
            base, epoch, target, segs = state_segments(states[r], f"rank {r} state")
            ranks, finished = target["ranks"], False
            if target["worker"] is not None and effective_worker(tuple(target["worker"])) is not None:
                raise ValueError(f"rank {r} state was saved inside DataLoader worker {target['worker'][0]}: pass the "
                                 "DataLoader's state_dict() instead")
        if old == 1 and (not ranks or ranks[-1] != [0, 1]):
            ranks = [*ranks, [0, 1]]  # one process that never called split_dataset_by_node: rank 0 of 1
        if not ranks or ranks[-1] != [r, old]:
            raise ValueError(f"states[{r}] was not saved by rank {r} of {old} (it comes from "
                             f"{describe_split(ranks, None)}): pass the states of all ranks, in rank order")
        if prefix is None:
            prefix = ranks[:-1]
        elif ranks[:-1] != prefix:
            raise ValueError(f"states[{r}] comes from a differently split dataset")
        metas.append((base, epoch, finished))
        if not finished:
            units.extend(segs)
    if len({m[0] for m in metas}) != 1:
        raise ValueError("the rank states come from different pipelines")
    if len({m[1] for m in metas}) != 1:
        raise ValueError(f"the rank states are from different epochs: {[m[1] for m in metas]}")
    base, epoch = metas[0][0], metas[0][1]
    finished = all(m[2] for m in metas)

    if infos is None:
        bins = deal(units, world_size, carve=carve)
        return [make_plan(base, epoch, {"ranks": [*prefix, [r, world_size]], "worker": None}, bins[r])
                for r in range(world_size)]

    if num_workers is None:
        counts = {i["num_workers"] for i in infos}
        if len(counts) != 1:
            raise ValueError(f"the ranks saved DataLoader states with different worker counts {sorted(counts)}: "
                             "pass num_workers=")
        num_workers = counts.pop()
    if type(num_workers) is not int or num_workers < 0:
        raise ValueError(f"num_workers must be a non-negative integer, got {num_workers!r}")
    per = max(num_workers, 1)
    bins = deal(units, world_size * per, carve=carve and not finished)
    out = []
    for r in range(world_size):
        plans = []
        for j in range(per):
            segs = bins[j * world_size + r] if not finished else []
            worker = [j, num_workers] if num_workers > 0 else None
            plans.append(make_plan(base, epoch, {"ranks": [*prefix, [r, world_size]], "worker": worker}, segs))
        # batches yielded so far by the old ranks this new rank takes over (a count for the loader's
        # bookkeeping only: what is left to yield is in the plans)
        mine = [o for o in range(old) if o % world_size == r]
        info = dict(infos[mine[0] if mine else 0], finished=finished,
                    num_yielded=sum(infos[o]["num_yielded"] for o in mine))
        out.append(build_loader_state(info, plans, num_workers))
    return out


# ============================================================================ dataset support
# (used by ``IterableDataset.__iter__`` / ``state_dict`` / ``load_state_dict``)


def split_description(dataset: Any, worker) -> dict:
    from .dataset import _shape_of
    from .distributed import ranks_of

    return {"base": _shape_of(dataset._node)[1], "ranks": ranks_of(dataset._split),
            "worker": list(worker) if worker is not None else None}


def load_node(dataset: Any, state: Any, worker) -> tuple[Node, int]:
    """Validate ``state`` (a plain state or an elastic plan) for ``dataset`` iterated in ``worker``
    (``(id, num_workers)`` or ``None``) and return the loaded node and its epoch. Nothing of the
    dataset changes; raises ``ValueError`` naming the problem."""
    from .dataset import _shape_of
    from .distributed import ranks_of, split_for_process

    ranks = ranks_of(dataset._split)
    base = _shape_of(dataset._node)[1]
    if is_plan(state):
        return build_plan_node(dataset._node, state, ranks, worker, base), state["epoch"]
    _state.check_envelope(state)
    node = split_for_process(dataset._node, dataset._split, worker=worker).clone()
    shape, fp = _shape_of(node)
    if state["fingerprint"] != fp:
        split = state.get("split")
        if isinstance(split, dict) and split.get("base") == base and "ranks" in split and "worker" in split:
            saved_w = tuple(split["worker"]) if isinstance(split["worker"], list) else None
            if split["ranks"] != ranks or effective_worker(saved_w) != effective_worker(worker):
                raise ValueError(
                    f"this state was saved by {describe_split(split['ranks'], saved_w)} but is loaded in "
                    f"{describe_split(ranks, worker)}. Resume a DataLoader through its own state_dict(); "
                    "resumable_iterable.StatefulDataLoader loads it with another number of workers, and "
                    "resumable_iterable.redistribute_states moves rank states to another world size")
        diff = _state.shape_difference(state["pipeline"], shape)
        raise ValueError("this state was saved from a different pipeline: "
                         + (diff or "its fingerprint does not match (was the state edited?)"))
    node.validate(state["state"])
    node.set_epoch(state["epoch"])
    node.load(state["state"])
    return node, state["epoch"]


def validate_loader_state(dataset: Any, loader_state: dict, num_workers: int) -> int:
    """Check every dataset state inside a ``StatefulDataLoader`` state against ``dataset`` for a
    loader with ``num_workers`` workers; return the epoch. Raises ``ValueError`` before any worker starts."""
    K = _loader_keys()
    saved = loader_num_workers(loader_state)
    if saved != num_workers:
        raise ValueError(f"the DataLoader state was saved with {saved} workers but this loader has {num_workers}")
    if num_workers == 0:
        return load_node(dataset, loader_state[K["dataset"]], None)[1]
    epochs = set()
    wstates = loader_state[K["snapshot"]][K["workers"]]
    for j in range(num_workers):
        ws = wstates.get(f"worker_{j}") if isinstance(wstates, dict) else None
        if not isinstance(ws, dict) or K["dataset"] not in ws:
            raise ValueError(f"DataLoader state: worker {j} has no dataset state")
        try:
            epochs.add(load_node(dataset, ws[K["dataset"]], (j, num_workers))[1])
        except ValueError as e:
            raise ValueError(f"DataLoader state, worker {j}: {e}") from None
    if len(epochs) != 1:
        raise ValueError(f"DataLoader state: its workers saved different epochs {sorted(epochs)}")
    return epochs.pop()


def requested_epoch(dataset: Any) -> int:
    """The epoch a new pass uses: inside a DataLoader worker, the main process's current epoch
    (shared memory, so ``set_epoch`` reaches persistent workers); elsewhere ``dataset._epoch``."""
    from .distributed import current_worker

    if current_worker() is not None and "torch" in sys.modules:
        from .integrations.torch import shared_epoch

        e = shared_epoch(dataset)
        if e is not None:
            return e
    return dataset._epoch


def fresh_node(dataset: Any, worker) -> tuple[Node, int]:
    epoch = requested_epoch(dataset)
    node = dataset._iteration_node().clone()
    node.set_epoch(epoch)
    node.reset()
    return node, epoch


def _drop_pending(dataset: Any) -> None:
    dataset._pending = False
    dataset._active = None
    dataset._loaded = None


def resolve_pending(dataset: Any, worker) -> None:
    """Make a loaded-but-not-iterated state fit the process about to iterate ``dataset``.

    A state loaded in the main process and then iterated in DataLoader workers (the dataset was
    handed to the loader after ``load_state_dict``) is split among the workers like an elastic
    resume from one process; a shared record makes sure only the first pass uses it, even when
    each pass forks new workers. Elsewhere a state loaded for another process is dropped.
    """
    if not dataset.__dict__.get("_pending") or dataset.__dict__.get("_active") is None:
        return
    loaded_in = dataset.__dict__.get("_active_ctx")
    claims = dataset.__dict__.get("_claims")
    if loaded_in == worker:
        if worker is None and claims is not None:
            from .integrations.torch import claimed

            if claimed(claims):  # DataLoader workers already used it
                _drop_pending(dataset)
        return
    if loaded_in is not None or worker is None or dataset.__dict__.get("_loaded") is None:
        _drop_pending(dataset)  # another process's state, or just a fresh start: start afresh here
        return
    # loaded in the main process, now inside DataLoader worker `worker`
    if claims is None:
        raise ValueError("this dataset holds a state loaded with load_state_dict() before torch was imported and is "
                         "now iterated by DataLoader workers; import torch first, or load the state through "
                         "resumable_iterable.StatefulDataLoader")
    from .distributed import ranks_of
    from .integrations.torch import claim

    w, n = worker
    if not claim(claims, w, n):
        _drop_pending(dataset)
        return
    base, epoch, _target, units = state_segments(dataset._loaded, "loaded state")
    ranks = ranks_of(dataset._split)
    plan = make_plan(base, epoch, {"ranks": ranks, "worker": [w, n]}, deal(units, n)[w])
    dataset._active = build_plan_node(dataset._node, plan, ranks, worker, base)
    dataset._active_ctx = worker
    dataset._active_epoch = epoch
