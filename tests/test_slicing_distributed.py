"""``take`` / ``skip`` across DataLoader workers and ranks, and ``shuffle`` over ``take`` / ``skip``
and ``concatenate_datasets``: the same examples as HF ``datasets``, each split part exact.

* ``take(n)`` / ``skip(n)`` count the whole dataset: workers and ranks split later share ``n``
  (HF's ``split_when_sharding``); a ``take`` / ``skip`` made after ``split_dataset_by_node``
  counts that rank's part.
* a ``shuffle`` above a ``take`` / ``skip`` does not change which examples are selected.
* a ``shuffle`` reorders the inputs of ``concatenate_datasets(axis=0)``; ``axis=1`` stays aligned.
"""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")

from datasets import Dataset  # noqa: E402
from datasets.distributed import split_dataset_by_node as hf_split  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from harness import assert_resumes_exactly, json_roundtrip, take  # noqa: E402
from resumable_iterable import distributed  # noqa: E402

HF40 = Dataset.from_dict({"id": list(range(40))})


def base(num_shards: int = 4) -> ri.IterableDataset:
    return ri.to_iterable_dataset(HF40, num_shards=num_shards)


def hf_base(num_shards: int = 4):
    return HF40.to_iterable_dataset(num_shards=num_shards)


def ids(rows) -> list[int]:
    return [int(r["id"]) for r in rows]


def loader_ids(ds, num_workers: int) -> list[int]:
    """What a plain torch DataLoader yields, in its order (batch_size=1)."""
    return [int(b["id"][0]) for b in DataLoader(ds, batch_size=1, num_workers=num_workers)]


# ---------------------------------------------------------------------- totals and which examples


@pytest.mark.parametrize("num_shards", [4, 3])  # 4: split by shard; 3: every rank keeps one example in two
@pytest.mark.parametrize("op", ["take", "skip"])
def test_take_skip_before_split_by_rank_are_applied_once_like_hf(num_shards, op):
    parts = [ids(ri.split_dataset_by_node(getattr(base(num_shards), op)(10), r, 2)) for r in range(2)]
    hf_parts = [ids(hf_split(getattr(hf_base(num_shards), op)(10), r, 2)) for r in range(2)]
    assert parts == hf_parts
    everything = sorted(i for p in parts for i in p)
    assert len(everything) == (10 if op == "take" else 30) == len(set(everything))


@pytest.mark.parametrize("num_shards,op", [(4, "take"), (3, "skip")])
def test_take_skip_across_ranks_and_workers_give_hf_examples_per_rank(num_shards, op):
    """Each rank's DataLoader with 2 workers yields what HF's does, in the same order."""
    for r in range(2):
        got = loader_ids(ri.split_dataset_by_node(getattr(base(num_shards), op)(10), r, 2), 2)
        want = loader_ids(hf_split(getattr(hf_base(num_shards), op)(10), r, 2), 2)
        assert got == want, f"rank {r}"


def test_take_with_workers_is_applied_once():
    got = loader_ids(base(4).take(10), 2)
    # HF's split: worker w takes its share (5) of the shards it reads (0, 2 and 1, 3)
    assert sorted(got) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]


@pytest.mark.parametrize("num_workers", [2, 3])
@pytest.mark.parametrize("num_shards", [4, 3])
@pytest.mark.parametrize("world", [1, 2])
def test_worker_and_rank_parts_of_take_skip_add_up(num_workers, num_shards, world):
    """Without DataLoader processes: every (rank, worker) pipeline built as the loader builds it."""
    for op, n, total in [("take", 10, 10), ("skip", 10, 30), ("take", 7, 7), ("skip", 7, 33)]:
        ds = getattr(base(num_shards), op)(n)
        got = []
        for r in range(world):
            part = ri.split_dataset_by_node(ds, r, world)
            for w in range(num_workers):
                got += ids(distributed.split_for_process(part._node, part._split, worker=(w, num_workers)).clone())
        assert len(got) == total and len(set(got)) == total, (op, n, sorted(got))


