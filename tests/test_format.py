"""``with_format`` / ``iter(batch_size)`` / column-wise Arrow batches.

* outputs equal HF ``datasets``' for every format, per example and per batch, on Arrow-backed
  sources (formatted from Arrow) and Python sources (formatted from Python examples);
* every-cut-point exactness (JSON round trip) of formatted rows, ``iter`` batches and ``batch``;
* a format is presentation only: same states and fingerprints with and without it;
* through torch ``DataLoader`` / torchdata ``StatefulDataLoader`` with 2 workers (``batch_size=None``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset
from datasets import IterableDataset as HFIterable

import resumable_iterable as ri
from harness import assert_resumes_exactly, codec_roundtrip, json_roundtrip
from resumable_iterable.nodes.arrow import ArrowSource
from resumable_iterable.nodes.arrow_batches import ArrowBatchesNode
from resumable_iterable.nodes.columns import ColumnsNode
from resumable_iterable.nodes import format as format_module
from resumable_iterable.nodes import format_plan
from resumable_iterable.nodes.format import FormatNode
from resumable_iterable.nodes.format_plan import present
from resumable_iterable.nodes.format_values import fast_tensor_batch, fast_tensor_rows

torch = pytest.importorskip("torch")

FORMATS = [None, "python", "numpy", "np", "torch", "pt", "arrow", "pa", "pandas", "pd"]
ROWS = [{"i": i, "f": i + 0.5, "s": "abcdefghijklm"[i % 13] * (i % 3 + 1), "v": [i, -i],
         "r": list(range(i % 4)), "d": {"a": i, "b": str(i)}} for i in range(13)]
HF = Dataset.from_list(ROWS)
# HF's arrow format over Python examples cannot concatenate one-row tables whose schemas differ
# (an empty list is typed list<null>): keep those lists non-empty where HF formats Python rows
PY_ROWS = [{**r, "r": r["r"] or [7]} for r in ROWS]


def same(a, b, where="value") -> None:
    """``a`` and ``b`` have the same types and values, recursively (numpy, torch, Arrow, pandas)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        if a.dtype == object:
            for i, (x, y) in enumerate(zip(a.ravel(), b.ravel())):
                same(x, y, f"{where}[{i}]")
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), f"{where}: {a} != {b}"
    elif isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a} != {b}"
        assert torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)), \
            f"{where}: {a} != {b}"
    elif isinstance(a, pa.Table):
        assert a.equals(b), f"{where}: {a} != {b}"
    elif isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    else:
        nan = isinstance(a, (float, np.floating)) and np.isnan(a) and np.isnan(b)
        assert (a == b or nan) and getattr(a, "dtype", None) == getattr(b, "dtype", None), f"{where}: {a!r} != {b!r}"


def to_py(x):
    """Formatted values as comparable Python data (for the exactness harness)."""
    if isinstance(x, dict):
        return {k: to_py(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_py(v) for v in x]
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), x.tolist())
    if isinstance(x, np.ndarray):
        return ("ndarray", str(x.dtype), [to_py(v) for v in x] if x.dtype == object else x.tolist())
    if isinstance(x, np.generic):
        return ("np", str(x.dtype), x.item())
    if isinstance(x, pa.Table):
        return ("table", str(x.schema), x.to_pydict())
    if isinstance(x, pd.DataFrame):
        return ("frame", x.to_dict("list"))
    return x


class Presented:
    """A dataset iterated through ``iter(batch_size)`` (or plainly), with values made comparable."""

    def __init__(self, ds, batch_size=None, drop_last_batch=False):
        self.ds, self.batch_size, self.drop = ds, batch_size, drop_last_batch

    def __iter__(self):
        it = iter(self.ds) if self.batch_size is None else self.ds.iter(self.batch_size, drop_last_batch=self.drop)
        return (to_py(x) for x in it)

    def state_dict(self):
        return self.ds.state_dict()

    def load_state_dict(self, state):
        self.ds.load_state_dict(state)


def gen(rows):
    for r in rows:
        yield dict(r)


# ---------------------------------------------------------------------- parity with HF datasets


@pytest.mark.parametrize("fmt", FORMATS)
def test_arrow_source_rows_and_batches_equal_hf(fmt):
    ours = ri.to_iterable_dataset(HF, num_shards=3).with_format(fmt)
    theirs = HF.to_iterable_dataset(num_shards=3).with_format(fmt)
    same(list(ours), list(theirs), f"{fmt} rows")
    for bs, drop in [(4, False), (4, True), (13, False), (20, False)]:
        same(list(ours.iter(bs, drop_last_batch=drop)), list(theirs.iter(bs, drop_last_batch=drop)), f"{fmt} iter({bs})")


@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow", "pandas"])
def test_python_source_rows_and_batches_equal_hf(fmt):
    ours = ri.IterableDataset.from_generator(gen, gen_kwargs={"rows": PY_ROWS}).with_format(fmt)
    theirs = HFIterable.from_generator(gen, gen_kwargs={"rows": PY_ROWS}).with_format(fmt)
    same(list(ours), list(theirs), f"{fmt} rows")
    same(list(ours.iter(5)), list(theirs.iter(5)), f"{fmt} iter(5)")


def png_rows(shards):
    import io

    from PIL import Image

    for s in shards:
        for i in range(3):
            buf = io.BytesIO()
            Image.fromarray(np.full((4, 5, 3), s * 10 + i, dtype=np.uint8)).save(buf, format="PNG")
            yield {"id": s * 10 + i, "image": {"bytes": buf.getvalue(), "path": None}}


