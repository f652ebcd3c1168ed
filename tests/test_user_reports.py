"""Reproductions of what users of HF ``datasets`` / torchdata reported about iterable datasets in
DataLoaders and resume, run against this library. Each test names the report it comes from."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from datasets import Dataset  # noqa: E402
from torch.utils.data import default_collate  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from harness import assert_loader_resumes_exactly, json_roundtrip  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

ROWS = 24


def inner():
    return ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(ROWS))}), num_shards=4).shuffle(
        seed=3, buffer_size=3)


def rows_of(datasets):
    for ds in datasets:
        for ex in ds:
            yield {"id": ex["id"]}


def nested(n_inner: int = 1):
    """A dataset read by another one's generator: a shuffled dataset wrapped in ``from_generator``
    (one shard when ``n_inner`` is 1: the datasets in a list are its shards)."""
    return ri.IterableDataset.from_generator(rows_of, gen_kwargs={"datasets": [inner() for _ in range(n_inner)]})


def ids(loader) -> list:
    return [int(i) for b in loader for i in b["id"]]


# https://github.com/huggingface/datasets/issues/7051 ("How to set_epoch with interleave_datasets?":
# the suggested wrapper is a dataset iterated by a from_generator generator) and
# https://github.com/huggingface/datasets/issues/7187 (a dataset iterated inside another one's
# generator in DataLoader workers). HF 5.2 splits the inner dataset among the DataLoader workers
# again, inside the one worker that runs the outer generator: with 2 workers, half of it is lost.
@pytest.mark.parametrize("n_inner", [1, 2])
def test_a_dataset_iterated_inside_another_ones_generator_is_read_whole_by_workers(n_inner):
    expected = sorted(list(range(ROWS)) * n_inner)
    assert sorted(ids(StatefulDataLoader(nested(n_inner), batch_size=4))) == expected
    assert sorted(ids(StatefulDataLoader(nested(n_inner), batch_size=4, num_workers=2))) == expected


def test_a_dataset_iterated_inside_another_ones_generator_resumes_exactly_at_every_batch():
    for workers in (0, 2):
        full = assert_loader_resumes_exactly(nested, workers=workers, batch_size=4, as_json=True,
                                             item=lambda b: b["id"].tolist(), cuts=lambda n: range(1, n + 1))
        assert sorted(i for b in full for i in b) == list(range(ROWS))


def test_a_torch_dataset_of_the_users_still_has_ours_split_among_workers():
    """The other habit: the user's own ``torch`` IterableDataset iterates ours in every worker; ours
    must still split itself among them, or every example comes once per worker."""
    class Wrapper(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(inner())

    assert sorted(ids(StatefulDataLoader(Wrapper(), batch_size=4, num_workers=2))) == list(range(ROWS))


def shuffled():
    return inner()  # 24 rows, 4 shards, a shuffle buffer


# https://github.com/PrimeIntellect-ai/prime-rl/pull/3332 ("resumed runs restart the data stream with
# num_workers > 0": iter(dataloader) was called before load_state_dict, and the loop went on with that
# iterator) and https://github.com/alibaba/TorchEasyRec/pull/544 (an eager iter() with persistent
# workers before the state was loaded). torchdata keeps the state for the loader's next iterator, so
# the one already made read the epoch again from its start: every example seen before the save came
# twice. ri.StatefulDataLoader's old iterator now refuses to go on.
@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_an_iterator_made_before_load_state_dict_refuses_to_go_on(workers, persistent):
    kw = dict(batch_size=4, num_workers=workers, persistent_workers=persistent)
    full = ids(ri.StatefulDataLoader(shuffled(), **kw))
    saved = ri.StatefulDataLoader(shuffled(), **kw)
    head = []
    for b in saved:
        head += [int(i) for i in b["id"]]
        if len(head) == 12:
            state = json_roundtrip(saved.state_dict())
            break
    loader = ri.StatefulDataLoader(shuffled(), **kw)
    early = iter(loader)
    loader.load_state_dict(state)
    with pytest.raises(RuntimeError, match="made before the loader's load_state_dict"):
        next(early)
    # the loader itself resumes: the rest of the saved run, each example once
    assert head + ids(loader) == full


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, True)])
def test_an_early_iterator_then_load_then_iterating_the_loader_resumes_exactly_at_every_batch(workers, persistent):
    kw = dict(batch_size=4, num_workers=workers, persistent_workers=persistent)

    def run(state=None, stop=None):
        loader = ri.StatefulDataLoader(shuffled(), **kw)
        if state is not None:
            iter(loader)  # the workers started before the state is loaded (TorchEasyRec's habit)
            loader.load_state_dict(state)
        out = []
        for b in loader:
            out.append(b["id"].tolist())
            if stop is not None and len(out) == stop:
                return out, json_roundtrip(loader.state_dict())
        return out, None

    full, _ = run()
    for k in range(1, len(full) + 1):
        head, state = run(stop=k)
        tail, _ = run(state=state)
        assert head + tail == full, f"cut after {k} batches"


# The same report, with a prefetch that reads ahead: the inner datasets a generator starts in the
# prefetch's thread, while the worker's own thread is elsewhere (here: in the collate_fn, which
# waits until the second inner dataset has started), were split among the workers again.
_GO, _STARTED, _FIRST_BATCH, _CALLS = threading.Event(), threading.Event(), [True], [0]


def rows_of_waiting(datasets):
    # called once per shard (the shard's list of one dataset); the second call in a worker process
    # starts its dataset while the worker's thread waits in the collate_fn
    _CALLS[0] += 1
    second = _CALLS[0] == 2
    if second:
        _GO.wait(30)
    its = [iter(ds) for ds in datasets]
    if second:
        _STARTED.set()
    for it in its:
        for ex in it:
            yield {"id": ex["id"]}


def collate_while_reading_ahead(batch):
    if _FIRST_BATCH[0]:  # (in each worker process: its copies of these)
        _FIRST_BATCH[0] = False
        _GO.set()
        _STARTED.wait(30)
    return default_collate(batch)


def test_a_dataset_a_prefetch_thread_starts_inside_another_ones_pass_is_read_whole():
    outer = ri.IterableDataset.from_generator(rows_of_waiting,
                                              gen_kwargs={"datasets": [inner() for _ in range(4)]}).prefetch(64)
    loader = StatefulDataLoader(outer, batch_size=4, num_workers=2, collate_fn=collate_while_reading_ahead)
    assert sorted(ids(loader)) == sorted(list(range(ROWS)) * 4)
