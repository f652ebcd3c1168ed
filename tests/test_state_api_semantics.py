"""What the state API does with several iterators, a loop broken off, and datasets made from a
dataset holding a loaded state (docs/state-contract.md, "Each iter(ds) starts a pass")."""

from __future__ import annotations

import copy
import json

import resumable_iterable as ri


def build():
    return ri.IterableDataset.from_dict({"id": list(range(20))}, num_shards=2).shuffle(seed=1, buffer_size=4)


def ids(ds):
    return [e["id"] for e in ds]


def resumed_from(state):
    ds = build()
    ds.load_state_dict(json.loads(json.dumps(state)))
    return ids(ds)


def test_the_state_describes_the_pass_started_last_and_each_iterator_goes_on():
    full = ids(build())
    ds = build()
    first = iter(ds)
    head1 = [next(first)["id"] for _ in range(9)]
    second = iter(ds)
    head2 = [next(second)["id"] for _ in range(2)]
    assert head2 + resumed_from(ds.state_dict()) == full
    assert head1 + [e["id"] for e in first] == full
    assert head2 + [e["id"] for e in second] == full


def test_a_loop_broken_off_leaves_its_position_and_the_next_loop_starts_a_new_pass():
    full = ids(build())
    ds = build()
    head = []
    for e in ds:
        head.append(e["id"])
        if len(head) == 6:
            break
    assert head + resumed_from(ds.state_dict()) == full
    assert ids(ds) == full


def test_a_loaded_state_goes_with_copies_not_with_datasets_made_from_it():
    full = ids(build())
    ds = build()
    it = iter(ds)
    [next(it) for _ in range(7)]
    state = ds.state_dict()
    loaded = build()
    loaded.load_state_dict(state)
    assert [int(e["id"]) for e in loaded.with_format("numpy")] == full  # a new dataset: from the start
    assert ids(loaded.skip(0)) == full
    assert ids(copy.deepcopy(loaded)) == full[7:]
    assert ids(loaded) == full[7:]
