"""The facade holds a description; its iteration in this process is its ``IterationSession``
(``loader/session.py``); a node's shape and fingerprint are cached in one place (``nodes/base.py``)."""

from __future__ import annotations

import copy

import pytest

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
    assert set(vars(ds)) <= {"_node", "_features", "_column_names", "_split", "_session", "_format", "_info",
                             "_named_split"}


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


def test_a_shallow_copy_of_a_loaded_dataset_resumes_on_its_own():
    full = [e["id"] for e in build()]
    ds = build()
    it = iter(ds)
    [next(it) for _ in range(5)]
    state = ds.state_dict()
    loaded = build()
    loaded.load_state_dict(state)
    twin = copy.copy(loaded)
    twin_it = iter(twin)
    twin_head = [next(twin_it)["id"] for _ in range(3)]
    assert [e["id"] for e in loaded] == full[5:]  # the copy did not consume the original's resume
    assert twin_head + [e["id"] for e in twin_it] == full[5:]


def test_set_epoch_after_a_state_dict_taken_before_the_pass_gives_the_new_epoch():
    ref = build()
    ref.set_epoch(1)
    expected = [e["id"] for e in ref]
    ds = build()
    before = ds.state_dict()  # describes a fresh pass of epoch 0
    ds.set_epoch(1)
    assert ds.state_dict()["epoch"] == 1 and before["epoch"] == 0
    assert [e["id"] for e in ds] == expected
    again = build()
    again.load_state_dict(before)  # a loaded state keeps its own epoch
    again.set_epoch(0)
    assert [e["id"] for e in again] == [e["id"] for e in build()]


def test_set_epoch_to_another_epoch_drops_a_loaded_state_not_iterated_yet(caplog):
    # an HF loop resumed from a state taken at the end of epoch 0 goes on with set_epoch(1)
    ds = build()
    list(ds)
    end_of_0 = ds.state_dict()
    ref = build()
    ref.set_epoch(1)
    expected = [e["id"] for e in ref]
    resumed = build()
    resumed.load_state_dict(end_of_0)
    resumed.set_epoch(1)
    assert "not resumed" in caplog.text
    assert [e["id"] for e in resumed] == expected
    # an earlier epoch set before the state is loaded (a habit at build time): the state is resumed
    ds = build()
    ds.set_epoch(3)
    it = iter(ds)
    head3 = [next(it)["id"] for _ in range(6)]
    mid3 = ds.state_dict()
    resumed = build()
    resumed.set_epoch(0)
    resumed.load_state_dict(mid3)
    resumed.set_epoch(1)
    ref3 = build()
    ref3.set_epoch(3)
    assert head3 + [e["id"] for e in resumed] == [e["id"] for e in ref3]
    # set to the loaded epoch, the state is kept (and the pass after it is epoch 0 again)
    ds = build()
    it = iter(ds)
    head = [next(it)["id"] for _ in range(9)]
    mid = ds.state_dict()
    resumed = build()
    resumed.load_state_dict(mid)
    resumed.set_epoch(0)
    assert head + [e["id"] for e in resumed] == [e["id"] for e in build()]


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


# ---------------------------------------------------------------------------- building on a dataset's pipeline


def _described(ds):
    return ds.rank_splits, ds.epoch, ds.format, ds.description, ds.column_names


def _hf_source():
    from datasets import Dataset, DatasetInfo

    info = DatasetInfo(description="desc")
    return ri.IterableDataset.from_hf(Dataset.from_dict({"id": list(range(12))}, info=info), num_shards=4)


def test_derive_builds_on_the_pipeline_and_keeps_the_rest_of_the_dataset():
    from resumable_iterable.nodes.map import MapNode

    part = ri.split_dataset_by_node(_hf_source().with_format("numpy"), 1, 2)
    part.set_epoch(3)
    assert part.rank_splits == ((1, 2),) and part.pipeline is not None
    double = part.derive(MapNode(part.pipeline.clone(), lambda ex: {"id": ex["id"] * 2}), features=part.features)
    assert _described(double) == (((1, 2),), 3, {"type": "numpy", "format_kwargs": {}}, "desc", ["id"])
    assert [int(e["id"]) for e in double] == [2 * int(e["id"]) for e in part] == [6, 8, 10, 18, 20, 22]  # shards 1 and 3
    assert part.derive(part.pipeline, split_by_node=(0, 3)).rank_splits == ((1, 2), (0, 3))
    with pytest.raises(ValueError, match="rank must be"):
        part.derive(part.pipeline, split_by_node=(3, 3))


def test_combined_datasets_are_split_and_at_the_epoch_of_their_inputs_with_their_merged_info():
    parts = [ri.split_dataset_by_node(_hf_source().with_format("numpy"), 0, 2) for _ in range(2)]
    for p in parts:
        p.set_epoch(2)
    for combined in (ri.interleave_datasets(parts), ri.concatenate_datasets(parts, axis=0)):
        # the info merged as HF's combinations merge it (DatasetInfo.from_merge)
        assert combined.rank_splits == ((0, 2),) and combined.epoch == 2 and combined.description == "desc"
        assert combined.state_dict()["split"]["ranks"] == [[0, 2]]
    assert ri.interleave_datasets(parts).format["type"] is None
    assert ri.concatenate_datasets(parts).format["type"] == "numpy"
    with pytest.raises(ValueError, match="split by node identically"):
        ri.interleave_datasets([parts[0], _hf_source()])