@pytest.mark.parametrize("num_shards", [4, 3])
def test_take_skip_after_split_count_each_rank_part(num_shards):
    """Made after split_dataset_by_node, take/skip apply to the rank's part: n of it, shared by its
    workers (HF takes n in every worker and, with 4 shards and workers, skips everything)."""
    taken, skipped = [], []
    for r in range(2):
        part = ri.split_dataset_by_node(base(num_shards), r, 2)
        whole = ids(part)
        assert ids(part.take(6)) == whole[:6]
        assert ids(part.skip(6)) == whole[6:]
        # with workers, each takes its share (3) of the shards it reads, as for a take before the
        # split; with 3 shards every worker keeps one example in two of its own stream, so only the
        # total over the ranks is fixed (as in HF for a take before the split)
        part_taken = loader_ids(part.take(6), 2)
        if num_shards == 4:
            assert len(part_taken) == 6 and set(part_taken) <= set(whole)
        taken += part_taken
        skipped += loader_ids(part.skip(6), 2)
        if num_shards == 4:  # the same as HF without workers
            assert ids(part.take(6)) == ids(hf_split(hf_base(num_shards), r, 2).take(6))
            assert ids(part.skip(6)) == ids(hf_split(hf_base(num_shards), r, 2).skip(6))
    assert len(taken) == len(set(taken)) == 12
    assert len(skipped) == len(set(skipped)) == 40 - 12


def test_take_between_two_rank_splits():
    """split 2 -> take(4) -> split 2: the take counts the first split's part, shared by the second."""
    for r in range(2):
        part = ri.split_dataset_by_node(base(4), r, 2)
        taken = part.take(4)
        got = [i for q in range(2) for i in ids(ri.split_dataset_by_node(taken, q, 2))]
        # the inner split is by shard: each sub-part takes 2 of its own shard (HF's split)
        assert len(got) == len(set(got)) == 4 and set(got) <= set(ids(part))


def test_shard_splits_take_like_hf():
    for i in range(2):
        assert ids(base(4).take(5).shard(2, i)) == ids(hf_base(4).take(5).shard(2, i))
        assert ids(base(4).skip(5).shard(2, i)) == ids(hf_base(4).skip(5).shard(2, i))


# ---------------------------------------------------------------------- exactness of every part


def rank_part_builder(op: str, num_shards: int, r: int, after: bool = False):
    def build():
        if after:
            return getattr(ri.split_dataset_by_node(base(num_shards), r, 2), op)(7)
        return ri.split_dataset_by_node(getattr(base(num_shards), op)(7), r, 2)

    return build


@pytest.mark.parametrize("op", ["take", "skip"])
@pytest.mark.parametrize("num_shards", [4, 3])
@pytest.mark.parametrize("after", [False, True])
def test_rank_parts_resume_exactly_at_every_cut(op, num_shards, after):
    for r in range(2):
        full = assert_resumes_exactly(rank_part_builder(op, num_shards, r, after))
        assert full, "vacuous"


class WorkerPart:
    """The pipeline DataLoader worker ``w`` of ``n`` runs for ``ds``, with the dataset's state API."""

    def __init__(self, ds, w: int, n: int):
        self.node = distributed.split_for_process(ds._node, ds._split, worker=(w, n)).clone()
        self.node.set_epoch(0)
        self.node.reset()

    def __iter__(self):
        return iter(self.node)

    def state_dict(self) -> dict:
        return self.node.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.node.load_state_dict(state)


@pytest.mark.parametrize("num_shards", [4, 3])
def test_worker_parts_of_a_rank_resume_exactly_at_every_cut(num_shards):
    for op in ("take", "skip"):
        for r in range(2):
            ds = ri.split_dataset_by_node(getattr(base(num_shards), op)(7).shuffle(seed=3, buffer_size=3), r, 2)
            for w in range(2):
                assert_resumes_exactly(lambda: WorkerPart(ds, w, 2))


def test_stateful_loader_with_workers_resumes_take_exactly():
    def build():
        return ri.split_dataset_by_node(base(4).take(13), 1, 2)

    ld = ri.StatefulDataLoader(build(), batch_size=2, num_workers=2)
    full, states = [], {}
    for b in ld:
        full.append(b["id"].tolist())
        states[len(full)] = json_roundtrip(ld.state_dict())
    # rank 1 takes 6 of the 13, 3 from each shard its workers read
    assert sorted(i for b in full for i in b) == [10, 11, 12, 30, 31, 32]
    for k in (1, 2):
        ld = ri.StatefulDataLoader(build(), batch_size=2, num_workers=2)
        ld.load_state_dict(states[k])
        assert [b["id"].tolist() for b in ld] == full[k:]


def test_elastic_resume_of_take_keeps_the_total():
    """Saved with 2 workers, resumed with 1 and with none: every example of take(10) once."""
    ld = ri.StatefulDataLoader(base(4).take(10), batch_size=2, num_workers=2)
    it = iter(ld)
    head = [i for _ in range(2) for i in next(it)["id"].tolist()]
    state = json_roundtrip(ld.state_dict())
    del it, ld
    for new_workers in (1, 0):
        ld = ri.StatefulDataLoader(base(4).take(10), batch_size=2, num_workers=new_workers)
        ld.load_state_dict(state)
        tail = [i for b in ld for i in b["id"].tolist()]
        assert Counter(head + tail) == Counter([0, 1, 2, 3, 4, 10, 11, 12, 13, 14]), new_workers


