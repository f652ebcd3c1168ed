"""HF ``datasets`` 5.2 habits run side by side with ours (``import resumable_iterable as ri`` in
place of HF's ``IterableDataset``): where a call an HF user writes gives something else here,
a test pins what HF gives and that ours gives the same (or the difference documented in
docs/compat.md)."""

from __future__ import annotations

import datasets
import numpy as np
import pytest

import resumable_iterable as ri
from harness import assert_resumes_exactly

ROWS = {"a": list(range(6)), "t": [f"s{i}" for i in range(6)], "f": [i / 2 for i in range(6)]}


def _hf(num_shards: int = 2):
    return datasets.Dataset.from_dict(ROWS).to_iterable_dataset(num_shards=num_shards)


def _ours(num_shards: int = 2):
    return ri.to_iterable_dataset(datasets.Dataset.from_dict(ROWS), num_shards=num_shards)


# ---------------------------------------------------------------- with_format(columns=...)
@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow", "pandas", None])
@pytest.mark.parametrize("kwargs", [{"columns": ["a"]}, {"output_all_columns": True},
                                    {"columns": ["a"], "output_all_columns": False}])
def test_with_format_refuses_the_map_style_column_arguments_at_the_call_as_hf(fmt, kwargs):
    """The map-style ``Dataset.with_format(type, columns=[...])`` habit: HF's IterableDataset raises
    TypeError at the call. Ours took the arguments as numpy/torch options: under numpy the format of
    the Arrow rows ignored them (every column came out, formatted), elsewhere iterating raised
    ``asarray() got an unexpected keyword argument 'columns'``."""
    if fmt == "torch":
        pytest.importorskip("torch")
    with pytest.raises(TypeError):
        _hf().with_format(fmt, **kwargs)
    with pytest.raises(TypeError, match="select_columns"):
        _ours().with_format(fmt, **kwargs)
    with pytest.raises(TypeError, match="select_columns"):
        _ours().map(lambda x: x).with_format(fmt, **kwargs)
    with pytest.raises(TypeError, match="select_columns"):  # and a dict of splits
        ri.IterableDatasetDict({"train": _ours()}).with_format(fmt, **kwargs)


def test_with_format_after_select_columns_is_what_columns_asked_for():
    """The way to HF's map-style ``with_format("numpy", columns=["a"])`` rows (output_all_columns=False)."""
    hf = datasets.Dataset.from_dict(ROWS).with_format("numpy", columns=["a"])
    hf_rows = [hf[i] for i in range(len(hf))]
    ours = list(_ours().select_columns(["a"]).with_format("numpy"))
    assert [{k: (type(v), v.item()) for k, v in r.items()} for r in ours] == \
        [{k: (type(v), v.item()) for k, v in r.items()} for r in hf_rows]


# ---------------------------------------------------------------- cast_column("a", "int8")
BAD_FEATURES = ["int8", 5, pytest.param("pa.int8", id="pyarrow-type"), {"x": "int8"}]


def _bad(feature):
    import pyarrow as pa

    return pa.int8() if feature == "pa.int8" else feature


@pytest.mark.parametrize("feature", BAD_FEATURES)
def test_cast_column_to_what_is_no_feature_raises_type_error_as_hf(feature):
    """``cast_column("a", "int8")`` (or a pyarrow type): HF's map-style ``Dataset`` and HF's
    IterableDataset (when iterated) raise ``TypeError``; ours yielded the column unchanged, its
    ``features`` claiming the string, and a state of that pipeline resumed it so."""
    feature = _bad(feature)
    with pytest.raises(TypeError):
        datasets.Dataset.from_dict(ROWS).cast_column("a", feature)
    with pytest.raises(TypeError):
        list(_hf().cast_column("a", feature))
    with pytest.raises(TypeError, match="'a'.*not a datasets feature type"):
        _ours().cast_column("a", feature)
    gen = ri.IterableDataset.from_generator(lambda: iter([{"a": 1}]))  # unknown columns: the same
    with pytest.raises(TypeError, match="'a'.*not a datasets feature type"):
        gen.cast_column("a", feature)


