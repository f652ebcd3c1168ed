"""``ri.load_from_disk``: folders written by HF's ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
(real ones, written here by ``datasets`` 5.2), streamed one shard per data file: the rows, features,
split, info and saved format HF's ``load_from_disk`` gives; exact resumption (every cut point, JSON
states, shuffled, 2 ranks, 0 and 2 DataLoader workers); states refused by another folder; clear errors."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import resumable_iterable as ri
from harness import assert_resumes_exactly, json_roundtrip, normalize

datasets = pytest.importorskip("datasets")
from datasets import ClassLabel, Features, Image, List, Value  # noqa: E402

N = 40


def _hf(n: int = N, offset: int = 0):
    return datasets.Dataset.from_dict({"id": list(range(offset, offset + n)),
                                       "text": [f"row {i}" for i in range(offset, offset + n)]})


def _ids(rows) -> list:
    return [int(r["id"]) for r in rows]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """40 rows in 4 shards (``data-0000k-of-00004.arrow``)."""
    path = str(tmp_path_factory.mktemp("saved") / "prep")
    _hf().save_to_disk(path, num_shards=4)
    return path


def test_rows_shards_features_split_and_info_as_hf(tmp_path):
    from PIL import Image as PILImage

    images = [PILImage.new("RGB", (2 + i % 3, 2), (i, 2 * i, 3)) for i in range(9)]
    features = Features({"id": Value("int32"), "label": ClassLabel(names=["cat", "dog", "eel"]),
                         "image": Image(), "nested": {"a": List(Value("int64")), "b": Value("string")}})
    hf = datasets.Dataset.from_dict(
        {"id": list(range(9)), "label": [i % 3 for i in range(9)], "image": images,
         "nested": [{"a": list(range(i)), "b": str(i)} for i in range(9)]},
        features=features, split="train",
        info=datasets.DatasetInfo(description="prepared", license="mit", features=features))
    hf.save_to_disk(str(tmp_path / "prep"), num_shards=3)
    theirs = datasets.load_from_disk(str(tmp_path / "prep"))
    ours = ri.load_from_disk(tmp_path / "prep")  # a PathLike, as HF's
    assert isinstance(ours, ri.IterableDataset)
    assert ours.num_shards == 3 == theirs.to_iterable_dataset(num_shards=3).num_shards
    # Arrow files are not split further, as HF's reshard() leaves its Arrow shards
    assert ours.reshard().num_shards == 3 == theirs.to_iterable_dataset(num_shards=3).reshard().num_shards
    assert ours.features == theirs.features == features
    assert ours.split == theirs.split == "train" and type(ours.split) is type(theirs.split)
    assert (ours.info.description, ours.info.license) == ("prepared", "mit")
    rows, expected = list(ours), list(theirs)
    assert len(rows) == 9
    for r, e in zip(rows, expected):
        assert r["image"] == e["image"] and r["image"].size == e["image"].size  # decoded as HF decodes them
        assert {k: v for k, v in r.items() if k != "image"} == {k: v for k, v in e.items() if k != "image"}


def test_a_selected_and_shuffled_dataset_yields_the_saved_order(tmp_path):
    """HF writes the rows of a dataset with an indices mapping in their selected order (no indices file)."""
    hf = _hf().shuffle(seed=3).select(range(5, 30)).filter(lambda ex: ex["id"] % 4 != 0)
    hf.save_to_disk(str(tmp_path / "prep"), num_shards=3)
    assert sorted(os.listdir(tmp_path / "prep")) == ["data-00000-of-00003.arrow", "data-00001-of-00003.arrow",
                                                    "data-00002-of-00003.arrow", "dataset_info.json", "state.json"]
    assert _ids(ri.load_from_disk(str(tmp_path / "prep"))) == _ids(hf) == _ids(
        datasets.load_from_disk(str(tmp_path / "prep")).to_iterable_dataset(num_shards=3))


def test_dataset_dict_folder(tmp_path):
    dd = datasets.DatasetDict(validation=_hf(6, 100), train=_hf(20))
    dd.save_to_disk(str(tmp_path / "dd"), num_shards={"validation": 1, "train": 4})
    ours = ri.load_from_disk(str(tmp_path / "dd"))
    assert isinstance(ours, ri.IterableDatasetDict)
    assert list(ours) == ["validation", "train"] == list(datasets.load_from_disk(str(tmp_path / "dd")))
    assert (ours["validation"].num_shards, ours["train"].num_shards) == (1, 4)
    assert _ids(ours["train"]) == list(range(20)) and _ids(ours["validation"]) == list(range(100, 106))
    # a split of it is a Dataset folder
    assert _ids(ri.load_from_disk(str(tmp_path / "dd" / "train"))) == list(range(20))
    # HF's load_dataset reads a DatasetDict folder as data files, a split per sub-folder: so does ours
    ld = ri.load_dataset(str(tmp_path / "dd"))
    assert sorted(ld) == ["train", "validation"] and _ids(ld["train"]) == list(range(20))


def test_the_saved_format_is_applied(tmp_path):
    _hf().with_format("numpy").save_to_disk(str(tmp_path / "np"), num_shards=2)
    ds = ri.load_from_disk(str(tmp_path / "np"))
    assert ds.format["type"] == "numpy"
    first = next(iter(ds))
    assert isinstance(first["id"], np.integer) and first["id"] == 0
    assert normalize(list(ds)) == normalize(list(datasets.load_from_disk(str(tmp_path / "np"))))
    # a format of some columns, the others not output (HF's default): those columns, as HF yields them
    datasets.Dataset.from_dict({"id": [1, 2], "text": ["a", "b"], "x": [0.5, 1.5]}).with_format(
        "numpy", columns=["x", "id"]).save_to_disk(str(tmp_path / "some"))
    some = ri.load_from_disk(str(tmp_path / "some"))
    assert some.column_names == ["id", "x"]
    assert normalize(list(some)) == normalize(list(datasets.load_from_disk(str(tmp_path / "some"))))
    # ... the others output unformatted: a format here is of every column
    datasets.Dataset.from_dict({"id": [1, 2], "x": [0.5, 1.5]}).with_format(
        "numpy", columns=["x"], output_all_columns=True).save_to_disk(str(tmp_path / "all"))
    with pytest.raises(NotImplementedError, match="output_all_columns=True"):
        ri.load_from_disk(str(tmp_path / "all"))
    # ... unless the format is none: every column is then a Python value
    datasets.Dataset.from_dict({"id": [1, 2], "x": [0.5, 1.5]}).with_format(
        None, columns=["x"], output_all_columns=True).save_to_disk(str(tmp_path / "python"))
    assert list(ri.load_from_disk(str(tmp_path / "python"))) == list(datasets.load_from_disk(str(tmp_path / "python")))


def test_an_empty_dataset_loads_empty_with_its_features(tmp_path):
    _hf().select([]).save_to_disk(str(tmp_path / "empty"))  # HF writes no data file at all
    ds = ri.load_from_disk(str(tmp_path / "empty"))
    assert list(ds) == [] and list(ds.features) == ["id", "text"]
    _hf().select([]).with_format("numpy").save_to_disk(str(tmp_path / "empty_np"))  # its format kept
    assert ri.load_from_disk(str(tmp_path / "empty_np")).format["type"] == "numpy"


def _every_cut(folder: str, rank: int) -> list:
    def build():
        ds = ri.load_from_disk(folder).shuffle(seed=7, buffer_size=6)
        return ri.split_dataset_by_node(ds, rank=rank, world_size=2)

    return assert_resumes_exactly(build)


def test_every_cut_point_resumes_exactly_shuffled_on_two_ranks(folder):
    halves = [_ids(_every_cut(folder, rank)) for rank in (0, 1)]
    assert sorted(halves[0] + halves[1]) == list(range(N)) and len(halves[0]) == len(halves[1]) == N // 2


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_every_cut_point_resumes_exactly(folder, workers):
    """Each of 2 ranks reads 2 of the 4 files, through a StatefulDataLoader of ``workers`` workers;
    the loader's state goes through JSON at each cut."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def run(rank, state=None, stop=None):
        ds = ri.split_dataset_by_node(ri.load_from_disk(folder).shuffle(seed=5, buffer_size=4), rank=rank,
                                      world_size=2)
        loader = StatefulDataLoader(ds, batch_size=3, num_workers=workers)
        if state is not None:
            loader.load_state_dict(state)
        out = []
        for b in loader:
            out.append(b["id"].tolist())
            if len(out) == stop:
                return out, json_roundtrip(loader.state_dict())
        return out, None

    seen = []
    for rank in (0, 1):
        full, _ = run(rank)
        for k in range(1, len(full)):
            head, state = run(rank, stop=k)
            tail, _ = run(rank, state=state)
            assert head + tail == full, f"rank {rank}: cut after {k} of {len(full)} batches ({workers} workers)"
        seen += [i for b in full for i in b]
    assert sorted(seen) == list(range(N))


