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
source under per-example ``map``/``filter`` (without ``with_indices``), column operations,
``shuffle`` (``buffer_state`` ``"examples"`` or ``"drop"``) and ``batch`` (without
``drop_last_batch``) - a segment's **untouched shards** (after the shard it is reading, in its
shard order) are known from the source state. They are carved off into new *fresh* segments (the
same split pipeline started from scratch, reading only those shards), and the donor segment gets
a ``stop`` position so it ends before them. Every example is still yielded exactly once (a
``batch`` at the cut may be short). A batched ``map``/``filter`` is never carved through: its
outputs may depend on which rows share a batch (HF's ``group_texts`` concatenates a batch and
drops its remainder), and a cut would change them.

This module makes plans: it deals the saved segments (carving untouched shards off) among the
new workers or ranks. Running a plan in a process (:class:`~resumable_iterable.loader.segments.SegmentsNode`,
built from a plan and saved as one) is in ``segments.py``, the plan format in ``plan.py``,
torchdata's loader state in ``loader_state.py``, and how a dataset picks the node tree it iterates
(fresh, loaded, or a plan) in ``resume.py``.

Public entry points: :func:`redistribute_states` (ranks) and
``resumable_iterable.StatefulDataLoader`` (workers; see ``integrations/torch.py``), which uses
:func:`remap_loader_state`.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

from .. import state as _state
from ..distributed import check_strategy, deal_of, effective_worker
from ..nodes.checks import as_int
from .loader_state import NUM_YIELDED, SNAPSHOT, build_loader_state, loader_num_workers, parse_loader_state
from .plan import (PLAN_FORMAT, check_plan_envelope, describe_split, make_plan, make_segment,  # noqa: F401
                   make_start, state_segments)
from .segments import SegmentsNode  # noqa: F401 - its home until this module was split: pickles name it here

#: node kinds through which untouched shards can be handed to another worker (see module doc)
_CARVABLE = {"map", "filter", "columns", "shuffle", "batch"}
_SOURCE_KEYS = {"node", "shard_seed", "shard_pos", "offset", "stop"}


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
        if kind in ("map", "filter") and (node.get("with_indices") or node.get("batched")):
            return None  # indices, or outputs that depend on which rows share a batch (HF's group_texts)
        if kind == "batch" and node.get("drop_last_batch"):
            return None  # the donor's last batch, cut short, would be dropped
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
    split = copy.deepcopy(seg["split"])
    fresh = make_segment(seg["fingerprint"], copy.deepcopy(seg["pipeline"]), split["ranks"], split["worker"],
                         start=make_start(cut, stop, seed), deal=deal_of(split))
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


# ============================================================================ DataLoader states and ranks


def remap_loader_state(state: dict, num_workers: int, carve: bool = True) -> dict:
    """Rewrite a ``StatefulDataLoader`` state saved with W workers for ``num_workers`` workers.

    The rest of the epoch yields every example the saved loader had not yet yielded, exactly once
    (see the module doc for the order). A state saved with ``num_workers`` workers is returned
    unchanged. ``num_workers=0`` means the main process.
    """
    num_workers = as_int(num_workers, "num_workers")
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


def _seeds_of(state: Any) -> Any:
    """The ``"seeds"`` entry of the first dataset state (or plan) in ``state`` that has one."""
    for _, doc in _state.find_documents(state, (_state.FORMAT, PLAN_FORMAT)):
        if isinstance(doc, dict) and doc.get("seeds") is not None:
            return doc["seeds"]
    return None


def _saved_by(ranks: list) -> str:
    """Which rank saved a state, in words (its rank split only: the worker split of a DataLoader
    state is the loader's business, and a dataset state's was checked to be none)."""
    if not ranks:
        return ("it comes from a process that did not split the dataset: call "
                "split_dataset_by_node(ds, rank, world_size) in every rank")
    return "it comes from " + ", ".join(f"rank {q[0]} of {q[1]}" for q in ranks)


def redistribute_states(states: list[dict], world_size: int, num_workers: int | None = None,
                        carve: bool = True, strategy: str | None = None) -> list[dict]:
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
    (see ``resumable_iterable.loader.elastic``) are handed to the ranks that would idle, unless ``carve=False``.

    ``num_workers`` sets the worker count of the returned DataLoader states (default: the saved
    one, which must then be the same on every rank); ``resumable_iterable.StatefulDataLoader``
    loads them with any worker count. ``strategy``: the ``split_dataset_by_node`` strategy the new
    ranks use (default: the saved ranks' one).
    """
    if not isinstance(states, (list, tuple)) or not states:
        raise ValueError("redistribute_states expects the non-empty list of per-rank states, in rank order")
    world_size = as_int(world_size, "world_size", lo=1)
    old = len(states)
    loader = [isinstance(s, dict) and (SNAPSHOT in s or NUM_YIELDED in s) for s in states]
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
        if old == 1 and (not ranks or ranks[-1][:2] != [0, 1]):
            ranks = [*ranks, [0, 1]]  # one process that never called split_dataset_by_node: rank 0 of 1
        if not ranks or ranks[-1][:2] != [r, old]:
            raise ValueError(f"states[{r}] was not saved by rank {r} of {old} ({_saved_by(ranks)}): pass the "
                             "states of all ranks, in rank order")
        if prefix is None:
            prefix, saved_strategy = ranks[:-1], ranks[-1][2:]
        elif ranks[:-1] != prefix or ranks[-1][2:] != saved_strategy:
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
    if strategy is not None:
        saved_strategy = [check_strategy(strategy)] if strategy != "auto" else []

    def new_rank(r: int) -> list:
        return [*prefix, [r, world_size, *saved_strategy]]

    # the seeds a rank's pipeline drew when built without one (each rank drew its own): new rank r
    # draws its later epochs from old rank r's (modulo the old world size), as that rank would have
    rank_seeds = [_seeds_of(s) for s in states]

    def seeded(plan: dict, r: int) -> dict:
        seeds = rank_seeds[r % old]
        if seeds is not None:
            plan["seeds"] = copy.deepcopy(seeds)
        return plan

    if infos is None:
        bins = deal(units, world_size, carve=carve)
        return [seeded(make_plan(base, epoch, {"ranks": new_rank(r), "worker": None}, bins[r]), r)
                for r in range(world_size)]

    if num_workers is None:
        counts = {i["num_workers"] for i in infos}
        if len(counts) != 1:
            raise ValueError(f"the ranks saved DataLoader states with different worker counts {sorted(counts)}: "
                             "pass num_workers=")
        num_workers = counts.pop()
    num_workers = as_int(num_workers, "num_workers")
    per = max(num_workers, 1)
    bins = deal(units, world_size * per, carve=carve and not finished)
    out = []
    for r in range(world_size):
        plans = []
        for j in range(per):
            segs = bins[j * world_size + r] if not finished else []
            worker = [j, num_workers] if num_workers > 0 else None
            plans.append(seeded(make_plan(base, epoch, {"ranks": new_rank(r), "worker": worker}, segs), r))
        # batches yielded so far by the old ranks this new rank takes over (a count for the loader's
        # bookkeeping only: what is left to yield is in the plans)
        mine = [o for o in range(old) if o % world_size == r]
        info = dict(infos[mine[0] if mine else 0], finished=finished,
                    num_yielded=sum(infos[o]["num_yielded"] for o in mine))
        out.append(build_loader_state(info, plans, num_workers))
    return out