@pytest.mark.parametrize("order", ["format, batch", "batch, format"])
@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_batches_of_decoded_images_from_a_generator_are_one_array_as_hf(fmt, order):
    # not Arrow-backed: the rows are batched, then formatted with the image feature (decoded, stacked)
    from datasets import Features, Image, Value

    features = Features({"id": Value("int64"), "image": {"bytes": Value("binary"), "path": Value("string")}})
    got = {}
    for name, cls in (("ours", ri.IterableDataset), ("hf", HFIterable)):
        ds = cls.from_generator(png_rows, gen_kwargs={"shards": [0, 1]}, features=features)
        ds = ds.cast_column("image", Image())
        ds = ds.with_format(fmt).batch(4) if order == "format, batch" else ds.batch(4).with_format(fmt)
        got[name] = list(ds)
    assert [b["image"].shape for b in got["ours"]] == [b["image"].shape for b in got["hf"]]
    assert tuple(got["ours"][0]["image"].shape) in ((4, 4, 5, 3), (4, 3, 4, 5))
    for a, b in zip(got["ours"], got["hf"]):
        assert np.array_equal(np.asarray(a["image"]), np.asarray(b["image"]))
        assert np.array_equal(np.asarray(a["id"]), np.asarray(b["id"]))


def _array_rows(i):
    # a map's numpy arrays (pixels, features), of several dtypes and shapes; "mixed" changes dtype
    # within a batch, "ragged" its length
    i = int(i)
    return {"pixels": np.full((3, 4, 4), i / 7, dtype=np.float32), "u8": np.full((2,), i, dtype=np.uint8),
            "flags": np.array([i % 2 == 0, True]), "ragged": np.arange(i % 3 + 1, dtype=np.int16),
            "mixed": np.full((2,), i, dtype=np.float32 if i % 2 else np.int64), "label": i % 3, "s": f"t{i}"}


def _ids(shards):
    for s in shards:
        for i in range(5):
            yield {"i": s * 5 + i}


@pytest.mark.parametrize("order", ["map, batch, format", "map, format, batch", "format, map, batch"])
@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_batches_of_a_maps_numpy_arrays_are_formatted_from_the_arrays_as_hf(fmt, order, monkeypatch):
    # columns of numpy arrays of numbers in a Python batch are made one array / tensor (a list where
    # the shapes differ) from the arrays, as HF's formatter does: not through an Arrow table, which
    # read them back number row by number row (10x slower than decoding a 64x64 JPEG) and gave a
    # column whose dtype changes within a batch one type where HF gives a list of two
    tables = []
    real = format_module.python_batch_to_table
    monkeypatch.setattr(format_module, "python_batch_to_table", lambda b, s=None: tables.append(list(b)) or real(b, s))
    got = {}
    for name, cls in (("ours", ri.IterableDataset), ("hf", HFIterable)):
        ds = cls.from_generator(_ids, gen_kwargs={"shards": [0, 1]})
        if order == "map, batch, format":
            ds = ds.map(lambda ex: _array_rows(ex["i"])).batch(4).with_format(fmt)
        elif order == "map, format, batch":
            ds = ds.map(lambda ex: _array_rows(ex["i"])).with_format(fmt).batch(4)
        else:
            ds = ds.with_format(fmt).map(lambda ex: _array_rows(ex["i"])).batch(4)
        got[name] = list(ds)
    same(got["ours"], got["hf"])
    assert tables and all(set(t).isdisjoint({"pixels", "u8", "flags", "ragged", "mixed"}) for t in tables), tables


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_batches_of_a_maps_numpy_arrays_resume_exactly(fmt):
    assert_resumes_exactly(lambda: Presented(ri.IterableDataset.from_generator(_ids, gen_kwargs={"shards": [0, 1]})
                                             .map(lambda ex: _array_rows(ex["i"])).shuffle(seed=1, buffer_size=4)
                                             .batch(3).with_format(fmt)), roundtrip=codec_roundtrip)


@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow"])
def test_column_operations_and_indices_equal_hf(fmt):
    """Column operations and an indices mapping (HF ``select``/``shuffle``) on the column-wise path.
    HF keeps ``select_columns`` on Arrow (same types); it renames / removes columns through a Python
    ``map``, so there only the values are compared (ours stay on Arrow: the types of the other rows)."""
    hf = HF.shuffle(seed=1).select(range(11))
    ours = ri.to_iterable_dataset(hf, num_shards=2).select_columns(["i", "v", "s"]).with_format(fmt)
    theirs = hf.to_iterable_dataset(num_shards=2).select_columns(["i", "v", "s"]).with_format(fmt)
    same(list(ours), list(theirs), "rows")
    same(list(ours.iter(3)), list(theirs.iter(3)), "iter(3)")
    ours = ours.rename_column("s", "text").remove_columns("v")
    theirs = hf.to_iterable_dataset(num_shards=2).rename_column("s", "text").select_columns(["i", "text"])
    if fmt != "arrow":  # (HF's own rename fails on arrow-formatted tables)
        def values(b):
            return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in b.items()}

        assert [values(b) for b in ours.iter(3)] == [values(b) for b in theirs.with_format(fmt).iter(3)]
    plain = list(ri.to_iterable_dataset(hf, num_shards=2).select_columns(["i", "s"]).with_format(fmt))
    same(list(ours), [{"i": r["i"], "text": r["s"]} if isinstance(r, dict) else r.rename_columns(["i", "text"])
                      for r in plain])


def test_parquet_files_are_formatted_column_wise_like_hf(tmp_path):
    paths = []
    for k in range(3):
        p = str(tmp_path / f"part{k}.parquet")
        pq.write_table(pa.Table.from_pylist(ROWS[k * 5:(k + 1) * 5]), p, row_group_size=2)
        paths.append(p)
    ours = ri.IterableDataset.from_parquet(paths).with_format("numpy")
    theirs = Dataset.from_list(ROWS).to_iterable_dataset().with_format("numpy")
    same(list(ours.iter(4)), list(theirs.iter(4)))
    same(list(ours), list(theirs))


# HF formats the rows of Arrow-backed sources from Arrow while they stay on its Arrow path (shuffle,
# take, skip, repeat, shard, interleave, concatenate, cast): numpy scalars, np.str_, float32 lists,
# '<U' string arrays in iter() batches. A Python map or filter ends that path: then 0-d arrays, str,
# float64 lists and object string arrays, as recursive_tensorize makes them. Ours must give the same.
TYPED = Dataset.from_list([{"id": i, "f": i + 0.25, "s": "ab"[i % 2] * (i % 3 + 1), "b": i % 3 == 0,
                            "x": [i, -i], "y": [i / 2]} for i in range(12)])