@pytest.mark.parametrize("old,new", [(2, 1), (2, 3)])
def test_redistribute_rank_states_of_skip(old, new):
    def part(r, world):
        return ri.split_dataset_by_node(base(4).skip(10), r, world)

    everything = sorted(i for r in range(old) for i in ids(part(r, old)))
    assert len(everything) == 30
    heads, states = [], []
    for r in range(old):
        p = part(r, old)
        heads += ids(take(iter(p), 4))
        states.append(json_roundtrip(p.state_dict()))
    tails = []
    for r, st in enumerate(ri.redistribute_states(states, new)):
        p = part(r, new)
        p.load_state_dict(st)
        tails += ids(p)
    assert sorted(heads + tails) == everything


# ---------------------------------------------------------------------- shuffle over take / skip


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_shuffle_does_not_change_what_take_and_skip_select(seed):
    for num_shards in (4, 3):
        assert sorted(ids(base(num_shards).take(2).shuffle(seed=seed, buffer_size=5))) == [0, 1]
        assert sorted(ids(base(num_shards).take(12).shuffle(seed=seed, buffer_size=5))) == list(range(12))
        assert sorted(ids(base(num_shards).skip(30).shuffle(seed=seed, buffer_size=5))) == list(range(30, 40))
    # like HF: the same set
    assert sorted(ids(hf_base(4).take(12).shuffle(seed=seed, buffer_size=5))) == list(range(12))


def test_shuffle_above_take_still_shuffles_the_order_and_the_shards_above():
    orders = {tuple(ids(base(4).take(12).shuffle(seed=s, buffer_size=5))) for s in range(5)}
    assert len(orders) > 1
    # a take inside one input of an interleave blocks only that input's shard order
    a = base(4).take(20)
    b = ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(100, 140))}), num_shards=4)
    mixed = [ids(ri.interleave_datasets([a, b]).shuffle(seed=s, buffer_size=1)) for s in range(4)]
    assert all(m[0::2] == list(range(20)) for m in mixed)
    assert len({tuple(m[1::2]) for m in mixed}) > 1


def test_take_shuffle_resumes_exactly_over_epochs():
    def build():
        ds = base(4).take(12).shuffle(seed=9, buffer_size=4)
        ds.set_epoch(1)
        return ds

    assert sorted(ids(assert_resumes_exactly(build))) == list(range(12))


# ---------------------------------------------------------------------- shuffle over concatenate


def part_ds(lo: int, n: int, num_shards: int) -> ri.IterableDataset:
    return ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(lo, lo + n))}), num_shards=num_shards)


def three():
    return ri.concatenate_datasets([part_ds(0, 6, 2), part_ds(100, 6, 2), part_ds(200, 6, 3)])


