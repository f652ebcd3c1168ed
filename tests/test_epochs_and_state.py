"""Epochs, in-place state updates, the lossless codec, lossy 'drop' buffers."""

from __future__ import annotations

import datetime
import json

import datasets
import numpy as np
import pytest
from datasets import Dataset

import resumable_iterable as ri
from data import HF, HF_B, src
from harness import assert_resumes_exactly, codec_roundtrip, take


def ids(ds):
    return [e["id"] for e in ds]


def test_set_epoch_reshuffles_deterministically():
    ds = src(6).shuffle(seed=1, buffer_size=8)
    e0 = ids(ds)
    ds.set_epoch(1)
    e1 = ids(ds)
    assert sorted(e0) == sorted(e1) == list(range(60))
    assert e0 != e1
    again = src(6).shuffle(seed=1, buffer_size=8)
    again.set_epoch(1)
    assert ids(again) == e1


@pytest.mark.parametrize("strategy", ["first_exhausted", "all_exhausted", "all_exhausted_without_replacement"])
def test_interleave_probabilities_draw_anew_every_epoch(strategy):
    # the draws come from (seed, epoch), as the docs say and as HF draws anew every epoch; they
    # were the same in every epoch (an oversampling mixture repeated the same examples each epoch)
    def build():
        return ri.interleave_datasets([src(2), src(2, HF_B)], probabilities=[0.5, 0.5], seed=3,
                                      stopping_strategy=strategy)

    hf = datasets.interleave_datasets([HF.to_iterable_dataset(2), HF_B.to_iterable_dataset(2)],
                                      probabilities=[0.5, 0.5], seed=3, stopping_strategy=strategy)
    ds = build()
    e0 = ids(ds)
    assert e0 == ids(hf)  # epoch 0: HF's order
    ds.set_epoch(1)
    e1 = ids(ds)
    assert e1 != e0
    again = build()
    again.set_epoch(1)
    assert ids(again) == e1

    def epoch_1():
        d = build()
        d.set_epoch(1)
        return d

    assert_resumes_exactly(epoch_1, max_cuts=12)


def test_resume_restores_the_epoch_and_the_next_epoch_starts_from_scratch():
    ds = src(6).shuffle(seed=1, buffer_size=8)
    ds.set_epoch(2)
    full2 = ids(ds)
    it = iter(ds)
    head = [e["id"] for e in take(it, 25)]
    state = json.loads(json.dumps(ds.state_dict()))
    assert state["epoch"] == 2
    ds2 = src(6).shuffle(seed=1, buffer_size=8)  # epoch 0 until the state says otherwise
    ds2.load_state_dict(state)
    assert ds2.epoch == 2
    assert head + ids(ds2) == full2
    # the pass after a resumed pass is a full pass
    assert ids(ds2) == full2
    ds2.set_epoch(3)
    ref = src(6).shuffle(seed=1, buffer_size=8)
    ref.set_epoch(3)
    assert ids(ds2) == ids(ref)


def test_state_dict_before_iterating_resumes_from_the_start():
    ds = src(3).shuffle(seed=4, buffer_size=5)
    state = json.loads(json.dumps(ds.state_dict()))
    ds2 = src(3).shuffle(seed=4, buffer_size=5)
    ds2.load_state_dict(state)
    assert ids(ds2) == ids(src(3).shuffle(seed=4, buffer_size=5))


def test_parent_keeps_seeing_child_state_after_load():
    """HF's bug: load_state_dict rebound the child's dict, freezing the parent's view."""
    ds = src(4).map(lambda ex: {"y": 0}).shuffle(seed=1, buffer_size=4)
    it = iter(ds)
    take(it, 10)
    ds2 = src(4).map(lambda ex: {"y": 0}).shuffle(seed=1, buffer_size=4)
    ds2.load_state_dict(ds.state_dict())
    it2 = iter(ds2)
    take(it2, 5)
    s1 = ds2.state_dict()
    take(it2, 5)
    s2 = ds2.state_dict()
    leaf = lambda s: s["state"]["children"][0]["children"][0]  # noqa: E731
    assert (leaf(s1)["shard_pos"], leaf(s1)["offset"]) != (leaf(s2)["shard_pos"], leaf(s2)["offset"])
    node = ds2._session.active
    assert node._state_dict["children"][0] is node.children[0]._state_dict
    assert node.children[0]._state_dict["children"][0] is node.children[0].children[0]._state_dict


