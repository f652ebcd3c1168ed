"""A pipeline built without a seed resumes its later epochs as the saved run would have drawn them.

A ``shuffle()``, an ``interleave_datasets(probabilities=...)`` or a global shuffle built without a
seed draws one at random when it is built. Its states carry the draws of the pass in progress; they
also record the drawn seeds (``"seeds"``), and a rebuilt pipeline that loads one adopts them, so the
epochs after the resumed one are the uninterrupted run's too (they were drawn from the rebuilt
pipeline's new seed: every example once, in another order). A seed given to the rebuilt pipeline
is kept.
"""

from __future__ import annotations

import itertools
import json
import pickle

import pytest

import resumable_iterable as ri


def rows(shards, n=6):
    for s in shards:
        for i in range(n):
            yield {"id": s * 100 + i}


def source(n_shards=4, base=0):
    return ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": list(range(base, base + n_shards))})


BUILDS = {
    "shuffle": lambda seed=None: source().shuffle(seed=seed, buffer_size=5),
    "interleave": lambda seed=None: ri.interleave_datasets([source(2), source(2, base=10)], probabilities=[0.3, 0.7],
                                                           seed=seed, stopping_strategy="all_exhausted"),
    "global_shuffle": lambda seed=None: ri.to_iterable_dataset(
        __import__("datasets").Dataset.from_dict({"id": list(range(24))}), num_shards=4).shuffle(
        seed=seed, buffer_size=None),
    "both": lambda seed=None: ri.interleave_datasets(
        [source(2).shuffle(seed=seed, buffer_size=3), source(2, base=10)], probabilities=[0.5, 0.5], seed=seed),
}


def epochs(ds, first, last):
    out = []
    for e in range(first, last):
        ds.set_epoch(e)
        out.append([ex["id"] for ex in ds])
    return out


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_cut_of_the_first_epoch_resumes_the_later_epochs_too(name):
    build = BUILDS[name]
    n = len(epochs(build(), 0, 1)[0])
    for cut in range(n + 3):
        ds = build()  # each build draws its own seed: the uninterrupted run is this object's
        ds.set_epoch(0)
        it = iter(ds)
        head = [ex["id"] for ex in itertools.islice(it, cut)]  # (each build's epoch may have its own length)
        state = json.loads(json.dumps(ds.state_dict()))
        full = [head + [ex["id"] for ex in it]] + epochs(ds, 1, 3)
        if name in ("shuffle", "global_shuffle"):  # the epochs differ (checked where chance cannot make them agree)
            assert full[1] != full[2]
        assert state["seeds"] and all(len(e) == 2 for e in state["seeds"])
        again = build()  # draws another seed
        again.load_state_dict(state)
        assert head + [ex["id"] for ex in again] == full[0], cut
        assert epochs(again, 1, 3) == full[1:], cut


def test_without_the_seeds_the_later_epochs_differ():
    """What the entry is for: the same state without it resumes the epoch, then draws anew."""
    ds = BUILDS["shuffle"]()
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    del state["seeds"]
    full = [[ex["id"] for ex in it]] + epochs(ds, 1, 2)
    again = BUILDS["shuffle"]()
    again.load_state_dict(state)
    assert [ex["id"] for ex in again] == full[0]
    assert epochs(again, 1, 2) != full[1:]


def test_a_seed_given_to_the_rebuilt_pipeline_is_kept_and_seeded_pipelines_record_none():
    seeded = BUILDS["shuffle"](seed=5)
    assert "seeds" not in seeded.state_dict()
    ds = BUILDS["shuffle"]()
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    again = BUILDS["shuffle"](seed=5)
    again.load_state_dict(state)
    list(again)
    assert epochs(again, 1, 2) == epochs(BUILDS["shuffle"](seed=5), 1, 2)


@pytest.mark.parametrize("seeds, message", [
    ("x", "list of \\[node index, seed\\]"), ([[0]], "pairs"), ([[0, -1]], "out of range"),
    ([[99, 1]], "out of range"), ([[0, 2**64]], "out of range"), ([[0, 1.5]], "pairs"),
])
def test_a_malformed_seeds_entry_is_refused_before_anything_loads(seeds, message):
    ds = BUILDS["shuffle"]()
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    state["seeds"] = seeds
    fresh = BUILDS["shuffle"]()
    before = fresh.state_dict()
    with pytest.raises(ValueError, match=message):
        fresh.load_state_dict(state)
    assert fresh.state_dict() == before


def test_a_copy_and_a_pickle_of_the_resumed_dataset_keep_the_adopted_seeds():
    ds = BUILDS["shuffle"]()
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    full = [[ex["id"] for ex in it]] + epochs(ds, 1, 3)
    again = BUILDS["shuffle"]()
    again.load_state_dict(state)
    assert [ex["id"] for ex in again] == full[0]
    assert epochs(pickle.loads(pickle.dumps(again)), 1, 3) == full[1:]


