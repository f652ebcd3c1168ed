"""Values of HF feature types (nested lists, ``Array2D``, timestamps and dates, ``Image``) equal HF
``datasets``' in type and value, where the rows of a ``datasets.Dataset`` reach the format through
nodes HF keeps on its Arrow path (``take``, ``shuffle``, ``cast``...) and after a ``filter``."""

from __future__ import annotations

import datetime
import io

import numpy as np
import pandas as pd
import PIL.Image
import pytest
from datasets import Array2D, ClassLabel, Dataset, Features, Image, List, Value

import resumable_iterable as ri

torch = pytest.importorskip("torch")


def typed(x):
    """``x`` as a comparable tree that keeps every value's type (and array dtypes and shapes)."""
    if isinstance(x, dict):
        return ("dict", tuple((k, typed(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(typed(v) for v in x))
    if isinstance(x, np.ndarray):
        body = tuple(typed(v) for v in x.ravel()) if x.dtype == object else x.tobytes()
        return ("ndarray", str(x.dtype), x.shape, body)
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), tuple(x.shape), x.numpy().tobytes())
    if isinstance(x, PIL.Image.Image):
        return ("PIL", x.mode, x.size, x.tobytes())
    if isinstance(x, pd.DataFrame):
        return ("DataFrame", tuple(map(str, x.dtypes)), tuple(typed(list(x[c])) for c in x.columns))
    if isinstance(x, float) and x != x:
        return ("float", "nan")
    return (type(x).__name__, repr(x))


def assert_same(ours, theirs):
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert typed(a) == typed(b), f"row {i}: {a!r} != {b!r}"


NESTED = Dataset.from_dict(
    {"ll": [[[1.0], []], [[None, 2.0]], [], [[1.0], None], None, [[1.5, 2.5], [3.5, 4.5]]],
     "l64": [[[1.0], [2.0]], [[]], [[3.0, None]], [[1e300]], [], None],
     "li": [[[1], [2, 3]], [[None, 1]], [[]], [], None, [[2 ** 30]]],
     "a2": [np.full((2, 3), i, dtype=np.float16) for i in range(6)],
     "a2dyn": [np.ones((i % 3, 3), dtype=np.float32) * i for i in range(6)]},
    features=Features({"ll": List(List(Value("float32"))), "l64": List(List(Value("float64"))),
                       "li": List(List(Value("int32"))), "a2": Array2D((2, 3), "float16"),
                       "a2dyn": Array2D((None, 3), "float32")}))


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("op", ["take", "shuffle"])
def test_lists_of_lists_and_arrays_as_hf(fmt, op):
    # HF formats these rows from Arrow: float32 (and int64) arrays and tensors, stacked, NaN for a
    # null number, typed empty arrays; they were float64 arrays and Python lists here
    def build(ds):
        ds = ds.take(10) if op == "take" else ds.shuffle(seed=1, buffer_size=1)
        return ds.with_format(fmt)

    assert_same(build(ri.to_iterable_dataset(NESTED)), build(NESTED.to_iterable_dataset()))


PARIS = datetime.timezone(datetime.timedelta(hours=2))
TIMES = Dataset.from_dict(
    {"ts": [datetime.datetime(2024, 1, 1, 5, 6, 7), None, datetime.datetime(1970, 1, 1)],
     "tz": [datetime.datetime(2024, 1, 1, tzinfo=PARIS), None, datetime.datetime(2024, 1, 1, 5, tzinfo=PARIS)],
     "ns": [datetime.datetime(2024, 1, 1, 0, 0, 0, 1), None, datetime.datetime(2000, 1, 1)],
     "d32": [datetime.date(2024, 1, 2), None, datetime.date(1, 1, 1)],
     "d64": [[datetime.date(2024, 1, 2), None], [], None],
     "dur": [datetime.timedelta(seconds=5), None, datetime.timedelta(days=-1)],
     "t": [datetime.time(1, 2, 3), None, datetime.time(0)]},
    features=Features({"ts": Value("timestamp[s]"), "tz": Value("timestamp[ms, tz=Europe/Paris]"),
                       "ns": Value("timestamp[ns]"), "d32": Value("date32"), "d64": List(Value("date64")),
                       "dur": Value("duration[s]"), "t": Value("time64[us]")}))


@pytest.mark.parametrize("op", ["take", "shuffle", "cast_column"])
def test_times_under_numpy_as_hf(op):
    # HF formats timestamps and dates from Arrow: 0-d datetime64 arrays (UTC), NaT for a null,
    # timedelta64 scalars; they were 0-d object arrays of Python datetimes here
    def build(ds):
        ds = (ds.take(10) if op == "take" else ds.shuffle(seed=1, buffer_size=1) if op == "shuffle"
              else ds.cast_column("ts", Value("timestamp[ms]")))
        return ds.with_format("numpy")

    assert_same(build(ri.to_iterable_dataset(TIMES)), build(TIMES.to_iterable_dataset()))


def test_map_after_numpy_format_with_a_time_column():
    # a time64 value is a 0-d object array once formatted: formatting the map's rows again raised
    # TypeError('iteration over a 0-d array'); HF yields them
    ours = ri.to_iterable_dataset(TIMES).with_format("numpy").map(lambda ex: {"n": 1})
    theirs = TIMES.to_iterable_dataset().with_format("numpy").map(lambda ex: {"n": 1})
    for a, b in zip(list(ours), list(theirs), strict=True):
        assert {k: typed(v) for k, v in a.items() if k != "dur"} == {k: typed(v) for k, v in b.items() if k != "dur"}


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    PIL.Image.fromarray((np.arange(36).reshape(3, 4, 3) * (i + 1) % 256).astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


IMAGES = Dataset.from_dict(
    {"img": [{"bytes": _png(i), "path": None} for i in range(7)], "label": list(range(7)),
     "name": [f"n{i}" for i in range(7)]},
    features=Features({"img": Image(), "label": Value("int32"), "name": Value("string")}))
STEPS = {"take": lambda ds: ds.take(5), "filter": lambda ds: ds.filter(lambda ex: ex["label"] != 2),
         "cast_column": lambda ds: ds.cast_column("label", Value("int16")), "shuffle": lambda ds: ds.shuffle(seed=0, buffer_size=1)}


@pytest.mark.parametrize("step", sorted(STEPS))
def test_pandas_decodes_images_as_hf(step):
    # HF's pandas formatter decodes media columns with the features: a PIL image, not {"bytes", "path"}
    ours = STEPS[step](ri.to_iterable_dataset(IMAGES)).with_format("pandas")
    theirs = STEPS[step](IMAGES.to_iterable_dataset()).with_format("pandas")
    assert_same(ours, theirs)
    assert_same(ours.iter(3), theirs.iter(3))


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("step", ["take", "cast_column"])
def test_batches_with_images_as_hf(fmt, step):
    # iter(batch_size) over Arrow-rooted rows with an Image column: the images were formatted twice
    # (uint8 arrays made int64 by HF's formatter), the other columns as rows (int16 kept, strings in
    # an object array); HF formats the batch from Arrow (int64, '<U' strings) with uint8 images
    ours = STEPS[step](ri.to_iterable_dataset(IMAGES)).with_format(fmt)
    theirs = STEPS[step](IMAGES.to_iterable_dataset()).with_format(fmt)
    assert_same(ours.iter(3), theirs.iter(3))


@pytest.mark.parametrize("column, feature", [
    ("d32", Value("timestamp[s]")), ("d32", Value("timestamp[ms, tz=UTC]")), ("ts", Value("date32")),
    ("tz", Value("timestamp[s]")), ("ts", Value("timestamp[s, tz=Europe/Paris]")), ("d32", Value("string"))])
@pytest.mark.parametrize("fmt", [None, "arrow"])
def test_cast_of_times_as_hf(column, feature, fmt):
    # HF casts the Arrow column: a date cast to a timestamp is a datetime, a datetime cast to a date a
    # date; here the value was kept as it was (a date in a timestamp column, which also made the
    # Arrow format's table from it fail over to other types)
    ours = ri.to_iterable_dataset(TIMES).cast_column(column, feature).with_format(fmt)
    theirs = TIMES.to_iterable_dataset().cast_column(column, feature).with_format(fmt)
    if fmt == "arrow":
        assert [t.to_pylist() for t in ours] == [t.to_pylist() for t in theirs]
        assert [t.schema for t in ours] == [t.schema for t in theirs]
    else:
        assert_same(ours, theirs)


def test_cast_of_times_that_would_lose_data_names_the_column():
    ds = ri.to_iterable_dataset(TIMES).cast_column("ns", Value("timestamp[s]"))
    with pytest.raises(ValueError, match="column 'ns' is timestamp\\[s\\]"):
        list(ds)


def _jpeg(i: int) -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(i)
    PIL.Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=70)
    return buf.getvalue()


JPEGS = Dataset.from_dict({"img": [{"bytes": _jpeg(i), "path": None} for i in range(5)], "id": list(range(5))},
                          features=Features({"img": Image(), "id": Value("int64")}))


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("data, step", [(IMAGES, "map"), (IMAGES, "filter"), (JPEGS, "batch"), (JPEGS, "map")])
def test_dataset_batches_of_images_as_hf(data, step, fmt):
    # batch() after a map of unknown features gave the images as {"bytes", "path"} dicts (the batch
    # went through an Arrow table, which encodes them, and no features said to decode them): HF
    # gives uint8 arrays / tensors
    def build(ds):
        ds = ds.map(lambda ex: {"n": 1}) if step == "map" else ds.filter(lambda ex: True) if step == "filter" else ds
        return ds.batch(2).with_format(fmt)

    assert_same(build(ri.to_iterable_dataset(data, num_shards=2)), build(data.to_iterable_dataset(num_shards=2)))


LABELS = Dataset.from_dict({"lab": ["neg", "pos", "neu", "neg"], "fx": [[float(i)] * 3 for i in range(4)]},
                           features=Features({"lab": Value("string"), "fx": List(Value("float32"), length=3)}))


@pytest.mark.parametrize("fmt", ["pandas", "arrow"])
def test_table_formats_cast_to_the_declared_features_as_hf(fmt):
    # a map(features=) declaring a ClassLabel for the names it returns: HF's table formats cast the
    # rows' table to the features (the name becomes its id; fixed-size float32 lists stay so); here
    # the table of the declared types failed and the inferred one (str, double lists) was yielded
    features = Features({**LABELS.features, "y": ClassLabel(names=["neg", "neu", "pos"])})

    def build(ds):
        return ds.map(lambda ex: {"y": ex["lab"]}, features=features).with_format(fmt)

    ours, theirs = build(ri.to_iterable_dataset(LABELS)), build(LABELS.to_iterable_dataset())
    if fmt == "arrow":
        assert [(t.schema, t.to_pylist()) for t in ours] == [(t.schema, t.to_pylist()) for t in theirs]
    else:
        assert_same(ours, theirs)


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_null_class_label_under_a_tensor_format_as_hf(fmt):
    # a null ClassLabel (int64 in Arrow) is NaN in HF's formatted rows, as a null integer Value; it was None
    data = Dataset.from_dict({"lab": [0, None, 1]}, features=Features({"lab": ClassLabel(names=["a", "b"])}))
    assert_same(ri.to_iterable_dataset(data).take(3).with_format(fmt), data.to_iterable_dataset().take(3).with_format(fmt))
