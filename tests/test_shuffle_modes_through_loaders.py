"""The global shuffle (``shuffle(buffer_size=None)``) and the replay-mode buffer
(``shuffle(buffer_size=k, buffer_state="replay")``) through the DataLoaders, as users run them:
torchdata's ``StatefulDataLoader`` and ours with 2-3 workers, numpy / torch formats, ``batch()``,
``take`` / ``skip`` after the shuffle, maps that edit their input in place, ``split_dataset_by_node``,
``set_epoch`` over two epochs with persistent workers, another worker count (ours) or rank count
(``redistribute_states``) on resume, states through ``json`` and ``save_state`` / ``load_state``.

Each check: no example lost or repeated after a resume, and with the same worker count the resumed
run is the uninterrupted one."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

import numpy as np  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from data import hf_dataset, src  # noqa: E402
from harness import assert_loader_resumes_exactly, json_roundtrip  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning"),
              pytest.mark.filterwarnings("ignore:too many dataloader workers")]

HF = hf_dataset(60)
SDL = ri.StatefulDataLoader


def bump(ex):
    """A map that edits its input in place (and returns it)."""
    ex["n"] = ex.get("n", 0) + 1
    ex["id2"] = ex["id"] * 2
    return ex


def glob(seed=3):
    return src(4, HF).shuffle(seed=seed, buffer_size=None)


def replay(seed=3, k=5):
    return src(4, HF).shuffle(seed=seed, buffer_size=k, buffer_state="replay")


def plain(x):
    """A batch or an example made comparable (tensors, arrays -> tagged lists)."""
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), x.tolist())
    if isinstance(x, np.ndarray):
        return ("ndarray", str(x.dtype), x.tolist())
    if isinstance(x, np.generic):
        return ("np", str(x.dtype), x.item())
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def ids_of(batch) -> list[int]:
    v = batch["id"]
    if hasattr(v, "tolist"):
        v = v.tolist()
    return [int(i) for i in v] if isinstance(v, list) else [int(v)]


PIPELINES = {
    "global/numpy": lambda: glob().with_format("numpy"),
    "global/map-in-place/torch": lambda: src(4, HF).map(bump).shuffle(seed=3, buffer_size=None).with_format("torch"),
    "global/take/batch": lambda: glob().map(bump).skip(3).take(45).batch(4),
    "replay/map-in-place/torch": lambda: src(4, HF).map(bump).shuffle(seed=3, buffer_size=5, buffer_state="replay")
    .with_format("torch"),
    "replay/skip/numpy/batch": lambda: replay().map(bump).skip(4).batch(3).with_format("numpy"),
    "replay/rank-1-of-2": lambda: ri.split_dataset_by_node(replay().map(bump), 1, 2),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_torchdata_loader_resumes_exactly(name):
    build = PIPELINES[name]
    batch_size = None if "batch" in name else 4
    full = assert_loader_resumes_exactly(build, workers=2, batch_size=batch_size, item=plain,
                                         cuts=lambda n: (1, n // 2), as_json=True)
    seen = []
    for b in full:
        v = b["id"]
        v = v[-1] if isinstance(v, tuple) else v  # a tagged tensor / array: its values
        seen += v if isinstance(v, list) else [v]
    assert len(seen) == len(set(seen)) == (45 if "take" in name else 30 if "rank" in name else 56 if "skip" in name
                                            else 60)


def test_global_shuffle_with_workers_is_the_single_process_order():
    # batch_size=None: the loader's round robin over the workers restores the permutation's order,
    # also through take() after it (each worker takes its share of the first positions)
    for build in (glob, lambda: glob().take(10), lambda: glob().with_format("numpy")):
        single = [int(ex["id"]) for ex in build()]
        for workers in (2, 3):
            assert [int(ex["id"]) for ex in SDL(build(), batch_size=None, num_workers=workers)] == single


def _epochs(build, workers, batch_size, start=0, state=None, stop=None):
    """Two epochs with persistent workers; ``stop=(epoch, n)`` returns after ``n`` examples of
    ``epoch`` with the loader's state (through JSON)."""
    ds = build()
    dl = SDL(ds, batch_size=batch_size, num_workers=workers, persistent_workers=workers > 0)
    if state is not None:
        dl.load_state_dict(state)
    out = []
    for epoch in range(start, 2):
        ds.set_epoch(epoch)
        seen = []
        for b in dl:
            seen += ids_of(b)
            if stop == (epoch, len(seen)):
                return out + [seen], json_roundtrip(dl.state_dict())
        out.append(seen)
    return out, None