def kinds(x):
    """The types (and dtypes, dimensions) of formatted values, without the values."""
    if isinstance(x, dict):
        return {k: kinds(v) for k, v in x.items()}
    dtype = getattr(x, "dtype", None)
    return type(x).__name__, "<U" if getattr(dtype, "kind", "") == "U" else str(dtype or ""), getattr(x, "ndim", None)


def both(op):
    from datasets import concatenate_datasets, interleave_datasets

    ours = op(ri.to_iterable_dataset(TYPED, num_shards=2), ri)
    theirs = op(TYPED.to_iterable_dataset(num_shards=2), {"interleave_datasets": interleave_datasets,
                                                          "concatenate_datasets": concatenate_datasets})
    return ours, theirs


def _lib(lib, name):
    return getattr(lib, name) if not isinstance(lib, dict) else lib[name]


ARROW_PATH_OPS = {  # name: (operation, same order in both libraries)
    "take": (lambda d, lib: d.take(7), True),
    "skip": (lambda d, lib: d.skip(3), True),
    "repeat": (lambda d, lib: d.repeat(2), True),
    "shard": (lambda d, lib: d.shard(2, 1), True),
    "interleave": (lambda d, lib: _lib(lib, "interleave_datasets")([d, d.skip(5)]), True),
    "concatenate": (lambda d, lib: _lib(lib, "concatenate_datasets")([d.take(4), d]), True),
    "cast": (lambda d, lib: d.cast_column("id", __import__("datasets").Value("int32")).take(5), True),
    "shuffle": (lambda d, lib: d.shuffle(seed=3, buffer_size=4), False),
    "map": (lambda d, lib: d.map(lambda e: e), True),
    "filter": (lambda d, lib: d.filter(lambda e: e["id"] != 3), True),
    "shuffle, map": (lambda d, lib: d.shuffle(seed=3, buffer_size=4).map(lambda e: e), False),
}


@pytest.mark.parametrize("name", list(ARROW_PATH_OPS))
def test_numpy_types_of_arrow_backed_rows_after_each_operation_equal_hf(name):
    op, ordered = ARROW_PATH_OPS[name]
    ours, theirs = both(op)
    ours, theirs = ours.with_format("numpy"), theirs.with_format("numpy")
    got, want = list(ours), list(theirs)
    if not ordered:  # our shuffle drains its buffer in another order (docs/compat.md)
        got, want = (sorted(rows, key=lambda r: int(r["id"])) for rows in (got, want))
    assert [kinds(r) for r in got] == [kinds(r) for r in want]
    same(got, want, f"{name} rows")
    got, want = list(ours.iter(5)), list(theirs.iter(5))
    assert [kinds(b) for b in got] == [kinds(b) for b in want]
    if ordered:
        same(got, want, f"{name} iter(5)")


def test_a_decimal_column_on_the_arrow_path_is_formatted_as_hf_and_saved_exactly(tmp_path):
    """A decimal128 column under with_format("numpy") made a shuffled (or taken, skipped,
    interleaved) Arrow source raise ValueError ('format number 1 of "decimal128(12, 3)" is not
    recognized') at its first row: the check for numeric features let numpy's ValueError out for
    the dtype names it cannot parse. HF gives the Decimal in a 0-d object array, buffered and saved
    as it is (under "torch", HF and ours both raise: torch has no dtype for it)."""
    import decimal

    fmt = "numpy"
    table = pa.table({"id": list(range(12)), "price": pa.array([decimal.Decimal(f"{i}.{i:03d}") for i in range(12)],
                                                               pa.decimal128(12, 3))})
    hf = Dataset(table)

    def build():
        return ri.to_iterable_dataset(hf, num_shards=2).with_format(fmt).shuffle(seed=3, buffer_size=4)

    got = sorted(build(), key=lambda r: int(r["id"]))
    want = sorted(hf.to_iterable_dataset(num_shards=2).with_format(fmt).shuffle(seed=3, buffer_size=4),
                  key=lambda r: int(r["id"]))
    assert [kinds(r) for r in got] == [kinds(r) for r in want]
    assert [r["price"].item() for r in got] == [r["price"].item() for r in want]

    def through_a_file(state):
        ri.save_state(state, tmp_path / "s")
        return ri.load_state(tmp_path / "s")

    assert_resumes_exactly(lambda: build().map(lambda r: {"id": int(r["id"]), "price": str(r["price"].item())}),
                           roundtrip=through_a_file)


def test_numpy_arrow_path_types_reach_the_default_collate_as_hf():
    """The float lists of a shuffled Arrow source are float32 (HF's type): a model's float32 layers
    take the loader's batches as they take HF's."""
    from torch.utils.data import DataLoader

    ours, theirs = both(lambda d, lib: d.shuffle(seed=3, buffer_size=4))
    for ds in (ours, theirs):
        batch = next(iter(DataLoader(ds.with_format("numpy"), batch_size=4)))
        assert (batch["y"].dtype, batch["id"].dtype, batch["f"].dtype) == (torch.float32, torch.int64, torch.float64)


