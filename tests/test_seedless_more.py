"""More about pipelines built without a seed (see ``test_seedless_epochs.py``): what a resume of
their later epochs must also survive.

* a seedless node below ``shuffle(max_buffer_input_shards=k)``: every pass regroups the shards of
  that node's own copy of its input, so that copy is what must draw from the saved seed;
* datasets sharing a pipeline template (``with_format``, ``copy.copy``, ``split_dataset_by_node``):
  loading a state into one of them must not change the seeds the others draw and record;
* a malformed ``"seeds"`` entry in any worker's state of a ``StatefulDataLoader`` state is refused
  by ``load_state_dict``, before a worker starts;
* ``inspect`` reports a malformed ``"seeds"`` entry as a problem, as loading would refuse it.
"""

from __future__ import annotations

import copy
import itertools
import json
import pickle

import pytest

import resumable_iterable as ri
from test_seedless_epochs import epochs, source


def cut(ds, k, epoch=0):
    """``k`` examples of ``epoch``, the state then (JSON round trip), the rest of the epoch."""
    ds.set_epoch(epoch)
    it = iter(ds)
    head = [ex["id"] for ex in itertools.islice(it, k)]
    state = json.loads(json.dumps(ds.state_dict()))
    return head, state, [ex["id"] for ex in it]


GROUPED = {
    "interleave below": lambda: ri.interleave_datasets(
        [source(), source(base=10)], probabilities=[0.5, 0.5], stopping_strategy="all_exhausted").shuffle(
        seed=1, buffer_size=3, max_buffer_input_shards=2),
    "shuffle below": lambda: source().shuffle(buffer_size=2).shuffle(seed=1, buffer_size=3, max_buffer_input_shards=2),
    "both seedless": lambda: source().shuffle(buffer_size=2).shuffle(buffer_size=3, max_buffer_input_shards=2),
}


@pytest.mark.parametrize("name", sorted(GROUPED))
@pytest.mark.parametrize("k", [0, 3])
def test_a_seedless_node_below_grouped_shards_resumes_the_later_epochs(name, k):
    build = GROUPED[name]
    ds = build()
    _, state, rest = cut(ds, k)
    later = epochs(ds, 1, 3)
    again = build()
    again.load_state_dict(state)
    assert [ex["id"] for ex in again] == rest
    assert epochs(again, 1, 3) == later


VIEWS = {
    "with_format": lambda ds: ds.with_format("python"),
    "copy": copy.copy,
    "split_dataset_by_node": lambda ds: ri.split_dataset_by_node(ds, rank=0, world_size=1),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_loading_into_a_dataset_sharing_the_template_leaves_the_others_seeds(view):
    def build():
        return source().shuffle(buffer_size=3)

    other = build()
    next(iter(other))
    foreign = other.state_dict()
    ds = build()
    ds.state_dict()
    mine = epochs(copy.deepcopy(ds), 1, 3)
    VIEWS[view](ds).load_state_dict(foreign)  # the view draws from the other run's seeds now...
    assert epochs(ds, 1, 3) == mine  # ...but this dataset still draws from its own
    # and its states say so: they resume its run
    _, state, rest = cut(ds, 2, epoch=1)
    later = epochs(ds, 2, 4)
    again = build()
    again.load_state_dict(state)
    assert [ex["id"] for ex in again] == rest
    assert epochs(again, 2, 4) == later


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("bad", ["x", [[0, -1]], [[99, 1]]])
def test_a_malformed_seeds_entry_of_any_worker_is_refused_when_the_loader_state_loads(bad):
    pytest.importorskip("torchdata")

    def loader(workers=2):
        return ri.StatefulDataLoader(source().shuffle(buffer_size=3), batch_size=2, num_workers=workers,
                                     collate_fn=lambda b: [ex["id"] for ex in b])

    dl = loader()
    it = iter(dl)
    next(it)
    next(it)
    state = pickle.loads(pickle.dumps(dl.state_dict()))
    del it
    state["_snapshot"]["_worker_snapshots"]["worker_1"]["dataset_state"]["seeds"] = bad
    for workers in (2, 1):
        with pytest.raises(ValueError, match="worker_1/dataset_state: 'seeds'"):
            loader(workers).load_state_dict(state)


@pytest.mark.parametrize("bad, message", [("x", "list of \\[node index, seed\\]"), ([[0, -1]], "out of range"),
                                          ([[99, 1]], "out of range")])
def test_inspect_reports_a_malformed_seeds_entry(tmp_path, capsys, bad, message):
    from resumable_iterable.cli import main

    ds = source().shuffle(buffer_size=3)
    next(iter(ds))
    state = ds.state_dict()
    assert main(["inspect", str(_saved(tmp_path / "good.json", state))]) == 0
    capsys.readouterr()
    state["seeds"] = bad
    assert main(["inspect", str(_saved(tmp_path / "bad.json", state))]) == 1
    err = capsys.readouterr().err
    assert "'seeds'" in err and len(err.strip().splitlines()) == 1
    assert __import__("re").search(message, err)
    with pytest.raises(ValueError, match=message):
        source().shuffle(buffer_size=3).load_state_dict(state)


def _saved(path, state):
    ri.save_state(state, path)
    return path