def test_state_dict_is_a_copy_but_the_buffer_examples_are_shared():
    ds = src(2).shuffle(seed=1, buffer_size=10)
    it = iter(ds)
    take(it, 3)
    state = ds.state_dict()
    live = ds._session.active._state_dict
    buf = state["state"]["buffer"]
    assert buf is not live["buffer"] and buf == live["buffer"]
    assert all(a is b for a, b in zip(buf, live["buffer"]))  # shallow: no example copied
    before = list(buf)
    take(it, 5)
    assert state["state"]["buffer"] == before  # later iteration does not change a taken state


def test_exotic_values_survive_the_codec_in_a_shuffle_buffer(tmp_path):
    rows = {
        "id": list(range(30)),
        "blob": [bytes([i, 255 - i]) for i in range(30)],
        "vec": [np.arange(3, dtype=np.float32) * i for i in range(30)],
    }

    def gen(n):
        for i in range(n[0]):
            yield {"id": i, "blob": rows["blob"][i], "vec": rows["vec"][i], "t": (i, "x"),
                   "when": datetime.date(2024, 1, 1 + i % 28), "f": float("nan") if i == 3 else i / 2,
                   "np": np.int16(i)}

    def build():
        return ri.IterableDataset.from_generator(gen, gen_kwargs={"n": [30]}).shuffle(seed=2, buffer_size=8)

    assert_resumes_exactly(lambda: build().map(lambda ex: {"f": str(ex["f"])}), roundtrip=codec_roundtrip)
    ds = build()
    take(iter(ds), 12)
    path = tmp_path / "s.json"
    ds.save_state(path)
    with pytest.raises(TypeError):
        json.dumps(ds.state_dict())  # plain json cannot: that is what save_state is for
    back = ri.load_state(path)
    buf = [e for chunk in back["state"]["buffer"] for e in chunk]  # the buffer is saved in chunks
    assert any(isinstance(e["blob"], bytes) for e in buf)
    assert any(isinstance(e["vec"], np.ndarray) and e["vec"].dtype == np.float32 for e in buf)
    assert any(isinstance(e["t"], tuple) for e in buf)


def test_drop_buffer_state_is_hf_compatible_and_lossy_but_never_duplicates():
    def build():
        return src(4).shuffle(seed=5, buffer_size=10, buffer_state="drop")

    full = ids(build())
    ds = build()
    it = iter(ds)
    head = [e["id"] for e in take(it, 20)]
    state = json.loads(json.dumps(ds.state_dict()))
    assert state["state"]["buffer"] == []
    ds2 = build()
    ds2.load_state_dict(state)
    tail = ids(ds2)
    assert len(set(head + tail)) == len(head + tail)  # no duplicate
    assert len(head + tail) == len(full) - 10  # exactly the buffered examples are lost


def test_hf_dataset_with_image_like_decoding_features():
    from datasets import ClassLabel, Features, Value

    hf = Dataset.from_dict({"label": [0, 1, 1, 0] * 5, "x": list(range(20))},
                           features=Features({"label": ClassLabel(names=["neg", "pos"]), "x": Value("int64")}))
    ds = ri.to_iterable_dataset(hf, num_shards=2)
    assert list(ds) == list(hf.to_iterable_dataset(num_shards=2))
    assert ds.column_names == ["label", "x"]
    assert ds.features == hf.features


@pytest.mark.parametrize("combine", ["interleave", "concatenate"])
def test_combined_pipeline_follows_the_loaded_epoch_after_the_resumed_pass(combine):
    # README: the pass after a resumed one uses the loaded epoch if set_epoch was never called.
    # interleave_datasets / concatenate_datasets called set_epoch(0) on the result, which counted as
    # the user's: the pass after a resumed epoch-1 pass ran epoch 0 again (its draws, its shuffles).
    def build():
        a, b = src(2).shuffle(seed=1, buffer_size=4), src(2, HF_B)
        if combine == "interleave":
            return ri.interleave_datasets([a, b], probabilities=[0.4, 0.6], seed=3)
        return ri.concatenate_datasets([a, b])
    ref = build()
    ref.set_epoch(1)
    epoch1 = list(ref)
    ds = build()
    ds.set_epoch(1)
    head = take(iter(ds), 7)
    again = build()
    again.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    assert again.epoch == 1
    assert head + list(again) == epoch1
    assert list(again) == epoch1
