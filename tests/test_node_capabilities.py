"""The capability protocol of ``nodes/base.py``: a node kind says itself what the machinery above
it may do with it (replay below a replay-mode shuffle, row-local below a global shuffle, its
single source), so that a new node kind is one file and no table elsewhere lists it."""

from __future__ import annotations

import pytest

import resumable_iterable as ri
from data import HF, HF_B
from harness import assert_resumes_exactly
from resumable_iterable.nodes.arrow import ArrowSource
from resumable_iterable.nodes.base import Node
from resumable_iterable.nodes.interleave import InterleaveNode
from resumable_iterable.nodes.map import MapNode


def _shout(ex: dict) -> dict:
    return {**ex, "text": ex["text"].upper()}


class Shout(Node):
    """A per-example node kind defined in this file only, declaring no capability."""

    kind = "shout"

    def __init__(self, child: Node):
        super().__init__([child])

    def _iter(self):
        for ex in self.children[0]:
            yield _shout(ex)


class ReplayableShout(Shout):
    """The same kind declaring that it can be replayed and is row-local: nothing else to register."""

    def replay_problem(self) -> str | None:
        return None

    def reread(self, provs: list[list], bar=None) -> list[dict]:
        return [_shout(ex) for ex in self.children[0].reread(provs, bar)]

    def row_local_problem(self) -> str | None:
        return None


def source() -> Node:
    return ArrowSource(HF.data.table, num_shards=3)


def test_a_node_kind_without_capabilities_is_refused_by_name():
    ds = ri.IterableDataset(Shout(source()))
    with pytest.raises(ValueError, match=r"through shout at shuffle/shout: 'shout' nodes do not support replay"):
        ds.shuffle(seed=1, buffer_size=8, buffer_state="replay")
    with pytest.raises(ValueError, match=r"there is a 'shout' node, which is not a per-example transform"):
        ds.shuffle(seed=1, buffer_size=None)


def test_a_new_node_kind_declares_its_own_replay_and_row_locality():
    def replayed():
        return ri.IterableDataset(ReplayableShout(source())).shuffle(seed=3, buffer_size=7, buffer_state="replay")

    def global_shuffled():
        return ri.IterableDataset(ReplayableShout(source())).shuffle(seed=3, buffer_size=None)

    for build in (replayed, global_shuffled):
        got = assert_resumes_exactly(build, max_cuts=12)
        assert sorted(x["id"] for x in got) == list(range(60))
        assert all(x["text"] == f"T{x['id']}" for x in got)


def test_single_source_walks_single_input_chains_only():
    src = source()
    assert MapNode(MapNode(src, _shout), _shout).single_source() is src
    assert InterleaveNode([src, ArrowSource(HF_B.data.table)]).single_source() is None