@pytest.mark.parametrize("saved_workers,new_workers", [(2, 1), (1, 2), (2, 0)])
def test_a_loader_state_resumes_with_another_worker_count(folder, saved_workers, new_workers):
    """``ri.StatefulDataLoader``'s elastic resume: every example not yet yielded, exactly once."""
    def loader(workers):
        return ri.StatefulDataLoader(ri.load_from_disk(folder).shuffle(seed=3, buffer_size=4), batch_size=3,
                                     num_workers=workers)

    for cut in (1, 5):
        head, ld = [], loader(saved_workers)
        for b in ld:
            head += b["id"].tolist()
            if len(head) == 3 * cut:
                state = json_roundtrip(ld.state_dict())
                break
        resumed = loader(new_workers)
        resumed.load_state_dict(state)
        tail = [i for b in resumed for i in b["id"].tolist()]
        assert sorted(head + tail) == list(range(N)), f"{saved_workers} -> {new_workers} workers, cut {cut}"


def _state_after(ds, k: int) -> dict:
    it = iter(ds)
    for _ in range(k):
        next(it)
    return json_roundtrip(ds.state_dict())


def test_a_state_is_refused_by_another_folder_and_kept_by_a_copy(folder, tmp_path):
    state = _state_after(ri.load_from_disk(folder), 13)
    # the same folder moved: resumes
    shutil.copytree(folder, tmp_path / "moved")
    moved = ri.load_from_disk(str(tmp_path / "moved"))
    moved.load_state_dict(state)
    assert _ids(moved) == list(range(13, N))
    # another dataset saved with as many shards: the same file names, other rows
    _hf(N, 1000).save_to_disk(str(tmp_path / "other"), num_shards=4)
    assert sorted(os.listdir(folder)) == sorted(os.listdir(tmp_path / "other"))
    other = ri.load_from_disk(str(tmp_path / "other"))
    with pytest.raises(ValueError, match="another save_to_disk folder"):
        other.load_state_dict(state)
    assert _ids(other) == list(range(1000, 1000 + N))  # nothing applied
    # saved again with another number of shards: other files
    _hf().save_to_disk(str(tmp_path / "resaved"), num_shards=2)
    with pytest.raises(ValueError, match="different pipeline"):
        ri.load_from_disk(str(tmp_path / "resaved")).load_state_dict(state)