@pytest.mark.parametrize("feature", BAD_FEATURES)
def test_cast_to_features_with_what_is_no_feature_raises_type_error_as_hf(feature):
    feature = _bad(feature)
    features = {"a": feature, "t": datasets.Value("string"), "f": datasets.Value("float64")}
    with pytest.raises(TypeError):
        datasets.Dataset.from_dict(ROWS).cast(datasets.Features(features))
    with pytest.raises(TypeError, match="'a'.*not a datasets feature type"):
        _ours().cast(datasets.Features(features))
    with pytest.raises(TypeError, match="'a'.*not a datasets feature type"):
        _ours().cast(features)


def test_cast_column_to_features_still_casts():
    """Nested features written as HF writes them (a dict for a struct, ``[feature]`` for a list) are fine."""
    ours = ri.IterableDataset.from_dict({"s": [{"x": 1}], "l": [[1, 2]]})
    ours = ours.cast_column("s", {"x": datasets.Value("int8")}).cast_column("l", [datasets.Value("float32")])
    assert list(ours) == [{"s": {"x": 1}, "l": [1.0, 2.0]}]
    assert ours.features["s"] == {"x": datasets.Value("int8")}


# ---------------------------------------------------------------- batch(by_column=, drop_last_batch=True)
@pytest.mark.parametrize("batch_size", [None, 2, 4, 100])
def test_batch_by_column_drop_last_batch_drops_the_final_run_only(batch_size):
    """Pins the difference docs/compat.md gives: ours drops the final run; HF drops the last short
    chunk of ``batch_size`` input rows before grouping (nothing at all for ``batch_size=None``)."""
    rows = {"k": [1, 1, 2, 2, 2, 1, 3], "v": list(range(7))}
    ours = ri.to_iterable_dataset(datasets.Dataset.from_dict(rows))
    assert [b["v"] for b in ours.batch(batch_size, by_column="k", drop_last_batch=True)] == [[0, 1], [2, 3, 4], [5]]
    hf = datasets.Dataset.from_dict(rows).to_iterable_dataset()
    got = [b["v"] for b in hf.batch(batch_size, by_column="k", drop_last_batch=True)]
    assert got == {None: [], 2: [[0, 1], [2, 3, 4], [5]], 4: [[0, 1], [2, 3]], 100: []}[batch_size]


# ---------------------------------------------------------------- to_iterable_dataset of a Dataset with a transform
@pytest.mark.parametrize("how", ["with_transform", "set_transform"])
def test_to_iterable_dataset_of_a_dataset_with_a_transform_raises_hf_error_type(how):
    """HF raises NotImplementedError; ours raised ValueError "with_format('custom') is not supported",
    naming a call the user never made."""
    def transform(batch):
        return {"a": [x * 2 for x in batch["a"]]}

    ds = datasets.Dataset.from_dict(ROWS)
    if how == "with_transform":
        ds = ds.with_transform(transform)
    else:
        ds.set_transform(transform)
    with pytest.raises(NotImplementedError):
        ds.to_iterable_dataset()
    with pytest.raises(NotImplementedError, match="with_transform / set_transform.*map"):
        ri.to_iterable_dataset(ds)
    ours = ri.to_iterable_dataset(ds.with_format(None)).map(transform, batched=True)  # the way the error names
    assert [r["a"] for r in ours] == [2 * i for i in range(6)]


# ---------------------------------------------------------------- cast between text and bytes, fixed-length lists
def _one_column(values, num_shards=1):
    hf = datasets.Dataset.from_dict({"c": values}).to_iterable_dataset(num_shards=num_shards)
    return hf, ri.to_iterable_dataset(datasets.Dataset.from_dict({"c": values}), num_shards=num_shards)


@pytest.mark.parametrize("dtype", ["binary", "large_binary"])
def test_cast_of_strings_to_binary_gives_their_utf8_bytes_as_hf(dtype):
    """HF's Arrow cast gives the UTF-8 bytes; ours kept the ``str`` under features saying binary."""
    hf, ours = _one_column(["x", "é", None])
    cast = datasets.Value(dtype)
    assert list(ours.cast_column("c", cast)) == list(hf.cast_column("c", cast)) == \
        [{"c": b"x"}, {"c": "é".encode()}, {"c": None}]
    gen = ri.IterableDataset.from_generator(lambda: iter([{"c": ["a", "b"]}]))  # inside a list, Python rows
    assert list(gen.cast_column("c", datasets.List(cast))) == [{"c": [b"a", b"b"]}]


