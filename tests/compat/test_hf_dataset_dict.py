"""The streaming cases of HF ``datasets``' ``tests/test_dataset_dict.py`` (its ``IterableDatasetDict``
tests), ported to ``resumable_iterable.IterableDatasetDict`` at the public-API level.

Upstream: https://github.com/huggingface/datasets, commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8,
file ``tests/test_dataset_dict.py``. Test names are upstream's (methods of its ``DatasetDictTest``
class there, functions here). Upstream builds its dicts with ``IterableDataset.from_generator``;
the port does the same with ours. ``..._forwards_max_shard_size_to_each_split`` patches, as
upstream, ``datasets.dataset_dict``'s Hub client and the per-split push that HF's dict push calls:
ours writes each split out and hands the dict to HF's map-style ``DatasetDict.push_to_hub``, so the
patched per-split push is ``datasets.Dataset._push_parquet_shards_to_hub`` (upstream:
``IterableDataset``'s; both return the same). The other tests of that
file test the map-style ``DatasetDict`` (not ported; see ``docs/compat.md``).
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import patch

import pytest
from datasets import Dataset, Features, SplitInfo
from fsspec.implementations.memory import MemoryFileSystem

import resumable_iterable as ri
from resumable_iterable import IterableDataset, IterableDatasetDict

pytestmark = pytest.mark.compat


def _create_dummy_iterable_dataset(multiple_columns=False) -> IterableDataset:
    def gen():
        if multiple_columns:
            data = {"col_1": [3, 2, 1, 0], "col_2": ["a", "b", "c", "d"]}
            for v1, v2 in zip(data["col_1"], data["col_2"]):
                yield {"col_1": v1, "col_2": v2}
        else:
            for x in range(30):
                yield {"filename": "my_name-train" + "_" + f"{x:03d}"}

    return IterableDataset.from_generator(gen)


def _create_dummy_iterable_dataset_dict(multiple_columns=False) -> IterableDatasetDict:
    return IterableDatasetDict(
        {
            "train": _create_dummy_iterable_dataset(multiple_columns=multiple_columns),
            "test": _create_dummy_iterable_dataset(multiple_columns=multiple_columns),
        }
    )


def test_iterable_map():
    dsets = _create_dummy_iterable_dataset_dict()
    fn_kwargs = {"n": 3}
    mapped_dsets: IterableDatasetDict = dsets.map(
        lambda x, n: {"foo": [n] * len(x["filename"])},
        batched=True,
        fn_kwargs=fn_kwargs,
    )
    mapped_example = next(iter(mapped_dsets["train"]))
    assert sorted(mapped_example.keys()) == sorted(["filename", "foo"])
    assert mapped_example["foo"] <= 3
    del dsets, mapped_dsets


def test_iterable_filter():
    dsets = _create_dummy_iterable_dataset_dict()
    example = next(iter(dsets["train"]))
    fn_kwargs = {"n": 3}
    filtered_dsets: IterableDatasetDict = dsets.filter(
        lambda ex, n: n < int(ex["filename"].split("_")[-1]), fn_kwargs=fn_kwargs
    )
    filtered_example = next(iter(filtered_dsets["train"]))
    assert list(example.keys()) == list(filtered_example.keys())
    assert int(filtered_example["filename"].split("_")[-1]) == 4  # id starts from 3
    del dsets, filtered_dsets


def test_iterable_dataset_dict_push_to_hub_max_shard_size_and_num_shards_are_mutually_exclusive():
    dsets = _create_dummy_iterable_dataset_dict()
    with pytest.raises(ValueError, match="either max_shard_size or num_shards"):
        dsets.push_to_hub("user/dataset", max_shard_size="1MB", num_shards={"train": 1, "test": 1})


def test_iterable_dataset_dict_push_to_hub_forwards_max_shard_size_to_each_split():
    class DummyApi:
        def __init__(self, *args, **kwargs):
            pass

        def repo_info(self, repo_id, repo_type="dataset", revision=None):
            return SimpleNamespace(id=repo_id, sha="dummy-sha")

        def create_branch(self, *args, **kwargs):
            pass

        def list_repo_tree(self, *args, **kwargs):
            return []

        def create_commit(self, *args, **kwargs):
            return SimpleNamespace(commit_url="https://hf.co/commit/dummy")

    dummy_fs = MemoryFileSystem(skip_instance_cache=True)
    dummy_fs.touch("datasets/user/dataset@dummy-sha/README.md")

    forwarded_calls = []

    def mock_push_parquet_shards_to_hub(
        resolved_output_path,
        data_dir,
        split,
        token,
        create_pr,
        max_shard_size,
        num_shards,
        embed_external_files,
        num_proc,
    ):
        forwarded_calls.append(
            {
                "split": split,
                "max_shard_size": max_shard_size,
                "num_shards": num_shards,
            }
        )
        return [], [], Features(), SplitInfo(name=split), 0

    dsets = _create_dummy_iterable_dataset_dict()
    max_shard_size = sum(split_dataset.num_shards for split_dataset in dsets.values())
    with (
        patch("datasets.dataset_dict.HfApi", DummyApi),
        patch("datasets.dataset_dict.HfFileSystem", return_value=dummy_fs),
        patch.object(Dataset, "_push_parquet_shards_to_hub", side_effect=mock_push_parquet_shards_to_hub),
    ):
        dsets.push_to_hub("user/dataset", max_shard_size=max_shard_size)

    assert {call["split"] for call in forwarded_calls} == set(dsets.keys())
    assert all(call["max_shard_size"] == max_shard_size for call in forwarded_calls)
    assert all(call["num_shards"] is None for call in forwarded_calls)
    assert isinstance(dsets, ri.IterableDatasetDict)
