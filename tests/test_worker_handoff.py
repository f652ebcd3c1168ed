"""In any DataLoader's workers (torch's, torchdata's), the dataset's dict items cross to the main
process with their small tensors by value (``integrations/torch/transport.py``: ``handoff``,
``WorkerDict``): the main process receives the very batches torch's own path gives - plain dicts,
same values, dtypes, shapes, same order, resumable at every cut - only small storages arrive as
plain memory instead of shared-memory segments. ``ri.StatefulDataLoader(inline_tensor_bytes=0)``
and ``ResumableDataCallback(inline_tensor_bytes=0)`` turn it off."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from datasets import Dataset  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset, default_collate  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from harness import assert_loader_resumes_exactly  # noqa: E402
from resumable_iterable.integrations.torch.transport import WorkerDict  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

N = 48
HF = Dataset.from_dict({"id": np.arange(N), "x": np.random.default_rng(0).random((N, 16), dtype=np.float32),
                        "text": [f"row {i}" for i in range(N)]})
LOADERS = {"torch": DataLoader, "torchdata": TorchdataLoader}


def dataset(shards: int = 4) -> ri.IterableDataset:
    return ri.to_iterable_dataset(HF, num_shards=shards)


def off(ds: ri.IterableDataset) -> ri.IterableDataset:
    """``ds`` sending its items through torch's own path (a setting of the dataset's session)."""
    ds.session.small_tensors_by_value = False
    return ds


def described(x):
    """``x`` (batches) as comparable values: types, dtypes, shapes, values; every dict a plain ``dict``."""
    if isinstance(x, torch.Tensor):
        return "tensor", str(x.dtype), tuple(x.shape), x.tolist()
    if isinstance(x, np.ndarray):
        return "ndarray", str(x.dtype), x.shape, x.tolist()
    if isinstance(x, dict):
        assert type(x) is dict, type(x)
        return [(k, described(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [described(v) for v in x]
    return type(x).__name__, x


def shared(batches: list) -> set:
    return {v.is_shared() for b in batches for v in b.values() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("fmt", ["numpy", "torch", None])
def test_dataset_batches_arrive_as_torchs_own_path_gives_them(loader, fmt):
    def run(by_value):
        ds = dataset()
        ds = (ds.with_format(fmt) if fmt else ds).batch(8)
        return list(LOADERS[loader](ds if by_value else off(ds), batch_size=None, num_workers=2))

    ours, torchs = run(True), run(False)
    assert described(ours) == described(torchs) and len(ours) == N // 8
    if fmt is None:  # lists of Python values: no tensor
        assert shared(ours) == shared(torchs) == set()
    else:
        assert shared(ours) == {False} and shared(torchs) == {True}


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("fmt", ["numpy", None])
def test_examples_collated_by_the_loader_arrive_as_torchs_own_path_gives_them(loader, fmt):
    def run(by_value):
        ds = dataset().with_format(fmt) if fmt else dataset()
        return list(LOADERS[loader](ds if by_value else off(ds), batch_size=6, num_workers=2))

    ours, torchs = run(True), run(False)
    assert described(ours) == described(torchs) and len(ours) == N // 6
    assert shared(ours) == {False} and shared(torchs) == {True}


def test_large_tensors_still_travel_through_shared_memory():
    """Above 64 KB a storage goes through shared memory, as torch sends it; the small ones of the
    same batch travel by value."""
    def big(row):
        return {"big": np.full(20_000, row["id"], dtype=np.float32)}  # 80 KB

    ds = dataset().map(big).with_format("numpy")
    got = list(TorchdataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(int(b["big"][0]) for b in got) == list(range(N))
    assert all(b["big"][0].item() == b["id"].item() for b in got)
    assert all(b["big"].is_shared() and not b["id"].is_shared() for b in got)


class Nested(IterableDataset):
    """Dicts holding tensors in lists and dicts, from a dataset of ours iterated in the worker."""

    def __init__(self):
        self.ds = dataset()

    def __iter__(self):
        for b in self.ds.iter(batch_size=8):
            assert type(b) is WorkerDict  # in a worker: iter(batch_size) hands its batches off too
            b["parts"] = [torch.tensor(b["id"][:2])]
            b["meta"] = {"first": torch.tensor(b["id"][:1])}
            yield b


def test_tensors_in_lists_and_dicts_of_an_item_travel_by_value_too():
    got = list(TorchdataLoader(Nested(), batch_size=None, num_workers=2))
    assert sorted(i for b in got for i in b["id"]) == list(range(N))
    assert all(b["parts"][0].tolist() == b["id"][:2] == [b["meta"]["first"].item(), b["id"][1]] for b in got)
    assert all(type(b) is dict and not b["parts"][0].is_shared() and not b["meta"]["first"].is_shared() for b in got)


def test_closing_the_handoff_closes_the_pass_at_once():
    """A worker's pass left part-way (the loader's iterator dropped) closes the dataset's own
    generator there and then, also when something else still refers to it."""
    from resumable_iterable.integrations.torch.transport import handoff

    closed = []

    def items():
        try:
            yield from ({"i": i} for i in range(5))
        finally:
            closed.append(True)

    inner = items()
    out = handoff(inner)
    assert type(next(out)) is WorkerDict and next(out) == {"i": 1}
    out.close()
    assert closed == [True] and inner.gi_frame is None


def test_which_items_go_by_value():
    """An item goes by value when it holds a tensor: a value, a dict's value, or the first item of a
    list or tuple (long lists of numbers are not looked through); else pickle sends it as a dict."""
    from resumable_iterable.integrations.torch.transport import _reduce_worker_dict

    t = torch.arange(3)
    for item in ({"a": t}, {"a": [t, t]}, {"a": (t,)}, {"a": {"b": t}}):
        assert _reduce_worker_dict(WorkerDict(item))[0] is pickle.loads, item
    for item in ({"ids": list(range(2048))}, {"a": ["text", t]}, {"a": [[t]]}, {"s": "x"}):
        assert _reduce_worker_dict(WorkerDict(item)) == (dict, (item,)), item


def test_a_collate_fn_gets_dicts_and_the_main_process_plain_dicts():
    """A ``collate_fn`` of the user sees ``dict`` items (a subclass), and what it returns reaches
    the main process as it would have, its dicts plain ``dict``s, its numpy arrays untouched."""
    seen = []

    def collate(rows):
        assert all(isinstance(r, dict) and type(r) is WorkerDict for r in rows)
        seen.append(True)
        return rows

    got = list(DataLoader(dataset().with_format("numpy"), batch_size=4, num_workers=2, collate_fn=collate))
    rows = [r for b in got for r in b]
    assert len(rows) == N and all(type(r) is dict and type(r["x"]) is np.ndarray for r in rows)
    assert sorted(int(r["id"]) for r in rows) == list(range(N))
    # with no workers nothing is handed off: the user's own dicts
    assert all(type(r) is dict for b in DataLoader(dataset(), batch_size=4, collate_fn=lambda rows: rows) for r in b)


def test_a_worker_dict_pickles_as_itself_elsewhere_and_copies_stay_worker_dicts():
    import copy

    d = WorkerDict(a=torch.arange(3), b="text")
    for again in (copy.copy(d), copy.deepcopy(d), pickle.loads(pickle.dumps(d))):
        assert type(again) is WorkerDict and again.keys() == d.keys() and torch.equal(again["a"], d["a"])
    assert type(default_collate([d, d])) is WorkerDict  # how the loader's batch keeps the type


@pytest.mark.parametrize("workers", [1, 2])
def test_numpy_batches_resume_exactly_at_every_cut_through_torchdatas_loader(workers):
    def build():
        return dataset().shuffle(seed=3, buffer_size=7).with_format("numpy").batch(4)

    full = assert_loader_resumes_exactly(build, workers=workers, batch_size=None, as_json=True,
                                         item=lambda b: (type(b).__name__, b["id"].tolist(), b["x"].dtype),
                                         cuts=lambda n: range(1, n + 1))
    assert sorted(i for _, ids, _ in full for i in ids) == list(range(N))


def test_turned_off_by_our_loader_and_the_trainer_callback():
    off = ri.StatefulDataLoader(dataset(), batch_size=4, num_workers=2, inline_tensor_bytes=0)
    assert shared(list(off)) == {True}
    on = ri.StatefulDataLoader(off.dataset, batch_size=4, num_workers=2)  # the next loader decides again
    assert shared(list(on)) == {False}

    from resumable_iterable.integrations import trainer_loader

    loader = DataLoader(dataset(), batch_size=4, num_workers=2)
    trainer_loader.inline_small_tensors(loader, 0)
    assert not loader.dataset.session.small_tensors_by_value and shared(list(loader)) == {True}


def test_our_loaders_own_limit_applies_to_the_dataset_dicts():
    """``inline_tensor_bytes=100``: the batch's 32-byte ``id`` tensor goes by value, its 256-byte ``x``
    through shared memory (the dataset's default would send both by value)."""
    got = list(ri.StatefulDataLoader(dataset().with_format("numpy"), batch_size=4, num_workers=2,
                                     inline_tensor_bytes=100))
    assert len(got) == N // 4 and all(type(b) is dict for b in got)
    assert all(not b["id"].is_shared() and b["x"].is_shared() and b["x"].shape == (4, 16) for b in got)
    assert sorted(i for b in got for i in b["id"].tolist()) == list(range(N))


@pytest.mark.filterwarnings("ignore:.pin_memory. argument is set as true:UserWarning")
def test_pin_memory_and_persistent_workers():
    loader = TorchdataLoader(dataset().with_format("numpy").batch(8), batch_size=None, num_workers=2,
                             pin_memory=True, persistent_workers=True)
    for _ in range(2):
        got = list(loader)
        assert sorted(i for b in got for i in b["id"].tolist()) == list(range(N))
        assert all(type(b) is dict for b in got)


def test_spawned_workers_hand_off_too():
    """A spawned worker imports the package when it unpickles the dataset: the queue's pickler
    knows ``WorkerDict`` there too (else the main process would get ``WorkerDict``s of shared tensors)."""
    got = list(TorchdataLoader(dataset(shards=2).with_format("numpy").batch(8), batch_size=None, num_workers=1,
                               multiprocessing_context="spawn"))
    assert [b["id"].tolist()[0] for b in got] == list(range(0, N, 8))
    assert all(type(b) is dict for b in got) and shared(got) == {False}
