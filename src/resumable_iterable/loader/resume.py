"""How an :class:`~resumable_iterable.IterableDataset` picks the node tree a process iterates:
a fresh pass, a state loaded with ``load_state_dict`` (plain or an elastic plan), or a state
loaded in the main process and then split among DataLoader workers. Used by ``dataset.py``'s
``__iter__`` / ``state_dict`` / ``load_state_dict`` and by the torch integration."""

from __future__ import annotations

import sys
from typing import Any

from .. import state as _state
from ..distributed import effective_worker
from .elastic import build_plan_node, deal
from .loader_state import _loader_keys, loader_num_workers
from ..nodes.base import Node
from .plan import describe_split, is_plan, make_plan, state_segments


def split_description(dataset: Any, worker) -> dict:
    from ..dataset import _shape_of
    from ..distributed import ranks_of

    return {"base": _shape_of(dataset._node)[1], "ranks": ranks_of(dataset._split),
            "worker": list(worker) if worker is not None else None}


def load_node(dataset: Any, state: Any, worker) -> tuple[Node, int]:
    """Validate ``state`` (a plain state or an elastic plan) for ``dataset`` iterated in ``worker``
    (``(id, num_workers)`` or ``None``) and return the loaded node and its epoch. Nothing of the
    dataset changes; raises ``ValueError`` naming the problem."""
    from ..dataset import _shape_of
    from ..distributed import ranks_of, split_for_process

    ranks = ranks_of(dataset._split)
    base = _shape_of(dataset._node)[1]
    if is_plan(state):
        return build_plan_node(dataset._node, state, ranks, worker, base), state["epoch"]
    state = _state.inline_buffers(state)
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
    from ..distributed import current_worker

    if current_worker() is not None and "torch" in sys.modules:
        from ..integrations.torch import shared_epoch

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
    if not dataset._pending or dataset._active is None:
        return
    loaded_in = dataset._active_ctx
    claims = dataset._claims
    if loaded_in == worker:
        if worker is None and claims is not None:
            from ..integrations.torch import claimed

            if claimed(claims):  # DataLoader workers already used it
                _drop_pending(dataset)
        return
    if loaded_in is not None or worker is None or dataset._loaded is None:
        _drop_pending(dataset)  # another process's state, or just a fresh start: start afresh here
        return
    # loaded in the main process, now inside DataLoader worker `worker`
    if claims is None:
        raise ValueError("this dataset holds a state loaded with load_state_dict() before torch was imported and is "
                         "now iterated by DataLoader workers; import torch first, or load the state through "
                         "resumable_iterable.StatefulDataLoader")
    from ..distributed import ranks_of
    from ..integrations.torch import claim

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