def test_cast_of_bytes_to_string_decodes_them_as_hf():
    """HF's Arrow cast decodes UTF-8 bytes; ours gave ``str(b'x')``, the text ``"b'x'"``."""
    hf, ours = _one_column([b"x", "é".encode(), None])
    assert list(ours.cast_column("c", datasets.Value("string"))) == \
        list(hf.cast_column("c", datasets.Value("string"))) == [{"c": "x"}, {"c": "é"}, {"c": None}]
    gen = ri.IterableDataset.from_generator(lambda: iter([{"c": {"k": b"y"}}]))  # inside a struct, Python rows
    assert list(gen.cast_column("c", {"k": datasets.Value("string")})) == [{"c": {"k": "y"}}]


def test_cast_of_bytes_that_are_not_utf8_to_string_raises_value_error_as_hf():
    hf, ours = _one_column([b"x", b"\xff"])
    with pytest.raises(ValueError):  # pyarrow's ArrowInvalid, a ValueError
        list(hf.cast_column("c", datasets.Value("string")))
    it = iter(ours.cast_column("c", datasets.Value("string")))
    assert next(it) == {"c": "x"}  # what comes before is yielded
    with pytest.raises(ValueError, match="'c'.*not valid UTF-8"):
        next(it)


def test_cast_to_a_fixed_length_list_refuses_other_lengths_as_hf():
    """HF's Arrow cast raises TypeError for a list of another length; ours yielded it under
    features promising the length."""
    feature = datasets.List(datasets.Value("int64"), length=2)
    hf, ours = _one_column([[1, 2], [3], None])
    with pytest.raises(TypeError):
        list(hf.cast_column("c", feature))
    it = iter(ours.cast_column("c", feature))
    assert next(it) == {"c": [1, 2]}
    with pytest.raises(TypeError, match="'c'.*1 values does not fit its length 2"):
        next(it)
    hf, ours = _one_column([[1, 2], [3, 4], None])  # the right lengths (and null) pass, values cast
    floats = datasets.List(datasets.Value("float32"), length=2)
    assert list(ours.cast_column("c", floats)) == list(hf.cast_column("c", floats)) == \
        [{"c": [1.0, 2.0]}, {"c": [3.0, 4.0]}, {"c": None}]


def test_text_bytes_casts_resume_at_every_cut_point():
    def build():
        _, ours = _one_column([f"s{i}" for i in range(7)], num_shards=3)
        return (ours.shuffle(seed=2, buffer_size=3).cast_column("c", datasets.Value("binary"))  # no bytes in
                .map(lambda x: {"n": len(x["c"])}).cast_column("c", datasets.Value("string")))  # a JSON state

    rows = assert_resumes_exactly(build)
    assert sorted(r["c"] for r in rows) == [f"s{i}" for i in range(7)]


# ---------------------------------------------------------------- casts Python would garble
@pytest.mark.parametrize("values, feature, expected", [
    (["true", "false", None], datasets.Value("bool"), [True, False, None]),  # bool("false") is True
    ([1.25, 2.5], datasets.Value("decimal128(5, 2)"), None),  # Decimal('1.25'): the floats stayed floats
], ids=["string-to-bool", "float-to-decimal"])
def test_cast_of_values_python_would_garble_gives_hf_values(values, feature, expected):
    hf, ours = _one_column(values)
    got, want = list(ours.cast_column("c", feature)), list(hf.cast_column("c", feature))
    assert got == want and [type(r["c"]) for r in got] == [type(r["c"]) for r in want]
    if expected is not None:
        assert [r["c"] for r in got] == expected


@pytest.mark.parametrize("values, feature", [
    (["yes"], datasets.Value("bool")),  # HF: ArrowInvalid, a ValueError
    ([1, 2], datasets.Value("decimal128(5, 2)")),  # int64 needs precision 21: ArrowInvalid
], ids=["bad-bool-string", "int-to-small-decimal"])
def test_cast_arrow_refuses_raises_value_error_as_hf(values, feature):
    hf, ours = _one_column(values)
    with pytest.raises(ValueError):
        list(hf.cast_column("c", feature))
    with pytest.raises(ValueError, match="column 'c'"):
        list(ours.cast_column("c", feature))


