"""``ri.IterableDatasetDict``: what ``load_dataset(..., split=None)`` and the ``from_<format>({split: ...})``
readers return, side by side with HF's ``datasets.IterableDatasetDict`` (``load_dataset(...,
streaming=True)``) on the same local files: every method, results equal split by split; HF's
errors; a split taken from the dict after chained methods resumes exactly (every cut point, JSON
states), also through torchdata's loader with 2 workers; ``push_to_hub`` commits what HF commits.

Before, ``ri.load_dataset(split=None)`` returned a plain ``dict``, whose ``.map`` (as every HF
dict method) was an ``AttributeError``."""

from __future__ import annotations

import json
import pickle

import datasets
import numpy as np
import pytest
import torch
from datasets import ClassLabel, Features, Value

import resumable_iterable as ri
from harness import assert_resumes_exactly, normalize
from test_hf_export import FakeHfApi, pushed

SPLITS = {"train": 14, "test": 5, "validation": 3}


@pytest.fixture
def files(tmp_path):
    out = {}
    for split, n in SPLITS.items():
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps({"id": i, "text": f"{split}-{i}", "label": i % 3,
                                            "score": i / 4}) + "\n" for i in range(n)))
        out[split] = str(path)
    return out


def both(files):
    return (ri.load_dataset("json", data_files=files),
            datasets.load_dataset("json", data_files=files, streaming=True))


