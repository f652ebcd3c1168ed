"""The main process's per-batch snapshot in ``ri.StatefulDataLoader``: only the worker that sent
the batch has its state rebuilt.

torchdata's loader keeps each worker's state in the main process as a flat dict that the deltas
sent with the batches update (``_IncrementalWorkerState``), and after every batch it takes a
snapshot for ``state_dict()`` by rebuilding the nested state of *every* worker from its flat dict.
Only one worker's state changed since the last snapshot - the one whose batch it is - so with W
workers W - 1 of those rebuilds repeat the last one; with an exact shuffle buffer, whose entries
are many keys, they were the largest part of the main process's work per batch.

:func:`cache_worker_states` makes the iterator keep each worker's rebuilt state until a delta
changes that worker's: each worker's incremental state becomes a :class:`_CachedWorkerState` (the
same object, its class swapped for a subclass), whose ``apply_delta`` - called by torchdata
wherever it updates it - drops the kept one. A snapshot then holds the same dict object for a
worker as the one before it while that worker sent nothing, as it already shared the leaves
(lists, strings) of that worker's flat state: states returned by ``state_dict()`` must not be
edited in place, which was already true (the snapshot is the iterator's own).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

try:
    from torchdata.stateful_dataloader.incremental_state import _IncrementalWorkerState
except ImportError:  # pragma: no cover - torchdata is part of the [torch] extra
    _IncrementalWorkerState = None


if _IncrementalWorkerState is not None:
    class _CachedWorkerState(_IncrementalWorkerState):
        """A worker's incremental state that keeps its rebuilt nested state until a delta comes."""

        def apply_delta(self, delta_state_dict: dict) -> None:
            self.__dict__.pop("_ri_rebuilt", None)
            super().apply_delta(delta_state_dict)

        def get_state(self) -> dict:
            rebuilt = self.__dict__.get("_ri_rebuilt")
            if rebuilt is None:
                rebuilt = self.__dict__["_ri_rebuilt"] = super().get_state()
            return rebuilt


def _update_snapshot(ref: "weakref.ref", snapshot_step: int, last_yielded_worker_id: int, num_workers: int,
                     main_snapshot: dict, worker_snapshots: dict) -> None:
    self = ref()  # (held weakly: a bound method kept on the iterator would make a reference cycle)
    for ws in worker_snapshots.values():
        if type(ws) is _IncrementalWorkerState:  # (one made since the last snapshot: a startup, a new pass)
            ws.__class__ = _CachedWorkerState
    type(self)._update_snapshot(self, snapshot_step, last_yielded_worker_id, num_workers, main_snapshot,
                                worker_snapshots)


def cache_worker_states(it: Any) -> Any:
    """``it``, torchdata's multiprocessing iterator, rebuilding from now on only the states of the
    workers that changed at each snapshot (see the module doc); other iterators as they are."""
    if _IncrementalWorkerState is None or not isinstance(getattr(it, "_worker_snapshots", None), dict):
        return it
    if not hasattr(type(it), "_update_snapshot"):  # (a torchdata that snapshots otherwise)
        return it
    # the iterator must not refer to itself: torchdata shuts an iterator's workers down when it is
    # freed, and a reference cycle would leave that, and the worker processes, to the cyclic collector
    it._update_snapshot = functools.partial(_update_snapshot, weakref.ref(it))
    return it
