"""Elastic plans (``loader/plan.py``): every segment is built by ``make_segment`` - a dataset
state's, a running plan's, and a fresh one carved off untouched shards - and loads back exactly."""

from __future__ import annotations

import pytest

import resumable_iterable as ri
from data import src
from harness import json_roundtrip
from resumable_iterable.loader.plan import (SEGMENT_KEYS, START_KEYS, check_plan_envelope, make_segment,
                                            make_start)


def test_a_segment_has_a_state_or_a_start():
    start = make_start(1, 3, None)
    assert set(start) == set(START_KEYS)
    seg = make_segment("fp", {}, [[0, 1]], None, start=start)
    assert set(seg) == set(SEGMENT_KEYS) and seg["split"] == {"ranks": [[0, 1]], "worker": None}
    for bad in ({}, {"state": {}, "start": start}):
        with pytest.raises(ValueError, match="exactly one"):
            make_segment("fp", {}, [], None, **bad)


def test_carved_and_running_segments_load_back_exactly():
    def build():
        return src(8).map(lambda ex: {"id": ex["id"], "y": ex["id"] % 3})

    full = sorted(e["id"] for e in build())
    ds = ri.split_dataset_by_node(build(), 0, 1)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(5)]
    plans = [json_roundtrip(p) for p in ri.redistribute_states([ds.state_dict()], world_size=3)]
    starts = [s for p in plans for s in p["segments"] if s["start"] is not None]
    assert starts, "untouched shards were carved off into fresh segments"
    rest = []
    for r, plan in enumerate(plans):
        check_plan_envelope(plan)
        part = ri.split_dataset_by_node(build(), r, 3)
        part.load_state_dict(plan)
        it = iter(part)
        rest.append(next(it)["id"])
        again = json_roundtrip(part.state_dict())  # a running plan: its segments are rebuilt
        assert all(set(s) == set(SEGMENT_KEYS) for s in again["segments"])
        fresh = ri.split_dataset_by_node(build(), r, 3)
        fresh.load_state_dict(again)
        rest += [e["id"] for e in fresh]
    assert sorted(head + rest) == full