def plain(x):
    """An example made comparable across formats (tensors and arrays -> lists)."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (torch.Tensor, np.ndarray, np.generic)):
        return ("array", str(x.dtype).replace("torch.", ""), x.tolist())
    return x


def add_split(example, split):
    return {"where": f"{split}:{example['id']}"}


async def add_split_async(example, split):
    return {"where": f"{split}:{example['id']}"}


# every method of HF's IterableDatasetDict, each applied as a user would (lib: ri or datasets)
METHODS = {
    "map": lambda lib, d: d.map(lambda x: {"n": len(x["text"])}),
    "map_batched_remove": lambda lib, d: d.map(lambda b: {"t": [t.upper() for t in b["text"]]}, batched=True,
                                               batch_size=3, remove_columns=["text"]),
    "map_with_indices": lambda lib, d: d.map(lambda x, i: {"i": i}, with_indices=True),
    "map_with_split": lambda lib, d: d.map(add_split, with_split=True),
    "map_async_with_split": lambda lib, d: d.map(add_split_async, with_split=True),
    "map_with_split_indices_input_columns": lambda lib, d: d.map(
        lambda text, i, split: {"k": f"{split}/{i}/{text}"}, with_indices=True, with_split=True,
        input_columns="text"),
    "map_batched_with_split": lambda lib, d: d.map(lambda b, s: {"s": [s] * len(b["id"])}, batched=True,
                                                   batch_size=4, with_split=True),
    "map_fn_kwargs_drop_last": lambda lib, d: d.map(lambda b, n: {"id": [i * n for i in b["id"]]}, batched=True,
                                                    batch_size=2, drop_last_batch=True, fn_kwargs={"n": 10}),
    "filter": lambda lib, d: d.filter(lambda x: x["label"] != 1),
    "filter_batched_indices": lambda lib, d: d.filter(lambda b, idx: [i % 2 == 0 for i in idx], batched=True,
                                                      batch_size=3, with_indices=True),
    "filter_input_columns_fn_kwargs": lambda lib, d: d.filter(lambda label, k: label == k, input_columns="label",
                                                              fn_kwargs={"k": 2}),
    "with_format_torch": lambda lib, d: d.with_format("torch"),
    "with_format_numpy": lambda lib, d: d.with_format("numpy"),
    "remove_columns": lambda lib, d: d.remove_columns(["score", "label"]),
    "rename_column": lambda lib, d: d.rename_column("text", "content"),
    "rename_columns": lambda lib, d: d.rename_columns({"text": "content", "id": "idx"}),
    "select_columns": lambda lib, d: d.select_columns(["label", "id"]),
    "cast": lambda lib, d: d.cast(Features({"id": Value("int32"), "text": Value("large_string"),
                                            "label": ClassLabel(names=["a", "b", "c"]), "score": Value("float32")})),
    "cast_column": lambda lib, d: d.cast_column("label", ClassLabel(names=["a", "b", "c"])),
    "chained": lambda lib, d: (d.cast_column("label", ClassLabel(names=["a", "b", "c"]))
                               .filter(lambda x: x["id"] != 2).map(add_split, with_split=True)
                               .rename_column("where", "origin").remove_columns("score").select_columns(
                                   ["origin", "label", "id"]).with_format("torch")),
}


@pytest.mark.parametrize("name", METHODS)
def test_every_method_gives_hf_results_split_by_split(files, name):
    ours, hf = both(files)
    assert isinstance(ours, ri.IterableDatasetDict) and isinstance(ours, dict)
    a, b = METHODS[name](ri, ours), METHODS[name](datasets, hf)
    assert type(a) is ri.IterableDatasetDict and all(isinstance(v, ri.IterableDataset) for v in a.values())
    assert list(a) == list(b) == list(SPLITS)
    assert a.column_names == b.column_names and a.num_columns == b.num_columns
    for split in SPLITS:
        assert a[split].features == b[split].features, split
        rows = [plain(x) for x in a[split]]
        assert rows == [plain(x) for x in b[split]], split
        assert rows, split
    # the dict's method is the split's method
    for split in SPLITS:
        alone = METHODS[name](ri, ri.IterableDatasetDict({split: ours[split]}))[split]
        assert [plain(x) for x in alone] == [plain(x) for x in a[split]]


def tag_with(prefix, example, split, sep="/"):
    return {"where": f"{prefix}{sep}{split}{sep}{example['id']}"}


async def tag_with_async(prefix, example, split, sep="/"):
    return {"where": f"{prefix}{sep}{split}{sep}{example['id']}"}


@pytest.mark.parametrize("fn", [tag_with, tag_with_async])
def test_map_with_split_calls_a_partial_with_its_arguments_and_keywords(files, fn):
    """A function given as functools.partial(f, prefix, sep=...) to map(with_split=True) was called
    as f(example, prefix, split): its keywords dropped and its arguments after the example (as HF's
    ``bind`` does, wrongly); it is called as the partial would be, with the split after the example."""
    import functools

    ours, _ = both(files)
    out = ours.map(functools.partial(fn, "p", sep=":"), with_split=True)
    for split, n in SPLITS.items():
        assert [x["where"] for x in out[split]] == [f"p:{split}:{i}" for i in range(n)]
    again = pickle.loads(pickle.dumps(out["test"]))  # as DataLoader workers under spawn get it
    assert [x["where"] for x in again] == [f"p:test:{i}" for i in range(SPLITS["test"])]


def _fails_on_4(example, split, marker="!"):
    if example["id"] == 4:
        raise ValueError("bad example")
    return {"where": f"{split}{marker}{example['id']}"}


def test_an_error_in_a_with_split_function_names_the_function(files):
    """The note of an error raised in a map(with_split=True) function named the wrapper and its
    address ("in map(_WithSplit(<function f at 0x7f...>, 'train')) on example #4"), and inspect
    showed map(_WithSplit): both name the user's function, through a partial and a pickle too."""
    import functools

    ours, _ = both(files)
    for fn in (_fails_on_4, functools.partial(_fails_on_4, marker="?")):
        ds = pickle.loads(pickle.dumps(ours.map(fn, with_split=True)["train"]))
        with pytest.raises(ValueError, match="bad example") as info:
            list(ds)
        note = " ".join(getattr(info.value, "__notes__", []))
        assert note.startswith("in map(_fails_on_4) on example #4 (source files shard 0, row 4"), note
        assert "_WithSplit" not in ds._node.describe() and "_fails_on_4" in ds._node.describe()


def test_shuffle_shuffles_every_split_as_hf(files):
    """As HF: the same seed (or a generator, copied) for every split. The order of each split is our
    shuffle's (HF's until the buffer drains: ``docs/compat.md``): the same examples as HF, in the
    order the split's own ``shuffle`` gives."""
    ours, hf = both(files)
    for kwargs in ({"seed": 3, "buffer_size": 4}, {"generator": np.random.default_rng(7), "buffer_size": 100}):
        a, b = ours.shuffle(**kwargs), hf.shuffle(**kwargs)
        assert type(a) is ri.IterableDatasetDict and list(a) == list(b)
        for split in SPLITS:
            rows = list(a[split])
            key = lambda x: x["id"]  # noqa: E731
            assert sorted(rows, key=key) == sorted(b[split], key=key)
            assert rows == list(ours[split].shuffle(**kwargs)) == list(a[split])
            assert rows != sorted(rows, key=key) or SPLITS[split] < 5
    assert ours.shuffle(seed=1) is not ours and list(ours["train"]) == list(hf["train"])


