"""Elastic resume: a StatefulDataLoader state saved with W workers loads with W′ workers
(``resumable_iterable.StatefulDataLoader``), and rank states move to another world size
(``resumable_iterable.redistribute_states``, tested here in one process; the multi-process
version is in test_torch_distributed.py). Every not-yet-yielded example exactly once.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from data import HF_C, src  # noqa: E402
from harness import json_roundtrip, take  # noqa: E402
from resumable_iterable.loader import elastic  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

SDL = ri.StatefulDataLoader


def general() -> ri.IterableDataset:
    """Nothing here can be carved: interleave with probabilities (peeked examples in the state), a
    batched map checkpointed mid-batch, a shuffle buffer."""
    a = src(4).map(lambda b: {"k": [i % 7 for i in b["id"]]}, batched=True, batch_size=4)
    b = src(4, HF_C).map(lambda ex: {"k": ex["id"] % 7})
    mix = ri.interleave_datasets([a, b], probabilities=[0.6, 0.4], seed=2,
                                 stopping_strategy="all_exhausted_without_replacement")
    return mix.shuffle(seed=5, buffer_size=7)


def simple() -> ri.IterableDataset:
    """A carvable chain: source -> map -> filter -> shuffle (untouched shards can move)."""
    return (src(6).map(lambda ex: {"k": ex["id"] % 7})
            .filter(lambda ex: ex["id"] % 4 != 1).shuffle(seed=8, buffer_size=5))


ALL_GENERAL = sorted(list(range(60)) + list(range(2000, 2040)))
ALL_SIMPLE = [i for i in range(60) if i % 4 != 1]


def ids(batch) -> list[int]:
    return batch["id"].tolist()


def loader(build, num_workers, **kw):
    return SDL(build(), batch_size=4, num_workers=num_workers, **kw)


def pass_with_states(build, num_workers, cuts):
    ld = loader(build, num_workers)
    batches, states = [], {}
    for b in ld:
        batches.append(ids(b))
        if len(batches) in cuts:
            states[len(batches)] = json_roundtrip(ld.state_dict())
    return batches, states


def assert_exactly_once(head, tail, everything, what):
    got = Counter(i for b in head + tail for i in b)
    dup = [i for i, c in got.items() if c > 1]
    missing = sorted(set(everything) - set(got))
    assert not dup and not missing and sorted(got) == sorted(everything), (
        f"{what}: duplicated {dup[:10]}, missing {missing[:10]}")


# ---------------------------------------------------------------------- W -> W'


@pytest.mark.parametrize("saved_workers", [0, 1, 2, 3, 4])
def test_elastic_resume_with_any_worker_count(saved_workers):
    full, states = pass_with_states(general, saved_workers, {1, 12})
    assert sorted(i for b in full for i in b) == ALL_GENERAL
    ds1 = general()
    ds1.set_epoch(1)
    for new_workers in [0, 1, 2, 3, 4]:
        if new_workers == saved_workers:
            continue
        ref_next = [ids(b) for b in loader(lambda: ds1, new_workers)]
        for k, state in states.items():
            ds = general()
            ld = SDL(ds, batch_size=4, num_workers=new_workers)
            ld.load_state_dict(state)
            tail = [ids(b) for b in ld]
            assert_exactly_once(full[:k], tail, ALL_GENERAL, f"{saved_workers} -> {new_workers} workers, cut {k}")
            if k == 12:  # the next epoch is an ordinary epoch with the new worker count
                ds.set_epoch(1)
                assert [ids(b) for b in ld] == ref_next


@pytest.mark.parametrize("saved_workers,new_workers", [(0, 4), (1, 3), (2, 4), (1, 2), (3, 4), (4, 2)])
def test_untouched_shards_go_to_workers_that_would_idle(saved_workers, new_workers):
    full, states = pass_with_states(simple, saved_workers, {2})
    state = states[2]
    remapped = elastic.remap_loader_state(state, new_workers)
    plans = [remapped["_snapshot"]["_worker_snapshots"][f"worker_{j}"]["dataset_state"]
             for j in range(new_workers)]
    if saved_workers < new_workers:
        assert all(p["segments"] for p in plans), "a new worker was left without work"
        assert any(s["start"] is not None for p in plans for s in p["segments"])
    ld = loader(simple, new_workers)
    ld.load_state_dict(state)
    assert_exactly_once(full[:2], [ids(b) for b in ld], ALL_SIMPLE, f"{saved_workers} -> {new_workers}")


def group_blocks(batch):
    """HF's ``group_texts``: the batch's ids concatenated and cut into blocks of 3, the remainder
    dropped - its outputs depend on which rows share a batch."""
    ids = [i for i in batch["id"]]
    n = len(ids) // 3 * 3
    return {"id": [ids[k] for k in range(0, n, 3)], "block": [ids[k:k + 3] for k in range(0, n, 3)]}


@pytest.mark.parametrize("build", [
    lambda: src(6).map(group_blocks, batched=True, batch_size=4, remove_columns=["id", "text"]),
    lambda: src(6).batch(4, drop_last_batch=True).map(lambda b: {"id": b["id"][0], "n": len(b["id"])}),
], ids=["group_texts", "batch_drop_last"])
@pytest.mark.parametrize("saved_workers,new_workers", [(0, 2), (1, 3)])
def test_outputs_that_depend_on_a_batch_are_not_carved(build, saved_workers, new_workers):
    """A batched map whose outputs depend on which rows share a batch, or a batch that drops its last
    short one: cutting a segment's untouched shards off would change (and lose) outputs, so the
    elastic epoch continues the saved segments whole and yields the saved run's remaining outputs."""
    def rows(b):
        return sorted(map(tuple, (b["block"] if "block" in b else [[i, n] for i, n in zip(b["id"], b["n"])])))

    ld = SDL(build(), batch_size=2, num_workers=saved_workers)
    full, state = [], None
    for b in ld:
        full.extend(rows(b))
        if state is None:
            state, head = json_roundtrip(ld.state_dict()), list(full)
    again = SDL(build(), batch_size=2, num_workers=new_workers)
    again.load_state_dict(state)
    assert sorted(head + [r for b in again for r in rows(b)]) == sorted(full)


