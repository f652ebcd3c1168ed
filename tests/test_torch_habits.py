"""PyTorch habits (issue 10): random streams per DataLoader worker and rank, copies of a dataset
and ``set_epoch`` with persistent workers, and the torch base class whatever the import order."""

from __future__ import annotations

import copy
import pickle
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torch.utils.data import DataLoader  # noqa: E402

from fresh import run_fresh  # noqa: E402
import resumable_iterable as ri  # noqa: E402
from data import HF_B, src  # noqa: E402
from harness import assert_resumes_exactly, json_roundtrip  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]


def ids(loader) -> list[int]:
    out = []
    for b in loader:
        v = b["id"]
        out.extend(v.tolist() if hasattr(v, "tolist") else [v])
    return out


# ---------------------------------------------------------------------- 1. one random stream per worker / rank


def _per_worker(got: list[int], lo: int, hi: int, offset: int) -> list[int]:
    return [i - offset for i in got if lo <= i < hi]


def test_workers_draw_different_shuffle_buffer_streams():
    """Two shards of 30 rows, one per worker: with one stream for both, worker 1's order would be
    worker 0's order shifted by 30 (the same buffer draws on rows at the same offsets)."""
    ds = src(2).shuffle(seed=7, buffer_size=8)
    got = ids(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(got) == list(range(60))
    w0, w1 = _per_worker(got, 0, 30, 0), _per_worker(got, 30, 60, 30)
    assert w0 != w1
    # deterministic: the same seed and split give the same streams
    assert ids(DataLoader(ds, batch_size=None, num_workers=2)) == got


def test_workers_draw_different_interleave_choices():
    a, b = src(2), ri.to_iterable_dataset(HF_B.select(range(24)), num_shards=2)  # ids 1000..1023
    mix = ri.interleave_datasets([a, b], probabilities=[0.5, 0.5], seed=3,
                                 stopping_strategy="all_exhausted_without_replacement")
    got = ids(DataLoader(mix, batch_size=None, num_workers=2))
    assert sorted(got) == list(range(60)) + list(range(1000, 1024))
    # worker 0 reads rows 0..29 and 1000..1011, worker 1 rows 30..59 and 1012..1023
    choices = [["a" if i < 1000 else "b" for i in got if (i < 30 or 1000 <= i < 1012) == (w == 0)] for w in range(2)]
    assert choices[0] != choices[1]


def test_ranks_draw_different_streams_deterministically():
    def rank_order(r: int) -> list[int]:
        part = ri.split_dataset_by_node(src(2).shuffle(seed=7, buffer_size=8), rank=r, world_size=2)
        return [e["id"] for e in part]

    r0, r1 = rank_order(0), rank_order(1)
    assert sorted(r0 + r1) == list(range(60))
    assert r0 != [i - 30 for i in r1]
    assert rank_order(0) == r0 and rank_order(1) == r1


def test_rank_split_by_example_keeps_one_stream():
    """3 shards for 2 ranks: each rank reads everything and keeps every other example of the same
    stream, so the ranks' streams must stay identical for the parts to be disjoint."""
    parts = [[e["id"] for e in ri.split_dataset_by_node(src(3).shuffle(seed=7, buffer_size=8), rank=r, world_size=2)]
             for r in range(2)]
    assert sorted(parts[0] + parts[1]) == list(range(60))


SPLIT_RANDOM = {
    "shuffle": lambda: src(4).shuffle(seed=7, buffer_size=5).shard(2, 1, contiguous=False),
    "shuffle_replay": lambda: src(4).shuffle(seed=7, buffer_size=5, buffer_state="replay").shard(2, 1, contiguous=False),
    "interleave": lambda: ri.interleave_datasets(
        [src(4), ri.to_iterable_dataset(HF_B, num_shards=4)], probabilities=[0.7, 0.3], seed=2,
        stopping_strategy="all_exhausted").shard(2, 0, contiguous=False),
    "rank_of_worker": lambda: ri.split_dataset_by_node(src(4).shuffle(seed=1, buffer_size=4), rank=1,
                                                       world_size=2).shard(2, 1, contiguous=False),
}


@pytest.mark.parametrize("name", sorted(SPLIT_RANDOM))
def test_split_random_nodes_resume_at_every_cut(name):
    full = assert_resumes_exactly(SPLIT_RANDOM[name])
    assert full  # a split part with its own seed is still a complete, resumable pipeline


def _habits_pipeline() -> ri.IterableDataset:
    a, b = src(4), ri.to_iterable_dataset(HF_B, num_shards=4)
    mix = ri.interleave_datasets([a, b], probabilities=[0.6, 0.4], seed=5,
                                 stopping_strategy="all_exhausted_without_replacement")
    return mix.shuffle(seed=11, buffer_size=6)


def test_distinct_worker_streams_resume_exactly_and_elastically():
    def loader(num_workers: int):
        return ri.StatefulDataLoader(_habits_pipeline(), batch_size=4, num_workers=num_workers)

    full, states = [], {}
    ld = loader(2)
    for k, batch in enumerate(ld, 1):
        full.append(batch["id"].tolist())
        if k in (3, 8):
            states[k] = json_roundtrip(ld.state_dict())
    flat = [i for b in full for i in b]
    assert sorted(flat) == list(range(60)) + list(range(1000, 1025))
    for k, st in states.items():
        same = loader(2)
        same.load_state_dict(st)
        assert [b["id"].tolist() for b in same] == full[k:], f"exact resume after batch {k}"
        other = loader(3)  # elastic: another worker count, each remaining example once
        other.load_state_dict(st)
        rest = [i for b in other for i in b["id"].tolist()]
        assert sorted(rest) == sorted(i for b in full[k:] for i in b), f"elastic resume after batch {k}"


# ---------------------------------------------------------------------- 2. copies of a dataset and set_epoch


def _epoch_pipeline() -> ri.IterableDataset:
    return src(4).shuffle(seed=3, buffer_size=6)


@pytest.fixture(scope="module")
def epoch_refs() -> list[list[int]]:
    """The order of a fresh dataset at epochs 0, 1, 2 through a 2-worker DataLoader."""
    refs = []
    for e in range(3):
        ds = _epoch_pipeline()
        ds.set_epoch(e)
        refs.append(ids(DataLoader(ds, batch_size=5, num_workers=2)))
    assert refs[0] != refs[1] != refs[2]
    return refs


COPIES = {
    "pickle": lambda ds: pickle.loads(pickle.dumps(ds)),
    "deepcopy": copy.deepcopy,
    "copy": copy.copy,
}


@pytest.mark.parametrize("how", sorted(COPIES))
def test_set_epoch_on_a_copy_reaches_persistent_workers(how, epoch_refs):
    original = _epoch_pipeline()
    original.set_epoch(1)
    ds = COPIES[how](original)
    assert ds.epoch == 1
    ds.set_epoch(0)
    loader = DataLoader(ds, batch_size=5, num_workers=2, persistent_workers=True)
    for e in range(3):
        if e:
            ds.set_epoch(e)  # after the persistent workers started
        assert ids(loader) == epoch_refs[e], f"epoch {e}"
    assert original.epoch == 1  # the copy has its own epoch ...
    other = DataLoader(original, batch_size=5, num_workers=2)
    assert ids(other) == epoch_refs[1]  # ... in its own shared slot


def test_set_epoch_on_the_original_does_not_reach_a_copys_workers(epoch_refs):
    original = _epoch_pipeline()
    clone = copy.deepcopy(original)
    loader = DataLoader(clone, batch_size=5, num_workers=2, persistent_workers=True)
    assert ids(loader) == epoch_refs[0]
    original.set_epoch(2)
    assert ids(loader) == epoch_refs[0]
    clone.set_epoch(1)
    assert ids(loader) == epoch_refs[1]


def test_copy_of_a_dataset_with_a_loaded_state_resumes_once_in_workers():
    ds = _epoch_pipeline()
    it = iter(ds)
    head = [next(it)["id"] for _ in range(17)]
    state = json_roundtrip(ds.state_dict())
    loaded = _epoch_pipeline()
    loaded.load_state_dict(state)
    clone = pickle.loads(pickle.dumps(loaded))
    loader = DataLoader(clone, batch_size=4, num_workers=2)
    rest = ids(loader)
    assert sorted(head + rest) == list(range(60))
    assert sorted(ids(loader)) == list(range(60))  # the next pass is a full epoch, not the tail again


# ---------------------------------------------------------------------- 3. the torch base, whatever the import order

_BUILD = """
import pickle, sys
import pyarrow as pa
TABLE = pa.table({"id": list(range(40))})
def build():
    import resumable_iterable as ri
    return ri.IterableDataset.from_arrow_table(TABLE, num_shards=4).shuffle(seed=5, buffer_size=4)
"""

ORDERS = {
    "torch_first": "import torch\nimport resumable_iterable as ri\nds = build()\n",
    "torch_after_ri": "import resumable_iterable as ri\nimport torch\nds = build()\n",
    # also a state loaded before torch is imported, then split among DataLoader workers
    "torch_after_dataset": ("import resumable_iterable as ri\nds = build()\n"
                            "saved = build()\nit = iter(saved)\nHEAD = [next(it)['id'] for _ in range(9)]\n"
                            "LOADED = build()\nLOADED.load_state_dict(saved.state_dict())\n"
                            "assert 'torch' not in sys.modules\nimport torch\n"),
    # torch's ABC cache holds the "no" given before the class's bases change (importing torchdata or
    # making an Arrow table after the check would clear that cache by chance, so they come before)
    "issubclass_checked_first": ("import resumable_iterable as ri\nimport torch.utils.data\n"
                                 "from resumable_iterable import StatefulDataLoader\n"
                                 "assert not issubclass(ri.IterableDataset, torch.utils.data.IterableDataset)\n"
                                 "ds = build()\n"),
    "unpickled_after_torch": ("import resumable_iterable as ri\nblob = pickle.dumps(build())\n"
                              "assert 'torch' not in sys.modules\nimport torch\nds = pickle.loads(blob)\n"),
}

_CHECK = """
import torch.utils.data
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader
assert isinstance(ds, torch.utils.data.IterableDataset)
assert issubclass(ri.IterableDataset, torch.utils.data.IterableDataset)
def ids(loader):
    return [i for b in loader for i in b["id"].tolist()]
assert sorted(ids(DataLoader(ds, batch_size=4))) == list(range(40))
assert sorted(ids(StatefulDataLoader(ds, batch_size=4))) == list(range(40))
ref = build()
ref.set_epoch(1)
ref = ids(DataLoader(ref, batch_size=4, num_workers=2))
persistent = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
first = ids(persistent)
assert sorted(first) == list(range(40))
ds.set_epoch(1)  # reaches the persistent workers started before
assert ids(persistent) == ref != first
loader = ri.StatefulDataLoader(ds, batch_size=4, num_workers=2)
it = iter(loader)
head = [next(it)["id"].tolist() for _ in range(3)]
state = loader.state_dict()
rest = [b["id"].tolist() for b in it]
again = ri.StatefulDataLoader(build(), batch_size=4, num_workers=2)
again.load_state_dict(state)
assert [b["id"].tolist() for b in again] == rest
if "LOADED" in globals():
    loader = DataLoader(LOADED, batch_size=4, num_workers=2)
    assert sorted(HEAD + ids(loader)) == list(range(40))
    assert sorted(ids(loader)) == list(range(40))  # used by one pass only
print("ok")
"""


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_torch_base_whatever_the_import_order(order):
    code = _BUILD + ORDERS[order] + _CHECK
    assert run_fresh(textwrap.dedent(code), timeout=180) == "ok"


@pytest.mark.parametrize("torch_import", ["import torch\n", ""])
def test_our_loader_first_on_a_dataset_built_before_torch(torch_import):
    # nothing asks isinstance before the loader does: resumable_iterable.StatefulDataLoader (which
    # imports torch itself when there is no import) must still see a torch IterableDataset
    code = _BUILD + "import resumable_iterable as ri\nds = build()\n" + torch_import + """
loader = ri.StatefulDataLoader(ds, batch_size=4, num_workers=2)
assert sorted(i for b in loader for i in b["id"].tolist()) == list(range(40))
print("ok")
"""
    assert run_fresh(textwrap.dedent(code), timeout=180) == "ok"
