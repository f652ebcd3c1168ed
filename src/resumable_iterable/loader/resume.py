"""Which node tree a process iterates: a fresh pass, a state loaded with ``load_state_dict``
(plain or an elastic plan), or its part of a state loaded in the main process and then split
among DataLoader workers.

Plain functions of a dataset's pipeline *template* (its unsplit node tree) and its rank
*split* (``("rank", rank, world_size, strategy)`` entries); the process state that decides which one
applies is held by ``session.py``. Nothing here changes its arguments: a state is validated
completely and loaded into a fresh copy of the pipeline.
"""

from __future__ import annotations

from typing import Any

from .. import state as _state
from ..distributed import (deal_of, effective_worker, has_world_size_1, matching_split, ranks_of, split_deal,
                           split_for_process)
from ..nodes.base import Node
from . import hooks
from .elastic import deal
from .loader_state import DATASET_STATE, SNAPSHOT, WORKER_SNAPSHOTS, loader_num_workers, worker_key
from .plan import describe_split, is_plan, make_plan, state_segments
from .segments import build_plan_node


def drawn_seeds(template: Node) -> list[list[int]]:
    """The ``"seeds"`` entry of a state: ``[[i, seed], ...]`` for each node of the unsplit pipeline
    (``i``: its place in ``template.walk_built()``) that drew its seed at random when it was built. A
    state of a pipeline that drew none has no entry."""
    return [[i, s] for i, n in enumerate(template.walk_built()) if (s := n.drawn_seed()) is not None]


def seeds_to_adopt(template: Node, state: Any, where: str = "state") -> list[tuple[int, int]]:
    """``(i, seed)`` for each node of ``template`` (``i``: its place in ``walk_built()``) that drew its
    seed when it was built and that a state saved a seed for (``"seeds"``, see :func:`drawn_seeds`):
    loading the state makes them draw from those (``IterationSession.adopt_seeds``), so the epochs
    after the saved one are the saved run's. A node given a seed keeps it. Raises ``ValueError``
    naming a malformed entry."""
    if not isinstance(state, dict) or state.get("seeds") is None:
        return []
    nodes = list(template.walk_built())
    seeds = check_seeds(state["seeds"], len(nodes), where)
    return [(i, seed) for i, seed in seeds if nodes[i].drawn_seed() is not None]


def check_seeds(seeds: Any, n_nodes: int, where: str) -> list:
    """``seeds`` (a state's ``"seeds"`` entry) checked for a pipeline of ``n_nodes`` nodes (counted
    by ``walk_built``); raises ``ValueError`` naming a malformed entry (``inspect`` reports it)."""
    if not isinstance(seeds, list) or not all(
            isinstance(e, list) and len(e) == 2 and all(type(x) is int for x in e) for e in seeds):
        raise ValueError(f"{where}: 'seeds' must be a list of [node index, seed] pairs of integers, got {seeds!r}")
    for i, seed in seeds:
        if not 0 <= i < n_nodes or not 0 <= seed < 2**64:
            raise ValueError(f"{where}: 'seeds' entry {[i, seed]} is out of range (the pipeline has {n_nodes} "
                             "nodes; a seed is in [0, 2**64 - 1])")
    return seeds


def shape_nodes(shape: Any) -> int:
    """How many nodes ``walk_built`` goes through in a pipeline of this saved shape: the groups of a
    ``shard_interleave`` are copies of one input, counted once."""
    if not isinstance(shape, dict):
        return 0
    kids = shape.get("children") if isinstance(shape.get("children"), list) else []
    if shape.get("node") == "shard_interleave":
        kids = kids[:1]
    return 1 + sum(shape_nodes(c) for c in kids)


def split_description(template: Node, split: tuple, worker, deal: int) -> dict:
    """The ``"split"`` entry of a state saved in ``worker`` (``(id, num_workers)`` or ``None``),
    whose shards were dealt as ``deal`` says (``distributed.py``; recorded when not 0)."""
    desc = {"base": template.fingerprint(), "ranks": ranks_of(split),
            "worker": list(worker) if worker is not None else None}
    if deal:
        desc["deal"] = deal
    return desc


def fresh_node(template: Node, split: tuple, epoch: int, worker) -> tuple[Node, int]:
    """A fresh pass at ``epoch`` over the part of the pipeline that this process (its rank split and
    the DataLoader ``worker`` it runs in, ``(id, num_workers)`` or ``None``) reads, and how its
    shards were dealt."""
    deal = split_deal(template, ranks_of(split), worker)
    node = split_for_process(template, split, epoch=epoch, deal=deal).clone()  # (warns of idle workers)
    node.set_epoch(epoch)
    node.reset()
    return node, deal