@pytest.mark.parametrize("kind", ["global", "replay"])
def test_two_epochs_persistent_workers_resumed_with_another_worker_count(kind):
    build = (lambda: glob().map(bump)) if kind == "global" else (lambda: replay().map(bump).with_format("numpy"))
    full, _ = _epochs(build, 2, None)
    assert all(sorted(e) == list(range(60)) for e in full) and full[0] != full[1]
    ref3, _ = _epochs(build, 3, None)
    # cut in epoch 0 (2 workers), resumed with 3: the rest of epoch 0 once, then epoch 1 as 3 workers run it
    head, state = _epochs(build, 2, None, stop=(0, 13))
    tail, _ = _epochs(build, 3, None, start=0, state=state)
    assert sorted(head[0] + tail[0]) == list(range(60))
    assert tail[1] == ref3[1]
    # cut in epoch 1, resumed with no worker
    head, state = _epochs(build, 2, 4, stop=(1, 8 * 4))
    tail, _ = _epochs(build, 0, 4, start=1, state=state)
    assert sorted(head[1] + tail[0]) == list(range(60))


@pytest.mark.parametrize("kind", ["global", "replay"])
@pytest.mark.parametrize("rows", [60, 61])
def test_ranks_and_workers_change_through_saved_files(kind, rows, tmp_path):
    hf = hf_dataset(rows)
    if kind == "global":
        build = lambda: src(4, hf).shuffle(seed=3, buffer_size=None).with_format("numpy")  # noqa: E731
    else:
        build = lambda: src(4, hf).map(bump).shuffle(seed=3, buffer_size=5, buffer_state="replay")  # noqa: E731
    seen, states = [], []
    for rank, cut in enumerate((7, 2)):  # 2 ranks x 2 workers -> 3 ranks x 1 worker
        dl = SDL(ri.split_dataset_by_node(build(), rank, 2), batch_size=None, num_workers=2)
        it = iter(dl)
        seen += [int(next(it)["id"]) for _ in range(cut)]
        ri.save_state(dl.state_dict(), tmp_path / f"rank{rank}.json")
        del it, dl
        states.append(ri.load_state(tmp_path / f"rank{rank}.json"))
    new = json.loads(json.dumps(ri.redistribute_states(states, 3)))
    for rank in range(3):
        dl = SDL(ri.split_dataset_by_node(build(), rank, 3), batch_size=None, num_workers=1)
        dl.load_state_dict(new[rank])
        seen += [int(ex["id"]) for ex in dl]
    assert sorted(seen) == list(range(rows))


def _loader_state(ds, workers):
    dl = SDL(ds, batch_size=None, num_workers=workers)
    it = iter(dl)
    for _ in range(3):
        next(it)
    return json_roundtrip(dl.state_dict())


@pytest.mark.parametrize("workers", [0, 2])
def test_states_of_unsplit_or_misordered_ranks_are_named_as_such(workers):
    # two processes that never called split_dataset_by_node: the error said the state came "from no
    # DataLoader worker split", which is neither what is wrong nor true of a 2-worker loader's state
    unsplit = [_loader_state(glob(), workers) for _ in range(2)]
    with pytest.raises(ValueError, match=r"states\[0\] was not saved by rank 0 of 2 \(it comes from a process that "
                                         r"did not split the dataset: call split_dataset_by_node") as e:
        ri.redistribute_states(unsplit, 3)
    assert "worker" not in str(e.value)
    # rank states passed in the wrong order: the rank that saved it, and nothing about workers
    split = [_loader_state(ri.split_dataset_by_node(replay(), r, 2), workers) for r in range(2)]
    with pytest.raises(ValueError, match=r"states\[0\] was not saved by rank 0 of 2 \(it comes from rank 1 of 2\): "
                                         r"pass the states of all ranks, in rank order") as e:
        ri.redistribute_states(split[::-1], 3)
    assert "worker" not in str(e.value)


def test_take_and_skip_after_the_global_shuffle_are_shared_among_workers_as_documented():
    # docs/global-shuffle.md: take(n) keeps the single-process order, so does skip(s) with s a multiple
    # of the worker count; another skip changes the order (and with a take after it, the selection)
    def run(build, workers):
        return [int(ex["id"]) for ex in SDL(build(), batch_size=None, num_workers=workers)]

    single = lambda build: [ex["id"] for ex in build()]  # noqa: E731
    for build in (lambda: glob().take(11), lambda: glob().skip(6), lambda: glob().skip(6).take(20)):
        assert run(build, 3) == single(build)
    skip5 = lambda: glob().skip(5)  # noqa: E731
    got = run(skip5, 3)
    assert sorted(got) == sorted(single(skip5)) and got != single(skip5)
    part = lambda: glob().skip(5).take(20)  # noqa: E731
    got = run(part, 3)
    assert len(got) == len(set(got)) == 20 and set(got) != set(single(part))
