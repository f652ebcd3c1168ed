"""Every node alone, and the compositions named in the core issue, checked at every cut point."""

from __future__ import annotations

import pytest

import resumable_iterable as ri
from data import HF, HF_B, HF_C, gen_src, src
from harness import assert_resume_chain, assert_resumes_exactly, codec_roundtrip, json_roundtrip, take


def double(ex):
    return {"y": ex["id"] * 2}


def dup_odd(batch):
    ids = [i for i in batch["id"] for _ in range(1 + i % 2)]
    return {"id": ids, "k": [len(ids)] * len(ids)}


PIPELINES = {
    "arrow": lambda: src(4),
    "arrow_1_shard": lambda: src(1),
    "arrow_indices": lambda: ri.to_iterable_dataset(HF.shuffle(seed=3).select(range(45)), num_shards=3),
    "generator": lambda: gen_src(3),
    "map": lambda: src().map(double),
    "map_with_indices": lambda: src().map(lambda ex, i: {"i": i}, with_indices=True),
    "map_remove_columns": lambda: src().map(double, remove_columns=["text"]),
    "map_fn_kwargs_input_columns": lambda: src().map(lambda i, k: {"z": i + k}, input_columns=["id"], fn_kwargs={"k": 5}),
    "map_inplace_none": lambda: src().map(lambda ex: ex.update(id=-ex["id"])),
    "map_batched": lambda: src().map(lambda b: {"y": [i * 3 for i in b["id"]]}, batched=True, batch_size=7),
    "map_batched_rowcount": lambda: src().map(dup_odd, batched=True, batch_size=8, remove_columns=["text"]),
    "map_batched_shrink": lambda: src().map(lambda b: {"id": b["id"][::3]}, batched=True, batch_size=5,
                                            remove_columns=["id", "text"]),
    "map_batched_indices_droplast": lambda: src().map(lambda b, idx: {"i": idx}, batched=True, batch_size=7,
                                                      with_indices=True, drop_last_batch=True),
    "filter": lambda: src().filter(lambda ex: ex["id"] % 3 != 0),
    "filter_batched": lambda: src().filter(lambda b: [i % 4 == 1 for i in b["id"]], batched=True, batch_size=6),
    "filter_indices": lambda: src().filter(lambda ex, i: i % 2 == 0, with_indices=True),
    "select_columns": lambda: src().select_columns(["id"]),
    "remove_columns": lambda: src().remove_columns("text"),
    "rename_column": lambda: src().rename_column("text", "t"),
    "rename_columns": lambda: src().rename_columns({"text": "t", "id": "j"}),
    "skip": lambda: src().skip(13),
    "take": lambda: src().take(17),
    "skip_past_end": lambda: src().skip(100),
    "repeat": lambda: src(3, HF_B).repeat(3),
    "repeat_forever_take": lambda: src(2, HF_B).repeat(None).take(70),
    "batch": lambda: src().batch(8),
    "batch_drop_last": lambda: src().batch(8, drop_last_batch=True),
    "shuffle": lambda: src().shuffle(seed=7, buffer_size=10),
    "shuffle_buffer_1": lambda: src().shuffle(seed=7, buffer_size=1),
    "shuffle_buffer_larger_than_data": lambda: src().shuffle(seed=7, buffer_size=1000),
    "shard": lambda: src(4).shard(2, 1),
    "concat": lambda: ri.concatenate_datasets([src(2), src(3, HF_B)]),
    "concat_axis1": lambda: ri.concatenate_datasets([src(2, HF_B), src(2, HF_C).rename_columns({"id": "id2", "text": "t2"})], axis=1),
    "interleave_first": lambda: ri.interleave_datasets([src(2), src(2, HF_B), src(2, HF_C)]),
    "interleave_all": lambda: ri.interleave_datasets([src(2), src(2, HF_B)], stopping_strategy="all_exhausted"),
    "interleave_wo_replacement": lambda: ri.interleave_datasets(
        [src(2), src(2, HF_B)], stopping_strategy="all_exhausted_without_replacement"),
    "interleave_prob_first": lambda: ri.interleave_datasets([src(2), src(2, HF_B)], probabilities=[0.7, 0.3], seed=1),
    "interleave_prob_all": lambda: ri.interleave_datasets([src(2), src(2, HF_B)], probabilities=[0.8, 0.2], seed=2,
                                                          stopping_strategy="all_exhausted"),
    "interleave_prob_wo_replacement": lambda: ri.interleave_datasets(
        [src(2), src(2, HF_B), src(1, HF_C)], probabilities=[0.5, 0.2, 0.3], seed=3,
        stopping_strategy="all_exhausted_without_replacement"),
    # compositions
    "map_filter_interleave_shuffle_batch": lambda: ri.interleave_datasets(
        [src(3).map(double).filter(lambda ex: ex["id"] % 5 != 0), gen_src(2).map(double)],
        probabilities=[0.6, 0.4], seed=4, stopping_strategy="all_exhausted").shuffle(seed=5, buffer_size=9).batch(4),
    "concat_skip_take": lambda: ri.concatenate_datasets([src(2), gen_src(2)]).skip(11).take(50),
    "repeat_of_shuffled": lambda: src(3, HF_B).shuffle(seed=2, buffer_size=6).repeat(3),
    "shuffled_repeat": lambda: src(3, HF_B).repeat(2).shuffle(seed=2, buffer_size=6),
    "batched_map_over_shuffle": lambda: src().shuffle(seed=9, buffer_size=8).map(
        dup_odd, batched=True, batch_size=9, remove_columns=["text"]),
    "batched_map_of_batched_filter": lambda: src().filter(lambda b: [i % 2 == 0 for i in b["id"]], batched=True,
                                                          batch_size=4).map(dup_odd, batched=True, batch_size=3,
                                                                            remove_columns=["text"]),
    "interleave_of_shuffles": lambda: ri.interleave_datasets(
        [src(2).shuffle(seed=1, buffer_size=5), src(2, HF_B).shuffle(seed=2, buffer_size=3)],
        stopping_strategy="all_exhausted"),
    "concat_of_interleave_and_repeat": lambda: ri.concatenate_datasets(
        [ri.interleave_datasets([src(2, HF_B), gen_src(2, 5)]), src(1, HF_B).repeat(2)]),
    "step_split": lambda: ri.split_dataset_by_node(src(3), rank=1, world_size=2),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_cut_point(name):
    full = assert_resumes_exactly(PIPELINES[name])
    if name != "skip_past_end":
        assert full, f"{name} yielded nothing: the test would be vacuous"


@pytest.mark.parametrize("name", ["map_filter_interleave_shuffle_batch", "batched_map_over_shuffle",
                                  "interleave_prob_all", "repeat_of_shuffled", "concat_skip_take"])
def test_resume_three_times_in_a_row(name):
    for steps in ([3, 5, 7], [1, 1, 1, 1], [0, 10, 0], [6, 2, 4]):
        assert_resume_chain(PIPELINES[name], steps)


def test_codec_roundtrip_equals_json_roundtrip():
    assert_resumes_exactly(PIPELINES["map_filter_interleave_shuffle_batch"], roundtrip=codec_roundtrip, max_cuts=15)


@pytest.mark.parametrize("new_world_size", [1, 3])
def test_elastic_plan_resumes_exactly_at_every_cut_point(new_world_size):
    """The pipeline of a process during an elastic epoch (its segments, carved ones included)
    follows the same contract as every node."""
    def base():
        return src(4).map(double).shuffle(seed=3, buffer_size=5)

    states = []
    for rank in range(2):
        part = ri.split_dataset_by_node(base(), rank=rank, world_size=2)
        take(iter(part), 7)
        states.append(json_roundtrip(part.state_dict()))
    plans = ri.redistribute_states(states, new_world_size)
    total = 0
    for rank, plan in enumerate(plans):
        def build(rank=rank, plan=plan):
            ds = ri.split_dataset_by_node(base(), rank=rank, world_size=new_world_size)
            ds.load_state_dict(plan)
            return ds

        total += len(assert_resumes_exactly(build))
    assert total == 60 - 14  # every example not yielded before the checkpoint, once
