"""``ri.StatefulDataLoader`` sends the small tensors of a worker's batch by value
(``integrations/torch/transport.py``): the loader yields the very same batches as torchdata's -
values, dtypes, shapes, strides, storage offsets, shared storages, containers, identity - only
the path of small storages differs (inside the message, not through a shared-memory segment)."""

from __future__ import annotations

import collections
import dataclasses
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
import torch.multiprocessing  # noqa: E402,F401 - registers torch's reductions with ForkingPickler
from torch.utils.data import IterableDataset, default_collate, get_worker_info  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from data import src  # noqa: E402
from resumable_iterable.integrations.torch.transport import (  # noqa: E402
    INLINE_BUDGET, InlineSmallTensors, inline_small_tensors)

pack_sequence = torch.nn.utils.rnn.pack_sequence

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning"),
              pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")]

Pair = collections.namedtuple("Pair", "a b")


def crossed(obj):
    """``obj`` as the main process receives it from a worker's queue."""
    return pickle.loads(ForkingPickler.dumps(obj))


@dataclasses.dataclass
class Meta:
    ids: torch.Tensor
    name: str


def kinds(i: int) -> dict:
    """One batch with tensors and containers of many kinds, each shaped by ``i``."""
    g = torch.Generator().manual_seed(i)
    base = torch.arange(100.0) + i
    ids = torch.arange(i, i + 32)
    gray = torch.rand(2, 1, 4, 4, generator=g).contiguous(memory_format=torch.channels_last)
    return {
        "id": ids,
        "mask": torch.rand(32, generator=g) > 0.5,
        "half": torch.rand(4, 3, generator=g).to(torch.bfloat16),
        "zero_d": torch.tensor(float(i), dtype=torch.float16),
        "empty": torch.zeros(3, 5, dtype=torch.int32)[:, :0],
        "complex": torch.rand(5, dtype=torch.complex64, generator=g),
        "large": torch.full((40_000,), float(i)),  # 160 KB: above the limit
        "transposed": torch.arange(12.0).view(3, 4).t() + i,  # not contiguous
        "gray": gray,  # contiguous, with a size-1 dimension's stride of its own
        "views": [base[:10], base[10:20], base[50:].view(5, 10)],  # one storage, offsets
        "meta": Meta(ids, f"batch {i}"),  # the same tensor in a dataclass
        "param": torch.nn.Parameter(torch.rand(3, generator=g)),
        "packed": pack_sequence([torch.arange(3.0) + i, torch.arange(2.0)]),
        "nested_tensor": torch.nested.nested_tensor([torch.arange(2.0), torch.arange(3.0) + i]),
        "nested": [torch.tensor([i, 1]), (torch.tensor([i, 2]), Pair(torch.tensor([3]), "x"))],
        "text": [f"row {i}"] * 3,
        "names": ["first", torch.tensor([i])],  # a tensor after a string
    }


class Batches(IterableDataset):
    """Ready-made batches of :func:`kinds`, split among workers."""

    def __init__(self, n: int):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        k, w = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(k, self.n, w):
            yield kinds(i)


def flat(x, path=""):
    if isinstance(x, torch.nn.utils.rnn.PackedSequence):
        yield from flat(tuple(x), f"{path}/packed")
    elif isinstance(x, torch.Tensor):
        yield path, x
    elif isinstance(x, Meta):
        yield from flat(x.ids, f"{path}/ids")
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from flat(v, f"{path}/{k}")
    elif isinstance(x, (list, tuple)):
        for k, v in enumerate(x):
            yield from flat(v, f"{path}/{k}")


