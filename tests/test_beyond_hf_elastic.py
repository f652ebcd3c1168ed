"""The features that go beyond HF, through ``ri.StatefulDataLoader`` as users run them, with
elastic resumes: 2 ranks x 2 workers saved (each rank's loader state through a ``save_state``
file), moved to 1 rank x 3 workers, run a little, saved again and moved to 3 ranks x 0 workers:
every example of the epoch exactly once, the next epochs whole. Data: an image folder (PIL
images, decoded or not), numpy arrays of many dtypes from a generator, token lists for ``pack``.
Pipelines: replay-mode and stored shuffle buffers, the global shuffle, ``pack``,
``with_format("numpy" | "torch")`` + ``batch``, maps that edit their input in place and return it.
Also persistent workers over several epochs around an elastic resume, and a fresh process that
imports torch after building the dataset.

These start many DataLoader workers: ``slow`` (bounded in CI; ``--soak`` tries more cut points).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest
from datasets import Dataset

import resumable_iterable as ri

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
Image = pytest.importorskip("PIL.Image")

pytestmark = [pytest.mark.slow, pytest.mark.torch,
              pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

SDL = ri.StatefulDataLoader


# ------------------------------------------------------------------ data


def image_folder(root) -> str:
    rng = np.random.default_rng(0)
    for label in ("cat", "dog", "owl"):
        os.makedirs(f"{root}/{label}", exist_ok=True)
        for j in range(8):
            Image.fromarray(rng.integers(0, 255, (4 + j % 2, 5, 3), dtype=np.uint8)).save(f"{root}/{label}/{j}.png")
    return str(root)


def pixels_key(image) -> str:
    if isinstance(image, dict):  # undecoded: {"bytes", "path"}
        return image["path"].rsplit("/", 2)[-2] + "/" + image["path"].rsplit("/", 1)[-1]
    # a PIL image, its uint8 array (a row), or an int64 array (a numpy batch of images, as in HF)
    return hashlib.md5(np.ascontiguousarray(np.asarray(image), dtype=np.uint8).tobytes()).hexdigest()[:12]


def tag_in_place(ex):
    """Edits its input and returns it (the habit HF's docs show)."""
    ex["key"] = pixels_key(ex["image"])
    ex["label"] += 100
    return ex


DTYPES = {"f16": np.float16, "i8": np.int8, "u64": np.uint64, "b": np.bool_, "c64": np.complex64}


def array_rows(shards):
    for s in shards:
        for i in range(7):
            k = s * 100 + i
            yield {"key": k, "f16": np.full((2, 3), k, np.float16), "i8": np.array([k % 100], np.int8),
                   "u64": np.array([2**63 + k], np.uint64), "b": np.array([k % 2 == 0]),
                   "c64": np.array([1j * k], np.complex64), "dt": np.array([k], "datetime64[s]"),
                   "big": np.full(5000, k, np.float32)}  # 20 KB: through the workers' shared memory


def scale_in_place(ex):
    ex["f16"] += 1
    ex["big"] *= 2
    return ex


def check_arrays(rows):
    for r in rows:
        k = r["key"]
        assert r["f16"].dtype == np.float16 and (r["f16"] == k + 1).all(), r["f16"]
        assert r["u64"].dtype == np.uint64 and r["u64"][0] == 2**63 + k
        assert r["dt"].dtype == np.dtype("datetime64[s]") and r["c64"].dtype == np.complex64
        assert r["big"].dtype == np.float32 and (r["big"] == 2 * k).all()
    return {"key": [r["key"] for r in rows]}


def keys_of_rows(rows):
    return {"key": [r["key"] for r in rows]}


TOKENS = Dataset.from_dict({"input_ids": [[1000 * i + j for j in range(i % 4 + 1)] for i in range(36)]})


def keys(batch) -> list:
    if "input_ids" in batch:  # packed chunks: their tokens (a tensor, or a list of rows when they differ in length)
        return [int(t) for row in batch["input_ids"] for t in row]
    if "image" in batch and "key" not in batch:
        return [pixels_key(x) for x in batch["image"]]
    v = batch["key"]
    return v.tolist() if hasattr(v, "tolist") else list(v)


# ------------------------------------------------------------------ pipelines: (build, batch_size, collate_fn)


def pipelines(folder: str) -> dict:
    def images():
        return ri.load_dataset("imagefolder", data_dir=folder, split="train", num_shards=6)

    def arrays():
        return ri.IterableDataset.from_generator(array_rows, gen_kwargs={"shards": list(range(6))})

    return {
        "images_replay_map_in_place": (lambda: images().shuffle(seed=1, buffer_size=4, buffer_state="replay")
                                       .map(tag_in_place), 3, keys_of_rows),
        "images_map_in_place_then_stored_buffer": (lambda: images().map(tag_in_place).shuffle(seed=1, buffer_size=4),
                                                   3, keys_of_rows),
        "images_undecoded_torch_batches": (lambda: images().decode(False).shuffle(seed=1, buffer_size=4)
                                           .with_format("torch").batch(3), None, None),
        "images_global_numpy_batches": (lambda: images().shuffle(seed=1, buffer_size=None)
                                        .with_format("numpy").batch(2), None, None),
        "arrays_map_in_place_replay": (lambda: arrays().map(scale_in_place)
                                       .shuffle(seed=2, buffer_size=5, buffer_state="replay"), 2, check_arrays),
        "arrays_stored_buffer_map_in_place": (lambda: arrays().shuffle(seed=2, buffer_size=5).map(scale_in_place),
                                              2, check_arrays),
        "pack_after_replay_torch": (lambda: ri.to_iterable_dataset(TOKENS, num_shards=6)
                                    .shuffle(seed=3, buffer_size=4, buffer_state="replay").pack(5)
                                    .with_format("torch").batch(2), None, None),
        "pack_greedy_after_global": (lambda: ri.to_iterable_dataset(TOKENS, num_shards=6)
                                     .shuffle(seed=3, buffer_size=None).pack(6, mode="greedy", position_ids=True),
                                     2, lambda rows: {"input_ids": [r["input_ids"] for r in rows]}),
    }


def loader(build, rank, world, workers, bs, collate, epoch=0, **kw):
    part = ri.split_dataset_by_node(build(), rank=rank, world_size=world)
    part.set_epoch(epoch)
    extra = {"collate_fn": collate} if collate is not None else {}
    return part, SDL(part, batch_size=bs, num_workers=workers, **extra, **kw)


def take_batches(ld, n) -> list:
    out = []
    it = iter(ld)
    for _ in range(n):
        try:
            out += keys(next(it))
        except StopIteration:
            break
    return out


def through_file(state, path):
    ri.save_state(state, path)
    return ri.load_state(path)


def assert_exactly_once(got, everything, what):
    counts = Counter(got)
    dup = sorted(k for k, c in counts.items() if c > 1)
    missing = sorted(set(everything) - set(counts))
    assert not dup and not missing and len(got) == len(everything), (
        f"{what}: repeated {dup[:8]}, lost {missing[:8]}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return image_folder(tmp_path_factory.mktemp("images"))


NAMES = list(pipelines("unused"))


@pytest.mark.parametrize("name", NAMES)
def test_two_ranks_of_two_workers_to_one_of_three_to_three_of_none(name, folder, tmp_path, soak):
    build, bs, collate = pipelines(folder)[name]
    everything = []
    for r in range(2):
        everything += [k for b in loader(build, r, 2, 2, bs, collate)[1] for k in keys(b)]
    assert len(set(everything)) == len(everything)
    cut_pairs = [(1, 2), (3, 0), (2, 4)] + ([(0, 0), (1, 1), (4, 1), (5, 3), (2, 6)] if soak else [])
    for cuts in cut_pairs:
        head, states = [], []
        for r in range(2):  # each rank saves its loader state in a file
            _, ld = loader(build, r, 2, 2, bs, collate)
            head += take_batches(ld, cuts[r])
            states.append(through_file(ld.state_dict(), tmp_path / f"rank{r}.state"))
            del ld
        (plan,) = ri.redistribute_states(states, 1, num_workers=3)
        _, ld = loader(build, 0, 1, 3, bs, collate)
        ld.load_state_dict(plan)
        head += take_batches(ld, 2)  # part of the elastic epoch, then saved again
        state = through_file(ld.state_dict(), tmp_path / "one.state")
        del ld
        tail = []
        for r, st in enumerate(ri.redistribute_states([state], 3, num_workers=0)):
            _, ld = loader(build, r, 3, 0, bs, collate)
            ld.load_state_dict(st)
            tail += [k for b in ld for k in keys(b)]
        assert_exactly_once(head + tail, everything, f"{name}: cut {cuts} -> 1x3 -> 3x0")
        # the CLI reads every state of the chain
        from resumable_iterable.cli import inspect_file

        for f in ("rank0.state", "rank1.state", "one.state"):
            assert inspect_file(str(tmp_path / f))["problems"] == []


@pytest.mark.parametrize("name", ["images_replay_map_in_place", "arrays_stored_buffer_map_in_place",
                                  "pack_after_replay_torch", "images_global_numpy_batches"])
def test_persistent_workers_over_epochs_around_an_elastic_resume(name, folder):
    """Saved in epoch 1 by 2 ranks x 2 persistent workers; resumed as 1 x 3 and 3 x 0 and as saved:
    epoch 1 exactly once, epochs 2 and 3 whole (the same examples as an uninterrupted run's)."""
    build, bs, collate = pipelines(folder)[name]
    epochs = [[] for _ in range(4)]
    for r in range(2):
        part, ld = loader(build, r, 2, 2, bs, collate, persistent_workers=True)
        for e in range(4):
            part.set_epoch(e)
            epochs[e] += [k for b in ld for k in keys(b)]
    head, states = [], []
    for r in range(2):
        part, ld = loader(build, r, 2, 2, bs, collate, persistent_workers=True)
        list(ld)
        part.set_epoch(1)
        head += take_batches(ld, 2 + r)
        states.append(ri.loads_state(ri.dumps_state(ld.state_dict())))
        del ld
    for world, workers in ((1, 3), (3, 0), (2, 2)):
        new = states if (world, workers) == (2, 2) else ri.redistribute_states(states, world, num_workers=workers)
        got = [[] for _ in range(3)]
        for r in range(world):
            part, ld = loader(build, r, world, workers, bs, collate, epoch=1, persistent_workers=workers > 0)
            ld.load_state_dict(new[r])
            for i, e in enumerate((1, 2, 3)):
                part.set_epoch(e)
                got[i] += [k for b in ld for k in keys(b)]
        assert_exactly_once(head + got[0], epochs[1], f"{name} -> {world}x{workers}, epoch 1")
        for i, e in ((1, 2), (2, 3)):
            assert sorted(got[i]) == sorted(epochs[e]), f"{name} -> {world}x{workers}: epoch {e} not whole"


SUBPROCESS = textwrap.dedent("""
    import json, pickle, copy, sys
    import numpy as np
    from datasets import Dataset
    import resumable_iterable as ri
    assert "torch" not in sys.modules
    hf = Dataset.from_dict({"id": list(range(40)), "x": [[float(i)] * 3 for i in range(40)]})

    def double(ex):  # edits its formatted input in place and returns it
        ex["x"] *= 2
        return ex

    def build():
        return (ri.to_iterable_dataset(hf, num_shards=4).with_format("numpy").map(double)
                .shuffle(seed=1, buffer_size=5, buffer_state="replay"))

    def ids(rows):
        assert all((r["x"] == 2 * r["id"]).all() for r in rows), rows
        return [int(r["id"]) for r in rows]

    full = [int(e["id"]) for e in build()]
    run = build()
    it = iter(run)
    head = [int(next(it)["id"]) for _ in range(7)]
    state = json.loads(json.dumps(run.state_dict()))
    loaded = build()
    loaded.load_state_dict(state)
    copies = {"loaded": loaded, "pickled": pickle.loads(pickle.dumps(loaded)), "deepcopied": copy.deepcopy(loaded)}
    import torch  # after the datasets were built, loaded and copied
    from torchdata.stateful_dataloader import StatefulDataLoader

    for name, ds in copies.items():
        assert isinstance(ds, torch.utils.data.IterableDataset), name
        for cls in (torch.utils.data.DataLoader, StatefulDataLoader, ri.StatefulDataLoader):
            d = copy.deepcopy(ds)
            ld = cls(d, batch_size=3, num_workers=2, persistent_workers=True,
                     collate_fn=ids)
            tail = [i for b in ld for i in b]
            assert sorted(head + tail) == sorted(full) and len(tail) == 33, (name, cls, tail)
            d.set_epoch(1)
            again = build()
            again.set_epoch(1)
            assert sorted(i for b in ld for i in b) == sorted(full), (name, cls, "epoch 1")
    print("ok")
""")


def test_torch_imported_after_the_dataset_was_built_loaded_and_copied(tmp_path):
    script = tmp_path / "late_torch.py"
    script.write_text(SUBPROCESS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