def test_what_the_dict_shows_is_hfs(files):
    ours, hf = both(files)
    assert repr(ours) == repr(hf)
    assert list(ours.keys()) == list(hf.keys()) and ours.column_names == hf.column_names
    assert ours.num_columns == hf.num_columns == {s: 4 for s in SPLITS}
    mapped = ours.map(lambda x: x)
    assert mapped.column_names == hf.map(lambda x: x).column_names == {s: None for s in SPLITS}
    assert mapped.num_columns == {s: None for s in SPLITS}
    # as HF's dict: no features / state of its own
    assert not hasattr(hf, "features") and not hasattr(ours, "features")
    assert not hasattr(hf, "state_dict") and not hasattr(ours, "state_dict")
    with pytest.raises(AttributeError, match=r"each split has its own \(ds\['train'\].state_dict\)"):
        ours.state_dict()
    with pytest.raises(AttributeError, match="load_state_dict"):
        ours.load_state_dict({})
    with pytest.raises(KeyError):
        ours["nope"]


def test_hf_errors(files):
    """The errors a user can meet are HF's types (the columns' messages are each split's: ours name the
    columns; a missing column to remove is refused here, HF lets it pass)."""
    ours, hf = both(files)
    cases = [
        (TypeError, lambda d: d.map(with_split=True)),  # no function to give the split to
        (TypeError, lambda d: d.shuffle(seeds={"train": 1})),  # the map-style DatasetDict's, not the iterable's
        (TypeError, lambda d: d.map(lambda x: x, num_proc=2)),  # map-style only
        (ValueError, lambda d: list(d.rename_column("text", "id")["train"])),
        (ValueError, lambda d: list(d.select_columns("nope")["train"])),
        (ValueError, lambda d: list(d.cast(Features({"x": Value("int64")}))["train"])),  # HF: CastError(ValueError)
        (ValueError, lambda d: d.push_to_hub("u/r", max_shard_size="1MB", num_shards={"train": 1})),
        (ValueError, lambda d: d.push_to_hub("u/r", num_shards=2)),
    ]
    for error, call in cases:
        for d in (hf, ours):
            with pytest.raises(error):
                call(d)
    bad = ri.IterableDatasetDict(ours, extra=hf["train"])  # a HF dataset among ours
    with pytest.raises(TypeError, match="split .extra. is a datasets.iterable_dataset.IterableDataset, not a resumable_iterable"):
        bad.column_names
    with pytest.raises(TypeError):
        datasets.IterableDatasetDict(hf, extra=3).column_names


@pytest.fixture
def fake_hub(monkeypatch):
    """``test_hf_export``'s Hub in process, also where ``datasets``' dicts push from."""
    from fsspec.implementations.memory import MemoryFileSystem

    import datasets.arrow_dataset
    import datasets.dataset_dict
    import datasets.iterable_dataset

    memory = MemoryFileSystem()

    class FakeHfFileSystem:
        _cache: dict = {}

        def __new__(cls, *args, **kwargs):
            return memory

    FakeHfApi.uploads, FakeHfApi.commits = {}, []
    for module in (datasets.arrow_dataset, datasets.iterable_dataset, datasets.dataset_dict):
        monkeypatch.setattr(module, "HfApi", FakeHfApi, raising=False)
        monkeypatch.setattr(module, "HfFileSystem", FakeHfFileSystem, raising=False)
    yield FakeHfApi
    memory.store.clear()


@pytest.mark.parametrize("kwargs", [{}, {"commit_message": "hi", "config_name": "c1", "data_dir": "dd"},
                                    {"max_shard_size": "10KB"}, {"num_shards": {"train": 1}}],
                         ids=["default", "options", "max_shard_size", "num_shards"])
