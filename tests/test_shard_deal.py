"""Which shards each DataLoader worker and rank reads, epoch by epoch (``distributed.py``).

Under a shuffle the shards are dealt from a list drawn from the epoch, as HF shuffles its shards
before dealing them: a worker reads other shards every epoch. Without a
shuffle, or under ``take``/``skip``, the natural order: worker ``w`` reads ``w, w + W, ...``.
Resumes stay exact in every epoch, with the same or another number of workers, and states
saved before the deal existed (no ``"deal"``) resume their epoch as they were dealt. A split into
one part (``split_dataset_by_node(ds, 0, 1)``, one worker) reads what the unsplit dataset reads,
in its order, as in HF, and their states load into each other.
"""

from __future__ import annotations

import copy
import re

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from resumable_iterable import distributed  # noqa: E402
from resumable_iterable.loader import resume  # noqa: E402
from data import HF, gen_src  # noqa: E402
from harness import assert_resumes_exactly, json_roundtrip  # noqa: E402

N_SHARDS, ROWS = 8, 5
EVERYTHING = sorted(s * 100 + i for s in range(N_SHARDS) for i in range(ROWS))


def shuffled(seed=3, buffer_size=4):
    return gen_src(N_SHARDS, ROWS).shuffle(seed=seed, buffer_size=buffer_size)


