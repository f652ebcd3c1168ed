"""API parity audit against HF ``datasets`` 5.2 for a user switching by changing one import: each
test runs the same call on HF's ``IterableDataset`` and on ours, side by side, and (where the call
touches iteration) checks every cut point with the state through JSON."""

from __future__ import annotations

import inspect
import json
import os

import datasets
import pytest
from datasets import Features, Value

import resumable_iterable as ri
from harness import assert_resumes_exactly

ROWS = {"a": list(range(6)), "b": [str(i) for i in range(6)]}


def _hf(num_shards: int = 3):
    return datasets.Dataset.from_dict(ROWS).to_iterable_dataset(num_shards=num_shards)


def _ours(num_shards: int = 3):
    return ri.to_iterable_dataset(datasets.Dataset.from_dict(ROWS), num_shards=num_shards)


# ---------------------------------------------------------------- a column named twice
@pytest.mark.parametrize("fmt", [None, "arrow", "pandas", "numpy"])
def test_select_columns_with_a_name_twice_is_that_column_once_as_hf(fmt):
    hf = datasets.Dataset.from_dict(ROWS).select_columns(["a", "a"])  # HF's map-style: its rows have it once
    assert list(hf.features) == ["a"] and hf.to_list() == [{"a": i} for i in range(6)]
    assert _hf().select_columns(["a", "a"]).column_names == ["a"]  # HF's iterable names it once
    ours = _ours().select_columns(["a", "a"]).with_format(fmt)
    assert ours.column_names == ["a"] and ours.num_columns == 1 and list(ours.features) == ["a"]
    assert ours.to_list() == hf.to_list()  # the Arrow export had the column twice and raised
    if fmt in ("arrow", "pandas"):  # one column, not two of the same name
        batch = next(iter(ours.iter(batch_size=4)))
        assert list(batch.column_names if fmt == "arrow" else batch.columns) == ["a"]
    if fmt != "pandas":  # (the harness compares rows, not DataFrames)
        assert_resumes_exactly(lambda: _ours().select_columns(["a", "a"]).with_format(fmt).shuffle(seed=1, buffer_size=2))


def test_remove_columns_with_a_name_twice_keeps_the_other_columns_as_hf():
    hf = _hf().remove_columns(["a", "a"])
    ours = _ours().remove_columns(["a", "a"])
    assert ours.column_names == hf.column_names == ["b"]
    assert list(ours) == list(hf)
    # the Arrow path dropped every column (pyarrow's drop_columns of a name twice): empty tables,
    # and an export of None values
    assert next(iter(ours.with_format("arrow").iter(batch_size=6))).to_pylist() == list(hf)
    assert ours.to_list() == list(hf)
    assert_resumes_exactly(lambda: _ours().remove_columns(["a", "a"]).with_format("arrow").skip(1))


def test_a_name_twice_keeps_the_fingerprint_of_states_saved_before():
    # states saved by earlier versions record the names as given: they must keep loading
    shape = _ours().select_columns(["a", "a"]).pipeline.shape()
    assert shape["columns"] == ["a", "a"]