@pytest.mark.parametrize("batched", [False, True])
def test_map_after_with_format_gets_the_arrow_path_types_as_hf(batched):
    seen = {}

    def record(lib):
        def f(e):
            seen.setdefault(lib, []).append(kinds(e))
            return e
        return f

    out = {}
    for lib, ds in zip(("ours", "hf"), both(lambda d, lib: d.take(8))):
        out[lib] = list(ds.with_format("numpy").map(record(lib), batched=batched, batch_size=3))
    assert seen["ours"] == seen["hf"]
    # the columns a function leaves alone keep the values it was given (HF updates the formatted example)
    for lib, ds in zip(("ours", "hf"), both(lambda d, lib: d.shuffle(seed=1, buffer_size=3))):
        f = (lambda b: {"n": [len(s) for s in b["s"]]}) if batched else (lambda e: {"n": len(e["s"])})
        out[lib] = list(ds.with_format("numpy").map(f, batched=batched, batch_size=3))
    assert [kinds(r) for r in sorted(out["ours"], key=lambda r: int(r["id"]))] == \
        [kinds(r) for r in sorted(out["hf"], key=lambda r: int(r["id"]))]
    assert kinds(out["ours"][0])["f"] == ("float32", "float32", 0)


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_a_null_number_given_to_a_map_after_with_format_is_nan_as_hf(fmt):
    """A map after ``with_format`` gets a row of HF's formatted batch: a null in a column of numbers
    is a float32 NaN there (it was ``None``), and the map's output keeps it."""
    import datasets

    hf = datasets.Dataset.from_dict({"i": [None, 1, 2], "f": [0.5, None, 1.5], "s": ["a", None, "c"]})
    out = {}
    for lib, ds in (("ours", ri.to_iterable_dataset(hf)), ("hf", hf.to_iterable_dataset())):
        seen = []
        rows = list(ds.with_format(fmt).map(lambda e: (seen.append(kinds(e)), {"n": 1})[1]))
        out[lib] = (seen, [kinds(r) for r in rows], [[float(r[c]) for c in ("i", "f")] for r in rows])
    assert out["ours"][:2] == out["hf"][:2]
    assert str(out["ours"][2]) == str(out["hf"][2]) == "[[nan, 0.5], [1.0, nan], [2.0, 1.5]]"
    assert out["ours"][0][0]["i"][:2] == (("float32", "float32") if fmt == "numpy" else ("Tensor", "torch.float32"))


def test_batches_of_the_dataset_batch_hold_strings_as_objects_as_hf():
    for op in (lambda d, lib: d.with_format("numpy").batch(5), lambda d, lib: d.batch(5).with_format("numpy"),
               lambda d, lib: d.shuffle(seed=1, buffer_size=3).with_format("numpy").batch(5)):
        ours, theirs = both(op)
        got, want = list(ours), list(theirs)
        assert [kinds(b)["s"] for b in got] == [kinds(b)["s"] for b in want] == [("ndarray", "object", 1)] * 3
        assert all(type(v) is str for b in got for v in b["s"])


NULL_LED = Dataset.from_dict({"x": [None, [1, 2], [3], None], "y": [1, 2, 3, 4], "z": [None, [[1.0]], [[2.0, 3.0]], [[4.0]]]})


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_batches_of_list_columns_led_by_a_null_row_equal_hf_batch(fmt):
    """HF's numpy / torch ``format_batch`` fails on a list column whose first row is null (HF's
    ``iter(batch_size)`` raises AttributeError); its ``batch()`` formats such a column as one row of
    lists. Ours gives that from ``batch()`` and ``iter()``, whatever the source and path."""
    want = list(NULL_LED.to_iterable_dataset().with_format(fmt).batch(3))
    assert type(want[0]["x"]) is (np.ndarray if fmt == "numpy" else list)  # [None, [1, 2], [3]] as HF makes it
    sources = {"arrow": lambda: ri.to_iterable_dataset(NULL_LED, num_shards=1),
               "generator": lambda: ri.IterableDataset.from_generator(gen, gen_kwargs={"rows": NULL_LED.to_list()},
                                                                      features=NULL_LED.features)}
    for name, make in sources.items():
        same(list(make().with_format(fmt).batch(3)), want, f"{name} batch()")
        same(list(make().with_format(fmt).iter(3)), want, f"{name} iter()")
        same(list(make().map(lambda ex: ex).with_format(fmt).iter(3)), want, f"{name} map then iter()")
    # a batched map after with_format gets such a batch too
    seen = []
    mapped = ri.to_iterable_dataset(NULL_LED, num_shards=1).with_format(fmt).map(
        lambda b: seen.append(b) or {"n": [1] * len(b["y"])}, batched=True, batch_size=3)
    list(mapped)
    same({k: seen[0][k] for k in ("x", "y", "z")}, {k: want[0][k] for k in ("x", "y", "z")}, "batched map input")


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_null_led_lists_of_strings_and_images_are_formatted_as_hf_iter(fmt):
    """HF formats these column-wise (object rows): the same values as its ``iter()``, images decoded."""
    import io

    from datasets import Features, Image, List, Value
    from PIL import Image as PImage

    def png(v):
        buf = io.BytesIO()
        PImage.new("L", (2, 2), v).save(buf, format="PNG")
        return {"bytes": buf.getvalue(), "path": None}

    features = Features({"s": List(Value("string")), "img": List(Image())})
    data = Dataset.from_dict({"s": [None, ["a", "b"], ["c"]], "img": [None, [png(1)], [png(2), png(3)]]},
                             features=features)
    want = list(data.to_iterable_dataset().with_format(fmt).iter(3))
    same(list(ri.to_iterable_dataset(data).with_format(fmt).iter(3)), want)


def test_batch_then_format_equals_iter():
    """``with_format(f).batch(n)`` (or ``batch(n).with_format(f)``) yields what ``iter(n)`` yields."""
    ds = ri.to_iterable_dataset(HF, num_shards=2)
    want = list(ds.with_format("torch").iter(4, drop_last_batch=True))
    same(list(ds.with_format("torch").batch(4, drop_last_batch=True)), want)
    same(list(ds.batch(4, drop_last_batch=True).with_format("torch")), want)


# ---------------------------------------------------------------------- exactness at every cut point


def arrow_ds(fmt, shards=3):
    return ri.to_iterable_dataset(HF, num_shards=shards).with_format(fmt)


@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow", "pandas"])
def test_formatted_rows_resume_exactly(fmt):
    assert_resumes_exactly(lambda: Presented(arrow_ds(fmt)))


@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow", "pandas", None])
@pytest.mark.parametrize("bs,drop", [(4, False), (5, True), (1, False)])
def test_iter_batches_resume_exactly(fmt, bs, drop):
    assert_resumes_exactly(lambda: Presented(arrow_ds(fmt), bs, drop))


