"""Running an elastic plan in one process (the plan format is in ``plan.py``; how a plan is dealt
in ``elastic.py``): :class:`SegmentsNode`, the pipeline of one DataLoader worker or rank during an
epoch resumed with another worker or rank count, runs the segments dealt to it one after another;
:func:`build_plan_node` checks a plan against the dataset and the process that loads it and builds
that node (each segment's split pipeline, loaded with its saved state or, for a fresh segment
carved off, started at its shards); :func:`plan_state` is the plan that node's state is, for
``state_dict()``. ``resume.py`` builds it, ``session.py`` iterates it and takes its state.

State of :class:`SegmentsNode`: ``{"node", "current", "children"}`` - the segment being run;
those before are done."""

from __future__ import annotations

from typing import Any, Iterator

from .. import state as _state
from ..distributed import deal_of, effective_worker, matching_split, split_ranks, split_workers
from ..nodes.base import Node
from ..nodes.checks import check_int
from .plan import check_plan_envelope, check_worker, describe_split, make_plan, make_segment


class SegmentsNode(Node):
    """Runs segments one after another (the pipeline of one process during an elastic epoch).

    State: ``{"node", "current", "children"}`` - the segment being run; those before are done.
    """

    kind = "segments"

    def formats_as_arrow_rows(self) -> bool:  # its segments' rows pass through as they are
        return True

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

    def dealt_shards(self, seed: int) -> Node:
        raise ValueError("an elastic plan is already the pipeline of one process; its shards are dealt")

    def position(self) -> dict | None:
        st = self._state_dict
        return self.children[st["current"]].position() if st["current"] < len(self.children) else None

    @property
    def current(self) -> int:
        """The index of the segment being run (those before it are done)."""
        return self._state_dict["current"]


# ============================================================================ loading a plan


def _one_way(ranks: list) -> list:
    """``ranks`` (a split's ``[rank, world_size, ...]`` entries) without those of world size 1."""
    return [list(r) for r in ranks if r[1] != 1]


def build_plan_node(template: Node, plan: dict, current_ranks: list, current_worker, base: str) -> SegmentsNode:
    """Validate ``plan`` against a dataset (its unsplit pipeline ``template``) and the process it
    is loaded in; return the loaded :class:`SegmentsNode`. Raises ``ValueError`` naming the problem."""
    check_plan_envelope(plan)
    if plan["base"] != base:
        raise ValueError("this elastic plan was made for a different pipeline (its base fingerprint "
                         f"{plan['base']} is not this dataset's {base})")
    t = plan["target"]
    here_w = effective_worker(current_worker)
    want_w = effective_worker(tuple(t["worker"]) if t["worker"] is not None else None)
    # a plan dealt to rank 0 of 1 (``redistribute_states(states, 1)``) loads into the unsplit dataset
    # too, and one dealt to no rank split into ``split_dataset_by_node(ds, 0, 1)``: its segments
    # rebuild their own splits, the target only says which process runs them
    if _one_way(t["ranks"]) != _one_way(current_ranks) or here_w != want_w:
        hint = ("; load it into split_dataset_by_node(dataset, rank, world_size) with the plan's rank and world size"
                if len(t["ranks"]) > len(current_ranks) else "")
        here = describe_split(current_ranks, current_worker, t["ranks"])
        raise ValueError(f"this elastic plan was dealt to {describe_split(t['ranks'], t['worker'])}, but it is "
                         f"loaded in {here}: each worker/rank must load its own state{hint}")
    epoch = plan["epoch"]
    nodes, splits = [], []
    for i, seg in enumerate(plan["segments"]):
        where = f"elastic plan segment {i}"
        worker = check_worker(seg["split"]["worker"], where)
        deal = deal_of(seg["split"], where)
        ranks = seg["split"]["ranks"]
        node = matching_split(lambda as_before: split_workers(split_ranks(template, ranks, epoch, deal, as_before),
                                                              worker, epoch, deal).clone(), seg["fingerprint"], ranks)
        shape, fp = node.fingerprinted_shape()
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
            src = node.single_source()
            start = seg["start"]
            if src is None:
                raise ValueError(f"{where}: a fresh segment needs a pipeline with a single source")
            fresh = src.state_dict()  # a source's state: a few integers (see nodes/source.py)
            if start["stop"] > src.num_shards:
                raise ValueError(f"{where}: 'stop' = {start['stop']} is past the {src.num_shards} shards of the segment")
            # the saved shard order, not the one this pipeline's shuffle drew: a shuffle() without a seed
            # draws another seed in every process, and [shard_pos, stop) are positions in the saved order
            # (the source refuses a seed where no shuffle sets one, and none where one does)
            src.load_state_dict({**fresh, "shard_seed": start["shard_seed"], "shard_pos": start["shard_pos"],
                                 "stop": start["stop"]})
        nodes.append(node)
        splits.append({"ranks": seg["split"]["ranks"], "worker": seg["split"]["worker"], "deal": deal})
    return SegmentsNode(nodes, splits, base, {"ranks": t["ranks"], "worker": t["worker"]})


def plan_state(node: SegmentsNode, epoch: int) -> dict:
    """The plan state of a running :class:`SegmentsNode` (segments already finished are left out)."""
    segs = []
    for i in range(node.current, len(node.children)):
        child = node.children[i]
        shape, fp = child.fingerprinted_shape()
        split = node.splits[i]
        segs.append(make_segment(fp, _state.copy_state(shape), [list(r) for r in split["ranks"]],
                                 list(split["worker"]) if split["worker"] else None, state=child.state_dict(),
                                 deal=split["deal"]))
    return make_plan(node.base, epoch, node.target, segs)
