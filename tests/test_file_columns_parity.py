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
from harness import assert_resumes_exactly, rows_until_error

datasets.disable_progress_bars()


def test_parquet_columns_a_later_file_lacks_are_named(tmp_path):
    """``columns=["b"]`` over a second file without ``b``: pyarrow read it without the column and a
    ``KeyError`` ('Field "b" does not exist in schema') came from the batch, naming no file; HF raises
    ``ArrowInvalid`` (a ``ValueError``). Ours: a ``ValueError`` naming the file and the column, also
    when a global shuffle or ``reshard()`` reads it."""
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"a": [3], "c": [1.5]}), tmp_path / "2.parquet")
    files = [str(tmp_path / "1.parquet"), str(tmp_path / "2.parquet")]
    hf_rows, hf_error = rows_until_error(datasets.load_dataset("parquet", data_files=files, split="train",
                                                               streaming=True, columns=["b"]))
    ds = ri.load_dataset("parquet", data_files=files, split="train", columns=["b"])
    rows, error = rows_until_error(ds)
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
    hf_rows, hf_error = rows_until_error(datasets.load_dataset(fmt, data_files=str(path), split="train",
                                                               streaming=True, features=features))
    assert hf_rows == [] and isinstance(hf_error, CastError)
    with pytest.raises(CastError, match=r"column\(s\) \['b'\] that the features lack"):
        ri.load_dataset(fmt, data_files=str(path), split="train", features=features)
    full = Features({"a": Value("int32"), "b": Value("string")})  # every column: cast, resumed exactly
    assert assert_resumes_exactly(lambda: ri.load_dataset(fmt, data_files=str(path), split="train",
                                                          features=full)) == rows


@pytest.mark.parametrize("first,second", [
    ([{"a": [1, 2]}], [{"a": [[1]]}]),  # lists of lists after lists of numbers
    ([{"a": {"x": 1}}], [{"a": 1}]),  # a number where the first file has a struct
    ([{"a": 1}], [{"a": {"x": 1}}]),  # and the other way
    ([{"a": {"x": 1}}], [{"a": {"y": 1}}]),  # a struct field the first file lacks
    ([{"a": 1}], [{"a": 1.5}]),  # a value the type cannot hold: ValueError (HF: ArrowInvalid)
    ([{"a": 1}], [{"a": "x"}]),
])
def test_a_later_file_of_another_type_raises_hfs_exception_type(tmp_path, first, second):
    """HF's cast raises ``TypeError`` for a type that does not cast to the first file's and
    ``ArrowInvalid`` (a ``ValueError``) for a value; ours raised ``ValueError`` for both, so an
    ``except TypeError`` written for HF missed it. Ours is now both (and a ``ValueError`` still)."""
    import json

    for name, rows in (("1.jsonl", first), ("2.jsonl", second)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = [str(tmp_path / "1.jsonl"), str(tmp_path / "2.jsonl")]
    hf_rows, hf_error = [], None
    try:
        for row in datasets.load_dataset("json", data_files=files, split="train", streaming=True):
            hf_rows.append(row)
    except (TypeError, ValueError) as e:
        hf_error = e
    rows, error = rows_until_error(ri.load_dataset("json", data_files=files, split="train"))
    assert rows == hf_rows == first
    assert isinstance(error, ValueError) and "2.jsonl" in str(error)
    assert isinstance(error, TypeError) == isinstance(hf_error, TypeError), (hf_error, error)
    if len(first[0]) == 1 and isinstance(first[0]["a"], int):  # also Parquet files
        import pyarrow.parquet as pq

        for name, rows in (("1.parquet", first), ("2.parquet", second)):
            pq.write_table(pa.Table.from_pylist(rows), tmp_path / name)
        files = [str(tmp_path / "1.parquet"), str(tmp_path / "2.parquet")]
        error = rows_until_error(ri.load_dataset("parquet", data_files=files, split="train"))[1]
        assert isinstance(error, ValueError) and isinstance(error, TypeError) == isinstance(hf_error, TypeError)


def test_json_objects_typed_string_by_the_features_are_their_json_text(tmp_path):
    """``features={"a": Value("string")}`` over JSON objects: HF's json builder writes each object as
    JSON text (``{"x":1}``); ours cast the dict with ``str`` (``"{'x': 1}"``). Files of strings
    beside them, either first, are read as HF reads them; every cut point resumes exactly."""
    (tmp_path / "objects.jsonl").write_text('{"a": {"x": 1, "y": "q\\nz"}}\n{"a": null}\n{"a": {"x": 2, "y": null}}\n')
    (tmp_path / "strings.jsonl").write_text('{"a": "plain"}\n{"a": "{}"}\n')
    features = Features({"a": Value("string")})
    for names in (["objects.jsonl"], ["objects.jsonl", "strings.jsonl"], ["strings.jsonl", "objects.jsonl"]):
        files = [str(tmp_path / n) for n in names]
        hf = list(datasets.load_dataset("json", data_files=files, split="train", streaming=True, features=features))
        ours = assert_resumes_exactly(lambda: ri.load_dataset("json", data_files=files, split="train",  # noqa: B023
                                                              features=features))
        assert ours == hf
    assert hf[2:] == [{"a": '{"x":1,"y":"q\\nz"}'}, {"a": None}, {"a": '{"x":2,"y":null}'}]
