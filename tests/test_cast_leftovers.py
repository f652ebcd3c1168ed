"""Casts side by side with HF ``datasets``' streaming ``IterableDataset``: the column order of a
cast of a file source, a cast adding a column, ``cast(None)``, ``rename_column`` of a name that is
not a string, a list of structs given as a struct of lists. Each compared with HF itself, and
each cast resumable at every cut point."""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Features, Image, List, Value

import resumable_iterable as ri
from harness import assert_resumes_exactly


@pytest.fixture
def parquet(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"a": list(range(9)), "b": [f"x{i}" for i in range(9)]}), path, row_group_size=4)
    return str(path)


def ours(path):
    return ri.load_dataset("parquet", data_files=path, split="train")


def hf(path):
    return datasets.load_dataset("parquet", data_files=path, split="train", streaming=True)


def test_cast_of_a_file_source_yields_the_features_order_as_hf(parquet):
    """The file's columns listed in another order: HF yields the features' order; ours kept the
    file's (the source took the features as they were, the same ones but for the order)."""
    features = Features({"b": Value("string"), "a": Value("int64")})
    got = assert_resumes_exactly(lambda: ours(parquet).cast(features))
    assert [list(e) for e in got] == [["b", "a"]] * 9
    assert got == list(hf(parquet).cast(features))
    assert ours(parquet).cast(features).column_names == ["b", "a"]


def test_cast_of_image_settings_in_another_order_keeps_the_features_order(tmp_path):
    """The source's own media path (only ``decode`` changes): the order is the features' too."""
    import io

    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (2, 2)).save(buf, format="PNG")
    rows = [{"img": {"bytes": buf.getvalue(), "path": None}, "n": i} for i in range(5)]
    table = pa.Table.from_pylist(rows)
    path = tmp_path / "i.parquet"
    pq.write_table(table.replace_schema_metadata(Features({"img": Image(), "n": Value("int64")}).arrow_schema.metadata), path)
    features = Features({"n": Value("int64"), "img": Image(decode=False)})
    got = assert_resumes_exactly(lambda: ours(str(path)).cast(features))
    assert [list(e) for e in got] == [["n", "img"]] * 5
    assert got == list(hf(str(path)).cast(features))


def test_cast_adding_a_column_yields_none_for_it_as_hf(parquet):
    """HF's IterableDataset casts to features with a column more (None in every example); ours
    refused them ("do not match the dataset's columns"). Features lacking a column stay refused."""
    features = Features({"a": Value("int32"), "c": Value("string"), "b": Value("string")})
    got = assert_resumes_exactly(lambda: ours(parquet).cast(features).shuffle(seed=3, buffer_size=3))
    assert sorted(got, key=lambda e: e["a"]) == list(hf(parquet).cast(features))
    assert got[0]["c"] is None and list(got[0]) == ["a", "c", "b"]
    assert ours(parquet).cast(features).features == features
    with pytest.raises(ValueError, match=r"features lack the dataset's column\(s\) \['b'\]"):
        ours(parquet).cast(Features({"a": Value("int32")}))


def test_cast_none_leaves_the_examples_as_hf(parquet):
    """HF's ``cast(None)`` yields the examples as they are, features unknown; ours raised a bare
    "'NoneType' object is not iterable"."""
    cast = ours(parquet).cast(None)
    assert cast.features is None and cast.column_names is None
    assert hf(parquet).cast(None).features is None
    assert assert_resumes_exactly(lambda: ours(parquet).cast(None)) == list(hf(parquet).cast(None))
    with pytest.raises(TypeError, match="features must be a datasets.Features"):
        ours(parquet).cast([("a", Value("int64"))])


