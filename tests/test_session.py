"""The facade holds a description; its iteration in this process is its ``IterationSession``
(``loader/session.py``); a node's shape and fingerprint are cached in one place (``nodes/base.py``)."""

from __future__ import annotations

import copy

import resumable_iterable as ri
import resumable_iterable.nodes.base as node_base
from resumable_iterable.loader.session import IterationSession


def build():
    return ri.IterableDataset.from_dict({"id": list(range(30))}, num_shards=3).shuffle(seed=2, buffer_size=5)


def test_the_facade_holds_a_description_and_one_session():
    ds = build()
    it = iter(ds)
    [next(it) for _ in range(4)]
    state = ds.state_dict()
    ds.load_state_dict(state)
    assert isinstance(ds.session, IterationSession)
    assert set(vars(ds)) <= {"_node", "_features", "_column_names", "_split", "_session", "_format", "_info"}


def test_a_shallow_copy_iterates_and_keeps_its_epoch_on_its_own():
    full = [e["id"] for e in build()]
    ds = build()
    it = iter(ds)
    head = [next(it)["id"] for _ in range(7)]
    twin = copy.copy(ds)
    twin.set_epoch(5)
    assert ds.epoch == 0 and twin.epoch == 5
    assert twin.state_dict()["epoch"] == 5  # a fresh pass of its own, not ds's pass
    assert ds.state_dict()["epoch"] == 0
    assert head + [e["id"] for e in it] == full
    other = build()
    other.set_epoch(5)
    assert [e["id"] for e in twin] == [e["id"] for e in other]


def test_state_dict_reads_the_pipeline_shape_once_per_pass(monkeypatch):
    calls = []
    real = node_base.shape_fingerprint
    monkeypatch.setattr(node_base, "shape_fingerprint", lambda shape: calls.append(1) or real(shape))
    ds = build().batch(2)
    it = iter(ds)
    for _ in range(10):
        next(it)
        ds.state_dict()
    # the pass's tree and the unsplit template (the state's "split" base), each once
    assert len(calls) == 2


def test_shard_forgets_the_cached_fingerprint_and_clone_keeps_it():
    node = build()._node
    fp = node.fingerprint()
    assert node.clone().fingerprint() == fp
    part = node.shard(3, 0)
    assert part.fingerprint() != fp
    assert part.fingerprint() == node.clone().shard(3, 0).fingerprint()
    assert node.fingerprinted_shape() == (node.shape(), fp)