def test_load_dataset_refuses_a_dataset_folder_as_hf(folder):
    with pytest.raises(ValueError, match="Please use `load_from_disk` instead") as hf:
        datasets.load_dataset(folder)
    with pytest.raises(ValueError, match="Please use `load_from_disk` instead.*load_from_disk") as ours:
        ri.load_dataset(folder)
    assert type(ours.value) is type(hf.value)


#: a state saved by the release before load_from_disk, from ``ri.load_dataset(folder, split="train")``
#: (which read the folder as Arrow files) of the ``folder`` fixture's folder, after 13 rows
OLD_STATE = {"format": "resumable_iterable.state", "version": 2, "fingerprint": "9a3a00d384e087f0",
             "pipeline": {"node": "files", "total_shards": 4, "shard_ids": [0, 1, 2, 3], "format": "arrow"},
             "epoch": 0, "state": {"node": "files", "shard_seed": None, "shard_pos": 1, "offset": 3, "stop": None,
                                   "files": "88592ae9473f1ff0"},
             "split": {"base": "9a3a00d384e087f0", "ranks": [], "worker": None}}


def test_a_state_of_the_folder_read_by_load_dataset_before_resumes_where_the_error_says(folder):
    with pytest.raises(ValueError, match="load_from_disk") as e:
        ri.load_dataset(folder, split="train")
    assert "load_dataset('arrow', data_dir=" in str(e.value)
    ds = ri.load_dataset("arrow", data_dir=folder, split="train")  # what the error says
    ds.load_state_dict(OLD_STATE)
    assert _ids(ds) == list(range(13, N))


