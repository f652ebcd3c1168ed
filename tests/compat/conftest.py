"""Fixtures of HF ``datasets``' ``tests/test_iterable_dataset.py``, built locally with the public
``resumable_iterable`` API (no downloads)."""

from __future__ import annotations

import pytest
from datasets import Features, List, Value

from hf_helpers import examples_ds


@pytest.fixture
def dataset():
    return examples_ds()


@pytest.fixture
def dataset_with_several_columns():
    return examples_ds(filepath=["data0.txt", "data1.txt", "data2.txt"], metadata={"sources": ["https://foo.bar"]})


@pytest.fixture
def dataset_with_several_columns_and_features():
    """Upstream reaches known features with the private ``_resolve_features()``; the public way is to
    declare them."""
    features = Features({"id": Value("int64"), "filepath": List(Value("string")),
                         "metadata": {"sources": List(Value("string"))}})
    return examples_ds(features=features, filepath=["data0.txt", "data1.txt", "data2.txt"],
                       metadata={"sources": ["https://foo.bar"]})


@pytest.fixture
def arrow_file(tmp_path_factory):
    """An Arrow cache file written by HF ``datasets`` from the ``dataset`` fixture's examples."""
    from datasets import Dataset

    from hf_helpers import generate_examples_fn

    filename = str(tmp_path_factory.mktemp("data") / "file.arrow")
    Dataset.from_generator(generate_examples_fn).map(cache_file_name=filename)
    return filename