def seedless() -> ri.IterableDataset:
    """``simple`` with a shuffle given no seed: every build (every process, every resumed run) draws another."""
    return (src(6).map(lambda ex: {"k": ex["id"] % 7})
            .filter(lambda ex: ex["id"] % 4 != 1).shuffle(buffer_size=5))


@pytest.mark.parametrize("saved_workers,new_workers", [(1, 3), (0, 2)])
def test_untouched_shards_of_a_seedless_shuffle_resume_in_a_new_run(saved_workers, new_workers):
    """A carved segment reads its shards in the saved order, not in the order the new run's seed draws."""
    full, states = pass_with_states(seedless, saved_workers, {2})
    remapped = elastic.remap_loader_state(states[2], new_workers)
    assert any(s["start"] is not None for j in range(new_workers)
               for s in remapped["_snapshot"]["_worker_snapshots"][f"worker_{j}"]["dataset_state"]["segments"])
    ld = loader(seedless, new_workers)  # another seed than the saved run's
    ld.load_state_dict(states[2])
    assert_exactly_once(full[:2], [ids(b) for b in ld], ALL_SIMPLE, f"{saved_workers} -> {new_workers}")
    # and rank states moved to more ranks, each new rank its own new build
    heads, rank_states = [], []
    for r in range(2):
        part = ri.split_dataset_by_node(seedless(), r, 2)
        it = iter(part)
        heads.append([e["id"] for e in take(it, 4)])
        rank_states.append(json_roundtrip(part.state_dict()))
    tails = []
    for r, st in enumerate(ri.redistribute_states(rank_states, 3)):
        part = ri.split_dataset_by_node(seedless(), r, 3)
        part.load_state_dict(json_roundtrip(st))
        tails.append([e["id"] for e in part])
    assert_exactly_once(heads, tails, ALL_SIMPLE, "2 -> 3 ranks")


def test_carving_can_be_switched_off():
    _, states = pass_with_states(simple, 1, {1})
    remapped = elastic.remap_loader_state(states[1], 4, carve=False)
    plans = [remapped["_snapshot"]["_worker_snapshots"][f"worker_{j}"]["dataset_state"] for j in range(4)]
    assert [len(p["segments"]) for p in plans] == [1, 0, 0, 0]


def test_same_worker_count_is_the_uninterrupted_order():
    full, states = pass_with_states(general, 2, {5})
    ld = loader(general, 2)
    ld.load_state_dict(states[5])
    assert full[:5] + [ids(b) for b in ld] == full


