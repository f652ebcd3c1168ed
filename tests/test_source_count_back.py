"""A source counts back over the rows it read (``SourceNode.position_back``, for a shuffle buffer's
error note) and counts them (``SourceNode.examples_yielded``, for a concatenation counting back
across its inputs), through the shards read before the current one, whose lengths it asks
(``shard_length``): at every cut point, after a resume, and with a shard whose length cannot be
told any more (a file gone since), past which both say ``None``."""

from __future__ import annotations

import json

import pytest
from data import hf_dataset

from resumable_iterable.nodes.arrow import ArrowSource


def _source(seed):
    node = ArrowSource.from_hf(hf_dataset(23), num_shards=4)  # shards of 6, 6, 6, 5 rows
    if seed is not None:  # as a shuffle() above does
        node.expect_shuffled_shards()
        node.shuffle_shards(seed)
    return node


@pytest.mark.parametrize("seed", [None, 5])
def test_every_cut_point_counts_back_to_every_row_read(seed):
    node = _source(seed)
    seen = []  # where each example read came from, as position() said right after it
    for ex in node:
        seen.append(node.position())
        state = json.loads(json.dumps(node.state_dict()))
        resumed = _source(seed)
        resumed.load_state_dict(state)
        for n in (node, resumed):
            assert n.examples_yielded() == len(seen)
            assert [n.position_back(back) for back in range(len(seen))] == seen[::-1]
            assert n.position_back(len(seen)) is None
    assert len(seen) == 23 and len({(p["shard"], p["row"]) for p in seen}) == 23


def test_a_shard_whose_length_is_gone_stops_the_count():
    node = _source(5)
    order = node.shard_order()
    plain = node.shard_length

    def length(shard_id):
        if shard_id == order[1]:
            raise FileNotFoundError(shard_id)
        return plain(shard_id)

    node.shard_length = length
    seen = []
    for ex in node:
        seen.append(node.position())
        c = order.index(seen[-1]["shard"])  # the shard being read; counting back needs the lengths of those before
        assert node.examples_yielded() == (None if c > 1 else len(seen))
        for back in range(len(seen)):
            s = order.index(seen[-1 - back]["shard"])
            assert node.position_back(back) == (None if s <= 1 < c else seen[-1 - back]), (len(seen), back)
