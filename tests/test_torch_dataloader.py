"""PyTorch DataLoader / torchdata StatefulDataLoader: worker splitting, exact checkpoints with
workers (prefetched batches included), epochs with persistent workers, warnings.

Every loader here uses the ``fork`` start method (the Linux default): fast, and lambdas work.
"""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torch.utils.data import DataLoader  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader  # noqa: E402

from fresh import run_fresh  # noqa: E402
import resumable_iterable as ri  # noqa: E402
from data import gen_src, src  # noqa: E402
from harness import json_roundtrip  # noqa: E402
from resumable_iterable import distributed  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]


# ---------------------------------------------------------------------- helpers


def ids_collate(rows):
    """A custom collate_fn: the ids of the batch, in order, plus its size."""
    return {"ids": [r["id"] for r in rows], "n": len(rows)}


def batch_ids(batch) -> list[int]:
    if "ids" in batch:
        return list(batch["ids"])
    ids = batch["id"]
    return ids.tolist() if hasattr(ids, "tolist") else list(ids)


def pipeline(shuffled: bool) -> ri.IterableDataset:
    """4 shards of 15 rows, a batched map checkpointed mid-batch, a filter, maybe a shuffle buffer."""
    ds = (src(4)
          .map(lambda b: {"sq": [i * i for i in b["id"]]}, batched=True, batch_size=4)
          .filter(lambda ex: ex["id"] % 5 != 3))
    return ds.shuffle(seed=3, buffer_size=6) if shuffled else ds


def run(loader) -> list[list[int]]:
    return [batch_ids(b) for b in loader]


def states_after_each_batch(make_loader, cuts) -> tuple[list, dict]:
    """One pass; the loader's state (JSON round trip) after each batch in ``cuts``; the batches."""
    loader = make_loader()
    batches, states = [], {}
    if 0 in cuts:
        states[0] = json_roundtrip(loader.state_dict())
    for b in loader:
        batches.append(batch_ids(b))
        if len(batches) in cuts:
            states[len(batches)] = json_roundtrip(loader.state_dict())
    return batches, states


# ---------------------------------------------------------------------- torch base class, optional torch


def test_core_imports_and_runs_without_torch():
    code = (
        "import sys\n"
        "import resumable_iterable as ri\n"
        "from datasets import Dataset\n"
        "ds = ri.to_iterable_dataset(Dataset.from_dict({'id': list(range(10))}), num_shards=2).shuffle(seed=0, buffer_size=3)\n"
        "assert sorted(e['id'] for e in ds) == list(range(10))\n"
        "st = ds.state_dict()\n"
        "assert 'torch' not in sys.modules, 'the core imported torch'\n"
        "assert not any(c.__module__.startswith('torch') for c in type(ds).__mro__)\n"
        "ri.StatefulDataLoader  # imported lazily, on first use\n"
        "import torch.utils.data\n"
        "assert isinstance(ri.to_iterable_dataset(Dataset.from_dict({'id': [1]})), torch.utils.data.IterableDataset)\n"
        "print('ok')\n"
    )
    assert run_fresh(code) == "ok"


def test_is_a_torch_iterable_dataset_and_stateful():
    from torchdata.stateful_dataloader import Stateful

    ds = src(2).map(lambda ex: ex).shuffle(seed=0, buffer_size=2)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    assert isinstance(ds, Stateful)
    assert isinstance(ri.StatefulDataLoader(ds), TorchdataLoader)


# ---------------------------------------------------------------------- worker split


@pytest.mark.parametrize("num_workers", [1, 2, 3, 4])
def test_plain_dataloader_workers_yield_every_example_once(num_workers):
    for ds, n in ((src(4).shuffle(seed=1, buffer_size=5), 60), (gen_src(3, 7), 21)):
        got = [i for b in DataLoader(ds, batch_size=5, num_workers=num_workers) for i in b["id"].tolist()]
        assert len(got) == n and len(set(got)) == n