def test_column_wise_batches_resume_exactly_with_indices_columns_and_files(tmp_path):
    hf = HF.shuffle(seed=2)
    assert_resumes_exactly(lambda: Presented(
        ri.to_iterable_dataset(hf, num_shards=2).rename_column("i", "id").select_columns(["id", "v"]).with_format("numpy"), 3))
    paths = []
    for k in range(3):
        p = str(tmp_path / f"p{k}.parquet")
        pq.write_table(pa.Table.from_pylist(ROWS[k * 4:(k + 1) * 4 + (k == 2)]), p, row_group_size=3)
        paths.append(p)
    assert_resumes_exactly(lambda: Presented(ri.IterableDataset.from_parquet(paths).with_format("torch").batch(5)))
    assert_resumes_exactly(lambda: Presented(ri.IterableDataset.from_parquet(paths).with_format("arrow"), 3))


def test_python_path_resumes_exactly():
    """Pipelines that are not Arrow-backed (map, shuffle, generator) are batched row by row, then formatted."""
    assert_resumes_exactly(lambda: Presented(
        ri.IterableDataset.from_generator(gen, gen_kwargs={"rows": ROWS}).shuffle(seed=0, buffer_size=4)
        .map(lambda ex: {"i2": ex["i"] * 2}).with_format("numpy"), 4))
    assert_resumes_exactly(lambda: Presented(arrow_ds("torch").map(lambda ex: {"i2": ex["i"] * 2}).batch(3)))


# ---------------------------------------------------------------------- presentation only


def test_format_does_not_change_states_or_fingerprints():
    """The column-wise path leaves the row pipeline's state exactly where ``batch`` leaves it, and
    a state loads across formats and between ``iter(n)`` and plain iteration."""
    plain, formatted = ri.to_iterable_dataset(HF, num_shards=3).batch(4), arrow_ds("numpy").batch(4)
    a, b = iter(plain), iter(formatted)
    for _ in range(3):
        next(a), next(b)
        assert plain.state_dict() == formatted.state_dict()
    ds = arrow_ds("torch")
    it = ds.iter(4)
    next(it), next(it)
    state = json_roundtrip(ds.state_dict())
    rows = ri.to_iterable_dataset(HF, num_shards=3)  # no format, plain iteration
    rows.load_state_dict(state)
    assert [r["i"] for r in rows] == list(range(8, 13))


def test_format_is_kept_by_chaining_and_split_by_node():
    ds = arrow_ds("np")
    assert ds.format == {"type": "numpy", "format_kwargs": {}}
    assert arrow_ds(None).format["type"] is None and arrow_ds("python").format["type"] is None
    for derived in (ds.shuffle(seed=0, buffer_size=3), ds.map(lambda ex: ex), ds.take(3), ds.select_columns("i"),
                    ri.split_dataset_by_node(ds, rank=0, world_size=3)):
        assert derived.format["type"] == "numpy"
        assert isinstance(next(iter(derived))["i"], (np.ndarray, np.generic))
    assert ds.with_format(None).format["type"] is None
    assert type(next(iter(ds.with_format(None)))["i"]) is int


def test_format_kwargs_reach_the_formatter():
    ds = arrow_ds("torch", shards=1)
    b = next(ds.with_format("torch", dtype=torch.float64).iter(4))
    assert b["i"].dtype == torch.float64


def test_bad_format_and_batch_size():
    ds = arrow_ds(None)
    with pytest.raises(ValueError, match="bogus"):
        ds.with_format("bogus")
    with pytest.raises(ValueError):
        ds.with_format("custom")
    with pytest.raises(TypeError):
        ds.with_format(3)
    for bad in (0, -1, 2.0, None):
        with pytest.raises(ValueError, match="batch_size"):
            ds.iter(bad)


def test_column_wise_path_is_chosen_only_for_arrow_chains():
    table = pa.Table.from_pylist(ROWS)
    node = ColumnsNode(ArrowSource(table, num_shards=2), "select", ["i"])
    chosen = present(node, ("numpy", {}), (4, False))
    assert isinstance(chosen, FormatNode) and isinstance(chosen.children[0], ArrowBatchesNode)
    assert chosen.children[0].children[0] is node  # drives the live pipeline, not a copy
    other = present(ri.IterableDataset.from_generator(gen, gen_kwargs={"rows": ROWS})._node, ("numpy", {}), (4, False))
    assert isinstance(other, FormatNode) and not isinstance(other.children[0], ArrowBatchesNode)


def test_missing_column_on_the_column_wise_path_names_it():
    ds = ri.IterableDataset.from_arrow_table(pa.Table.from_pylist(ROWS))
    bad = ri.IterableDataset(ColumnsNode(ds._node.clone(), "select", ["nope"])).with_format("numpy")
    with pytest.raises(KeyError, match="nope"):
        next(bad.iter(2))


# ---------------------------------------------------------------------- torch DataLoader


pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]


def test_dataloader_two_workers_formatted_batches():
    from torch.utils.data import DataLoader

    ds = ri.to_iterable_dataset(HF, num_shards=4).select_columns(["i", "f", "v"]).with_format("torch").batch(3)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert all(isinstance(b["i"], torch.Tensor) and b["f"].dtype == torch.float32 for b in batches)
    assert sorted(i for b in batches for i in b["i"].tolist()) == list(range(13))


def test_stateful_dataloader_two_workers_resumes_exactly():
    pytest.importorskip("torchdata")
    from torchdata.stateful_dataloader import StatefulDataLoader

    def build():
        return ri.to_iterable_dataset(HF, num_shards=4).with_format("numpy").batch(2)

    def ids(loader):
        return [b["i"].tolist() for b in loader]

    full = ids(StatefulDataLoader(build(), batch_size=None, num_workers=2))
    assert sorted(i for b in full for i in b) == list(range(13))
    for k in (1, 4):
        loader = StatefulDataLoader(build(), batch_size=None, num_workers=2)
        it = iter(loader)
        head = [next(it)["i"].tolist() for _ in range(k)]
        state = json.loads(json.dumps(loader.state_dict()))
        resumed = StatefulDataLoader(build(), batch_size=None, num_workers=2)
        resumed.load_state_dict(state)
        assert head + ids(resumed) == full, k