def test_push_to_hub_commits_what_hf_commits(files, fake_hub, kwargs):
    """Every split in one commit, with one card naming them all; the rows, files and card are HF's."""
    def build(lib):
        d = (ri.load_dataset("json", data_files=files) if lib is ri
             else datasets.load_dataset("json", data_files=files, streaming=True))
        return d.filter(lambda x: x["id"] != 1).remove_columns("score")

    ours, hf = pushed(fake_hub, lambda: build(ri), **kwargs), pushed(fake_hub, lambda: build(datasets), **kwargs)
    assert ours == hf
    assert sum(f.endswith(".parquet") for f in ours[1]) == len(SPLITS)
    card = ours[1]["README.md"]
    assert all(f"name: {s}" in card for s in SPLITS)


def test_push_to_hub_checks_before_reading_anything(files, fake_hub):
    read = []

    def spy(x):
        read.append(x["id"])
        return x

    ours, hf = both(files)
    ours = ri.IterableDatasetDict(ours.map(spy, features=ours["train"].features))
    for kwargs, match in (({"config_name": "data"}, "config_name"), ({"max_shard_size": 1, "num_shards": {}}, "either"),
                          ({"num_shards": 3}, "one `num_shards` per dataset")):
        with pytest.raises(ValueError, match=match):
            ours.push_to_hub("u/r", **kwargs)
        with pytest.raises(ValueError, match=match):
            hf.push_to_hub("u/r", **kwargs)
    for d in (ri.IterableDatasetDict({"tr-ain": ours["train"]}),
              datasets.IterableDatasetDict({"tr-ain": hf["train"]})):
        with pytest.raises(ValueError, match="Split name should match"):
            d.push_to_hub("u/r")
    mixed = {"train": "train", "test": "test"}
    for d in (ri.IterableDatasetDict({s: ours[s].remove_columns("score") if s == "test" else ours[s]
                                      for s in mixed}),
              datasets.IterableDatasetDict({s: hf[s].remove_columns("score") if s == "test" else hf[s]
                                            for s in mixed})):
        with pytest.raises(ValueError, match="should have the same features"):
            d.push_to_hub("u/r")
    assert read == [] and fake_hub.commits == []


def test_the_readers_and_load_dataset_give_dicts(files, tmp_path):
    """Every place that gives a dataset per split gives an ``IterableDatasetDict``, as HF: ``load_dataset``
    of data files, of a folder, of an image folder, and the ``from_<format>({split: files})`` readers."""
    from PIL import Image

    folder = tmp_path / "folder"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text(open(files[split]).read())
        (tmp_path / "img" / split / "cat").mkdir(parents=True)
        Image.new("RGB", (2, 2)).save(tmp_path / "img" / split / "cat" / "x.png")
    cases = [
        (lambda lib: lib.load_dataset("json", data_files=files, **({"streaming": True} if lib is datasets else {}))),
        (lambda lib: lib.load_dataset(str(folder), **({"streaming": True} if lib is datasets else {}))),
        (lambda lib: lib.load_dataset("imagefolder", data_dir=str(tmp_path / "img"),
                                      **({"streaming": True} if lib is datasets else {}))),
        (lambda lib: lib.IterableDataset.from_json(files)),
    ]
    for build in cases:
        ours, hf = build(ri), build(datasets)
        assert type(ours) is ri.IterableDatasetDict and type(hf) is datasets.IterableDatasetDict
        assert list(ours) == list(hf) and ours.column_names == hf.column_names
        assert {s: d.split for s, d in ours.items()} == {s: d.split for s, d in hf.items()}
        assert type(ours.map(lambda x: x)) is ri.IterableDatasetDict


def not_three(example):
    return example["id"] % 5 != 3


def _chained(files):
    d = ri.load_dataset("json", data_files=files)
    d = (d.cast_column("label", ClassLabel(names=["a", "b", "c"])).filter(not_three)
         .map(add_split, with_split=True).shuffle(seed=11, buffer_size=4).rename_column("text", "content")
         .remove_columns("score"))
    return d


def test_a_split_of_the_dict_after_chained_methods_resumes_at_every_cut(files):
    for split in ("train", "test"):
        full = assert_resumes_exactly(lambda: _chained(files)[split])
        assert {x["where"] for x in full} == {f"{split}:{i}" for i in range(SPLITS[split]) if i % 5 != 3}
    # each split has its own state: the test split's does not load into the train split
    d = _chained(files)
    with pytest.raises(ValueError):
        _chained(files)["train"].load_state_dict(d["test"].state_dict())


def _collated(batch):
    return [normalize(v.tolist() if isinstance(v, torch.Tensor) else v) for v in batch.values()]