def test_the_loader_yields_the_same_batches_and_only_small_storages_travel_inline():
    ours = list(ri.StatefulDataLoader(Batches(6), batch_size=None, num_workers=2))
    theirs = list(TorchdataLoader(Batches(6), batch_size=None, num_workers=2))
    assert len(ours) == len(theirs) == 6
    for a, b in zip(ours, theirs):
        assert a["text"] == b["text"] and a["meta"].name == b["meta"].name
        assert type(a["nested"][1][1]) is Pair and a["nested"][1][1].b == "x"
        assert type(a["packed"]) is torch.nn.utils.rnn.PackedSequence and type(a["param"]) is torch.nn.Parameter
        assert a["meta"].ids is a["id"]  # one object stays one object
        assert a["views"][0].untyped_storage().data_ptr() == a["views"][2].untyped_storage().data_ptr()
        fa, fb = dict(flat(a)), dict(flat(b))
        assert fa.keys() == fb.keys()
        for path, t in fa.items():
            u = fb[path]
            assert type(t) is type(u) and t.dtype == u.dtype and t.is_nested == u.is_nested, path
            if t.is_nested:
                assert all(torch.equal(x, y) for x, y in zip(t.unbind(), u.unbind())), path
                continue
            assert t.shape == u.shape and t.stride() == u.stride() and t.storage_offset() == u.storage_offset(), path
            assert torch.equal(t, u), path
            assert t.is_shared() == (path == "/large"), path  # small storages arrive as plain new ones
            assert u.is_shared() or u.numel() == 0, path  # torchdata sends all through shared memory
        a["id"] += 1  # writable


def test_per_example_dicts_collated_by_the_loader_resume_exactly_with_inline_ids():
    def loader():
        return ri.StatefulDataLoader(src(4).shuffle(seed=1, buffer_size=5), batch_size=4, num_workers=2)

    whole = [b["id"].tolist() for b in loader()]
    first = loader()
    it, head = iter(first), []
    for _ in range(5):
        head.append(next(it)["id"].tolist())
    state = first.state_dict()
    again = loader()
    again.load_state_dict(state)
    tail = [b["id"].tolist() for b in again]
    assert head + tail == whole
    assert not ri.StatefulDataLoader(src(2), batch_size=4, num_workers=1).__iter__().__next__()["id"].is_shared()


