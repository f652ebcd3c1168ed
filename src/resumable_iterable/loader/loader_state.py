"""torchdata ``StatefulDataLoader`` states: the keys they are made of, reading the parts elastic
resume needs, and writing a state for another number of workers whose workers continue with
given plans (see ``elastic.py``).

The keys are torchdata's, spelled here once (``tests/test_loader_state_keys.py`` checks them
against torchdata's own constants) so that reading a state - the ``inspect`` CLI does - never
imports torchdata. Use these names wherever a loader state is read or written."""

from __future__ import annotations

from typing import Any

from ..distributed import effective_worker
from ..state import FORMAT, PLAN_FORMAT
from .plan import describe_split, state_segments

# the main process's part (``stateful_dataloader.py``, module constants)
INDEX_SAMPLER_STATE = "_index_sampler_state"
SAMPLER_ITER_STATE = "_sampler_iter_state"
SAMPLER_ITER_YIELDED = "_sampler_iter_yielded"
ITERABLEDATASET_LEN_CALLED = "_IterableDataset_len_called"
SHARED_SEED = "_shared_seed"
ITERATOR_FINISHED = "_iterator_finished"
# a loader without worker processes (``_StatefulSingleProcessDataLoaderIter``)
NUM_YIELDED = "_num_yielded"
# a loader with worker processes (``_StatefulMultiProcessingDataLoaderIter``)
SNAPSHOT = "_snapshot"
MAIN_SNAPSHOT = "_main_snapshot"
WORKER_SNAPSHOTS = "_worker_snapshots"
SNAPSHOT_STEP = "_snapshot_step"
STEPS_SINCE_SNAPSHOT = "_steps_since_snapshot"
LAST_YIELDED_WORKER_ID = "_last_yielded_worker_id"
NUM_WORKERS = "_num_workers"
BASE_SEED = "_base_seed"
# one worker's snapshot, and the fetcher of any loader (``incremental_state.py``)
WORKER_ID = "worker_id"
FETCHER_STATE = "fetcher_state"
FETCHER_ENDED = "fetcher_ended"
DATASET_STATE = "dataset_state"
DATASET_ITER_STATE = "dataset_iter_state"

#: the main-process fields elastic resume carries over unchanged (its ``info["main"]`` keys)
_MAIN_FIELDS = {"index_sampler": INDEX_SAMPLER_STATE, "sampler_iter": SAMPLER_ITER_STATE,
                "sampler_yielded": SAMPLER_ITER_YIELDED, "len_called": ITERABLEDATASET_LEN_CALLED,
                "shared_seed": SHARED_SEED}


def worker_key(worker_id: int) -> str:
    """The key of worker ``worker_id``'s snapshot under :data:`WORKER_SNAPSHOTS`."""
    return f"worker_{worker_id}"


def loader_num_workers(state: Any) -> int:
    """How many workers the ``StatefulDataLoader`` that saved ``state`` had (0: main process)."""
    if not isinstance(state, dict):
        raise TypeError(f"a DataLoader state must be a dict, got {type(state).__name__}")
    if SNAPSHOT in state:
        try:
            n = state[SNAPSHOT][MAIN_SNAPSHOT][NUM_WORKERS]
        except (KeyError, TypeError):
            raise ValueError(f"DataLoader state: '{SNAPSHOT}' has no '{MAIN_SNAPSHOT}.{NUM_WORKERS}'") from None
        if type(n) is not int or n < 1:
            raise ValueError(f"DataLoader state: '{NUM_WORKERS}' must be a positive integer, got {n!r}")
        return n
    if NUM_YIELDED in state:
        return 0
    raise ValueError(f"not a StatefulDataLoader state: it has neither '{SNAPSHOT}' (worker processes) nor "
                     f"'{NUM_YIELDED}' (main process)" + _what_else(state))


def _what_else(state: dict) -> str:
    """The end of the message refusing ``state`` as a loader's: what it is, when it is a state of
    this library given in the wrong place (a dataset's, a plan, a list of rank states)."""
    if state.get("format") == FORMAT:
        return ("; it is a dataset's state (dataset.state_dict()): load it into the dataset "
                "(dataset.load_state_dict), or resume the loader from the loader's own state_dict()")
    if state.get("format") == PLAN_FORMAT:
        return "; it is an elastic plan (redistribute_states): load it into the dataset (dataset.load_state_dict)"
    return ""



def _check_saved_in(target: dict, worker: tuple[int, int] | None, where: str) -> None:
    """Refuse a dataset state (or plan) whose split says another worker (``target["worker"]``,
    already checked to be ``[id, num_workers]`` or ``None``) saved it than the one whose snapshot
    holds it: dealing both copies of one worker's state, and none of the other's, would repeat
    the examples of the one and lose the other's."""
    saved = tuple(target["worker"]) if target["worker"] is not None else None
    if effective_worker(saved) != effective_worker(worker):
        raise ValueError(f"{where} holds the state saved by {describe_split(target['ranks'], saved)}, not by "
                         f"{describe_split(target['ranks'], worker)}: each worker's snapshot must hold its own "
                         "state (was the state edited?)")


