"""``ri.StatefulDataLoader`` rebuilds, at each per-batch snapshot, only the state of the worker that
sent the batch (``integrations/torch/snapshots.py``); the others keep the one rebuilt before. Every
state it gives must be the one a full rebuild gives: after every batch, across a resume (whose
workers send their first states at startup), persistent workers' next pass, and snapshots every
few steps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

import resumable_iterable as ri  # noqa: E402
from resumable_iterable.integrations.torch import loader as loader_module  # noqa: E402
from resumable_iterable.integrations.torch import snapshots  # noqa: E402
from data import gen_src  # noqa: E402
from harness import json_roundtrip  # noqa: E402


def build():
    return gen_src(6, 12).shuffle(seed=3, buffer_size=8)


def states_per_batch(monkeypatch, cached: bool, workers: int, resume_at: int | None = None, epochs: int = 1,
                     **kw) -> tuple[list, list]:
    """The ids of every batch and the loader's state after it (JSON round-tripped), over ``epochs``
    passes; with ``resume_at``, the run is resumed in a new loader from the state after that batch."""
    with monkeypatch.context() as m:
        if not cached:
            m.setattr(loader_module, "cache_worker_states", lambda it: it)
        ds = build()
        # the same base seed in both runs (torch draws one per iterator otherwise)
        loader = ri.StatefulDataLoader(ds, batch_size=4, num_workers=workers,
                                       generator=torch.Generator().manual_seed(0), **kw)
        ids, states = [], []
        for epoch in range(epochs):
            ds.set_epoch(epoch)
            for k, batch in enumerate(loader):
                ids.append(batch["id"].tolist())
                states.append(json_roundtrip(loader.state_dict()))
                if resume_at is not None and epoch == 0 and k == resume_at:
                    break
        if resume_at is not None:
            again = ri.StatefulDataLoader(build(), batch_size=4, num_workers=workers,
                                          generator=torch.Generator().manual_seed(1), **kw)
            again.load_state_dict(states[-1])
            for batch in again:
                ids.append(batch["id"].tolist())
                states.append(json_roundtrip(again.state_dict()))
    return ids, states


@pytest.mark.parametrize("workers", [2, 3])
def test_every_state_is_the_full_rebuild(monkeypatch, workers):
    cached = states_per_batch(monkeypatch, True, workers)
    plain = states_per_batch(monkeypatch, False, workers)
    assert cached == plain
    assert len(cached[1]) == 18


def test_a_resumed_loader_and_its_startup_states(monkeypatch):
    cached = states_per_batch(monkeypatch, True, 2, resume_at=5)
    assert cached == states_per_batch(monkeypatch, False, 2, resume_at=5)
    ids = cached[0]
    assert sorted(i for b in ids for i in b) == sorted(s * 100 + i for s in range(6) for i in range(12))


def test_persistent_workers_and_snapshots_every_few_steps(monkeypatch):
    for kw in ({"persistent_workers": True}, {"snapshot_every_n_steps": 3}):
        cached = states_per_batch(monkeypatch, True, 2, epochs=2, **kw)
        assert cached == states_per_batch(monkeypatch, False, 2, epochs=2, **kw), kw


def test_the_workers_states_are_kept_until_a_delta_changes_them():
    """A worker that sent nothing since the last snapshot keeps its rebuilt state object; the one
    whose batch it is gets a new one."""
    loader = ri.StatefulDataLoader(build(), batch_size=4, num_workers=2)
    it = iter(loader)
    next(it)
    first = loader.state_dict()["_snapshot"]["_worker_snapshots"]
    next(it)
    second = loader.state_dict()["_snapshot"]["_worker_snapshots"]
    same = [k for k in first if first[k] is second[k]]
    assert len(same) == 1, same  # the other worker sent the second batch
    assert all(type(ws) is snapshots._CachedWorkerState for ws in loader._iterator._worker_snapshots.values())
    del it