def shards_by_worker(ds, epoch, num_workers=2, **kw):
    """{worker: shards it read} in ``epoch`` (batches of one shard's rows tell the worker apart)."""
    ds.set_epoch(epoch)
    got: dict[int, set] = {}
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers, **kw)
    for k, ex in enumerate(loader):
        got.setdefault(k % num_workers, set()).add(int(ex["id"]) // 100)
    return {w: sorted(s) for w, s in sorted(got.items())}


def test_workers_read_other_shards_every_epoch_under_a_shuffle():
    ds = shuffled()
    deals = [shards_by_worker(ds, e) for e in range(4)]
    for d in deals:
        assert sorted(d[0] + d[1]) == list(range(N_SHARDS)) and len(d[0]) == len(d[1]) == 4
    assert len({tuple(d[0]) for d in deals}) > 1, deals  # not the same shards in every epoch
    # fixed by the epoch alone: every rank and a resumed run deal alike, whatever seed each drew
    assert deals[1] == shards_by_worker(shuffled(), 1) == shards_by_worker(shuffled(seed=4), 1)
    assert deals[2] == shards_by_worker(gen_src(N_SHARDS, ROWS).shuffle(buffer_size=4), 2)


def test_a_concatenation_of_single_shard_datasets_is_dealt_anew_every_epoch():
    """HF deals the shards of all inputs in one order: a worker gets other inputs every epoch."""
    def build():
        inputs = [ri.IterableDataset.from_generator(gen_rows_of, gen_kwargs={"s": s}) for s in range(N_SHARDS)]
        return ri.concatenate_datasets(inputs).shuffle(seed=3, buffer_size=4)

    deals = [shards_by_worker(build(), e) for e in range(4)]
    for d in deals:
        assert sorted(d[0] + d[1]) == list(range(N_SHARDS)) and len(d[0]) == len(d[1]) == 4
    assert len({tuple(d[0]) for d in deals}) > 1, deals


def gen_rows_of(s):
    for i in range(ROWS):
        yield {"id": s * 100 + i, "text": ""}


def test_persistent_workers_follow_the_epoch():
    ds = shuffled()
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    deals = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        got: dict[int, set] = {}
        for k, ex in enumerate(loader):
            got.setdefault(k % 2, set()).add(int(ex["id"]) // 100)
        deals.append({w: sorted(s) for w, s in got.items()})
    assert deals == [shards_by_worker(shuffled(), e) for e in range(3)]


@pytest.mark.parametrize("build", [
    lambda: gen_src(N_SHARDS, ROWS),                                        # no shuffle
    lambda: gen_src(N_SHARDS, ROWS).take(1000).shuffle(seed=3, buffer_size=4),  # take fixes the order
    lambda: gen_src(N_SHARDS, ROWS).shuffle(seed=3, buffer_size=4).take(1000),  # as in HF, above too
])
def test_the_natural_deal_without_a_shuffle_that_sets_it(build):
    for epoch in range(3):
        assert shards_by_worker(build(), epoch) == {0: [0, 2, 4, 6], 1: [1, 3, 5, 7]}


def rank_shards(ds, rank, world, epoch, strategy="shards"):
    part = ri.split_dataset_by_node(ds, rank, world, strategy=strategy)
    part.set_epoch(epoch)
    return [int(ex["id"]) for ex in part]


def test_ranks_read_other_shards_every_epoch_and_together_everything():
    seen = set()
    for epoch in range(3):
        parts = [rank_shards(shuffled(), r, 2, epoch) for r in range(2)]
        assert sorted(parts[0] + parts[1]) == EVERYTHING
        seen.add(tuple(sorted({i // 100 for i in parts[0]})))
        # the rank's DataLoader workers share its shards, and still read everything once
        part = ri.split_dataset_by_node(shuffled(), 0, 2)
        part.set_epoch(epoch)
        assert sorted(int(ex["id"]) for ex in DataLoader(part, batch_size=None, num_workers=2)) == sorted(parts[0])
    assert len(seen) > 1
    # split by example, every rank reads all shards in one order: still a partition every epoch
    for epoch in range(2):
        parts = [rank_shards(shuffled(), r, 3, epoch, "examples") for r in range(3)]
        assert sorted(sum(parts, [])) == EVERYTHING


def _ids(batch):
    return batch["id"].tolist()


@pytest.mark.parametrize("resumed_workers", [2, 3, 0])
def test_every_batch_cut_in_a_later_epoch_resumes_exactly(resumed_workers):
    def run(loader_state=None, num_workers=2):
        ds = shuffled()
        loader = ri.StatefulDataLoader(ds, batch_size=3, num_workers=num_workers)
        if loader_state is not None:
            loader.load_state_dict(loader_state)
        else:
            ds.set_epoch(1)
        return loader

    loader = run()
    full, states = [], []
    for b in loader:
        full.append(_ids(b))
        states.append(json_roundtrip(loader.state_dict()))
    assert sorted(sum(full, [])) == EVERYTHING
    for k in range(len(full)) if resumed_workers == 2 else range(0, len(full), 3):
        tail = [_ids(b) for b in run(states[k], resumed_workers)]
        if resumed_workers == 2:
            assert full[:k + 1] + tail == full, k
        else:
            assert sorted(sum(full[:k + 1] + tail, [])) == EVERYTHING, k
        assert all("deal" in s["split"] for s in _dataset_states(states[k]))


def _dataset_states(loader_state):
    snaps = loader_state["_snapshot"]["_worker_snapshots"]
    return [snaps[k]["dataset_state"] for k in sorted(snaps)]


def test_a_state_saved_before_the_deal_resumes_as_it_was_dealt(monkeypatch):
    """An earlier version dealt the natural order every epoch and wrote no ``"deal"``."""
    def run(loader_state=None):
        ds = shuffled()
        loader = ri.StatefulDataLoader(ds, batch_size=3, num_workers=2)
        if loader_state is not None:
            loader.load_state_dict(loader_state)
        else:
            ds.set_epoch(1)
        return loader

    with monkeypatch.context() as m:  # the earlier version's dealing
        m.setattr(distributed, "split_deal", lambda *a: 0)  # forked workers inherit it
        m.setattr(resume, "split_deal", lambda *a: 0)
        loader = run()
        it = iter(loader)
        head = [_ids(next(it)) for _ in range(4)]
        old_state = json_roundtrip(loader.state_dict())
        rest = [_ids(b) for b in it]
        del it, loader
    assert not any("deal" in s["split"] for s in _dataset_states(old_state))
    assert sorted({i // 100 for b in head[0::2] + rest[0::2] for i in b}) in ([0, 2, 4, 6], [1, 3, 5, 7])
    assert [_ids(b) for b in run(old_state)] == rest
    # moved to another worker count, still exactly the rest
    loader = ri.StatefulDataLoader(shuffled(), batch_size=3, num_workers=3)
    loader.load_state_dict(old_state)
    assert sorted(sum(head + [_ids(b) for b in loader], [])) == EVERYTHING


def test_one_dataset_state_per_rank_moves_to_another_world_size():
    states, heads = [], []
    for r in range(2):
        part = ri.split_dataset_by_node(shuffled(), r, 2)
        part.set_epoch(2)
        it = iter(part)
        heads += [int(next(it)["id"]) for _ in range(7)]
        states.append(json_roundtrip(part.state_dict()))
        assert states[-1]["split"]["deal"] == 1
    tails = []
    for r, st in enumerate(ri.redistribute_states(states, 3)):
        assert all(seg["split"].get("deal") == 1 for seg in st["segments"])
        part = ri.split_dataset_by_node(shuffled(), r, 3)
        part.load_state_dict(json_roundtrip(st))
        tails += [int(ex["id"]) for ex in part]
    assert sorted(heads + tails) == EVERYTHING


def test_a_deal_this_version_does_not_know_is_refused():
    part = ri.split_dataset_by_node(shuffled(), 0, 2)
    part.set_epoch(1)
    it = iter(part)
    next(it)
    state = json_roundtrip(part.state_dict())
    for bad in (2, True, "1", None):
        st = copy.deepcopy(state)
        st["split"]["deal"] = bad
        with pytest.raises(ValueError, match="'split.deal' is"):
            ri.split_dataset_by_node(shuffled(), 0, 2).load_state_dict(st)
    # a state dealt by epoch loaded as if dealt in the natural order no longer matches its pipeline
    st = copy.deepcopy(state)
    del st["split"]["deal"]
    with pytest.raises(ValueError, match="different pipeline"):
        ri.split_dataset_by_node(shuffled(), 0, 2).load_state_dict(st)


def _composed(kind):
    a = gen_src(4, ROWS)
    b = gen_src(6, ROWS).map(lambda ex: {"id": ex["id"] + 10_000})
    if kind == "interleave":
        ds = ri.interleave_datasets([a, b], probabilities=[0.5, 0.5], seed=1, stopping_strategy="all_exhausted")
    elif kind == "concat":
        ds = ri.concatenate_datasets([a, b])
    elif kind == "concat_axis1":
        ds = ri.concatenate_datasets([a, gen_src(4, ROWS).map(lambda ex: {"id2": ex["id"]}, remove_columns=["id", "text"])],
                                     axis=1)
    elif kind == "input_shards":
        return gen_src(N_SHARDS, ROWS).shuffle(seed=2, buffer_size=5, max_buffer_input_shards=2)
    else:  # a filter over an Arrow source
        ds = ri.to_iterable_dataset(HF, num_shards=6).filter(lambda ex: ex["id"] % 3 != 1)
    return ds.shuffle(seed=2, buffer_size=5)


@pytest.mark.parametrize("kind", ["interleave", "concat", "concat_axis1", "input_shards", "arrow"])
def test_compositions_read_everything_once_in_every_epoch_and_resume_exactly(kind):
    for epoch in range(3):
        one = _composed(kind)
        one.set_epoch(epoch)
        expected = sorted(int(ex["id"]) for ex in one)
        ds = _composed(kind)
        ds.set_epoch(epoch)
        loader = ri.StatefulDataLoader(ds, batch_size=2, num_workers=2)
        batches, states = [], []
        for bt in loader:
            batches.append(_ids(bt))
            states.append(json_roundtrip(loader.state_dict()))
        if kind != "interleave":  # all_exhausted repeats examples, as many as each worker's draws need
            assert sorted(sum(batches, [])) == expected, epoch
        k = len(batches) // 3
        resumed = ri.StatefulDataLoader(_composed(kind), batch_size=2, num_workers=2)
        resumed.load_state_dict(states[k])
        assert batches[:k + 1] + [_ids(bt) for bt in resumed] == batches, (kind, epoch)


def test_a_seedless_shuffle_resumes_in_another_process_with_workers():
    """``shuffle()`` without a seed draws another seed in the resumed run: the deal must not depend on it."""
    def loader(ds):
        ds.set_epoch(3)
        return ri.StatefulDataLoader(ds, batch_size=3, num_workers=2)

    first = loader(gen_src(N_SHARDS, ROWS).shuffle(buffer_size=4))
    it = iter(first)
    head = [_ids(next(it)) for _ in range(5)]
    state = json_roundtrip(first.state_dict())
    rest = [_ids(b) for b in it]
    del it
    resumed = ri.StatefulDataLoader(gen_src(N_SHARDS, ROWS).shuffle(buffer_size=4), batch_size=3, num_workers=2)
    resumed.load_state_dict(state)
    assert [_ids(b) for b in resumed] == rest
    assert sorted(sum(head + rest, [])) == EVERYTHING


@pytest.mark.parametrize("make,by", [
    (lambda: gen_src(N_SHARDS, ROWS).shuffle(buffer_size=4), None),  # by shard: the deal needs no seed
    (lambda: gen_src(3, ROWS).shuffle(buffer_size=4), "shuffle() without a seed"),  # 3 shards, 2 ranks: by example
    (lambda: ri.to_iterable_dataset(HF, num_shards=4).shuffle(buffer_size=None), "shuffle(buffer_size=None) without a seed"),
    (lambda: ri.interleave_datasets([gen_src(1, ROWS), gen_src(3, ROWS)], probabilities=[0.5, 0.5]),
     "interleave_datasets(probabilities=...) without a seed"),  # one shard: by example
    (lambda: ri.interleave_datasets([gen_src(2, ROWS), gen_src(4, ROWS)], probabilities=[0.5, 0.5]), None),
])
def test_ranks_refuse_random_draws_they_would_not_share(make, by):
    """Every rank is its own process: a seed drawn at random differs from rank to rank."""
    if by is None:  # by shard: the deal needs no seed, and each rank draws its own interleave choices anyway
        parts = [rank_shards(make(), r, 2, 0) for r in range(2)]  # another seed on every rank
        if "interleave" not in make().pipeline.kind:
            assert sorted(parts[0] + parts[1]) == EVERYTHING
        return
    with pytest.raises(ValueError, match=rf"split among 2 ranks by split_dataset_by_node cannot hold {re.escape(by)}.*seed=42"):
        ri.split_dataset_by_node(make(), 0, 2)
    ri.split_dataset_by_node(make(), 0, 1)  # one rank: nothing to share
    # a shuffle without a seed made after the split is refused too
    if by == "shuffle() without a seed":
        part = ri.split_dataset_by_node(gen_src(3, ROWS).shuffle(seed=1, buffer_size=4), 0, 2)
        with pytest.raises(ValueError, match="shuffle\\(\\) without a seed"):
            part.shuffle(buffer_size=4)


@pytest.mark.parametrize("kind", ["interleave", "concat", "concat_axis1", "input_shards", "arrow"])
@pytest.mark.parametrize("rank", [0, 1])
def test_every_cut_of_a_dealt_rank_part_resumes_exactly(kind, rank):
    """The rank parts of a later epoch, dealt from the epoch's list: checkpoint after every example."""
    def build():
        part = ri.split_dataset_by_node(_composed(kind), rank, 2)
        part.set_epoch(2)
        return part

    full = assert_resumes_exactly(build)
    assert full


# ------------------------------------------------- a split of world size 1 is no split (as in HF)
def _as_before(m):
    """Earlier versions' rank split of world size 1: it dealt a shuffled dataset's shards once more
    (its states record ``"deal": 1``) and listed a concatenation's inputs as one-shard pieces."""
    def old_split_deal(node, ranks, worker):
        if not ranks and distributed.effective_worker(worker) is None:
            return 0
        return distributed.DEAL_BY_EPOCH if node.deals_by_epoch() else 0

    split_ranks = distributed.split_ranks
    m.setattr(distributed, "split_deal", old_split_deal)  # forked workers inherit these
    m.setattr(resume, "split_deal", old_split_deal)
    m.setattr(distributed, "split_ranks", lambda node, ranks, epoch=0, deal=0, as_before=False:
              split_ranks(node, ranks, epoch, deal, True))


def _one_part(build, split):
    return ri.split_dataset_by_node(build(), 0, 1) if split else build()


def _loader_ids(ds, num_workers):
    return [int(ex["id"]) for ex in DataLoader(ds, batch_size=None, num_workers=num_workers)]


@pytest.mark.parametrize("kind", ["plain", "interleave", "concat", "input_shards", "arrow"])
def test_split_of_world_size_one_reads_the_unsplit_order_in_every_epoch(kind):
    """HF's ``split_dataset_by_node(ds, 0, 1)`` reads what ``ds`` reads, in its order; ours dealt the
    shards of a shuffled dataset once more, at that split, and read another order."""
    build = shuffled if kind == "plain" else (lambda: _composed(kind))
    for epoch in range(3):
        runs = {}
        for split in (False, True):
            for workers in (0, 2):
                ds = _one_part(build, split)
                ds.set_epoch(epoch)
                runs[split, workers] = _loader_ids(ds, workers) if workers else [int(ex["id"]) for ex in ds]
        assert runs[True, 0] == runs[False, 0], (kind, epoch)
        assert runs[True, 2] == runs[False, 2], (kind, epoch)
    # below another rank split, one of world size 1 changes nothing either
    two = ri.split_dataset_by_node(shuffled(), 1, 2)
    two.set_epoch(1)
    one_more = ri.split_dataset_by_node(ri.split_dataset_by_node(shuffled(), 1, 2), 0, 1)
    one_more.set_epoch(1)
    assert [int(ex["id"]) for ex in one_more] == [int(ex["id"]) for ex in two]


@pytest.mark.parametrize("saved_split,loaded_split", [(True, False), (False, True)])
def test_every_cut_moves_between_the_unsplit_dataset_and_a_split_of_world_size_one(saved_split, loaded_split):
    """A single-GPU run that called ``split_dataset_by_node(ds, rank, world_size)`` with world size 1
    resumes in a plain ``python train.py`` run, and back; every example once."""
    def build(split):
        ds = _one_part(shuffled, split)
        ds.set_epoch(2)
        return ds

    full = [int(ex["id"]) for ex in build(saved_split)]
    for k in range(len(full)):
        ds = build(saved_split)
        it = iter(ds)
        for _ in range(k + 1):
            next(it)
        state = json_roundtrip(ds.state_dict())
        resumed = build(loaded_split)
        resumed.load_state_dict(state)
        assert [int(ex["id"]) for ex in resumed] == full[k + 1:], k


@pytest.mark.parametrize("saved_split,loaded_split", [(True, False), (False, True), (True, True)])
def test_loader_states_move_between_the_unsplit_dataset_and_a_split_of_world_size_one(saved_split, loaded_split):
    def loader(split, state=None, num_workers=2):
        ds = _one_part(shuffled, split)
        ld = ri.StatefulDataLoader(ds, batch_size=3, num_workers=num_workers)
        if state is None:
            ds.set_epoch(1)
        else:
            ld.load_state_dict(state)
        return ld

    first = loader(saved_split)
    full, states = [], []
    for b in first:
        full.append(_ids(b))
        states.append(json_roundtrip(first.state_dict()))
    assert sorted(sum(full, [])) == EVERYTHING
    assert {s["split"]["deal"] for s in _dataset_states(states[0])} == {distributed.DEAL_BY_EPOCH}
    for k in range(len(full)):
        assert full[:k + 1] + [_ids(b) for b in loader(loaded_split, states[k])] == full, k
    # and to another number of workers (elastic), exactly once
    for k in (0, len(full) // 2):
        rest = [_ids(b) for b in loader(loaded_split, states[k], num_workers=3)]
        assert sorted(sum(full[:k + 1] + rest, [])) == EVERYTHING, k


def _concat(shuffle=True):
    ds = ri.concatenate_datasets([gen_src(3, ROWS), gen_src(5, ROWS).map(lambda ex: {"id": ex["id"] + 10_000})])
    return ds.shuffle(seed=2, buffer_size=4) if shuffle else ds


@pytest.mark.parametrize("build", ["shuffled", "concat", "concat_unshuffled"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_state_an_earlier_version_saved_at_world_size_one_resumes_as_it_was_read(monkeypatch, num_workers, build):
    """Earlier versions split at ``split_dataset_by_node(ds, 0, 1)`` (dealt a shuffled dataset's
    shards once more, listed a concatenation's inputs as pieces): such a state resumes its epoch in
    that order in that split, with as many workers or others, and the unsplit dataset refuses it."""
    make = {"shuffled": shuffled, "concat": _concat, "concat_unshuffled": lambda: _concat(False)}[build]

    def loader(state=None, workers=num_workers):
        ld = ri.StatefulDataLoader(ri.split_dataset_by_node(make(), 0, 1), batch_size=3, num_workers=workers)
        if state is not None:
            ld.load_state_dict(state)
        return ld

    with monkeypatch.context() as m:
        _as_before(m)
        first = loader()
        it = iter(first)
        head = [_ids(next(it)) for _ in range(4)]
        old_state = json_roundtrip(first.state_dict())
        rest = [_ids(b) for b in it]
        del it, first
    saved = old_state["dataset_state"] if num_workers == 0 else _dataset_states(old_state)[0]
    assert saved["split"]["ranks"] == [[0, 1]]
    if build != "concat_unshuffled":
        assert head + rest != [_ids(b) for b in loader()]  # the earlier order differs from today's
    assert [_ids(b) for b in loader(old_state)] == rest
    if num_workers:  # elastic: to 3 workers, every example once
        assert sorted(sum(head + [_ids(b) for b in loader(old_state, 3)], [])) == sorted(sum(head + rest, []))
    unsplit = ri.StatefulDataLoader(make(), batch_size=3, num_workers=num_workers)
    if build == "concat_unshuffled" and num_workers:  # the workers' split lists the pieces either way
        unsplit.load_state_dict(old_state)
        assert [_ids(b) for b in unsplit] == rest
        return
    with pytest.raises(ValueError, match=r"earlier version split the pipeline at split_dataset_by_node\(ds, 0, 1\)"):
        unsplit.load_state_dict(old_state)