def parse_loader_state(state: dict, where: str = "DataLoader state") -> dict:
    """The parts of a ``StatefulDataLoader`` state that elastic resume needs.

    ``units`` lists the saved segments in the order the old loader would have continued: its
    workers starting with the one that was due next, each worker's segments in order. Workers
    that had finished the epoch contribute nothing.
    """
    num_workers = loader_num_workers(state)
    info: dict = {"num_workers": num_workers, "finished": bool(state.get(ITERATOR_FINISHED, False))}
    bases, epochs, targets, units = set(), set(), [], []

    def take(ds_state: Any, w: str, worker: tuple[int, int] | None = None) -> None:
        base, epoch, target, segs = state_segments(ds_state, w)
        _check_saved_in(target, worker, w)
        bases.add(base)
        epochs.add(epoch)
        targets.append(target)
        units.extend(segs)

    if num_workers == 0:
        for key in (NUM_YIELDED, DATASET_STATE):
            if key not in state:
                raise ValueError(f"{where}: missing '{key}'")
        take(state[DATASET_STATE], f"{where} (main process)")
        info["num_yielded"] = state[NUM_YIELDED]
        info["main"] = {k: state.get(key) for k, key in _MAIN_FIELDS.items()}
    else:
        snap = state[SNAPSHOT]
        since = state.get(STEPS_SINCE_SNAPSHOT, 0)
        if since:
            raise ValueError(f"{where}: it was taken {since} batch(es) after the loader's last snapshot "
                             "(snapshot_every_n_steps > 1); elastic resume needs snapshot_every_n_steps=1")
        for key in (SNAPSHOT_STEP, LAST_YIELDED_WORKER_ID, MAIN_SNAPSHOT, WORKER_SNAPSHOTS):
            if key not in snap:
                raise ValueError(f"{where}: '{SNAPSHOT}' is missing '{key}'")
        wstates = snap[WORKER_SNAPSHOTS]
        keys = [worker_key(i) for i in range(num_workers)]
        if not isinstance(wstates, dict) or sorted(wstates) != sorted(keys):
            raise ValueError(f"{where}: expected worker snapshots {keys}, got {sorted(wstates) if isinstance(wstates, dict) else wstates!r}")
        last = snap[LAST_YIELDED_WORKER_ID]
        if type(last) is not int or not 0 <= last < num_workers:
            raise ValueError(f"{where}: '{LAST_YIELDED_WORKER_ID}' = {last!r} is not a worker id")
        for j in range(num_workers):
            w = (last + 1 + j) % num_workers
            ws = wstates[worker_key(w)]
            if not isinstance(ws, dict) or DATASET_STATE not in ws:
                raise ValueError(f"{where}: worker {w} snapshot has no dataset state")
            fetcher = ws.get(FETCHER_STATE) or {}
            base, epoch, target, segs = state_segments(ws[DATASET_STATE], f"{where} worker {w}")
            _check_saved_in(target, (w, num_workers), f"{where} worker {w}")
            bases.add(base)
            epochs.add(epoch)
            targets.append(target)
            if not fetcher.get(FETCHER_ENDED, False):  # a worker that ended has nothing left
                units.extend(segs)
        info["num_yielded"] = snap[SNAPSHOT_STEP]
        main = snap[MAIN_SNAPSHOT]
        info["main"] = {k: main.get(key) for k, key in _MAIN_FIELDS.items()}
        info["base_seed"] = main.get(BASE_SEED)
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
    main = info["main"]
    n = info["num_yielded"]
    fetcher = {DATASET_ITER_STATE: None, FETCHER_ENDED: False}
    if num_workers == 0:
        (plan,) = plans
        return {INDEX_SAMPLER_STATE: main.get("index_sampler"), SAMPLER_ITER_STATE: main.get("sampler_iter"),
                SAMPLER_ITER_YIELDED: n, NUM_YIELDED: n, ITERABLEDATASET_LEN_CALLED: main.get("len_called"),
                SHARED_SEED: main.get("shared_seed"), FETCHER_STATE: fetcher, DATASET_STATE: plan,
                ITERATOR_FINISHED: info["finished"]}
    if len(plans) != num_workers:
        raise ValueError(f"expected {num_workers} plans, got {len(plans)}")
    if base_seed is None:
        base_seed = info.get("base_seed")
    if base_seed is None:
        import random

        base_seed = random.getrandbits(63)
    main_snapshot = {NUM_WORKERS: num_workers, SAMPLER_ITER_STATE: main.get("sampler_iter"),
                     INDEX_SAMPLER_STATE: main.get("index_sampler"), SAMPLER_ITER_YIELDED: n,
                     ITERABLEDATASET_LEN_CALLED: main.get("len_called"), SHARED_SEED: main.get("shared_seed"),
                     BASE_SEED: base_seed}
    workers = {worker_key(j): {WORKER_ID: j, DATASET_STATE: plans[j], FETCHER_STATE: dict(fetcher)}
               for j in range(num_workers)}
    return {SNAPSHOT: {SNAPSHOT_STEP: n, LAST_YIELDED_WORKER_ID: num_workers - 1, MAIN_SNAPSHOT: main_snapshot,
                       WORKER_SNAPSHOTS: workers},
            STEPS_SINCE_SNAPSHOT: 0, ITERATOR_FINISHED: info["finished"]}
