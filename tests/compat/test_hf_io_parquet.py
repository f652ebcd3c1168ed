"""The streaming cases of HF ``datasets``' ``tests/io/test_parquet.py``, ported to ``resumable_iterable``
at the public-API level.

Upstream: https://github.com/huggingface/datasets, commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8,
file ``tests/io/test_parquet.py`` (its ``parquet_path`` fixture from ``tests/fixtures/files.py``, built
here). Test names are upstream's; upstream's ``streaming=[False, True]`` parametrizations run as the
streaming case. Upstream reads with HF's ``ParquetDatasetReader(..., streaming=True).read()``, the
reader behind ``IterableDataset.from_parquet``; the port calls ``ri.IterableDataset.from_parquet``
with the same arguments (a ``{split: path}`` dict gives an ``IterableDatasetDict``, HF's or ours).
The other tests of that file read or write map-style datasets (not ported; see ``docs/compat.md``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, DatasetInfo, Features, Json, Value
from datasets.features.image import Image

import resumable_iterable as ri
from hf_helpers import DATA
from harness import assert_resumes_exactly

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def parquet_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data") / "dataset.parquet")
    schema = pa.schema(
        {
            "col_1": pa.string(),
            "col_2": pa.int64(),
            "col_3": pa.float64(),
        }
    )
    with open(path, "wb") as f:
        writer = pq.ParquetWriter(f, schema=schema)
        pa_table = pa.Table.from_pydict({k: [DATA[i][k] for i in range(len(DATA))] for k in DATA[0]}, schema=schema)
        writer.write_table(pa_table)
        writer.close()
    return path


@pytest.fixture(scope="module")
def shared_datadir(tmp_path_factory):
    """Upstream's ``tests/features/data``: here the RGB JPEG it holds (built, no download)."""
    import PIL.Image

    d = tmp_path_factory.mktemp("features_data")
    PIL.Image.fromarray(np.zeros((480, 640, 3), dtype=np.uint8)).save(d / "test_image_rgb.jpg")
    return d


def _read(path_or_paths, **kwargs):
    """``ParquetDatasetReader(path_or_paths, ..., streaming=True).read()``."""
    return ri.IterableDataset.from_parquet(path_or_paths, **kwargs)


def _check_parquet_datasetdict(dataset_dict, expected_features, splits=("train",)):
    assert isinstance(dataset_dict, ri.IterableDatasetDict)  # upstream: (DatasetDict, IterableDatasetDict)
    for split in splits:
        dataset = dataset_dict[split]
        assert len(list(dataset)) == 4
        assert dataset.features is not None
        assert set(dataset.features) == set(expected_features)
        for feature, expected_dtype in expected_features.items():
            assert dataset.features[feature].dtype == expected_dtype


@pytest.mark.parametrize(
    "features",
    [
        None,
        {"col_1": "string", "col_2": "int64", "col_3": "float64"},
        {"col_1": "string", "col_2": "string", "col_3": "string"},
        {"col_1": "int32", "col_2": "int32", "col_3": "int32"},
        {"col_1": "float32", "col_2": "float32", "col_3": "float32"},
    ],
)
def test_parquet_datasetdict_reader_features(features, parquet_path, tmp_path):
    cache_dir = tmp_path / "cache"
    default_expected_features = {"col_1": "string", "col_2": "int64", "col_3": "float64"}
    expected_features = features.copy() if features else default_expected_features
    features = (
        Features({feature: Value(dtype) for feature, dtype in features.items()}) if features is not None else None
    )
    dataset = _read({"train": parquet_path}, features=features, cache_dir=cache_dir)
    _check_parquet_datasetdict(dataset, expected_features)


@pytest.mark.parametrize("columns", [None, ["col_1"]])
@pytest.mark.parametrize("pass_features", [False, True])
@pytest.mark.parametrize("pass_info", [False, True])
def test_parquet_datasetdict_reader_columns(columns, pass_features, pass_info, parquet_path, tmp_path):
    cache_dir = tmp_path / "cache"

    default_expected_features = {"col_1": "string", "col_2": "int64", "col_3": "float64"}
    info = (
        DatasetInfo(features=Features({feature: Value(dtype) for feature, dtype in default_expected_features.items()}))
        if pass_info
        else None
    )

    expected_features = (
        {col: default_expected_features[col] for col in columns} if columns else default_expected_features
    )
    features = (
        Features({feature: Value(dtype) for feature, dtype in expected_features.items()}) if pass_features else None
    )

    dataset = _read(
        {"train": parquet_path},
        columns=columns,
        features=features,
        info=info,
        cache_dir=cache_dir,
    )
    _check_parquet_datasetdict(dataset, expected_features)
    # added: the rows hold the columns read, and every cut point resumes
    assert [set(row) for row in dataset["train"]] == [set(expected_features)] * 4
    assert_resumes_exactly(lambda: _read(parquet_path, columns=columns, features=features, info=info))


def test_dataset_to_parquet_keeps_features(shared_datadir, tmp_path):
    image_path = str(shared_datadir / "test_image_rgb.jpg")
    data = {"image": [image_path]}
    features = Features({"image": Image()})
    dataset = Dataset.from_dict(data, features=features)
    dataset.to_parquet(tmp_path / "foo.parquet")  # upstream: ParquetDatasetWriter(dataset, path).write()

    reloaded_dataset = Dataset.from_parquet(str(tmp_path / "foo.parquet"))
    assert dataset.features == reloaded_dataset.features

    reloaded_iterable_dataset = _read(str(tmp_path / "foo.parquet"))
    assert dataset.features == reloaded_iterable_dataset.features


def test_dataset_to_parquet_json_for_empty_struct(shared_datadir, tmp_path):
    data = {"empty_struct": [{}]}
    features = Features({"empty_struct": Json()})
    dataset = Dataset.from_dict(data, features=features)
    dataset.to_parquet(tmp_path / "foo.parquet")  # upstream: ParquetDatasetWriter(dataset, path).write()

    reloaded_dataset = Dataset.from_parquet(str(tmp_path / "foo.parquet"))
    assert dataset.features == reloaded_dataset.features
    assert dataset[0] == {"empty_struct": {}}

    reloaded_iterable_dataset = _read(str(tmp_path / "foo.parquet"))
    assert dataset.features == reloaded_iterable_dataset.features
    assert next(iter(dataset)) == {"empty_struct": {}}
    assert next(iter(reloaded_iterable_dataset)) == {"empty_struct": {}}  # added: upstream reads `dataset` again