# ---------------------------------------------------------------------- the fast numpy / torch batch path


def typed_dataset():
    """Every column type the column-wise numpy/torch formatting computes itself, and some it leaves to HF."""
    n = 11
    cols = {
        "i8": pa.array(np.arange(n, dtype=np.int8)), "u8": pa.array(np.arange(n, dtype=np.uint8)),
        "u16": pa.array(np.arange(n, dtype=np.uint16)),
        "u32": pa.array(np.arange(n, dtype=np.uint32)), "i32": pa.array(np.arange(n, dtype=np.int32)),
        "f16": pa.array(np.arange(n, dtype=np.float16)), "f32": pa.array(np.arange(n, dtype=np.float32) / 3),
        "f64": pa.array(np.arange(n) / 7), "b": pa.array([i % 2 == 0 for i in range(n)]),
        "s": pa.array([f"t{i}" * (i % 3) for i in range(n)]),
        "fixed": pa.array([[i, i + 1, i + 2] for i in range(n)], pa.list_(pa.float32(), 3)),
        "equal": pa.array([[i, -i] for i in range(n)], pa.list_(pa.int64())),
        "large": pa.array([[i, 1] for i in range(n)], pa.large_list(pa.int16())),
    }
    fallback = {  # HF's formatter handles these (object arrays, nulls, NaN, nested)
        "ragged": pa.array([list(range(i % 3)) for i in range(n)], pa.list_(pa.int64())),
        "nulls": pa.array([None if i == 5 else i for i in range(n)], pa.int64()),
        "nan": pa.array([float("nan") if i == 3 else i / 2 for i in range(n)]),
        "nested": pa.array([{"a": i} for i in range(n)]),
    }
    return pa.table(cols), fallback


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_fast_batches_equal_hf_for_every_column_type(fmt):
    table, fallback = typed_dataset()
    cases = [table] + [table.append_column(name, col) for name, col in fallback.items()]
    for t in cases:
        hf = Dataset(t)
        for bs in (4, 11):
            same(list(ri.to_iterable_dataset(hf, num_shards=2).with_format(fmt).iter(bs)),
                 list(hf.to_iterable_dataset(num_shards=2).with_format(fmt).iter(bs)), f"{t.column_names[-1]} bs={bs}")


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_fast_rows_equal_hf_for_every_column_type(fmt, monkeypatch):
    monkeypatch.setattr(format_plan, "ROW_CHUNK", 4)  # chunks that end inside shards too
    table, fallback = typed_dataset()
    for t in [table] + [table.append_column(name, col) for name, col in fallback.items()]:
        hf = Dataset(t)
        same(list(ri.to_iterable_dataset(hf, num_shards=2).with_format(fmt)),
             list(hf.to_iterable_dataset(num_shards=2).with_format(fmt)), t.column_names[-1])


@pytest.mark.parametrize("fmt", ["numpy", "torch", "pandas"])
def test_formatted_rows_resume_exactly_across_chunks(fmt, monkeypatch):
    monkeypatch.setattr(format_plan, "ROW_CHUNK", 3)
    table, _ = typed_dataset()
    assert_resumes_exactly(lambda: Presented(ri.to_iterable_dataset(Dataset(table), num_shards=2).with_format(fmt)))


def test_fast_batches_are_writable_copies_and_take_format_kwargs():
    table, _ = typed_dataset()
    ds = ri.IterableDataset.from_arrow_table(table)
    b = next(ds.with_format("numpy").iter(4))
    b["i32"][0] = 99  # a copy, like HF's: never a read-only view of Arrow memory
    assert b["i32"].flags.writeable and b["fixed"].shape == (4, 3)
    assert next(ds.with_format("numpy").iter(4))["i32"][0] == 0
    ours = next(ds.with_format("torch", dtype=torch.float64).iter(4))
    assert ours["i32"].dtype == torch.float64 and ours["b"].dtype == torch.float64


def test_torch_batches_are_views_of_one_storage_that_a_loader_moves_once():
    table, _ = typed_dataset()
    ds = ri.IterableDataset.from_arrow_table(table).with_format("torch")
    first, second = list(ds.iter(4))[:2]
    numeric = [k for k, v in first.items() if isinstance(v, torch.Tensor)]
    assert len(numeric) >= 6
    storages = {first[k].untyped_storage().data_ptr() for k in numeric}
    assert len(storages) == 1  # one block per batch
    assert first[numeric[0]].untyped_storage().data_ptr() != second[numeric[0]].untyped_storage().data_ptr()
    before = {k: first[k].clone() for k in numeric}
    first["i32"].fill_(-7)  # writing one column leaves the others (and the next batch) alone
    assert all(torch.equal(first[k], before[k]) for k in numeric if k != "i32")
    assert first["u8"].dtype == torch.int64 and first["b"].dtype == torch.bool and first["f64"].dtype == torch.float32
    hf = next(Dataset(table).to_iterable_dataset().with_format("torch").iter(4))
    assert all(first[k].dtype == hf[k].dtype and first[k].shape == hf[k].shape for k in numeric)


def test_fast_path_covers_the_simple_columns_and_leaves_the_rest_to_hf():
    table, fallback = typed_dataset()
    for fmt in ("numpy", "torch"):
        assert fast_tensor_batch(table, fmt, {}) is not None
        assert fast_tensor_rows(table, fmt, {}) is not None
        for name, col in fallback.items():
            assert fast_tensor_batch(table.append_column(name, col), fmt, {}) is None, name
            if name != "ragged" and name != "nan":  # one row is never ragged; HF keeps NaN scalars as they are
                assert fast_tensor_rows(table.append_column(name, col), fmt, {}) is None, name