def test_ordering_after_elastic_resume():
    """Documented order: each old worker's remaining stream continues in its own order, starting
    with the old worker that was due next; one new worker runs them one after another."""
    def build():
        return src(4).map(lambda ex: {"k": 1})

    streams = [[e["id"] for e in src(4).shard(2, w, contiguous=False)] for w in range(2)]
    for k in (0, 3, 8):
        ld = SDL(build(), batch_size=1, num_workers=2)
        it = iter(ld)
        head = [ids(next(it))[0] for _ in range(k)]
        state = json_roundtrip(ld.state_dict())
        done = [(k + 1) // 2, k // 2]  # round-robin from worker 0
        nxt = k % 2
        expected = streams[nxt][done[nxt]:] + streams[1 - nxt][done[1 - nxt]:]
        new = SDL(build(), batch_size=1, num_workers=1)
        new.load_state_dict(state)
        assert [ids(b)[0] for b in new] == expected
        assert sorted(head + expected) == list(range(60))


def test_checkpoint_during_an_elastic_epoch():
    """States taken while the elastic epoch runs are plans: they resume exactly with the same worker
    count, and elastically again with another."""
    full, states = pass_with_states(general, 2, {3})
    # 2 -> 3 workers, then checkpoint after 4 more batches
    ld = loader(general, 3)
    ld.load_state_dict(states[3])
    elastic_run = [ids(b) for b in ld]
    assert_exactly_once(full[:3], elastic_run, ALL_GENERAL, "2 -> 3")
    ld = loader(general, 3)
    ld.load_state_dict(states[3])
    it = iter(ld)
    mid = [ids(next(it)) for _ in range(4)]
    plan_state = json_roundtrip(ld.state_dict())
    del it, ld
    ws = plan_state["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    assert ws["format"] == elastic.PLAN_FORMAT
    same = loader(general, 3)
    same.load_state_dict(plan_state)
    assert mid + [ids(b) for b in same] == elastic_run  # exact with the same worker count
    for again in (0, 1, 4):
        other = loader(general, again)
        other.load_state_dict(plan_state)
        assert_exactly_once(full[:3] + mid, [ids(b) for b in other], ALL_GENERAL, f"2 -> 3 -> {again}")


def test_plain_torchdata_loader_runs_a_remapped_state():
    """The rewritten state is an ordinary StatefulDataLoader state: torchdata's own loader runs it."""
    full, states = pass_with_states(general, 4, {6})
    state = elastic.remap_loader_state(states[6], 2)
    ld = TorchdataLoader(general(), batch_size=4, num_workers=2)
    ld.load_state_dict(state)
    assert_exactly_once(full[:6], [ids(b) for b in ld], ALL_GENERAL, "torchdata 4 -> 2")


# ---------------------------------------------------------------------- errors


def test_a_state_of_another_pipeline_is_refused_before_workers_start():
    _, states = pass_with_states(general, 2, {2})
    for workers in (2, 3, 0):
        ld = SDL(simple(), batch_size=4, num_workers=workers)
        with pytest.raises(ValueError, match="different pipeline"):
            ld.load_state_dict(states[2])


def test_elastic_needs_a_snapshot_at_every_batch():
    ld = SDL(general(), batch_size=4, num_workers=2, snapshot_every_n_steps=3)
    it = iter(ld)
    for _ in range(4):
        next(it)
    state = ld.state_dict()
    assert state["_steps_since_snapshot"] > 0
    with pytest.raises(ValueError, match="snapshot_every_n_steps"):
        SDL(general(), batch_size=4, num_workers=1).load_state_dict(state)


@pytest.mark.parametrize("cut", [5, 7])
def test_a_replay_that_runs_past_the_end_names_the_setting_not_a_bare_stop_iteration(cut):
    """``snapshot_every_n_steps`` > 1 makes torchdata replay the batches since the last snapshot on
    resume; under ``shuffle(buffer_state="drop")`` the resumed workers yield fewer, the replay ran
    past the end and ``iter(loader)`` raised a bare ``StopIteration``. Now a ``ValueError`` says why."""
    def build():
        return ri.IterableDataset.from_dict({"i": list(range(8))}, num_shards=2).shuffle(
            seed=0, buffer_size=100, buffer_state="drop")

    ld = SDL(build(), batch_size=1, num_workers=2, snapshot_every_n_steps=4)
    it = iter(ld)
    for _ in range(cut):
        next(it)
    state = json_roundtrip(ld.state_dict())
    del it
    resumed = SDL(build(), batch_size=1, num_workers=2, snapshot_every_n_steps=4)
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match=r"snapshot_every_n_steps=4\) replays .*buffer_state='drop'"):
        iter(resumed)


def _worker_plan(num_workers=3, j=1):
    _, states = pass_with_states(general, 2, {3})
    return elastic.remap_loader_state(states[3], num_workers)["_snapshot"]["_worker_snapshots"][f"worker_{j}"]["dataset_state"]


def test_plan_errors_are_clear():
    plan = json_roundtrip(_worker_plan())
    ds = general()
    with pytest.raises(ValueError, match="dealt to DataLoader worker 1 of 3"):
        ds.load_state_dict(plan)  # the main process is not worker 1 of 3
    bad = copy.deepcopy(plan)
    bad["version"] = 99
    with pytest.raises(ValueError, match="unsupported elastic plan version"):
        ds.load_state_dict(bad)
    with pytest.raises(ValueError, match="different pipeline"):
        simple().load_state_dict(plan)
    bad = copy.deepcopy(plan)
    bad["segments"][0]["start"] = {"shard_pos": 0, "stop": 1, "shard_seed": None}
    with pytest.raises(ValueError, match="exactly one of 'state' and 'start'"):
        elastic.check_plan_envelope(bad)
    bad = copy.deepcopy(plan)
    bad["segments"][0]["split"]["worker"] = [5, 2]
    with pytest.raises(ValueError, match="'worker' must be null or"):
        elastic.check_plan_envelope(bad)
    # a plan validated in the worker it was dealt to: an edited node state is refused there too
    bad = copy.deepcopy(plan)
    bad["target"] = {"ranks": [], "worker": None}
    leaf = bad["segments"][0]["state"]
    while "children" in leaf:
        leaf = leaf["children"][0]
    leaf["offset"] = -1
    with pytest.raises(ValueError, match="out of range"):
        ds.load_state_dict(bad)


def test_a_worker_state_loaded_in_the_main_process_names_the_split():
    ld = TorchdataLoader(general(), batch_size=4, num_workers=2)
    it = iter(ld)
    next(it)
    next(it)
    worker_state = ld.state_dict()["_snapshot"]["_worker_snapshots"]["worker_1"]["dataset_state"]
    with pytest.raises(ValueError, match="saved by DataLoader worker 1 of 2 but is loaded in no DataLoader worker"):
        general().load_state_dict(worker_state)


# ---------------------------------------------------------------------- ranks, in one process


def rank_part(build, rank, world):
    return ri.split_dataset_by_node(build(), rank, world)


@pytest.mark.parametrize("build,everything", [(general, ALL_GENERAL), (simple, ALL_SIMPLE)])
@pytest.mark.parametrize("old,new", [(2, 1), (1, 2), (2, 3), (3, 2), (1, 4)])
def test_redistribute_dataset_states(build, everything, old, new):
    for cut in (0, 5, 11):
        heads, states = [], []
        for r in range(old):
            part = rank_part(build, r, old)
            it = iter(part)
            heads.append([e["id"] for e in take(it, min(cut, len(list(rank_part(build, r, old)))))])
            states.append(json_roundtrip(part.state_dict()))
        new_states = ri.redistribute_states(states, new)
        assert len(new_states) == new
        tails = []
        for r, st in enumerate(new_states):
            part = rank_part(build, r, new)
            part.load_state_dict(json_roundtrip(st))
            tails.append([e["id"] for e in part])
            # the next epoch is the ordinary split for the new world size
            part.set_epoch(1)
            again = rank_part(build, r, new)
            again.set_epoch(1)
            assert [e["id"] for e in part] == [e["id"] for e in again]
        assert_exactly_once(heads, tails, everything, f"{old} -> {new} ranks, cut {cut}")
        if build is simple and new > old and cut == 5:
            # 5 examples in, every old rank still has untouched shards to hand over (at cut 11 a
            # rank may be in its last shard, depending on how the epoch dealt the shards)
            assert all(tails), "a new rank was left without work"


def test_redistribute_loader_states_in_one_process():
    """Rank states saved by StatefulDataLoaders with 2 workers, moved to 3 ranks with 1 worker."""
    heads, states = [], []
    for r in range(2):
        ld = SDL(rank_part(general, r, 2), batch_size=4, num_workers=2)
        it = iter(ld)
        heads += [ids(next(it)) for _ in range(3)]
        states.append(json_roundtrip(ld.state_dict()))
        del it, ld
    tails = []
    for r, st in enumerate(ri.redistribute_states(states, 3, num_workers=1)):
        ld = SDL(rank_part(general, r, 3), batch_size=4, num_workers=1)
        ld.load_state_dict(st)
        tails += [ids(b) for b in ld]
    assert_exactly_once(heads, tails, ALL_GENERAL, "2x2 -> 3x1")


def test_redistribute_errors():
    s0, s1 = (json_roundtrip(rank_part(general, r, 2).state_dict()) for r in range(2))
    with pytest.raises(ValueError, match="not saved by rank 0 of 2"):
        ri.redistribute_states([s1, s0], 3)
    with pytest.raises(ValueError, match="non-empty list"):
        ri.redistribute_states([], 2)
    with pytest.raises(ValueError, match="world_size must be a positive integer"):
        ri.redistribute_states([s0, s1], 0)
    other = rank_part(general, 1, 2)
    other.set_epoch(4)
    with pytest.raises(ValueError, match="different epochs"):
        ri.redistribute_states([s0, json_roundtrip(other.state_dict())], 1)
    ld = SDL(rank_part(general, 1, 2), batch_size=4)
    with pytest.raises(ValueError, match="mix of DataLoader states and dataset states"):
        ri.redistribute_states([s0, ld.state_dict()], 1)
    # a plan dealt to rank 0 of 3 is not loadable by rank 1 of 3
    plans = ri.redistribute_states([s0, s1], 3)
    with pytest.raises(ValueError, match="dealt to rank 0 of 3"):
        rank_part(general, 1, 3).load_state_dict(plans[0])


@pytest.mark.parametrize("cut", [0, 5, 9, 30])
def test_ranks_moved_to_one_load_into_the_unsplit_dataset_or_its_one_way_split(cut):
    """Two ranks moved to one (``redistribute_states(states, 1)``): the plan is dealt to rank 0 of 1,
    and the one process may hold the dataset unsplit (it was refused, asking for
    ``split_dataset_by_node(ds, 0, 1)``) or split one way. Either yields the rest exactly once, also
    through loaders with any number of workers, and the next pass is that dataset's own. A plan dealt
    to a rank of two still names the missing split."""
    heads, states, loader_heads, loader_states = [], [], [], []
    for r in range(2):
        part = rank_part(general, r, 2)
        heads += [ex["id"] for ex in take(iter(part), cut)]
        states.append(json_roundtrip(part.state_dict()))
        ld = loader(lambda: rank_part(general, r, 2), 2)
        it = iter(ld)
        loader_heads += [ids(next(it)) for _ in range(cut // 4)]
        loader_states.append(json_roundtrip(ld.state_dict()))
    (plan,) = ri.redistribute_states(states, 1)
    (loader_plan,) = ri.redistribute_states(loader_states, 1)
    for build in (general, lambda: rank_part(general, 0, 1)):
        ds = build()
        ds.load_state_dict(plan)
        assert_exactly_once([heads], [[ex["id"] for ex in ds]], ALL_GENERAL, f"dataset, cut {cut}")
        assert [ex["id"] for ex in ds] == [ex["id"] for ex in build()]  # the next pass: its own, fresh
        for workers in (0, 3):
            ld = loader(build, workers)
            ld.load_state_dict(loader_plan)
            assert_exactly_once(loader_heads, [ids(b) for b in ld], ALL_GENERAL, f"{workers} workers, cut {cut}")
    (plan_r0, _) = ri.redistribute_states(states, 2)
    with pytest.raises(ValueError, match=r"dealt to rank 0 of 2.*loaded in no rank split.*"
                                         r"split_dataset_by_node\(dataset, rank, world_size\)"):
        general().load_state_dict(plan_r0)


def test_elastic_with_more_workers_than_shards():
    """Workers without shards save empty streams; moving from / to such a loader stays exact."""
    def two_shards():
        return src(2).shuffle(seed=1, buffer_size=4)

    full, states = pass_with_states(two_shards, 4, {3})
    for new_workers in (1, 3, 0):
        ld = SDL(two_shards(), batch_size=4, num_workers=new_workers)
        ld.load_state_dict(states[3])
        assert_exactly_once(full[:3], [ids(b) for b in ld], list(range(60)), f"4 -> {new_workers}")
    full, states = pass_with_states(two_shards, 0, {2})
    ld = SDL(two_shards(), batch_size=4, num_workers=4)
    ld.load_state_dict(states[2])
    assert_exactly_once(full[:2], [ids(b) for b in ld], list(range(60)), "0 -> 4")
