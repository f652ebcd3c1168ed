"""Replay mode of the shuffle buffer: the state keeps where buffered examples came from, not the examples."""

from __future__ import annotations

import copy
import json
import logging

import pytest
from datasets import Dataset

import resumable_iterable as ri
from data import HF, HF_B, HF_C, gen_src, src
from harness import assert_resume_chain, assert_resumes_exactly, codec_roundtrip, normalize, take
from resumable_iterable.nodes import replay as replay_mod


def double(ex):
    return {"y": ex["id"] * 2}


def tag_index(ex, i):
    return {"i": i}


def odd_keep(ex, i):
    return i % 3 != 1


def _empty_gen(n):
    yield from ({"e": i} for i in range(n[0]))


def shuffled(ds, mode, seed=5, size=9):
    return ds.shuffle(seed=seed, buffer_size=size, buffer_state=mode)


# each entry builds the pipeline for a buffer_state, so the replay run can be compared with the stored one
PIPELINES = {
    "arrow": lambda m: shuffled(src(4), m, size=7),
    "arrow_indices_mapping": lambda m: shuffled(ri.to_iterable_dataset(HF.shuffle(seed=3).select(range(45)), 3), m),
    "pyarrow_table": lambda m: shuffled(ri.IterableDataset.from_arrow_table(HF_B.data.table, num_shards=2), m),
    "generator": lambda m: shuffled(gen_src(3), m, size=4),
    "buffer_1": lambda m: shuffled(src(3), m, size=1),
    "buffer_larger_than_data": lambda m: shuffled(src(3), m, size=500),
    "map_filter_with_indices": lambda m: shuffled(
        src(4).map(tag_index, with_indices=True).filter(odd_keep, with_indices=True).map(double), m),
    "columns": lambda m: shuffled(src(2).map(double).rename_column("text", "t").remove_columns("y").select_columns(["t", "id"]), m),
    "skip_take_repeat": lambda m: shuffled(src(3, HF_B).skip(4).take(15).repeat(3), m, size=6),
    "interleave_first": lambda m: shuffled(ri.interleave_datasets([src(2), src(2, HF_B), gen_src(2, 6)]), m),
    "interleave_prob_all": lambda m: shuffled(ri.interleave_datasets(
        [src(3).map(double).filter(lambda ex: ex["id"] % 5 != 0), gen_src(2)], probabilities=[0.6, 0.4], seed=4,
        stopping_strategy="all_exhausted"), m).batch(4),
    "interleave_wo_replacement": lambda m: shuffled(ri.interleave_datasets(
        [src(2), src(2, HF_B).map(tag_index, with_indices=True)], probabilities=[0.3, 0.7], seed=8,
        stopping_strategy="all_exhausted_without_replacement"), m),
    "concat": lambda m: shuffled(ri.concatenate_datasets([src(2, HF_B), gen_src(2, 4), src(1, HF_C).take(5)]), m),
    "concat_axis1": lambda m: shuffled(ri.concatenate_datasets(
        [src(2, HF_B), src(2, HF_C).rename_columns({"id": "id2", "text": "t2"})], axis=1), m, size=5),
    # an input of axis=1 exhausted early: its None columns must come back even after a restart
    # (repeat, interleave) made the concatenation forget them
    "concat_axis1_uneven_repeat": lambda m: shuffled(ri.concatenate_datasets(
        [src(1, HF_B).take(3), src(2, HF_C).rename_columns({"id": "id2", "text": "t2"}).take(9)], axis=1).repeat(3),
        m, size=4),
    "concat_axis1_uneven_in_interleave": lambda m: shuffled(ri.interleave_datasets([ri.concatenate_datasets(
        [src(1, HF_B).take(2), ri.IterableDataset.from_generator(_empty_gen, gen_kwargs={"n": [0]}),
         src(2, HF_C).rename_columns({"id": "id2", "text": "t2"}).take(5)], axis=1), gen_src(2, 6)],
        stopping_strategy="all_exhausted"), m, size=3),
    "interleave_of_interleave": lambda m: shuffled(ri.interleave_datasets(
        [ri.interleave_datasets([src(2, HF_B), gen_src(2, 5)], stopping_strategy="all_exhausted"), src(2, HF_C)]), m),
    "nested_replay_shuffles": lambda m: shuffled(ri.interleave_datasets(
        [shuffled(src(2), m, seed=1, size=5), shuffled(src(2, HF_B).map(double), m, seed=2, size=3)]), m, size=6),
    "split_by_node": lambda m: ri.split_dataset_by_node(shuffled(src(4), m), rank=1, world_size=2),
    "shard": lambda m: shuffled(src(4).shard(2, 0), m),
    "batched_map_above": lambda m: shuffled(src(3), m).map(
        lambda b: {"id": [i for i in b["id"] for _ in range(1 + i % 2)]}, batched=True, batch_size=7,
        remove_columns=["text"]),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_replay_resumes_exactly_at_every_cut_and_matches_stored_buffers(name):
    build = PIPELINES[name]
    full = assert_resumes_exactly(lambda: build("replay"))
    assert full, "vacuous pipeline"
    # the buffer's serialisation changes the state, never the examples
    assert full == [normalize(x) for x in build("examples")]


@pytest.mark.parametrize("name", ["interleave_prob_all", "nested_replay_shuffles", "map_filter_with_indices"])
def test_replay_resume_chains_and_codec(name):
    build = PIPELINES[name]
    for steps in ([3, 5, 7], [1, 1, 1, 1], [0, 9, 0], [12, 2]):
        assert_resume_chain(lambda: build("replay"), steps)
    assert_resumes_exactly(lambda: build("replay"), roundtrip=codec_roundtrip, max_cuts=12)


def _ints_only(x) -> bool:
    if isinstance(x, list):
        return all(_ints_only(v) for v in x)
    return type(x) is int


def _shuffle_state(state: dict) -> dict:
    return next(n for n in _nodes(state["state"]) if n["node"] == "shuffle")


def _nodes(st):
    yield st
    for c in st.get("children", ()):
        yield from _nodes(c)


def test_state_holds_positions_not_examples():
    ds = PIPELINES["interleave_prob_all"]("replay")
    take(iter(ds), 6)
    sh = _shuffle_state(ds.state_dict())
    assert sh["buffer"] and all(_ints_only(p) and 2 <= len(p) <= 4 for p in sh["buffer"])
    assert type(sh["digest"]) is int
    # the stored-buffer state of the same pipeline holds the examples themselves
    ds = PIPELINES["interleave_prob_all"]("examples")
    take(iter(ds), 6)
    chunks = _shuffle_state(ds.state_dict())["buffer"]  # saved in chunks of examples
    assert chunks and all(isinstance(ex, dict) for chunk in chunks for ex in chunk)


def _big(n, offset):
    return Dataset.from_dict({"id": list(range(offset, offset + n)),
                              "text": [f"a fairly long text for row number {i}" for i in range(offset, offset + n)]})


BIG_A, BIG_B = _big(40_000, 0), _big(30_000, 10**6)


def big_pipeline(mode):
    a = ri.to_iterable_dataset(BIG_A, num_shards=8).map(double).filter(lambda ex: ex["id"] % 7 != 3)
    b = ri.to_iterable_dataset(BIG_B, num_shards=8)
    return ri.interleave_datasets([a, b], probabilities=[0.5, 0.5], seed=3).shuffle(
        seed=11, buffer_size=10_000, buffer_state=mode)


def test_a_10k_replay_buffer_state_is_small_and_resumes_exactly(caplog):
    sizes = {}
    for mode in ("replay", "examples"):
        ds = big_pipeline(mode)
        it = iter(ds)
        take(it, 12_345)
        text = ri.dumps_state(ds.state_dict())
        sizes[mode] = len(text.encode())
        expected = [x["id"] for x in take(it, 2000)]
        ds2 = big_pipeline(mode)
        with caplog.at_level(logging.INFO, logger="resumable_iterable"):
            ds2.load_state_dict(ri.loads_state(text))
            got = [x["id"] for x in take(iter(ds2), 2000)]
        assert got == expected
        if mode == "replay":  # re-reading 10 000 examples is reported (a bar on a terminal, a log line here)
            assert any("re-reading the shuffle buffer: 10000 examples" in r.getMessage() for r in caplog.records)
    print(f"\n10k buffer state: replay {sizes['replay'] / 1e3:.0f} kB, examples {sizes['examples'] / 1e3:.0f} kB")
    assert sizes["replay"] <= 200_000
    assert sizes["replay"] < sizes["examples"] / 2


@pytest.mark.parametrize("make,what", [
    (lambda: src().map(lambda b: b, batched=True), "map\\(.*<lambda>, batched=True\\) at shuffle/map"),
    (lambda: src().filter(lambda b: [True] * len(b["id"]), batched=True), "filter\\(.*<lambda>, batched=True\\)"),
    (lambda: src().batch(4), "batch at shuffle/batch"),
    (lambda: src().shuffle(seed=1, buffer_size=3), "shuffle\\(buffer_state='examples'\\) at shuffle/shuffle"),
    (lambda: ri.interleave_datasets([src(2), src(2, HF_B).map(lambda b: b, batched=True)]),
     "map\\(.*<lambda>, batched=True\\) at shuffle/interleave\\[1\\]/map"),
    (lambda: src(4).shuffle(seed=2, buffer_size=None), "global_shuffle at shuffle/global_shuffle"),
])
def test_unsupported_subtrees_are_refused_at_shuffle_time(make, what):
    ds = make()
    with pytest.raises(ValueError, match=f"cannot re-read its buffer through {what}"):
        ds.shuffle(seed=1, buffer_size=4, buffer_state="replay")
    ds.shuffle(seed=1, buffer_size=4)  # the stored buffer is fine


def _saved(build, k):
    ds = build()
    take(iter(ds), k)
    return json.loads(json.dumps(ds.state_dict()))


def test_edited_positions_are_rejected_before_anything_is_yielded():
    def build():
        return PIPELINES["map_filter_with_indices"]("replay")

    state = _saved(build, 10)
    sh = _shuffle_state(state)
    edits = []
    for value in ([sh["buffer"][0][0] + 1] + sh["buffer"][0][1:],  # another map index
                  sh["buffer"][0][:-1] + [sh["buffer"][0][-1] + 1]):  # another row
        s = copy.deepcopy(state)
        _shuffle_state(s)["buffer"][0] = value
        edits.append((s, "do not match their digest"))
    s = copy.deepcopy(state)
    b = _shuffle_state(s)
    b["buffer"][0], b["buffer"][1] = b["buffer"][1], b["buffer"][0]
    edits.append((s, "do not match their digest"))
    assert len(sh["buffer"][0]) == 4  # [filter index, map index, shard, row]
    for bad, match in [([0, 0, 0, 10**6], "past the end"), ([0, 0, 0, -1], "out of range"), ([0, 0, 99, 1], "shard 99"),
                       ([0, 0, 1], "\\[shard, row\\]"), ("x", "list of integers"), ([0, 0, 0, True], "\\[shard, row\\]"),
                       ([-1, 0, 0, 1], "non-negative example index"), ([0, 0, 0, 2**200], "out of range")]:
        s = copy.deepcopy(state)
        b = _shuffle_state(s)
        b["buffer"][0] = bad
        b["digest"] = replay_mod.buffer_digest(b["buffer"])  # even with a matching digest
        edits.append((s, match))
    for s, match in edits:
        ds = build()
        with pytest.raises(ValueError, match=match):
            ds.load_state_dict(s)
        assert [normalize(x) for x in ds] == [normalize(x) for x in build()]  # nothing changed


def test_edited_peeked_example_or_position_is_detected():
    def build():
        return PIPELINES["interleave_first"]("replay")

    state = _saved(build, 7)
    inter = next(n for n in _nodes(state["state"]) if n["node"] == "interleave")
    i = next(j for j, p in enumerate(inter["peeked"]) if p is not None)
    s = copy.deepcopy(state)
    nxt = next(n for n in _nodes(s["state"]) if n["node"] == "interleave")
    nxt["peeked"][i] = dict(nxt["peeked"][i], id=-5)
    ds = build()
    ds.load_state_dict(s)
    with pytest.raises(ValueError, match=f"example peeked from input {i} differs"):
        next(iter(ds))
    s = copy.deepcopy(state)
    nxt = next(n for n in _nodes(s["state"]) if n["node"] == "interleave")
    nxt["peeked_pos"][i] = None  # as the traced loop leaves it (a Ctrl-C): read from the input's state
    ds, same = build(), build()
    ds.load_state_dict(s)
    same.load_state_dict(state)
    assert list(ds) == list(same)
    s = copy.deepcopy(state)
    nxt = next(n for n in _nodes(s["state"]) if n["node"] == "interleave")
    nxt["peeked"][i], nxt["peeked_pos"][i] = None, [0, 0]
    with pytest.raises(ValueError, match=f"gives a position for input {i}, which has no peeked example"):
        build().load_state_dict(s)


def test_non_deterministic_filter_is_reported_on_resume():
    flip = {"on": False}

    def pred(ex):
        return ex["id"] % 2 == 0 or flip["on"] is False

    def build():
        return src(3).filter(pred).shuffle(seed=2, buffer_size=8, buffer_state="replay")

    state = _saved(build, 5)
    flip["on"] = True
    ds = build()
    ds.load_state_dict(state)
    with pytest.raises(ValueError, match="filter\\(.*pred\\) now rejects example .* predicate is not deterministic"):
        list(ds)


def test_map_error_while_replaying_names_the_node():
    boom = {"on": False}

    def fn(ex):
        if boom["on"] and ex["id"] % 2:
            raise KeyError("gone")
        return {"y": 1}

    def build():
        return src(3).map(fn).shuffle(seed=2, buffer_size=8, buffer_state="replay")

    state = _saved(build, 5)
    boom["on"] = True
    ds = build()
    ds.load_state_dict(state)
    with pytest.raises(KeyError, match="gone") as info:
        list(ds)
    assert "re-deriving a buffered example through map(test_map_error_while_replaying_names_the_node.<locals>.fn)" \
        in " ".join(info.value.__notes__)


def test_generator_that_changed_is_reported_on_replay():
    data = {"rows": 30}  # what the generator reads: its input changed between save and resume

    def gen(shard):
        yield from ({"i": i} for i in range(data["rows"]))

    def build(shards=("a",)):
        return ri.IterableDataset.from_generator(gen, gen_kwargs={"shard": list(shards)}).shuffle(
            seed=1, buffer_size=10, buffer_state="replay")

    ds = build()
    take(iter(ds), 5)
    state = ds.state_dict()
    data["rows"] = 12
    ds2 = build()
    ds2.load_state_dict(state)
    with pytest.raises(ValueError, match="generator source shard 0: the generator now yields fewer rows than the state says"):
        list(ds2)
    with pytest.raises(ValueError, match="the generator's shards are not those"):  # other gen_kwargs: refused on load
        build(("b",)).load_state_dict(state)


def test_epochs_and_repeat_of_a_replay_shuffle():
    def build(epoch):
        ds = shuffled(src(3, HF_B).map(double), "replay", size=6).repeat(2)
        ds.set_epoch(epoch)
        return ds

    a = assert_resumes_exactly(lambda: build(3))
    b = assert_resumes_exactly(lambda: build(4))
    assert len(a) == len(b) == 50 and a != b
    assert sorted(x["id"] for x in a) == sorted(x["id"] for x in b)


def _tag_in_place(ex):
    ex["tags"].append(ex["id"] % 3)  # edits a nested list of its input in place (HF users do)
    return ex


def _tagged(n, offset=0):
    return Dataset.from_dict({"id": list(range(offset, offset + n)), "tags": [[i] for i in range(n)]})


@pytest.mark.parametrize("build", [
    # the same source row sits in the buffer twice: read once on resume
    lambda: shuffled(ri.to_iterable_dataset(_tagged(8), 2).map(_tag_in_place).repeat(2), "replay", size=100),
    lambda: shuffled(ri.interleave_datasets([ri.to_iterable_dataset(_tagged(2), 1),
                                             ri.to_iterable_dataset(_tagged(9, 100), 3)],
                                            stopping_strategy="all_exhausted").map(_tag_in_place), "replay", size=100),
    lambda: shuffled(ri.IterableDataset.from_generator(
        lambda shards: ({"id": s * 10 + i, "tags": [i]} for s in shards for i in range(3)),
        gen_kwargs={"shards": [0, 1]}).map(_tag_in_place).repeat(3), "replay", size=100),
], ids=["repeat", "interleave_restarts_an_input", "generator_repeat"])
def test_a_row_buffered_twice_is_re_derived_twice_by_an_in_place_map(build):
    # each re-read example must share nothing mutable with another: the map ran on the first
    # re-derived copy of a row and its in-place edit reached the other copies too
    full = assert_resumes_exactly(build)
    assert all(len(ex["tags"]) == 2 for ex in full)


def test_provenance_capture_does_not_touch_other_pipelines(monkeypatch):
    # arming happens only below a replay-mode shuffle, or a shuffle logging positions in a
    # DataLoader worker (a process that took a buffer log, as earlier tests may have, counts as
    # one): in a plain process a default shuffle's interleave records nothing
    from resumable_iterable import state_logs

    monkeypatch.setattr(state_logs, "_journaling", [False])
    ds = ri.interleave_datasets([src(2), src(2, HF_B)]).shuffle(seed=1, buffer_size=5)
    take(iter(ds), 10)
    inter = next(n for n in _nodes(ds.state_dict()["state"]) if n["node"] == "interleave")
    assert inter["peeked_pos"] == [None, None]
    assert not any(n.kind == "interleave" and n.traced() for n in ds._session.active.walk())


def test_an_armed_interleave_is_armed_alone_and_still_pickles():
    # a replay-mode shuffle arms the interleave below it; copies (clone, shard, pickling for
    # DataLoader workers) are not armed - their own shuffle arms them when it iterates
    import pickle

    from resumable_iterable.nodes.arrow import ArrowSource
    from resumable_iterable.nodes.interleave import InterleaveNode
    from resumable_iterable.nodes.shuffle import ShuffleNode

    inter = InterleaveNode([ArrowSource(HF.data.table, 2), ArrowSource(HF_B.data.table, 2)])
    shuffle = ShuffleNode(inter, seed=1, buffer_size=5, buffer_state="replay")
    assert not inter.traced()
    take(iter(shuffle), 10)
    assert inter.traced()
    assert not inter.clone().traced() and not inter.shard(2, 0).traced()
    assert not pickle.loads(pickle.dumps(inter)).traced()


def _tuple_gen(shards):
    for s in shards:
        for i in range(7):
            yield {"id": s * 100 + i, "pair": (s, i), "raw": bytes([s, i])}


def test_rich_values_in_peeked_examples_replay_exactly_through_the_codec():
    def build():
        gen = ri.IterableDataset.from_generator(_tuple_gen, gen_kwargs={"shards": [0, 1, 2]})
        return shuffled(ri.interleave_datasets([gen, src(2, HF_B)]), "replay", size=4)

    assert_resumes_exactly(build, roundtrip=codec_roundtrip)
    # a plain JSON round trip turns tuples into lists: the peeked example still matches its position
    def build_json():
        gen = ri.IterableDataset.from_generator(_tuple_gen, gen_kwargs={"shards": [0, 1]}).remove_columns("raw")
        return ri.interleave_datasets([gen, src(2, HF_B)]).shuffle(seed=1, buffer_size=3, buffer_state="replay")

    ds = build_json()
    head = [x["id"] for x in take(iter(ds), 5)]
    state = json.loads(json.dumps(ds.state_dict()))
    assert next(n for n in _nodes(state["state"]) if n["node"] == "interleave")["peeked_pos"] != [None, None]
    resumed = build_json()
    resumed.load_state_dict(state)
    assert head + [x["id"] for x in resumed] == [x["id"] for x in build_json()]
    assert replay_mod.same_example({"a": (1, [2.0, float("nan")])}, {"a": [1, (2, float("nan"))]})
    assert not replay_mod.same_example({"a": (1, 2)}, {"a": [1, 3]})
