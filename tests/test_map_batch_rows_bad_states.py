"""Edited states whose batched ``map``/``filter`` holds rows (``retry``) that the node can never
have written: each must be refused by ``load_state_dict`` (``ValueError``, nothing loaded) - they
used to load, then crash part-way through the pass or silently lose or repeat data - and by
``inspect`` where the pipeline's shape tells (the rows held against ``batch_size``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import resumable_iterable as ri


def rows(shards, n=8):
    for s in shards:
        for i in range(n):
            yield {"id": s * 100 + i, "tags": [s, i]}


def source():
    return ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0, 1, 2]})


def sums(batch):
    return {"s": [sum(batch["id"])] * len(batch["id"])}


def evens(batch):
    return [i % 2 == 0 for i in batch["id"]]


BUILDS = {
    "map4": lambda: source().shuffle(seed=3, buffer_size=6).map(sums, batched=True, batch_size=4),
    "whole": lambda: source().shuffle(seed=3, buffer_size=6).map(sums, batched=True, batch_size=None),
    "drop5": lambda: source().shuffle(seed=3, buffer_size=6).map(sums, batched=True, batch_size=5,
                                                                 drop_last_batch=True),
    "filter4": lambda: source().shuffle(seed=3, buffer_size=6).filter(evens, batched=True, batch_size=4),
}


def plain_state(name, k):
    ds = BUILDS[name]()
    it = iter(ds)
    for _ in range(k):
        next(it)
    return json.loads(json.dumps(ds.state_dict()))


ROW = {"id": 104, "tags": [1, 4]}


@pytest.mark.parametrize("name, k, edit, message", [
    # the whole input is one batch: the node keeps a copy of its input's state, never rows
    ("whole", 0, lambda st: st.update(retry=[dict(ROW)], skip=0), "batch_size=None"),
    ("whole", 0, lambda st: st.update(retry=[dict(ROW)], skip=1), "batch_size=None"),
    # with drop_last_batch a computed batch (skip > 0) is a whole one: a short one ended the pass
    ("drop5", 1, lambda st: st.update(retry=st["retry"][:2]), "drop_last_batch"),
    # a filter yields at most the rows of its batch
    ("filter4", 1, lambda st: st.update(skip=len(st["retry"]) + 1), "'skip'"),
])
def test_rows_the_node_cannot_hold_are_refused_before_anything_loads(name, k, edit, message):
    full = list(BUILDS[name]())
    state = plain_state(name, k)
    edit(state["state"])
    ds = BUILDS[name]()
    with pytest.raises(ValueError, match=message):
        ds.load_state_dict(state)
    assert list(ds) == full  # the failed load changed nothing


def test_the_legitimate_forms_still_load():
    for name in BUILDS:
        full = list(BUILDS[name]())
        for k in range(len(full) + 1):
            state = plain_state(name, k)
            ds = BUILDS[name]()
            ds.load_state_dict(state)
            assert list(ds) == full[k:], (name, k)


def test_inspect_reports_more_rows_than_a_batch(tmp_path):
    state = plain_state("map4", 1)
    state["state"]["retry"] = state["state"]["retry"] * 3
    with pytest.raises(ValueError, match="more than a batch"):
        BUILDS["map4"]().load_state_dict(state)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    res = subprocess.run([sys.executable, "-m", "resumable_iterable.cli", "inspect", str(path)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "more than a batch" in res.stderr, res.stderr
