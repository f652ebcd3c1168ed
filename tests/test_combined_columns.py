"""``interleave_datasets`` / ``concatenate_datasets`` of datasets with different columns, side by
side with HF ``datasets``: every row in the merged features' order (a column an input lacks is
``None`` in its place, not last), and, under ``with_format("numpy" | "torch")``, a number column
that is null in a whole ``batch()`` is NaN (float32), not an object array of ``None``. Resumed
exactly at every cut point, in process and through torchdata's DataLoader; states saved before
the change still load."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest
from datasets import Features, Value

import resumable_iterable as ri
from harness import assert_loader_resumes_exactly, assert_resumes_exactly

AB = datasets.Dataset.from_list([{"a": i, "b": i + 0.5} for i in range(6)],
                                features=Features({"a": Value("int64"), "b": Value("float64")}))
AC = datasets.Dataset.from_list([{"a": 10 + i, "c": str(i)} for i in range(5)],
                                features=Features({"a": Value("int64"), "c": Value("string")}))
CA = datasets.Dataset.from_list([{"c": f"z{i}", "a": 20 + i} for i in range(4)],
                                features=Features({"c": Value("string"), "a": Value("int64")}))

COMBINE = {
    "interleave": lambda m, d: m.interleave_datasets(d),
    "interleave_all_exhausted": lambda m, d: m.interleave_datasets(d, stopping_strategy="all_exhausted"),
    "interleave_probabilities": lambda m, d: m.interleave_datasets(d, probabilities=[0.3, 0.3, 0.4], seed=3),
    "concatenate": lambda m, d: m.concatenate_datasets(d),
}


def _inputs(lib, order=(AB, AC, CA), shards=2):
    if lib is datasets:
        return [d.to_iterable_dataset(num_shards=shards) for d in order]
    return [ri.to_iterable_dataset(d, num_shards=shards) for d in order]


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("name", ["concatenate", "interleave_without_replacement", "take", "shuffle"])
def test_a_number_column_null_in_a_whole_batch_is_nan_as_hf(name, fmt):
    """After an interleave / concatenation that fills a column with None (or any step HF keeps on its
    Arrow path: take, shuffle), a float or int column null in a whole batch of ``batch()`` came out
    as an object array of None (torch: a list of None); HF gives float32 NaN."""
    nulls = datasets.Dataset.from_list(
        [{"a": i, "b": None, "i": None} for i in range(3)] + [{"a": 9, "b": 1.5, "i": 3}],
        features=Features({"a": Value("int64"), "b": Value("float64"), "i": Value("int32")}))
    build = {
        "concatenate": lambda m, d: m.concatenate_datasets(d[:2]),
        "interleave_without_replacement": lambda m, d: m.interleave_datasets(
            [d[0].take(1), d[1]], stopping_strategy="all_exhausted_without_replacement"),
        "take": lambda m, d: d[2].take(4),
        "shuffle": lambda m, d: d[2].shuffle(seed=0, buffer_size=1),  # one example at a time: HF's order
    }[name]

    def batches(lib):
        srcs = _inputs(lib, (AB, AC), shards=1)
        srcs.append(nulls.to_iterable_dataset() if lib is datasets else ri.to_iterable_dataset(nulls))
        return list(build(lib, srcs).with_format(fmt).batch(2))

    got, expected = batches(ri), batches(datasets)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert sorted(g) == sorted(e)  # (the column order: test_rows_have_the_merged_features_column_order_as_hf)
        for k in e:
            if isinstance(e[k], (np.ndarray,)) or type(e[k]).__name__ == "Tensor":
                assert type(g[k]) is type(e[k]) and g[k].dtype == e[k].dtype, (k, g[k], e[k])
                assert np.array_equal(np.asarray(g[k]), np.asarray(e[k]), equal_nan=e[k].dtype != object), (k, g[k])
            else:
                assert g[k] == e[k]
    assert any(np.isnan(np.asarray(b["b"], dtype=float)).all() for b in got)  # the case this is about
