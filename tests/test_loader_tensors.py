"""torch tensors in a DataLoader worker's exact shuffle buffer (a ``map`` returning tensors, or a
``with_format("torch")`` dataset, below the shuffle).

The worker sends the examples that entered its buffer with each state. torch's own pickle of a
tensor, outside its ``ForkingPickler`` reductions, writes each storage with ``torch.save`` into a
``bytes`` value (some hundred microseconds a tensor in the worker, as much again to load it in the
main process): an imagefolder ``with_format("torch")`` -> ``map`` -> ``shuffle`` ran at 0.7-0.96x
HF's lossy shuffle through torchdata's loader. The worker's pickler now sends a CPU
storage's bytes as a buffer (large ones through its shared-memory arena, like numpy arrays), and
the tensors arrive as torch's pickle rebuilds them.
"""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

import resumable_iterable as ri  # noqa: E402
from test_loader_images_bytes import logged  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

BIG = 1 << 15  # over the arena's threshold (16 KB)
ROWS = 4  # per shard, in the loader's every-cut-point test


def tensors() -> list:
    g = torch.Generator().manual_seed(0)
    return [
        {"id": 0, "x": torch.arange(12, dtype=torch.float32).reshape(3, 4)},
        {"id": 1, "x": torch.zeros(0)},
        {"id": 2, "x": torch.tensor(5)},
        {"id": 3, "x": torch.arange(24).reshape(4, 6).t()},  # a view, not contiguous
        {"id": 4, "x": torch.arange(30)[7:19:3]},  # a view with an offset into its storage
        {"id": 5, "x": torch.ones(3, dtype=torch.bfloat16), "m": torch.tensor([True, False])},
        {"id": 6, "x": torch.arange(5, dtype=torch.int16).flip(0)},
        {"id": 7, "x": torch.rand(BIG // 4, generator=g)},  # large: through shared memory
        {"id": 8, "x": torch.rand(4, generator=g, requires_grad=True)},
        {"id": 9, "x": torch.nn.Parameter(torch.rand(3, generator=g)), "c": torch.complex(torch.ones(2), torch.zeros(2))},
        {"id": 10, "pair": [torch.rand(BIG // 4, generator=g).reshape(64, -1), torch.tensor([1, 2])]},
    ]


def same_tensor(a, b) -> bool:
    """What torch's own pickle keeps: class, dtype, shape, strides, offset, ``requires_grad``, values."""
    return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset() and a.requires_grad == b.requires_grad
            and torch.equal(a.detach(), b.detach()))


def same_example(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, list):
            if not (len(v) == len(w) and all(same_tensor(x, y) for x, y in zip(v, w))):
                return False
        elif isinstance(v, torch.Tensor):
            if not same_tensor(v, w):
                return False
        elif v != w:
            return False
    return True


def test_tensors_in_a_buffer_log_arrive_as_torch_pickles_them_without_torch_save(monkeypatch):
    import resumable_iterable.integrations.torch.arena as ri_arena

    examples = tensors()
    theirs = [pickle.loads(pickle.dumps(ex)) for ex in examples]  # torch's own pickle, for reference

    def no_torch_save(self):
        raise AssertionError("a storage was pickled with torch.save")

    monkeypatch.setattr(torch.storage.TypedStorage, "__reduce__", no_torch_save)
    log = logged(examples).log()
    assert [type(r) is ri_arena.Record for r in log.refs] == [k in (7, 10) for k in range(len(examples))]
    message = ForkingPickler.dumps(log)
    assert len(message) < 8_000  # the large tensors' bytes are in shared memory, not in the message
    got = pickle.loads(message)
    for mine, ref, before in zip(got, theirs, examples):
        assert same_example(mine, ref), before["id"]
        assert same_example(mine, before), before["id"]
    own = log.entries()  # read in the worker itself (its own copies)
    assert all(same_example(a, b) for a, b in zip(own, examples))
    rows = torch.arange(1000 * 128).reshape(1000, 128)  # a batched map's output: each row a view of it
    row_log = logged([{"id": k, "ids": rows[k]} for k in (3, 500)]).log()
    assert not any(type(r) is ri_arena.Record for r in row_log.refs)  # each row's 1 KB, not its batch's 1 MB storage
    row_message = ForkingPickler.dumps(row_log)
    assert len(row_message) < 6_000
    assert all(torch.equal(r["ids"], rows[k]) for r, k in zip(pickle.loads(row_message), (3, 500)))
    small = got[0]["x"]
    small.resize_(20)  # an in-band storage is the tensor's own, as torch's pickle makes it
    assert small.shape == (20,)


def rows(shards):
    for s in shards:
        for i in range(ROWS):
            yield {"id": s * 100 + i}


def to_tensors(ex: dict) -> dict:
    k = ex["id"]
    n = BIG // 4 if k % 3 == 0 else 6  # some large (shared memory), most small (in the message)
    x = torch.arange(n, dtype=torch.float32) + k
    if k % 2:  # a row of a larger tensor, as a batched map's rows are
        x = torch.stack([x, x])[1]
    return {"x": x, "label": torch.tensor(k)}


def test_loader_resumes_exactly_from_every_state_with_tensors_in_the_buffer():
    """torchdata's loader, 2 workers, the state after every example through the state's text
    format (``ri.dumps_state``: tensors as their bytes): each resumes the very same continuation."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        ds = ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0, 1, 2, 3]})
        return StatefulDataLoader(ds.map(to_tensors).shuffle(seed=7, buffer_size=4), batch_size=None, num_workers=2)

    def item(ex):
        return int(ex["label"]), float(ex["x"][0]), int(ex["x"].numel())

    dl = loader()
    full, states = [], []
    for ex in dl:
        full.append(item(ex))
        states.append(ri.dumps_state(dl.state_dict()))
    assert sorted(k for k, _, _ in full) == [s * 100 + i for s in range(4) for i in range(ROWS)]
    assert all(x == k and n == (BIG // 4 if k % 3 == 0 else 6) for k, x, n in full)
    for cut, text in enumerate(states, 1):
        again = loader()
        again.load_state_dict(ri.loads_state(text))
        assert [item(ex) for ex in again] == full[cut:], cut