@pytest.mark.parametrize("layout", ["fixed", "list", "large_list"])
def test_fast_path_reads_list_columns_of_sliced_and_chunked_tables(layout):
    """The rows a batch covers are taken from the list column's child array at the slice's offset (no
    flatten()): slices at every offset, chunked columns and columns whose chunks start mid-array give
    exactly the lists of the rows, as numpy stacks them from Python lists."""
    rows = [[i * 10 + j for j in range(3)] for i in range(20)]
    typ = {"fixed": pa.list_(pa.float32(), 3), "list": pa.list_(pa.float32()),
           "large_list": pa.large_list(pa.float32())}[layout]
    whole = pa.array(rows, type=typ)
    tables = {"one chunk": pa.table({"x": whole}),
              "chunks": pa.table({"x": pa.chunked_array([whole.slice(0, 7), whole.slice(7, 6), whole.slice(13)])})}
    for label, table in tables.items():
        for start in range(0, 20, 3):
            for length in (1, 4, 11):
                part = table.slice(start, length)
                want = np.array(rows[start:start + length], dtype=np.float32)
                got = fast_tensor_batch(part, "numpy", {})["x"]
                assert got.dtype == np.float32 and np.array_equal(got, want), (label, start, length)
                assert np.array_equal(fast_tensor_batch(part, "torch", {})["x"].numpy(), want), (label, start, length)


@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow", "pandas"])
def test_batches_split_by_rank_with_a_step_are_still_formatted_as_batches(fmt):
    """3 shards over 2 ranks: each rank keeps every other batch (a step over the batch pipeline)."""
    ds = ri.to_iterable_dataset(Dataset(typed_dataset()[0]), num_shards=3).with_format(fmt).batch(4)
    whole = list(ds)
    parts = [list(ri.split_dataset_by_node(ds, rank=r, world_size=2)) for r in range(2)]
    same(parts[0] + parts[1], whole[0::2] + whole[1::2])


def test_elastic_resume_keeps_formatted_batches():
    """A loader state saved with 2 workers, resumed with 1 (an elastic plan): every example once, and
    the batches keep their format and dtypes."""
    pytest.importorskip("torchdata")

    def build():
        return ri.to_iterable_dataset(HF, num_shards=4).select_columns(["i", "f"]).with_format("numpy").batch(2)

    loader = ri.StatefulDataLoader(build(), batch_size=None, num_workers=2)
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(loader.state_dict()))
    resumed = ri.StatefulDataLoader(build(), batch_size=None, num_workers=1)
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert sorted(i for b in head + tail for i in b["i"].tolist()) == list(range(13))
    assert all(b["f"].dtype == torch.float32 and b["i"].dtype == torch.int64 for b in head + tail)


def test_formatted_batches_keep_the_rows_of_a_batch_interrupted_by_an_error():
    """with_format(...).batch(n) over a Python pipeline iterates the pipeline's own batch node, whose
    state holds the rows read before an error: a state taken then resumes exactly."""
    armed = {"on": True}

    def flaky(ex):
        if armed["on"] and ex["id"] == 6:
            armed["on"] = False
            raise RuntimeError("boom")
        return {}

    def build(fn):
        return ri.IterableDataset.from_generator(_rows, gen_kwargs={"n": 12}).map(fn).with_format("numpy").batch(4)

    full = [b["id"].tolist() for b in build(lambda ex: {})]
    ds = build(flaky)
    got = []
    with pytest.raises(RuntimeError):
        for b in ds:
            got.append(b["id"].tolist())
    resumed = build(lambda ex: {})
    resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    assert got + [b["id"].tolist() for b in resumed] == full


def _rows(n):
    for i in range(n):
        yield {"id": i}


# ---------------------------------------------------------------------- map / filter after with_format
# As in HF, a function given to map/filter after with_format receives formatted values: numpy
# arrays, torch tensors, a pyarrow Table, a pandas DataFrame (nodes/formatted_calls.py).

TYPES = {"numpy": np.ndarray, "torch": torch.Tensor, "arrow": pa.Table, "pandas": pd.DataFrame}


def _double_i(fmt):
    def fn(b):
        if fmt == "arrow":
            import pyarrow.compute as pc

            return b.append_column("i2", pc.multiply(b["i"], 2))
        if fmt == "pandas":
            return b.assign(i2=b["i"] * 2)
        return {"i2": b["i"] * 2}  # doubles an array (on a list it would repeat it)
    return fn


@pytest.mark.parametrize("fmt", list(TYPES))
@pytest.mark.parametrize("batched", [True, False])
def test_map_after_with_format_receives_formatted_values_as_hf(fmt, batched):
    seen = []

    def fn(b):
        seen.append(type(b) if fmt in ("arrow", "pandas") else type(b["i"]))
        return _double_i(fmt)(b)

    ours = ri.to_iterable_dataset(HF, num_shards=2).with_format(fmt).map(fn, batched=batched, batch_size=4)
    theirs = HF.to_iterable_dataset(num_shards=2).with_format(fmt).map(_double_i(fmt), batched=batched, batch_size=4)
    got = [(int(ex["i"]), int(ex["i2"])) for ex in ours.with_format(None)]
    assert got == [(int(ex["i"]), int(ex["i2"])) for ex in theirs.with_format(None)]
    assert got == [(i, 2 * i) for i in range(len(ROWS))]
    scalar = {np.int64} if fmt == "numpy" and not batched else set()  # HF tensorizes an example's int so
    assert seen and set(seen) <= {TYPES[fmt]} | scalar


@pytest.mark.parametrize("fmt", list(TYPES))
def test_filter_after_with_format_receives_formatted_values_as_hf(fmt):
    def odd(b):
        assert isinstance(b if fmt in ("arrow", "pandas") else b["i"], TYPES[fmt])
        i = b["i"]
        if fmt == "arrow":
            import pyarrow.compute as pc

            return pc.equal(pc.bit_wise_and(i, 1), 1)
        return i % 2 == 1

    ours = ri.to_iterable_dataset(HF, num_shards=2).with_format(fmt).filter(odd, batched=True, batch_size=4)
    theirs = HF.to_iterable_dataset(num_shards=2).with_format(fmt).filter(odd, batched=True, batch_size=4)
    assert [int(ex["i"]) for ex in ours.with_format(None)] == [int(ex["i"]) for ex in theirs.with_format(None)]
    assert [int(ex["i"]) for ex in ours.with_format(None)] == [i for i in range(len(ROWS)) if i % 2]