# ---------------------------------------------------------------------- through DataLoader workers


def ids(batch):
    return [ex["id"] for ex in batch]


def loader_epochs(dl, first, last, stop=None):
    """The ids of epochs ``first..last-1`` through loader ``dl``; with ``stop``, also the loader's
    state taken (without stopping) once ``stop`` examples of the first epoch were yielded."""
    out, state = [], None
    for e in range(first, last):
        dl.set_epoch(e)
        got = []
        for b in dl:
            got.extend(b)
            if stop is not None and e == first and state is None and len(got) >= stop:
                state, at = pickle.loads(pickle.dumps(dl.state_dict())), len(got)
        out.append(got)
    return (out, state, at) if stop is not None else out


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("name", ["shuffle", "both"])
def test_through_workers_the_later_epochs_are_the_saved_runs(name, persistent):
    pytest.importorskip("torchdata")
    build = BUILDS[name]

    def loader(ds, workers=2):
        return ri.StatefulDataLoader(ds, batch_size=3, num_workers=workers, collate_fn=ids,
                                     persistent_workers=persistent and workers > 0)

    for stop in (3, 9):
        full, state, at = loader_epochs(loader(build()), 0, 3, stop=stop)  # each build draws its own seed
        again = loader(build())
        again.load_state_dict(state)
        assert full[0][:at] + [i for b in again for i in b] == full[0], stop
        assert loader_epochs(again, 1, 3) == full[1:], stop


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("workers", [3, 0])
def test_after_an_elastic_resume_the_later_epochs_are_those_of_the_saved_seed(workers):
    """Resumed with another worker count: the rest of the epoch is every example once; the later
    epochs are those a pipeline given the saved seed makes with the new worker count."""
    pytest.importorskip("torchdata")
    build = BUILDS["shuffle"]
    dl = ri.StatefulDataLoader(build(), batch_size=3, num_workers=2, collate_fn=ids)
    full, state, at = loader_epochs(dl, 0, 1, stop=6)
    head = [full[0][:at]]
    (_, seed), = ri.loads_state(ri.dumps_state(state))["_snapshot"]["_worker_snapshots"]["worker_0"][
        "dataset_state"]["seeds"]
    again = ri.StatefulDataLoader(build(), batch_size=3, num_workers=workers, collate_fn=ids)
    again.load_state_dict(state)
    rest = [i for b in again for i in b]
    assert sorted(head[0] + rest) == sorted(r["id"] for r in rows(range(4)))
    expected = ri.StatefulDataLoader(build(seed=seed), batch_size=3, num_workers=workers, collate_fn=ids)
    assert loader_epochs(again, 1, 3) == loader_epochs(expected, 1, 3)
    # a state taken during the elastic epoch records the seeds too, and a third run adopts them
    again = ri.StatefulDataLoader(build(), batch_size=3, num_workers=workers, collate_fn=ids)
    again.load_state_dict(state)
    it = iter(again)
    next(it)
    mid = pickle.loads(pickle.dumps(again.state_dict()))
    del it
    third = ri.StatefulDataLoader(build(), batch_size=3, num_workers=workers, collate_fn=ids)
    third.load_state_dict(mid)
    list(third)
    assert loader_epochs(third, 1, 2) == loader_epochs(expected, 1, 2)


def test_rank_states_redistributed_keep_each_ranks_seeds():
    """Ranks splitting a seedless shuffle by shard each draw their own seed. ``redistribute_states``
    gives new rank r old rank r's seeds (modulo the old world size): from 2 ranks to 2, the
    epochs after the resumed one are each rank's own uninterrupted ones."""
    def rank_ds(r):
        return ri.split_dataset_by_node(source(n_shards=4).shuffle(buffer_size=3), rank=r, world_size=2)

    states, full = [], []
    for r in range(2):
        ds = rank_ds(r)  # each rank's process builds its pipeline, drawing its own seed
        ds.set_epoch(0)
        it = iter(ds)
        head = [ex["id"] for ex in itertools.islice(it, 4)]
        states.append(json.loads(json.dumps(ds.state_dict())))
        full.append([head, [ex["id"] for ex in it]] + epochs(ds, 1, 3))
    assert states[0]["seeds"] != states[1]["seeds"]
    plans = ri.redistribute_states(states, 2)
    for r in range(2):
        again = rank_ds(r)
        again.load_state_dict(json.loads(json.dumps(plans[r])))
        rest = [ex["id"] for ex in again]
        assert sorted(rest) == sorted(full[r][1])  # the rest of the epoch (dealt as segments)
        assert epochs(again, 1, 3) == full[r][2:], r