def test_rename_column_of_a_name_that_is_not_a_string_raises_value_error_as_hf(parquet):
    """HF's ``rename_column(1, "a")`` raises ValueError; ours raised TypeError "rename_columns
    expects a dict". ``rename_columns`` of something not a dict stays a TypeError (HF's too)."""
    with pytest.raises(ValueError):
        list(hf(parquet).rename_column(1, "a"))  # HF's when iterated, ours from the call
    with pytest.raises(ValueError, match=r"column names must be strings, got 1 -> 'a'"):
        ours(parquet).rename_column(1, "a")
    with pytest.raises(ValueError, match=r"got 'a' -> 2"):
        ours(parquet).rename_columns({"a": 2})
    with pytest.raises(TypeError):
        list(hf(parquet).rename_columns(1))
    with pytest.raises(TypeError, match="expects a dict .* got int"):
        ours(parquet).rename_columns(1)


@pytest.mark.parametrize("feature", [List({"x": Value("int32"), "y": Value("string")}),
                                     List({"x": Value("int32"), "y": Value("string")}, length=2)])
def test_a_struct_of_lists_cast_to_a_list_of_structs_raises_type_error(feature):
    """HF's Arrow cast refuses it (TypeError "Couldn't cast array of type struct<...>"), its Python
    encoding fails (AttributeError); ours raised that AttributeError, naming nothing."""
    def gen():
        yield {"c": [{"x": 1, "y": "a"}, {"x": 2, "y": "b"}]}
        yield {"c": {"x": [1, 2], "y": ["a", "b"]}}

    ds = ri.IterableDataset.from_generator(gen).cast_column("c", feature)
    it = iter(ds)
    assert next(it) == {"c": [{"x": 1, "y": "a"}, {"x": 2, "y": "b"}]}
    with pytest.raises(TypeError, match=r"column 'c' is List\(.*is not a list"):
        next(it)
    known = Features({"c": {"x": List(Value("int64")), "y": List(Value("string"))}})
    with pytest.raises(TypeError, match="Couldn't cast"):
        datasets.Dataset.from_dict({"c": [{"x": [1], "y": ["a"]}]}, features=known).cast_column("c", feature)


def test_class_label_ids_out_of_range_pass_on_arrow_rows_as_hf(tmp_path):
    """HF casts Arrow-backed rows (a JSON reader's ``features=``, ``from_dict``) on its Arrow path,
    which keeps an id out of the labels' range (and reads names as ids); ours raised ValueError
    ("Class label 5 greater than configured num_classes 2"). A generator's rows, or rows after a
    map, go through HF's Python encoding, which raises: ours too."""
    from datasets import ClassLabel

    import json

    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps({"l": v, "m": [v, 0]}) + "\n" for v in [0, 1, 5, -1, 2]))
    label = ClassLabel(names=["a", "b"])
    features = Features({"l": label, "m": List(label)})

    def build():
        return ri.load_dataset("json", data_files=str(path), split="train", features=features)

    expected = datasets.load_dataset("json", data_files=str(path), split="train", streaming=True, features=features)
    assert assert_resumes_exactly(build) == list(expected)
    assert [e["l"] for e in expected] == [0, 1, 5, -1, 2]
    assert list(ri.IterableDataset.from_dict({"l": [0, 5]}).cast_column("l", label)) == [{"l": 0}, {"l": 5}]
    assert list(datasets.IterableDataset.from_dict({"l": [0, 5]}).cast_column("l", label)) == [{"l": 0}, {"l": 5}]
    for ds in (ri.IterableDataset.from_generator(lambda: iter([{"l": 5}])).cast(Features({"l": label})),
               ri.IterableDataset.from_dict({"l": [5]}).map(lambda e: e).cast(Features({"l": label}))):
        with pytest.raises(ValueError, match="Class label 5 greater than configured num_classes 2"):
            list(ds)
    assert list(ri.IterableDataset.from_dict({"l": ["b", "a"]}).cast_column("l", label)) == [{"l": 1}, {"l": 0}]
    for name in ("zz", "5"):  # a name, or an id given as text, out of the labels: HF raises too
        with pytest.raises(ValueError, match=rf"column 'l': value '{name}' does not fit ClassLabel.*Invalid string class label {name}"):
            list(ri.IterableDataset.from_dict({"l": [name]}).cast_column("l", label))
        with pytest.raises(ValueError, match=rf"Invalid string class label {name}"):
            list(datasets.IterableDataset.from_dict({"l": [name]}).cast_column("l", label))