def test_a_split_of_the_dict_resumes_through_torchdata_with_two_workers(files):
    """``with_format("torch")`` on the dict, then its train split (3 files: 3 shards) in torchdata's
    ``StatefulDataLoader`` with 2 workers: the loader's state, through JSON, resumes a new loader
    over a freshly loaded dict at every batch."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    files = dict(files, train=[files["train"], files["test"], files["validation"]])

    def run(state=None, stop=None):
        d = _chained(files).map(lambda x: {"n": len(x["content"])}).with_format("torch")
        dl = StatefulDataLoader(d["train"], batch_size=3, num_workers=2)
        if state is not None:
            dl.load_state_dict(json.loads(json.dumps(state)))
        out = []
        for b in dl:
            out.append(_collated(b))
            if len(out) == stop:
                return out, dl.state_dict()
        return out, None

    full, _ = run()
    assert sum(len(b[0]) for b in full) == sum(1 for n in SPLITS.values() for i in range(n) if i % 5 != 3)
    for k in range(1, len(full)):
        head, state = run(stop=k)
        tail, _ = run(state=state)
        assert head + tail == full, f"cut after {k} of {len(full)} batches"
    # the dict (its with_split function) survives pickling, as DataLoader workers need under spawn
    test = {"test": files["test"]}
    back = pickle.loads(pickle.dumps(_chained(test)))
    assert type(back) is ri.IterableDatasetDict and list(back["test"]) == list(_chained(test)["test"])


def test_our_loader_given_the_dict_names_the_splits(files):
    """A dict has ``__getitem__`` and ``__len__``: torch's loaders take it for a map-style dataset and
    fail when iterated with ``KeyError: 0`` (HF's dict too). Ours refuses it when built, naming the splits."""
    ours, hf = both(files)
    with pytest.raises(TypeError, match=r"one split, e.g. StatefulDataLoader\(ds\['train'\], ...\)"):
        ri.StatefulDataLoader(ours, batch_size=2)
    with pytest.raises(KeyError):
        next(iter(torch.utils.data.DataLoader(hf, batch_size=2)))
    assert len(list(ri.StatefulDataLoader(ours["test"], batch_size=2))) == 3


def test_functions_of_datasets_given_the_dict_say_to_pick_splits(files):
    """``split_dataset_by_node(ds, ...)`` failed with ``AttributeError: ... '_distributed'`` (HF's too);
    ``interleave_datasets(ds)`` / ``concatenate_datasets(ds)`` read the split names as the datasets
    ("dataset 0 is a builtins.str"; HF: a ValueError saying the same). Each names the splits now."""
    ours, _ = both(files)
    with pytest.raises(TypeError, match=r"got a dict of the splits \['train', 'test', 'validation'\].*ds\['train'\]"):
        ri.split_dataset_by_node(ours, rank=0, world_size=2)
    for combine in (ri.interleave_datasets, ri.concatenate_datasets):
        with pytest.raises(TypeError, match=r"got a dict of the splits .*list\(ds.values\(\)\)"):
            combine(ours)
    assert len(list(ri.concatenate_datasets(list(ours.values())))) == sum(SPLITS.values())
    assert len(list(ri.split_dataset_by_node(ours["train"], rank=1, world_size=2))) == SPLITS["train"] // 2


def test_the_methods_take_hfs_arguments_in_hfs_order():
    """Every method and property of HF's ``IterableDatasetDict`` exists, its parameters in HF's order with
    HF's defaults (ours may add some after them); one default differs on purpose (``docs/compat.md``)."""
    import inspect

    differ = {("shuffle", "max_buffer_input_shards"): (1, 10)}
    theirs = {n: v for n, v in vars(datasets.IterableDatasetDict).items() if not n.startswith("_")}
    assert theirs
    for name, member in theirs.items():
        ours = getattr(ri.IterableDatasetDict, name)
        if isinstance(member, property):
            assert isinstance(ours, property), name
            continue
        hp = list(inspect.signature(member).parameters.values())
        op = list(inspect.signature(ours).parameters.values())
        assert [p.name for p in op[:len(hp)]] == [p.name for p in hp], name
        for h, o in zip(hp, op):
            expected = differ.get((name, h.name), (h.default, h.default))
            assert (o.default, h.default) == expected, (name, h.name)
            assert o.kind == h.kind, (name, h.name)