def test_the_budget_bounds_the_bytes_inline_in_one_batch():
    quarter = torch.zeros(60_000 // 4)  # 60 KB each: four fit in 256 KB, the fifth does not
    assert 4 * quarter.nbytes <= INLINE_BUDGET < 5 * quarter.nbytes
    batch = [quarter.clone() for _ in range(5)]
    got = crossed(inline_small_tensors(batch))
    assert all(torch.equal(g, q) for g, q in zip(got, batch))
    assert [t.is_shared() for t in got] == [False] * 4 + [True]
    big = crossed(inline_small_tensors([torch.zeros(100_000)] * 2, max_bytes=1 << 20))  # 400 KB each
    assert [t.is_shared() for t in big] == [False, False] and big[0] is big[1]  # one limit above the budget


def test_identity_and_cycles_are_kept():
    t = torch.arange(3)
    d = {"t": t}
    cyclic = {"d": d, "again": d, "list": ["text", t]}
    cyclic["self"] = cyclic
    got = crossed(inline_small_tensors(cyclic))
    assert got["self"] is got and got["d"] is got["again"] and got["d"]["t"] is got["list"][1]
    assert not got["d"]["t"].is_shared()


def test_what_cannot_be_pickled_is_left_to_torch():
    batch = {"t": torch.arange(3), "f": lambda: 0}
    assert inline_small_tensors(batch) is batch


@pytest.mark.parametrize("t", [torch.zeros(3, requires_grad=True), torch.nn.Parameter(torch.zeros(3)),
                               torch.zeros(4, 4)[:, 1], torch.zeros(3, dtype=torch.complex64).conj(),
                               torch.zeros(6, 2).t()[0], torch.zeros(8).expand(4, 8)],
                         ids=["grad", "parameter", "strided", "conj", "transposed-row", "expanded"])
def test_small_tensors_of_every_kind_arrive_as_torch_rebuilds_them(t):
    got = crossed(inline_small_tensors({"t": t}))["t"]
    theirs = crossed({"t": t})["t"]
    assert type(got) is type(theirs) and got.requires_grad == theirs.requires_grad and got.is_conj() == theirs.is_conj()
    assert got.stride() == theirs.stride() and got.storage_offset() == theirs.storage_offset()
    assert torch.equal(got.detach().resolve_conj(), theirs.detach().resolve_conj()) and not got.is_shared()


def test_a_small_view_of_a_large_storage_keeps_torchs_path():
    view = torch.zeros(100_000)[:4]  # 16 bytes, in a 400 KB storage
    got = crossed(inline_small_tensors({"v": view}))["v"]
    assert got.is_shared() and got.storage_offset() == 0 and got.untyped_storage().nbytes() == 400_000


def raising_collate(rows):
    raise ValueError("the user's collate_fn raised")


def test_the_wrapper_passes_through_outside_workers_pickles_and_keeps_errors():
    batch = [{"id": 1}, {"id": 2}]
    wrapped = InlineSmallTensors(default_collate)
    assert torch.equal(wrapped(batch)["id"], torch.tensor([1, 2]))  # main process: torch's own result
    again = pickle.loads(pickle.dumps(wrapped))  # a spawned worker gets it pickled
    assert again.collate_fn is default_collate and again.max_bytes == wrapped.max_bytes
    loader = ri.StatefulDataLoader(src(2), batch_size=4, num_workers=2, collate_fn=raising_collate)
    assert loader.collate_fn.collate_fn is raising_collate
    with pytest.raises(ValueError, match="the user's collate_fn raised"):
        next(iter(loader))


def test_turned_off_or_without_workers_the_collate_fn_is_the_users():
    assert ri.StatefulDataLoader(src(2), batch_size=4, num_workers=0, collate_fn=raising_collate).collate_fn \
        is raising_collate
    off = ri.StatefulDataLoader(src(2), batch_size=4, num_workers=2, inline_tensor_bytes=0)
    assert off.collate_fn is default_collate
    assert next(iter(off))["id"].is_shared()


class NumpyBatches(IterableDataset):
    """A torch dataset of numpy batches, not ours (ours send their dicts' small tensors by value
    on their own: tests/test_worker_handoff.py)."""

    def __iter__(self):
        info = get_worker_info()
        for i in range(info.id if info else 0, 6, info.num_workers if info else 1):
            yield {"id": np.arange(4 * i, 4 * i + 4)}


def test_the_public_wrapper_speeds_torchs_own_loader_too():
    """``InlineSmallTensors`` from ``integrations.torch`` works in torch's DataLoader (batch_size=None:
    around ``default_convert``), as documented in docs/torch.md."""
    from torch.utils.data import DataLoader, default_convert

    from resumable_iterable.integrations.torch import InlineSmallTensors as Public

    got = list(DataLoader(NumpyBatches(), batch_size=None, num_workers=2, collate_fn=Public(default_convert)))
    plain = list(DataLoader(NumpyBatches(), batch_size=None, num_workers=2))
    assert [b["id"].tolist() for b in got] == [b["id"].tolist() for b in plain]
    assert not any(b["id"].is_shared() for b in got) and all(b["id"].is_shared() for b in plain)


@pytest.mark.parametrize("bad", ["64KB", -1, 1.5, True])
def test_a_bad_inline_limit_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="inline_tensor_bytes must be a number of bytes"):
        ri.StatefulDataLoader(src(2), batch_size=4, num_workers=2, inline_tensor_bytes=bad)


def test_a_loader_made_from_another_loaders_collate_fn_wraps_it_once():
    """accelerate and others make a new loader from ``loader.collate_fn``."""
    first = ri.StatefulDataLoader(src(2), batch_size=4, num_workers=2)
    again = ri.StatefulDataLoader(src(2), batch_size=4, num_workers=2, collate_fn=first.collate_fn)
    assert again.collate_fn is first.collate_fn
    twice = InlineSmallTensors(InlineSmallTensors(default_collate))
    from torch.utils.data import DataLoader

    got = [b["id"].tolist() for b in DataLoader(src(2), batch_size=4, num_workers=2, collate_fn=twice)]
    assert got == [b["id"].tolist() for b in first]