@pytest.mark.parametrize("values, feature", [
    (["ab"], datasets.List(datasets.Value("string"))),  # ours: ['a', 'b']
    (["ab"], datasets.List(datasets.ClassLabel(names=["a", "b"]))),
    ([{"a": 1, "b": "x"}], {"a": datasets.Value("int8")}),  # ours dropped 'b'
    ([[{"a": 1, "b": "x"}]], datasets.List({"a": datasets.Value("int8")})),
    ([[1, 2]], datasets.Value("string")),  # ours: the text '[1, 2]'
    ([{"a": 1}], datasets.Value("string")),  # ours: "{'a': 1}"
    ([[1]], datasets.Value("bool")),  # ours: True
    ([{"a": 1}], datasets.List(datasets.Value("int64"))),  # ours: ['a'], its keys
    ([[1]], {"a": datasets.Value("int64")}),  # ours: AttributeError
    ([1], {"a": datasets.Value("int64")}),
], ids=["string-to-list", "string-to-list-of-labels", "struct-fewer-fields", "list-of-structs-fewer-fields",
        "list-to-string", "struct-to-string", "list-to-bool", "struct-to-list", "list-to-struct", "int-to-struct"])
def test_cast_arrow_refuses_raises_type_error_as_hf(values, feature):
    """HF's Arrow cast raises TypeError ("Couldn't cast array of type ..."); ours made a list of a
    string's characters, or dropped a struct's other fields."""
    hf, ours = _one_column(values)
    with pytest.raises(TypeError):
        list(hf.cast_column("c", feature))
    with pytest.raises(TypeError, match="column 'c'"):
        list(ours.cast_column("c", feature))


def test_bool_and_struct_casts_resume_at_every_cut_point():
    rows = [{"b": ["true", "false"][i % 2], "s": {"x": i}, "l": [{"y": i}]} for i in range(7)]

    def build():
        ds = ri.IterableDataset.from_generator(lambda shards: (r for s in shards for r in s),
                                               gen_kwargs={"shards": [rows[:3], rows[3:]]})
        return ds.shuffle(seed=5, buffer_size=2).cast(datasets.Features({
            "b": datasets.Value("bool"), "s": {"x": datasets.Value("int8")},
            "l": datasets.List({"y": datasets.Value("float32")})}))

    out = assert_resumes_exactly(build)
    assert sorted((r["s"]["x"], r["b"], r["l"][0]["y"]) for r in out) == [(i, i % 2 == 0, float(i)) for i in range(7)]


@pytest.mark.parametrize("values, shape", [
    ([[[1, 2]], [[3, 4, 5]]], (1, 2)), ([[[1, 2]], [[3, 4], [5, 6]]], (1, 2)), ([[[1, 2], [3]]], (None, 2)),
], ids=["longer-row", "more-rows", "ragged"])
def test_cast_to_an_array_of_another_shape_raises_value_error_as_hf(values, shape):
    """HF's Arrow cast raises ValueError ("cannot reshape array ..."); ours yielded the value under
    features promising the shape."""
    hf, ours = _one_column(values)
    feature = datasets.Array2D(shape, "int32")
    with pytest.raises(ValueError):
        list(hf.cast_column("c", feature))
    with pytest.raises(ValueError, match="'c' is Array2D of shape"):
        list(ours.cast_column("c", feature))
    gen = ri.IterableDataset.from_generator(lambda: iter([{"c": np.zeros((2, 4))}]))  # an array, Python rows
    with pytest.raises(ValueError, match=r"shape \(2, 4\)"):
        list(gen.cast_column("c", datasets.Array2D((2, 3), "float32")))


def test_cast_to_an_array_of_its_shape_passes_as_hf():
    hf, ours = _one_column([[[1, 2]], [[3, 4], [5, 6]]])
    feature = datasets.Array2D((None, 2), "int32")
    assert list(ours.cast_column("c", feature)) == list(hf.cast_column("c", feature))
