"""The elastic-resume *plan*: its format, its validation, and how a saved dataset state becomes
plan segments (see ``elastic.py`` for the idea).

A plan is what a DataLoader worker or rank receives (and produces while the elastic epoch runs)::

    {"format": "resumable_iterable.elastic_plan", "version": 1,
     "base": "<fingerprint of the unsplit pipeline>", "epoch": 3,
     "target": {"ranks": [[rank, world_size], ...], "worker": [id, num_workers] | null},
     "segments": [{"fingerprint", "pipeline", "split": {"ranks", "worker"[, "deal"]},
                   "state": {...} | null, "start": null | {"shard_pos", "stop", "shard_seed"}}, ...]}

``target`` names the process the plan was dealt to; loading it anywhere else raises. A segment
has either a node ``state`` or, for a fresh carved segment, a ``start`` position; every segment
is built by :func:`make_segment` (and a start by :func:`make_start`).
"""

from __future__ import annotations

import copy
from typing import Any

from .. import state as _state
from ..distributed import deal_of, effective_worker
from ..nodes.checks import check_epoch, check_int
from ..state import PLAN_FORMAT

PLAN_VERSION = 1
#: the fields of a plan segment, and of the ``start`` of a fresh one
SEGMENT_KEYS = ("fingerprint", "pipeline", "split", "state", "start")
START_KEYS = ("shard_pos", "stop", "shard_seed")


def is_plan(state: Any) -> bool:
    return isinstance(state, dict) and state.get("format") == PLAN_FORMAT


def make_plan(base: str, epoch: int, target: dict, segments: list[dict]) -> dict:
    return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "base": base, "epoch": epoch,
            "target": {"ranks": [list(r) for r in target["ranks"]],
                       "worker": list(target["worker"]) if target["worker"] is not None else None},
            "segments": segments}


def make_segment(fingerprint: str, pipeline: dict, ranks: list, worker: list | None, *,
                 state: dict | None = None, start: dict | None = None, deal: int = 0) -> dict:
    """A plan segment: the split pipeline (``pipeline``, its fingerprint) that the process
    ``ranks`` / ``worker`` iterated, its shards dealt as ``deal`` says (``distributed.py``), with
    either its node ``state`` or, for a fresh carved segment, a ``start`` (:func:`make_start`).
    The segment takes the values given: copy what it must not share."""
    if (state is None) == (start is None):
        raise ValueError("a plan segment has exactly one of a node state and a start position")
    split = {"ranks": ranks, "worker": worker}
    if deal:
        split["deal"] = deal
    return {"fingerprint": fingerprint, "pipeline": pipeline, "split": split, "state": state, "start": start}


def make_start(shard_pos: int, stop: int, shard_seed: int | None) -> dict:
    """Where a fresh carved segment reads: shard positions ``[shard_pos, stop)`` of the shard order
    drawn from ``shard_seed`` (``None``: the natural order)."""
    return {"shard_pos": shard_pos, "stop": stop, "shard_seed": shard_seed}


def _check_ranks(value: Any, where: str) -> list[list]:
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) in (2, 3) and all(type(x) is int for x in p[:2]) and 0 <= p[0] < p[1]
            and p[2:] in ([], ["shards"], ["examples"]) for p in value):
        raise ValueError(f"{where}: 'ranks' must be a list of [rank, world_size] (or [rank, world_size, "
                         f"'shards' | 'examples']) entries, got {value!r}")
    return value


def check_worker(value: Any, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(type(x) is int for x in value)
            and 0 <= value[0] < value[1]):
        raise ValueError(f"{where}: 'worker' must be null or [worker_id, num_workers], got {value!r}")
    return (value[0], value[1])


def _check_split(split: Any, where: str) -> dict:
    if not isinstance(split, dict) or set(split) - {"base", "deal"} != {"ranks", "worker"}:
        raise ValueError(f"{where}: 'split' must be an object with 'ranks' and 'worker' (and optionally 'deal')")
    _check_ranks(split["ranks"], where)
    check_worker(split["worker"], where)
    deal_of(split, where)
    return split


def describe_split(ranks: list, worker, other_ranks: list = ()) -> str:
    """Words a split; ``other_ranks``, the ranks of the split it is compared with, has it say
    "no rank split" when it has none and the other has some."""
    parts = [f"rank {r[0]} of {r[1]} (by {r[2] if len(r) > 2 else 'auto'})" if any(len(q) > 2 for q in ranks)
             else f"rank {r[0]} of {r[1]}" for r in ranks] or ["no rank split"] * bool(other_ranks)
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
    dataset_state = _state.inline_buffers(dataset_state)
    _state.check_envelope(dataset_state)
    split = dataset_state.get("split")
    if split is None or "base" not in split:
        raise ValueError(f"{where}: the state has no 'split' entry (saved by an older version?): it cannot be "
                         "moved to another number of workers or ranks")
    _check_split(split, where)
    seg = make_segment(dataset_state["fingerprint"], copy.deepcopy(dataset_state["pipeline"]),
                       copy.deepcopy(split["ranks"]), copy.deepcopy(split["worker"]),
                       state=_state.copy_state(dataset_state["state"]), deal=deal_of(split, where))
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
    check_epoch(plan, where)
    if not isinstance(plan["base"], str):
        raise ValueError(f"{where}: 'base' must be a pipeline fingerprint string")
    t = plan["target"]
    if not isinstance(t, dict) or set(t) != {"ranks", "worker"}:
        raise ValueError(f"{where}: 'target' must be an object with 'ranks' and 'worker'")
    _check_ranks(t["ranks"], f"{where} target")
    check_worker(t["worker"], f"{where} target")
    if not isinstance(plan["segments"], list):
        raise ValueError(f"{where}: 'segments' must be a list")
    for i, seg in enumerate(plan["segments"]):
        w = f"{where} segment {i}"
        if not isinstance(seg, dict) or set(seg) != set(SEGMENT_KEYS):
            raise ValueError(f"{w}: expected an object with fingerprint, pipeline, split, state and start")
        _check_split(seg["split"], w)
        if (seg["state"] is None) == (seg["start"] is None):
            raise ValueError(f"{w}: exactly one of 'state' and 'start' must be set")
        if seg["start"] is not None:
            st = seg["start"]
            if not isinstance(st, dict) or set(st) != set(START_KEYS):
                raise ValueError(f"{w}: 'start' must hold shard_pos, stop and shard_seed")
            check_int(st, "shard_pos", w)
            check_int(st, "stop", w, lo=st["shard_pos"])
            check_int(st, "shard_seed", w, hi=2**64 - 1, none_ok=True)
        elif not isinstance(seg["state"], dict):
            raise ValueError(f"{w}: 'state' must be an object")