def input_order(rows: list[int]) -> list[int]:
    seen = []
    for i in rows:
        if i // 100 not in seen:
            seen.append(i // 100)
    return seen


def test_shuffle_reorders_the_inputs_of_concatenate():
    runs = [ids(three().shuffle(seed=s, buffer_size=1)) for s in range(8)]
    for run in runs:
        assert sorted(run) == sorted(ids(three()))
        assert all(len({i // 100 for i in run[k:k + 6]}) == 1 for k in (0, 6, 12)), "inputs are read one by one"
    assert len({tuple(input_order(r)) for r in runs}) > 1
    assert any(input_order(r)[0] != 0 for r in runs)
    # the shards within each input are shuffled too
    assert len({tuple(i for i in r if i < 100) for r in runs}) > 1
    # deterministic for a seed, and another order in another epoch
    assert ids(three().shuffle(seed=1, buffer_size=1)) == runs[1]
    epochs = []
    for e in range(4):
        ds = three().shuffle(seed=1, buffer_size=1)
        ds.set_epoch(e)
        epochs.append(tuple(ids(ds)))
    assert len(set(epochs)) > 1


@pytest.mark.parametrize("buffer_state", ["examples", "replay"])
def test_shuffle_over_concatenate_resumes_exactly_at_every_cut(buffer_state):
    def build():
        ds = three().shuffle(seed=4, buffer_size=3, buffer_state=buffer_state)
        ds.set_epoch(2)
        return ds

    assert_resumes_exactly(build)


def test_shuffled_concatenate_under_repeat_resumes_exactly():
    assert_resumes_exactly(lambda: three().shuffle(seed=6, buffer_size=2).repeat(2), max_cuts=15)
    assert_resumes_exactly(lambda: three().repeat(2).shuffle(seed=6, buffer_size=2), max_cuts=15)


def test_shuffled_concatenate_split_by_rank_resumes_exactly():
    ds = three().shuffle(seed=2, buffer_size=2)
    got = []
    for r in range(2):
        got += ids(assert_resumes_exactly(lambda: ri.split_dataset_by_node(ds, r, 2)))
    assert sorted(got) == sorted(ids(three()))


def test_concatenate_state_is_checked():
    ds = three().shuffle(seed=1, buffer_size=1)
    it = iter(ds)
    take(it, 7)
    state = json_roundtrip(ds.state_dict())
    concat_state = state["state"]["children"][0]
    assert concat_state["node"] == "concat" and type(concat_state["shard_seed"]) is int
    concat_state["shard_seed"] = "x"
    with pytest.raises(ValueError, match="shard_seed"):
        three().shuffle(seed=1, buffer_size=1).load_state_dict(state)


def test_concatenate_state_written_before_the_input_order_still_loads():
    """Such a state has no 'shard_seed': its run read the inputs in the order given."""
    full = ids(three())
    ds = three()
    it = iter(ds)
    head = ids(take(it, 8))
    state = json_roundtrip(ds.state_dict())
    del state["state"]["shard_seed"]
    resumed = three()
    resumed.load_state_dict(state)
    assert head + ids(resumed) == full


def test_concatenate_axis1_stays_aligned_under_shuffle_and_workers():
    """Inputs with different shard sizes: rows of the same position are merged, whatever the
    shuffle seed or the number of DataLoader workers (HF: not shuffled, one shard)."""
    a = part_ds(0, 20, 2)
    b = ri.to_iterable_dataset(Dataset.from_dict({"j": list(range(20))}), num_shards=4)
    cat = ri.concatenate_datasets([a, b], axis=1)
    assert cat.num_shards == 1
    for s in range(4):
        rows = list(cat.shuffle(seed=s, buffer_size=3))
        assert sorted(r["id"] for r in rows) == list(range(20))
        assert all(r["id"] == r["j"] for r in rows), s
    rows = list(DataLoader(cat, batch_size=None, num_workers=2))
    assert sorted(int(r["id"]) for r in rows) == list(range(20))
    assert all(int(r["id"]) == int(r["j"]) for r in rows)


# ---------------------------------------------------------------------- split_dataset_by_node(strategy=)


@pytest.mark.parametrize("num_shards,world_size", [(4, 2), (5, 2), (6, 4), (3, 3), (2, 3), (1, 2)])
@pytest.mark.parametrize("strategy", ["auto", "shards", "examples"])
def test_split_strategies_give_hf_parts(num_shards, world_size, strategy):
    """Each strategy yields, rank by rank, the examples HF's yields, with HF's ``num_shards``."""
    if strategy == "shards" and num_shards < world_size:
        with pytest.raises(ValueError, match="strategy='shards': some ranks would get no shard"):
            ri.split_dataset_by_node(base(num_shards), 0, world_size, strategy=strategy)
        with pytest.raises(ValueError):
            hf_split(hf_base(num_shards), 0, world_size, strategy=strategy)
        return
    seen = []
    for rank in range(world_size):
        ours = ri.split_dataset_by_node(base(num_shards), rank, world_size, strategy=strategy)
        theirs = hf_split(hf_base(num_shards), rank, world_size, strategy=strategy)
        assert ids(ours) == ids(theirs)
        assert ours.num_shards == theirs.num_shards
        assert ours.rank_splits == ((rank, world_size) if strategy == "auto" else (rank, world_size, strategy),)
        seen += ids(ours)
    assert sorted(seen) == list(range(40))


def test_an_unknown_strategy_is_refused():
    for ds in (base(), hf_base()):
        with pytest.raises(ValueError, match="strategy"):
            ri.split_dataset_by_node(ds, 0, 2, strategy="rows")


@pytest.mark.parametrize("strategy", ["shards", "examples"])
def test_split_with_a_strategy_resumes_exactly_in_workers_and_after_interleave(strategy):
    def part(rank):
        return ri.split_dataset_by_node(base(5).shuffle(seed=3, buffer_size=4), rank, 2, strategy=strategy)

    for rank in range(2):
        assert_resumes_exactly(lambda: part(rank))
    # DataLoader workers split the rank's part further: every example once
    got = []
    for rank in range(2):
        got += [int(i) for b in DataLoader(part(rank), batch_size=None, num_workers=2) for i in [b["id"]]]
    assert sorted(got) == list(range(40))
    # a combination of split datasets is split the same way
    mixed = ri.interleave_datasets([part(1), ri.split_dataset_by_node(base(5), 1, 2, strategy=strategy)])
    assert mixed.rank_splits == ((1, 2, strategy),)


@pytest.mark.parametrize("strategy,new_strategy", [("examples", None), ("shards", None), ("examples", "auto")])
def test_redistribute_states_keeps_or_changes_the_strategy(strategy, new_strategy):
    def part(rank, world_size, how):
        return ri.split_dataset_by_node(base(6), rank, world_size, strategy=how)

    states, yielded = [], []
    for rank in range(2):
        ds = part(rank, 2, strategy)
        it = iter(ds)
        yielded += ids(take(it, 5 + rank))
        states.append(json_roundtrip(ds.state_dict()))
    plans = ri.redistribute_states(states, world_size=3, strategy=new_strategy)
    how = new_strategy or strategy
    rest = []
    for rank, plan in enumerate(plans):
        ds = part(rank, 3, how)
        ds.load_state_dict(json_roundtrip(plan))
        rest += ids(ds)
    assert sorted(yielded + rest) == list(range(40))
    # loaded with another strategy than the plans were dealt for: a clear error
    wrong = "auto" if how != "auto" else "examples"
    with pytest.raises(ValueError, match=r"dealt to rank 0 of 3"):
        part(0, 3, wrong).load_state_dict(plans[0])


# ---------------------------------------------------------------------- a concatenation has its inputs' shards


def single_shard_parts(k=4):
    hf = [Dataset.from_dict({"id": list(range(j * 10, j * 10 + 10))}) for j in range(k)]
    return hf, [ri.to_iterable_dataset(p, num_shards=1) for p in hf]


def worker_ids(ds, workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def which(example):
        return torch.utils.data.get_worker_info().id, int(example["id"])

    return sorted(StatefulDataLoader(ds, batch_size=None, num_workers=workers, collate_fn=which))


def test_concatenation_shards_are_the_sum_of_its_inputs_as_hf():
    """Concatenated single-shard datasets (``to_iterable_dataset()``'s default) are read by as many
    DataLoader workers and ranks as they have inputs, as in HF; before, one worker read them all."""
    from datasets import concatenate_datasets as hf_concatenate

    hf_parts, parts = single_shard_parts()
    ours = ri.concatenate_datasets(parts + [base(3)])
    theirs = hf_concatenate([p.to_iterable_dataset(num_shards=1) for p in hf_parts] + [hf_base(3)])
    assert ours.num_shards == theirs.num_shards == 7
    for n, i, contiguous in [(7, 3, True), (3, 0, True), (3, 2, True), (3, 1, False), (2, 1, False), (4, 3, True)]:
        assert ids(ours.shard(n, i, contiguous=contiguous)) == ids(theirs.shard(n, i, contiguous=contiguous)), (n, i)
    assert worker_ids(ours, 4) == worker_ids(theirs, 4)
    for rank in range(7):  # 7 ranks: one input shard each
        assert ids(ri.split_dataset_by_node(ours, rank, 7)) == ids(hf_split(theirs, rank, 7))
    with pytest.raises(ValueError, match="cannot split 7 shards into 8 groups"):
        ours.shard(8, 0)


@pytest.mark.parametrize("workers", [2, 3])
def test_concatenation_of_single_shard_datasets_resumes_exactly_through_workers(workers):
    from harness import assert_loader_resumes_exactly

    def build():
        _, parts = single_shard_parts()
        return ri.concatenate_datasets(parts).shuffle(seed=5, buffer_size=6)

    full = assert_loader_resumes_exactly(build, workers=workers, batch_size=4, item=lambda b: b["id"].tolist(),
                                         cuts=lambda n: range(1, n + 1))
    assert sorted(i for b in full for i in b) == list(range(40))
    per_worker = {}
    for w, i in worker_ids(build(), workers):
        per_worker.setdefault(w, set()).add(i // 10)
    # each worker reads its own inputs (dealt in an order drawn by epoch, under the shuffle), all of them together
    assert sorted(i for ins in per_worker.values() for i in ins) == list(range(4))
    assert sorted(len(ins) for ins in per_worker.values()) == sorted(len(range(w, 4, workers)) for w in range(workers))


def test_a_state_loaded_under_another_strategy_says_so():
    ds = ri.split_dataset_by_node(base(4), 0, 2, strategy="examples")
    take(iter(ds), 3)
    state = json_roundtrip(ds.state_dict())
    with pytest.raises(ValueError, match="another split_dataset_by_node strategy"):
        ri.split_dataset_by_node(base(4), 0, 2).load_state_dict(state)
