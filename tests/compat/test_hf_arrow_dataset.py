"""The cases of HF ``datasets``' ``tests/test_arrow_dataset.py`` that test iterable behaviour:
``Dataset.to_iterable_dataset`` and, through it, ``interleave_datasets`` / ``concatenate_datasets``
and ``iter(batch_size)``, ported to ``resumable_iterable`` at the public-API level.

Upstream: https://github.com/huggingface/datasets, commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8,
file ``tests/test_arrow_dataset.py``. The rest of that file tests map-style datasets, which this
library does not replace. Upstream's interleave tests run on map-style datasets; the two ported
here give the same examples on iterable ones (HF's iterable interleave included), the others do not
(map-style ``first_exhausted`` / ``all_exhausted`` stop at a full round, the iterable ones at the
exhausting example). See ``docs/compat.md``.
"""

from __future__ import annotations

import pytest
from datasets import ClassLabel, Dataset, Features, List, Value

import resumable_iterable as ri
from harness import assert_resumes_exactly

pytestmark = pytest.mark.compat


@pytest.fixture
def dataset():
    """Upstream's ``dataset`` fixture (``tests/fixtures/files.py``)."""
    n = 10
    features = Features({
        "tokens": List(Value("string")),
        "labels": List(ClassLabel(names=["negative", "positive"])),
        "answers": {"text": List(Value("string")), "answer_start": List(Value("int32"))},
        "id": Value("int64"),
    })
    return Dataset.from_dict({
        "tokens": [["foo"] * 5] * n,
        "labels": [[1] * 5] * n,
        "answers": [{"answer_start": [97], "text": ["1976"]}] * 10,
        "id": list(range(n)),
    }, features=features)


def test_dataset_to_iterable_dataset(dataset):
    iterable_dataset = ri.to_iterable_dataset(dataset)
    assert isinstance(iterable_dataset, ri.IterableDataset)
    assert list(iterable_dataset) == list(dataset)
    assert iterable_dataset.features == dataset.features
    iterable_dataset = ri.to_iterable_dataset(dataset, num_shards=3)
    assert isinstance(iterable_dataset, ri.IterableDataset)
    assert list(iterable_dataset) == list(dataset)
    assert iterable_dataset.features == dataset.features
    assert iterable_dataset.num_shards == 3
    with pytest.raises(ValueError):
        ri.to_iterable_dataset(dataset, num_shards=len(dataset) + 1)
    # upstream reads the private `_formatting.format_type`; `format` is the public way
    assert ri.to_iterable_dataset(dataset.with_format("torch")).format["type"] == "torch"
    with pytest.raises(NotImplementedError):
        ri.to_iterable_dataset(dataset.with_format("torch", columns=[dataset.column_names[0]]))


def test_concatenate_datasets_duplicate_columns(dataset):
    with pytest.raises(ValueError) as excinfo:
        ri.concatenate_datasets([ri.to_iterable_dataset(dataset), ri.to_iterable_dataset(dataset)], axis=1)
    assert "duplicated" in str(excinfo.value)


def _interleave_inputs():
    d1 = Dataset.from_dict({"a": [0, 1, 2]})
    d2 = Dataset.from_dict({"a": [10, 11, 12, 13]})
    d3 = Dataset.from_dict({"a": [22, 21, 20]}).select([2, 1, 0])
    return [ri.to_iterable_dataset(d) for d in (d1, d2, d3)]


def test_interleave_datasets_probabilities():
    seed = 42
    probabilities = [0.3, 0.5, 0.2]
    dataset = ri.interleave_datasets(_interleave_inputs(), probabilities=probabilities, seed=seed)
    expected_length = 7  # hardcoded
    expected_values = [10, 11, 20, 12, 0, 21, 13]  # hardcoded
    assert isinstance(dataset, ri.IterableDataset)
    values = [x["a"] for x in dataset]
    assert len(values) == expected_length
    assert values == expected_values
    # upstream compares `_fingerprint`s; here: the same examples again, and exact resumption
    assert [x["a"] for x in ri.interleave_datasets(_interleave_inputs(), probabilities=probabilities,
                                                   seed=seed)] == expected_values
    assert_resumes_exactly(lambda: ri.interleave_datasets(_interleave_inputs(), probabilities=probabilities,
                                                          seed=seed))


def test_interleave_datasets_probabilities_oversampling_strategy():
    seed = 42
    probabilities = [0.3, 0.5, 0.2]

    def build():
        return ri.interleave_datasets(_interleave_inputs(), stopping_strategy="all_exhausted",
                                      probabilities=probabilities, seed=seed)

    expected_length = 16  # hardcoded
    expected_values = [10, 11, 20, 12, 0, 21, 13, 10, 1, 11, 12, 22, 13, 20, 10, 2]  # hardcoded
    assert isinstance(build(), ri.IterableDataset)
    values = [x["a"] for x in build()]
    assert len(values) == expected_length
    assert values == expected_values
    assert_resumes_exactly(build)


@pytest.mark.parametrize("batch_size", [4, 5])
@pytest.mark.parametrize("drop_last_batch", [False, True])
def test_dataset_iter_batch(batch_size, drop_last_batch):
    n = 25
    dset = ri.to_iterable_dataset(Dataset.from_dict({"i": list(range(n))}))
    all_col_values = list(range(n))
    batches = []
    for i, batch in enumerate(dset.iter(batch_size, drop_last_batch=drop_last_batch)):
        assert batch == {"i": all_col_values[i * batch_size : (i + 1) * batch_size]}
        batches.append(batch)
    if drop_last_batch:
        assert all(len(batch["i"]) == batch_size for batch in batches)
    else:
        assert all(len(batch["i"]) == batch_size for batch in batches[:-1])
        assert len(batches[-1]["i"]) <= batch_size