def _grow(t):
    """A table map changing the number of rows: its output replaces the batch (as HF)."""
    return pa.table({"i": [v for v in t["i"].to_pylist() for _ in range(1 + v % 2)]})


FORMATTED_PIPELINES = {
    "numpy_batched": lambda: ri.to_iterable_dataset(HF, num_shards=3).with_format("numpy").map(
        _double_i("numpy"), batched=True, batch_size=4),
    "torch_per_example": lambda: ri.to_iterable_dataset(HF, num_shards=3).with_format("torch").map(
        lambda ex: {"i2": ex["i"] * 2, "v2": ex["v"] + 1}),
    "arrow_rows_change": lambda: ri.to_iterable_dataset(HF, num_shards=3).with_format("arrow").map(
        _grow, batched=True, batch_size=5, remove_columns=["i"]),
    "pandas_filter_then_shuffle": lambda: ri.to_iterable_dataset(HF, num_shards=3).with_format("pandas").filter(
        lambda df: df["i"] % 3 != 0).shuffle(seed=1, buffer_size=4),
}


@pytest.mark.parametrize("name", list(FORMATTED_PIPELINES))
def test_formatted_functions_resume_exactly(name):
    def build():  # (a torch map's tensors stay tensors without the format, as in HF: compared as data)
        return Presented(FORMATTED_PIPELINES[name]().with_format(None))

    assert assert_resumes_exactly(build, roundtrip=codec_roundtrip)  # JSON text (numpy values tagged)


def test_formatted_functions_through_dataloader_workers():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def build():
        return ri.to_iterable_dataset(HF, num_shards=4).with_format("numpy").map(
            _double_i("numpy"), batched=True, batch_size=3).with_format("torch")

    got = sorted((int(b["i"]), int(b["i2"])) for b in StatefulDataLoader(build(), batch_size=None, num_workers=2))
    assert got == [(i, 2 * i) for i in range(len(ROWS))]


@pytest.mark.parametrize("fmt", ["arrow", "pandas"])
def test_an_async_function_after_a_table_format_is_refused(fmt):
    """HF cannot await it either (its table map takes the coroutine for the output); after a tensor
    format it is awaited, as in HF (``test_format_map_parity.py``)."""
    async def fn(ex):
        return ex

    with pytest.raises(TypeError, match="not an async one"):
        ri.to_iterable_dataset(HF).with_format(fmt).map(fn)


def test_a_table_map_must_return_a_table():
    ds = ri.to_iterable_dataset(HF).with_format("arrow").map(lambda t: {"x": [1] * len(t)}, batched=True)
    with pytest.raises(TypeError, match="return a pyarrow.Table"):
        list(ds)


def test_add_column_after_with_format_is_not_a_formatted_function():
    ds = ri.to_iterable_dataset(HF, num_shards=2).with_format("numpy").add_column("k", list(range(len(ROWS))))
    assert [int(ex["k"]) for ex in ds] == list(range(len(ROWS)))


def test_nulls_empty_and_ragged_lists_of_arrow_backed_rows_are_formatted_as_hf():
    """A null number is NaN, an empty list has its feature's dtype, and batches that are no simple
    columns (nulls, ragged lists) are formatted by HF's own formatter from the Arrow table."""
    from datasets import Features, List, Value

    features = Features({"n": Value("int64"), "el": List(Value("float32")), "s": Value("string")})
    hf = Dataset.from_dict({"n": [None, 1, 2, 3], "el": [[], [1.5], [], [2.5]], "s": ["a", None, "c", "d"]},
                           features=features)
    for op in (lambda d: d.take(4), lambda d: d.skip(0)):
        ours, theirs = op(ri.to_iterable_dataset(hf)).with_format("numpy"), op(hf.to_iterable_dataset()).with_format("numpy")
        got, want = list(ours), list(theirs)
        assert [kinds(r) for r in got] == [kinds(r) for r in want]
        assert np.isnan(got[0]["n"]) and got[0]["el"].dtype == np.float32
        got, want = list(ours.iter(2)), list(theirs.iter(2))
        assert [kinds(b) for b in got] == [kinds(b) for b in want]
        assert [str(b["s"].dtype) for b in got] == ["object", "<U1"]


@pytest.mark.parametrize("shuffled", [False, True])
def test_binary_columns_in_numpy_batches_keep_their_trailing_nul_bytes_as_hf(shuffled):
    """``with_format("numpy").batch(n)`` of a binary column gave a fixed-width ``'S'`` array, whose
    values drop trailing NUL bytes (``b"ab\\0"`` read as ``b"ab"``: raw audio or serialized records
    silently cut); HF's ``batch()`` gives an object array of the bytes, whole."""
    import datasets

    values = [b"ab\x00", b"c", b"\x00\x00", b"\x01\x00\x02\x00"]
    data = datasets.Dataset.from_dict({"b": values, "i": list(range(4))})

    def build(ds):
        ds = ds.with_format("numpy")
        return (ds.shuffle(seed=0, buffer_size=2) if shuffled else ds).batch(2)

    ours = [b["b"] for b in build(ri.to_iterable_dataset(data))]
    theirs = [b["b"] for b in build(data.to_iterable_dataset())]
    assert [a.dtype for a in ours] == [a.dtype for a in theirs] == [np.dtype(object)] * 2
    if not shuffled:  # (the shuffle orders differ)
        assert [list(a) for a in ours] == [list(a) for a in theirs] == [values[:2], values[2:]]
    assert sorted(v for a in ours for v in a) == sorted(values)
    assert_resumes_exactly(lambda: build(ri.to_iterable_dataset(data)), roundtrip=codec_roundtrip)
