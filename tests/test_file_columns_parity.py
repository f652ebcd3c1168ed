"""Columns of data files against ``columns=`` and ``features=``, side by side with HF 5.2's
``load_dataset(..., streaming=True)``: where HF raises, ours raises too (an error naming the file,
of a type HF's is a subclass of, or HF's own), nothing wrong yielded before it."""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Features, Value
from datasets.table import CastError

import resumable_iterable as ri
from harness import assert_resumes_exactly

datasets.disable_progress_bars()


def _rows_then_error(ds):
    rows = []
    try:
        for row in ds:
            rows.append(row)
    except ValueError as e:
        return rows, e
    return rows, None


def test_parquet_columns_a_later_file_lacks_are_named(tmp_path):
    """``columns=["b"]`` over a second file without ``b``: pyarrow read it without the column and a
    ``KeyError`` ('Field "b" does not exist in schema') came from the batch, naming no file; HF raises
    ``ArrowInvalid`` (a ``ValueError``). Ours: a ``ValueError`` naming the file and the column, also
    when a global shuffle or ``reshard()`` reads it."""
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"a": [3], "c": [1.5]}), tmp_path / "2.parquet")
    files = [str(tmp_path / "1.parquet"), str(tmp_path / "2.parquet")]
    hf_rows, hf_error = _rows_then_error(datasets.load_dataset("parquet", data_files=files, split="train",
                                                               streaming=True, columns=["b"]))
    ds = ri.load_dataset("parquet", data_files=files, split="train", columns=["b"])
    rows, error = _rows_then_error(ds)
    assert rows == hf_rows == [{"b": "x"}, {"b": "y"}]
    assert isinstance(hf_error, ValueError) and isinstance(error, ValueError)
    assert "2.parquet" in str(error) and "no column(s) ['b']" in str(error)
    for other in (lambda: ds.shuffle(seed=0, buffer_size=None), ds.reshard):  # (reshard reads the metadata)
        with pytest.raises(ValueError, match=r"2\.parquet.*no column\(s\) \['b'\]"):
            list(other())


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_features_that_lack_a_column_of_the_file_raise_hfs_cast_error(tmp_path, fmt):
    """``features=`` without a column the file has: HF's cast raises ``CastError``; ours dropped the
    JSON column silently (and refused the Parquet one with a ``ValueError`` of ``cast``). Both
    formats now raise ``CastError`` naming the file and the column, when the dataset is built."""
    rows = [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    path = tmp_path / f"rows.{'jsonl' if fmt == 'json' else 'parquet'}"
    if fmt == "json":
        path.write_text('{"a": 1, "b": "x"}\n{"a": 2, "b": "y"}\n')
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    features = Features({"a": Value("int64")})
    hf_rows, hf_error = _rows_then_error(datasets.load_dataset(fmt, data_files=str(path), split="train",
                                                               streaming=True, features=features))
    assert hf_rows == [] and isinstance(hf_error, CastError)
    with pytest.raises(CastError, match=r"column\(s\) \['b'\] that the features lack"):
        ri.load_dataset(fmt, data_files=str(path), split="train", features=features)
    full = Features({"a": Value("int32"), "b": Value("string")})  # every column: cast, resumed exactly
    assert assert_resumes_exactly(lambda: ri.load_dataset(fmt, data_files=str(path), split="train",
                                                          features=full)) == rows