def test_errors_name_the_problem(folder, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        ri.load_from_disk(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="is a file"):
        ri.load_from_disk(os.path.join(folder, "state.json"))
    # a folder of data files
    (tmp_path / "plain").mkdir()
    shutil.copy(os.path.join(folder, "data-00000-of-00004.arrow"), tmp_path / "plain")
    with pytest.raises(FileNotFoundError, match="no 'state.json' nor 'dataset_info.json'.*load_dataset"):
        ri.load_from_disk(str(tmp_path / "plain"))
    # half a Dataset folder: the file missing is named
    shutil.copytree(folder, tmp_path / "half")
    os.remove(tmp_path / "half" / "dataset_info.json")
    with pytest.raises(FileNotFoundError, match="no 'dataset_info.json'") as e:
        ri.load_from_disk(str(tmp_path / "half"))
    assert "state.json" not in str(e.value).split("(")[0]
    # a data file gone
    shutil.copytree(folder, tmp_path / "gone")
    os.remove(tmp_path / "gone" / "data-00002-of-00004.arrow")
    with pytest.raises(FileNotFoundError, match=r"\['data-00002-of-00004.arrow'\] listed in 'state.json' are missing"):
        ri.load_from_disk(str(tmp_path / "gone"))
    # a DatasetDict whose split folder is gone
    datasets.DatasetDict(train=_hf(4), test=_hf(2)).save_to_disk(str(tmp_path / "dd"))
    shutil.rmtree(tmp_path / "dd" / "test")
    with pytest.raises(FileNotFoundError, match="split 'test'"):
        ri.load_from_disk(str(tmp_path / "dd"))
    # saved by datasets < 1.15 with an indices mapping beside the rows, which HF no longer applies: refused
    shutil.copytree(folder, tmp_path / "old")
    state = json.loads((tmp_path / "old" / "state.json").read_text())
    (tmp_path / "old" / "state.json").write_text(json.dumps({**state, "_indices_data_files": [{"filename": "indices.arrow"}]}))
    with pytest.raises(ValueError, match="datasets < 1.15 with an indices mapping.*flatten_indices"):
        ri.load_from_disk(str(tmp_path / "old"))
    # features that do not type the files' columns (dataset_info.json edited)
    shutil.copytree(folder, tmp_path / "typed")
    info = json.loads((tmp_path / "typed" / "dataset_info.json").read_text())
    info["features"]["id"]["dtype"] = "string"
    (tmp_path / "typed" / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="do not type the columns as its data files do"):
        ri.load_from_disk(str(tmp_path / "typed"))
    # a damaged state.json
    shutil.copytree(folder, tmp_path / "bad")
    (tmp_path / "bad" / "state.json").write_text("{")
    with pytest.raises(ValueError, match="state.json.*not valid JSON"):
        ri.load_from_disk(str(tmp_path / "bad"))


def test_arguments(folder):
    # HF's signature, in its order
    import inspect

    assert list(inspect.signature(ri.load_from_disk).parameters) == list(
        inspect.signature(datasets.load_from_disk).parameters)
    # keep_in_memory changes nothing (streamed); storage_options: HF gives them to the local file
    # system, which uses none of them
    assert _ids(ri.load_from_disk(folder, keep_in_memory=True, storage_options={"anon": True})) == list(range(N))
    assert _ids(ri.load_from_disk("file://" + folder)) == list(range(N))
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        ri.load_from_disk(folder, storage_options="anon")
    with pytest.raises(TypeError, match="keep_in_memory"):
        ri.load_from_disk(folder, keep_in_memory="yes")
    # a remote folder is not read here (HF downloads it whole first): said, not taken for a local path
    with pytest.raises(NotImplementedError, match="only local folders"):
        ri.load_from_disk("s3://bucket/prep", storage_options={"anon": True})


def test_state_json_is_a_plain_json_document(folder):
    """The state of a loaded folder is JSON (no file contents, no paths of the machine)."""
    state = _state_after(ri.load_from_disk(folder), 3)
    text = json.dumps(state)
    assert folder not in text


def test_a_folder_of_a_hub_repo_is_downloaded_then_read(folder, tmp_path, monkeypatch):
    """``hf://datasets/user/repo/path``, as HF reads it (downloaded whole first): here into the HF
    cache, at one commit, read offline from the cache (laid out as huggingface_hub lays it out)."""
    import huggingface_hub.constants as constants
    from test_hub import populate_hub_cache

    datasets.DatasetDict(train=_hf(8), test=_hf(3, 50)).save_to_disk(str(tmp_path / "dd"),
                                                                      num_shards={"train": 2, "test": 1})
    files = {f"prep/{name}": os.path.join(folder, name) for name in os.listdir(folder)}
    for split in ("train", "test"):
        files.update({f"dd/{split}/{n}": str(tmp_path / "dd" / split / n) for n in os.listdir(tmp_path / "dd" / split)})
    files["dd/dataset_dict.json"] = str(tmp_path / "dd" / "dataset_dict.json")
    files["other/data.arrow"] = os.path.join(folder, "data-00000-of-00004.arrow")
    cache = str(tmp_path / "hf-cache")
    # offline, files come from the cache: only the two folders' are there, so nothing else is asked for
    populate_hub_cache(cache, "user/prep", "c" * 40, "main", files,
                       downloaded={f for f in files if not f.startswith("other/")})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    ds = ri.load_from_disk("hf://datasets/user/prep/prep", storage_options={"token": "x"})
    assert ds.num_shards == 4 and _ids(ds) == list(range(N))
    state = _state_after(ds, 13)
    local = ri.load_from_disk(folder)  # the same folder, local: the same files, the same fingerprint
    local.load_state_dict(state)
    assert _ids(local) == list(range(13, N))
    dd = ri.load_from_disk("hf://datasets/user/prep@main/dd")
    assert list(dd) == ["train", "test"] and _ids(dd["test"]) == [50, 51, 52]
    with pytest.raises(FileNotFoundError, match="no folder written by save_to_disk there"):
        ri.load_from_disk("hf://datasets/user/prep/other")
    with pytest.raises(ValueError, match=r"storage_options \['block_size'\] are not used here"):
        ri.load_from_disk("hf://datasets/user/prep/prep", storage_options={"block_size": 0})
