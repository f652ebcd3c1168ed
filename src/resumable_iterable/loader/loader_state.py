"""torchdata ``StatefulDataLoader`` states: reading the parts elastic resume needs, and writing a
state for another number of workers whose workers continue with given plans (see ``elastic.py``)."""

from __future__ import annotations

from typing import Any

from .plan import state_segments


def loader_keys():
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
    K = loader_keys()
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
    K = loader_keys()
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
    K = loader_keys()
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
