"""A state asked for while the dataset is producing an example - from a ``map`` function of that
dataset, or from a signal handler that interrupted its code - is refused: the nodes are then
part-way through a step, and the state would lose or repeat an example on resume."""

from __future__ import annotations

import json
import sys

import pytest

import resumable_iterable as ri


def ids(ds):
    return [e["id"] for e in ds]


def test_a_map_function_asking_for_the_state_is_refused_and_the_state_after_the_error_resumes():
    holder = {}

    def spy(ex):
        if ex["id"] == 3:
            holder["state"] = json.loads(json.dumps(holder["ds"].state_dict()))

    def build(f=None):
        return ri.IterableDataset.from_dict({"id": list(range(12))}, num_shards=2).map(f or (lambda ex: None))

    full = ids(build())
    ds = holder["ds"] = build(spy)
    head = []
    with pytest.raises(RuntimeError, match="while the dataset is producing an example"):
        for ex in ds:
            head.append(ex["id"])
    assert "state" not in holder  # before the fix: a state that resumed at id 4, losing id 3
    resumed = build()
    resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    assert head + ids(resumed) == full


@pytest.mark.parametrize("build", [
    lambda: ri.IterableDataset.from_dict({"id": list(range(30))}, num_shards=3).map(lambda ex: {"x": 1}),
    lambda: ri.IterableDataset.from_dict({"id": list(range(30))}, num_shards=3).shuffle(seed=1, buffer_size=5),
], ids=["map", "shuffle"])
def test_a_state_taken_inside_the_pipeline_code_is_refused_never_wrong(build):
    """As a signal handler would (``signal.signal(SIGTERM, lambda *a: save(ds.state_dict()))``): at
    every line the library runs while the 8th example is being produced."""
    full = ids(build())
    ds = build()
    got, states, refused = [], [], []

    def tracer(frame, event, arg):
        if "resumable_iterable" not in frame.f_code.co_filename:
            return None
        if event == "line" and len(got) == 7 and not tracing_state:
            tracing_state.append(1)
            try:
                states.append(json.loads(json.dumps(ds.state_dict())))
            except RuntimeError:
                refused.append(1)
            finally:
                tracing_state.clear()
        return tracer

    tracing_state: list = []
    it = iter(ds)
    sys.settrace(tracer)
    try:
        for ex in it:
            got.append(ex["id"])
            if len(got) == 8:
                break
    finally:
        sys.settrace(None)
    assert refused and got == full[:8]
    for state in states:  # only states taken between examples (the trace's first lines, at 7)
        resumed = build()
        resumed.load_state_dict(state)
        assert full[:7] + ids(resumed) == full


def test_states_between_examples_and_copies_are_unaffected():
    ds = ri.IterableDataset.from_dict({"id": list(range(10))}).shuffle(seed=3, buffer_size=4)
    full = ids(ds)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(4)]
    state = ds.state_dict()
    twin = pickle_copy(ds)  # a copy leaves the original's iterator behind
    assert twin.state_dict()["state"] != state["state"]
    resumed = ri.IterableDataset.from_dict({"id": list(range(10))}).shuffle(seed=3, buffer_size=4)
    resumed.load_state_dict(state)
    assert head + ids(resumed) == full
    assert head + [e["id"] for e in it] == full
    batches = ds.iter(3)
    next(batches)
    ds.state_dict()  # between batches of iter(batch_size)


def pickle_copy(ds):
    import pickle

    return pickle.loads(pickle.dumps(ds))