def test_workers_read_disjoint_shards_with_rank_split():
    for world in (2, 3):  # 6 shards: shard-level split; 5 shards with world 2/3: example-level split
        for n_shards in (6, 5):
            seen = Counter()
            for rank in range(world):
                part = ri.split_dataset_by_node(src(n_shards), rank, world)
                seen.update(i for b in DataLoader(part, batch_size=4, num_workers=2) for i in b["id"].tolist())
            assert seen == Counter(range(60)), (world, n_shards)


def test_more_workers_than_shards_warns_once_in_the_main_process(caplog, monkeypatch):
    monkeypatch.setattr(distributed, "_warned", set())
    ds = src(2).shuffle(seed=0, buffer_size=4)
    loader = ri.StatefulDataLoader(ds, batch_size=4, num_workers=4)
    with caplog.at_level(logging.WARNING, logger="resumable_iterable"):
        for epoch in range(2):
            ds.set_epoch(epoch)
            got = [i for b in loader for i in batch_ids(b)]
            assert sorted(got) == list(range(60))
    msgs = [r.getMessage() for r in caplog.records if "too many dataloader workers" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert "4 workers for 2 shard(s)" in msgs[0]
    assert "load_dataset('imagefolder', ..., num_shards=n)" in msgs[0]  # reshard() leaves a folder of images one shard


def test_more_workers_than_shards_resumes_exactly():
    make = lambda: TorchdataLoader(src(2).shuffle(seed=0, buffer_size=4), batch_size=4, num_workers=4)  # noqa: E731
    full = run(make())
    batches, states = states_after_each_batch(make, {3, 7})
    assert batches == full
    for k, st in states.items():
        loader = make()
        loader.load_state_dict(st)
        assert full[:k] + run(loader) == full


# ---------------------------------------------------------------------- exact checkpoints with StatefulDataLoader

CONFIGS = [  # (num_workers, persistent_workers, shuffled, collate)
    (0, False, True, None),
    (0, False, False, ids_collate),
    (1, False, True, ids_collate),
    (1, True, False, None),
    (2, False, True, None),
    (2, True, True, ids_collate),
    (2, False, False, ids_collate),
    (4, True, True, None),
    (4, False, False, None),
]


@pytest.mark.parametrize("num_workers,persistent,shuffled,collate", CONFIGS)
def test_stateful_dataloader_resumes_exactly_after_any_batch(num_workers, persistent, shuffled, collate):
    def make():
        return TorchdataLoader(pipeline(shuffled), batch_size=5, num_workers=num_workers,
                               persistent_workers=persistent, collate_fn=collate)

    full = run(make())
    assert sorted(i for b in full for i in b) == [i for i in range(60) if i % 5 != 3]
    n = len(full)
    cuts = set(range(n + 1)) if num_workers <= 1 else {0, 1, 2, n // 2, n - 1, n}
    batches, states = states_after_each_batch(make, cuts)
    assert batches == full, "taking states disturbed the iteration"
    for k in sorted(cuts):
        loader = make()
        loader.load_state_dict(states[k])
        tail = run(loader)
        assert full[:k] + tail == full, f"cut after batch {k} of {n}"


def test_prefetched_batches_are_not_lost():
    """With 2 workers and prefetch_factor 4, up to 8 batches are produced ahead of the consumer;
    the state holds each worker's state as of the last batch *yielded*, so none is lost."""
    def make():
        return TorchdataLoader(pipeline(True), batch_size=3, num_workers=2, prefetch_factor=4)

    full = run(make())
    loader = make()
    it = iter(loader)
    head = [batch_ids(next(it)) for _ in range(3)]
    in_flight = it._send_idx - it._rcvd_idx
    state = json_roundtrip(loader.state_dict())
    assert in_flight >= 4, f"expected batches in flight at checkpoint time, got {in_flight}"
    resumed = make()
    resumed.load_state_dict(state)
    assert head + run(resumed) == full


def test_resume_twice_in_a_row_with_workers():
    def make():
        return TorchdataLoader(pipeline(True), batch_size=4, num_workers=2)

    full = run(make())
    seen, state = [], None
    for step in (2, 3, 1):
        loader = make()
        if state is not None:
            loader.load_state_dict(state)
        it = iter(loader)
        seen += [batch_ids(next(it)) for _ in range(step)]
        state = json_roundtrip(loader.state_dict())
    loader = make()
    loader.load_state_dict(state)
    assert seen + run(loader) == full


def test_loader_state_is_json():
    loader = TorchdataLoader(pipeline(True), batch_size=4, num_workers=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert json.loads(json.dumps(state)) == state


# ---------------------------------------------------------------------- epochs


def epoch_reference(shuffled: bool, epoch: int, num_workers: int) -> list[list[int]]:
    ds = pipeline(shuffled)
    ds.set_epoch(epoch)
    return run(TorchdataLoader(ds, batch_size=5, num_workers=num_workers))


@pytest.mark.parametrize("num_workers,persistent", [(0, False), (2, False), (2, True)])
def test_epoch_after_a_resumed_epoch_is_a_full_epoch(num_workers, persistent):
    ref1, ref2 = epoch_reference(True, 1, num_workers), epoch_reference(True, 2, num_workers)
    assert ref1 != ref2
    ds = pipeline(True)
    ds.set_epoch(1)
    loader = TorchdataLoader(ds, batch_size=5, num_workers=num_workers, persistent_workers=persistent)
    it = iter(loader)
    head = [batch_ids(next(it)) for _ in range(4)]
    state = json_roundtrip(loader.state_dict())
    del it, loader

    ds = pipeline(True)
    ds.set_epoch(1)  # the training loop restarts at the saved epoch
    loader = TorchdataLoader(ds, batch_size=5, num_workers=num_workers, persistent_workers=persistent)
    loader.load_state_dict(state)
    assert head + run(loader) == ref1
    ds.set_epoch(2)
    assert run(loader) == ref2  # a full epoch, reshuffled for epoch 2
    assert run(loader) == ref2  # and again (no epoch change)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("loader_cls", [TorchdataLoader, ri.StatefulDataLoader])
def test_a_state_taken_at_the_end_of_an_epoch_then_set_epoch_gives_the_next_epoch(loader_cls, num_workers):
    # torchdata with num_workers=0 loads the dataset state when the iterator is made, after the
    # loop's set_epoch(1): the loaded epoch 0 must not become the epoch of the pass that follows
    ref1 = epoch_reference(True, 1, num_workers)
    ds = pipeline(True)
    loader = loader_cls(ds, batch_size=5, num_workers=num_workers)
    run(loader)
    state = json_roundtrip(loader.state_dict())  # epoch 0 has ended
    ds = pipeline(True)
    loader = loader_cls(ds, batch_size=5, num_workers=num_workers)
    loader.load_state_dict(state)
    ds.set_epoch(1)
    assert run(loader) == ref1


@pytest.mark.parametrize("num_workers,persistent,loader_cls", [
    (0, False, ri.StatefulDataLoader), (2, False, ri.StatefulDataLoader), (2, True, ri.StatefulDataLoader),
    (2, False, TorchdataLoader), (2, True, TorchdataLoader)])
def test_a_state_saved_after_the_last_batch_then_the_next_epoch_gives_all_of_it(loader_cls, num_workers, persistent):
    # the loop saved after every batch; the last save came after the last batch of epoch 1, before
    # the loader ended the pass; the resumed loop knows epoch 1 is done and goes on with epoch 2.
    # The loader loads the dataset state when its iterator is made, after set_epoch(2). (torchdata's
    # own class with num_workers=0 keeps its fetcher's "ended" from the state: see docs/torch.md)
    ref2 = epoch_reference(True, 2, num_workers)
    ds = pipeline(True)
    loader = loader_cls(ds, batch_size=5, num_workers=num_workers, persistent_workers=persistent)
    ds.set_epoch(1)
    for _ in loader:
        saved = json_roundtrip(loader.state_dict())
    ds = pipeline(True)
    loader = loader_cls(ds, batch_size=5, num_workers=num_workers, persistent_workers=persistent)
    loader.load_state_dict(saved)
    ds.set_epoch(2)
    assert run(loader) == ref2
    ds.set_epoch(3)
    assert run(loader) == epoch_reference(True, 3, num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("where", ["mid", "last"])
def test_ri_loader_a_later_epoch_set_before_the_state_is_loaded_gives_that_epoch(num_workers, where):
    ref2 = epoch_reference(True, 2, num_workers)
    ds = pipeline(True)
    ds.set_epoch(1)
    loader = ri.StatefulDataLoader(ds, batch_size=5, num_workers=num_workers)
    batches = run(loader)
    loader = ri.StatefulDataLoader(pipeline(True), batch_size=5, num_workers=num_workers)
    loader.dataset.set_epoch(1)
    it = iter(loader)
    for _ in range(3 if where == "mid" else len(batches)):
        next(it)
    state = json_roundtrip(loader.state_dict())
    del it, loader
    ds = pipeline(True)
    ds.set_epoch(2)  # the loop moved on to epoch 2, then loads the epoch-1 state
    loader = ri.StatefulDataLoader(ds, batch_size=5, num_workers=num_workers)
    loader.load_state_dict(state)
    assert run(loader) == ref2


@pytest.mark.parametrize("num_workers", [0, 2])
def test_ri_loader_state_dict_before_the_first_pass_then_set_epoch_gives_that_epoch(num_workers):
    # torchdata's state_dict() makes the iterator (and starts the workers) at once; a set_epoch
    # after it must still decide the pass (an initial checkpoint before the epoch loop)
    ds = pipeline(True)
    loader = ri.StatefulDataLoader(ds, batch_size=5, num_workers=num_workers)
    initial = json_roundtrip(loader.state_dict())
    ds.set_epoch(3)
    again = json_roundtrip(loader.state_dict())  # still before the first batch: a fresh pass of epoch 3
    assert run(loader) == epoch_reference(True, 3, num_workers)
    later = ri.StatefulDataLoader(pipeline(True), batch_size=5, num_workers=num_workers)
    later.load_state_dict(again)
    assert run(later) == epoch_reference(True, 3, num_workers)
    resumed = pipeline(True)
    loader = ri.StatefulDataLoader(resumed, batch_size=5, num_workers=num_workers)
    loader.load_state_dict(initial)
    assert run(loader) == epoch_reference(True, 0, num_workers)  # the state taken then: a fresh epoch 0


@pytest.mark.parametrize("loader_cls", [DataLoader, TorchdataLoader])
def test_set_epoch_reaches_persistent_workers(loader_cls):
    refs = [epoch_reference(True, e, 2) for e in range(3)]
    assert refs[0] != refs[1] != refs[2]
    ds = pipeline(True)
    loader = loader_cls(ds, batch_size=5, num_workers=2, persistent_workers=True)
    for e in range(3):  # set_epoch is first called after the workers started
        if e:
            ds.set_epoch(e)
        assert run(loader) == refs[e], f"epoch {e}"


def test_set_epoch_does_not_leak_between_datasets():
    a, b = pipeline(True), pipeline(True)
    la = TorchdataLoader(a, batch_size=5, num_workers=1, persistent_workers=True)
    lb = TorchdataLoader(b, batch_size=5, num_workers=1, persistent_workers=True)
    first_a, first_b = run(la), run(lb)
    b.set_epoch(5)
    assert run(la) == first_a  # a is still at epoch 0
    assert run(lb) == epoch_reference(True, 5, 1)
    assert first_b == first_a


def test_ri_loader_restores_the_saved_epoch_like_num_workers_0():
    ds = pipeline(True)
    ds.set_epoch(3)
    loader = ri.StatefulDataLoader(ds, batch_size=5, num_workers=2)
    it = iter(loader)
    next(it)
    state = json_roundtrip(loader.state_dict())
    fresh = pipeline(True)
    resumed = ri.StatefulDataLoader(fresh, batch_size=5, num_workers=2)
    resumed.load_state_dict(state)
    assert fresh.epoch == 3


# ---------------------------------------------------------------------- a state loaded on the dataset, then workers


@pytest.mark.parametrize("persistent", [False, True])
def test_state_loaded_on_the_dataset_is_split_among_workers_once(persistent):
    ds = pipeline(True)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(17)]
    state = json_roundtrip(ds.state_dict())
    full = [e["id"] for e in pipeline(True)]

    again = pipeline(True)
    again.load_state_dict(state)
    loader = DataLoader(again, batch_size=4, num_workers=3, persistent_workers=persistent)
    rest = [i for b in loader for i in b["id"].tolist()]
    assert sorted(head + rest) == sorted(full) and len(head + rest) == len(full)
    # the next pass (new workers, or the same persistent ones) is a full epoch, not the tail again
    nxt = [i for b in loader for i in b["id"].tolist()]
    assert sorted(nxt) == sorted(full)
    # and the main process does not resume it again either
    assert [e["id"] for e in again] == full


@pytest.mark.slow  # a spawned worker imports torch afresh: 10-15 s on a small machine; run by `make soak`
def test_set_epoch_reaches_a_persistent_spawned_worker(soak):
    """With the spawn start method the dataset is pickled to the worker; the shared epoch slot
    travels as shared memory, so set_epoch still reaches the persistent worker."""
    if not soak:
        pytest.skip("spawn start method: slow, runs with --soak (make soak)")
    def build():
        return src(4).shuffle(seed=3, buffer_size=6)

    refs = []
    for e in range(2):
        ds = build()
        ds.set_epoch(e)
        refs.append(run(DataLoader(ds, batch_size=5)))
    assert refs[0] != refs[1]
    ds = build()
    loader = ri.StatefulDataLoader(ds, batch_size=5, num_workers=1, persistent_workers=True,
                                   multiprocessing_context="spawn")
    assert run(loader) == refs[0]
    ds.set_epoch(1)
    assert run(loader) == refs[1]


class _UserStatefulDataset(torch.utils.data.IterableDataset):
    """How torchtitan-style training code wraps a streaming dataset: its own torch ``IterableDataset``
    (``Stateful`` by its two methods), looping over the dataset epoch after epoch with ``set_epoch``,
    whose state is the wrapped dataset's, taken in each DataLoader worker."""

    def __init__(self):
        self._data = ri.split_dataset_by_node(src(4).shuffle(seed=0, buffer_size=5), 0, 1)

    def __iter__(self):
        while True:
            for example in self._data:
                yield example["id"]
            self._data.set_epoch(self._data.epoch + 1)

    def state_dict(self):
        return {"data": self._data.state_dict()}

    def load_state_dict(self, state):
        self._data.load_state_dict(state["data"])


@pytest.mark.parametrize("workers,cuts", [(0, range(0, 40, 3)), (2, (4, 23))])
def test_a_users_stateful_wrapper_looping_over_epochs_resumes_exactly(workers, cuts):
    """Our dataset inside a user's Stateful torch dataset that loops over epochs: torchdata's loader
    asks the wrapper (in each worker) for its state, which is ours; resumed at a cut, later epochs
    included, the batches are those of the uninterrupted run."""
    def run(steps, state=None, cut=None):
        loader = TorchdataLoader(_UserStatefulDataset(), batch_size=3, num_workers=workers)
        if state is not None:
            loader.load_state_dict(state)
        out, taken = [], None
        for i, batch in enumerate(loader):
            out.append(batch.tolist())
            if i == cut:
                taken = json_roundtrip(loader.state_dict())
            if len(out) == steps:
                return out, taken

    total = 45  # 60 examples a pass: more than two passes
    full, _ = run(total)
    for cut in cuts:
        head, state = run(cut + 1, cut=cut)
        assert head + run(total - cut - 1, state)[0] == full, cut