def load_node(template: Node, split: tuple, state, worker) -> tuple[Node, int, int]:
    """Validate ``state`` (a plain state or an elastic plan) for a dataset iterated in ``worker``
    (``(id, num_workers)`` or ``None``) and return the loaded node, its epoch and how its shards
    were dealt (its ``"deal"``). Raises ``ValueError`` naming the problem."""
    ranks = ranks_of(split)
    base = template.fingerprint()
    if is_plan(state):
        return build_plan_node(template, state, ranks, worker, base), state["epoch"], 0
    state = _state.inline_buffers(state)
    _state.check_envelope(state)
    deal = deal_of(state.get("split"))
    node = matching_split(lambda as_before: split_for_process(template, split, worker=worker, epoch=state["epoch"],
                                                             deal=deal, as_before=as_before).clone(),
                          state["fingerprint"], ranks)
    shape, fp = node.fingerprinted_shape()
    if state["fingerprint"] != fp:
        saved = state.get("split")
        if isinstance(saved, dict) and saved.get("base") == base and "ranks" in saved and "worker" in saved:
            saved_w = tuple(saved["worker"]) if isinstance(saved["worker"], list) else None
            if [r[:2] for r in saved["ranks"]] == [r[:2] for r in ranks] and saved["ranks"] != ranks:
                raise ValueError(
                    f"this state was saved by {describe_split(saved['ranks'], saved_w)} but is loaded in "
                    f"{describe_split(ranks, worker)}: the ranks split the dataset with another "
                    "split_dataset_by_node strategy; call it with the strategy of the saved run")
            if has_world_size_1(saved["ranks"]) and saved["ranks"] != ranks:
                raise ValueError(
                    f"this state was saved by {describe_split(saved['ranks'], saved_w)} but is loaded in "
                    f"{describe_split(ranks, worker, saved['ranks'])}: an earlier version split the pipeline at "
                    "split_dataset_by_node(ds, 0, 1) (it dealt a shuffled dataset's shards once more there, and "
                    "listed a concatenation's inputs as one-shard pieces), so this state resumes only in the split "
                    "it was saved in; from the next epoch on, that split reads what the unsplit dataset reads")
            if saved["ranks"] != ranks or effective_worker(saved_w) != effective_worker(worker):
                raise ValueError(
                    f"this state was saved by {describe_split(saved['ranks'], saved_w)} but is loaded in "
                    f"{describe_split(ranks, worker, saved['ranks'])}. Resume a DataLoader through its own "
                    "state_dict(); resumable_iterable.StatefulDataLoader loads it with another number of workers, and "
                    "resumable_iterable.redistribute_states moves rank states to another world size")
        diff = _state.shape_difference(state["pipeline"], shape)
        raise ValueError("this state was saved from a different pipeline: "
                         + (diff or "its fingerprint does not match (was the state edited?)"))
    node.validate(state["state"])
    node.set_epoch(state["epoch"])
    node.load(state["state"])
    return node, state["epoch"], deal


def worker_part(template: Node, split: tuple, loaded: dict, worker: tuple[int, int]) -> tuple[Node, int]:
    """Worker ``worker``'s part of a state ``loaded`` in the main process, dealt among the
    workers like an elastic resume from one process; returns the loaded node and its epoch."""
    w, n = worker
    base, epoch, _target, units = state_segments(loaded, "loaded state")
    ranks = ranks_of(split)
    plan = make_plan(base, epoch, {"ranks": ranks, "worker": [w, n]}, deal(units, n)[w])
    return build_plan_node(template, plan, ranks, worker, base), epoch


def validate_loader_state(template: Node, split: tuple, loader_state: dict, num_workers: int) -> int:
    """Check every dataset state inside a ``StatefulDataLoader`` state against a dataset for a
    loader with ``num_workers`` workers; return the epoch. Raises ``ValueError`` before any worker starts."""
    saved = loader_num_workers(loader_state)
    if saved != num_workers:
        raise ValueError(f"the DataLoader state was saved with {saved} workers but this loader has {num_workers}")
    if num_workers == 0:
        epoch = load_node(template, split, loader_state[DATASET_STATE], None)[1]
        rng = loader_state[DATASET_STATE].get("rng") if isinstance(loader_state[DATASET_STATE], dict) else None
        h = hooks.current()
        if rng is not None and h is not None:  # the collator's generator (save_worker_rng)
            h.check_rng_state(rng, "state 'rng'")
        return epoch
    epochs = set()
    wstates = loader_state[SNAPSHOT][WORKER_SNAPSHOTS]
    for j in range(num_workers):
        ws = wstates.get(worker_key(j)) if isinstance(wstates, dict) else None
        if not isinstance(ws, dict) or DATASET_STATE not in ws:
            raise ValueError(f"DataLoader state: worker {j} has no dataset state")
        try:
            epochs.add(load_node(template, split, ws[DATASET_STATE], (j, num_workers))[1])
            rng = ws[DATASET_STATE].get("rng") if isinstance(ws[DATASET_STATE], dict) else None
            h = hooks.current()
            if rng is not None and h is not None:
                h.check_rng_state(rng, "state 'rng'")
        except ValueError as e:
            raise ValueError(f"DataLoader state, worker {j}: {e}") from None
    if len(epochs) != 1:
        raise ValueError(f"DataLoader state: its workers saved different epochs {sorted(epochs)}")
    return epochs.pop()
