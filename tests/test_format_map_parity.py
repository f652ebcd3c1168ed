"""``map`` / ``filter`` after ``with_format``: what the function receives and what comes out, side
by side with HF ``datasets`` 5.2, and every-cut-point exactness of such pipelines (JSON round
trip), alone and through a ``StatefulDataLoader`` with 0 and 2 workers.

* with ``input_columns``, HF formats the whole example (batch) and gives the function the input
  columns' values from it; the columns the function leaves alone keep their formatted values;
* a batched function on Python rows (a generator source) gets HF's batch: each row formatted,
  then the batch of them formatted again (numpy: float32 arrays);
* a batched function on Arrow-backed rows gets string columns as object arrays of ``np.str_``.
"""

from __future__ import annotations

import datasets as hf
import numpy as np
import pyarrow as pa
import pytest

import resumable_iterable as ri
from harness import assert_loader_resumes_exactly, assert_resumes_exactly, codec_roundtrip, json_roundtrip
from test_format import same, to_py

torch = pytest.importorskip("torch")

N = 7


def rows():
    for i in range(N):
        yield {"a": i, "b": [float(i), i + 0.5], "s": f"t{i}", "f": i * 1.5}


TABLE = pa.table({"a": list(range(N)), "b": [[float(i), i + 0.5] for i in range(N)],
                  "s": [f"t{i}" for i in range(N)], "f": [i * 1.5 for i in range(N)]})


def source(lib, kind):
    if kind == "generator":
        return lib.IterableDataset.from_generator(rows)
    if lib is hf:
        return hf.Dataset(TABLE).to_iterable_dataset(num_shards=1)
    return ri.IterableDataset.from_arrow_table(TABLE)


def side_by_side(kind, fmt, function, method="map", **kwargs):
    """(what the function got, what came out) for HF's pipeline and ours."""
    out = []
    for lib in (hf, ri):
        seen = []

        def recording(*args, **kw):
            seen.append(args)
            return function(*args, **kw)

        ds = getattr(source(lib, kind).with_format(fmt), method)(recording, **kwargs)
        out.append((seen, list(ds)))
    return out


def new_column(*args, **kwargs):
    return {"n": args[0]}


CASES = [dict(), dict(remove_columns=["f"]), dict(remove_columns=["a"]), dict(with_indices=True),
         dict(fn_kwargs={"z": 1}), dict(with_indices=True, fn_kwargs={"z": 1}, remove_columns=["b"])]


@pytest.mark.parametrize("kind", ["generator", "arrow"])
@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("columns", [["a"], ["a", "s"]])
def test_map_with_input_columns_after_a_tensor_format_equals_hf(kind, fmt, batched, columns):
    """The columns the function leaves alone were Python values formatted at the end (float64, 0-d
    arrays where HF gives float32, numpy scalars); the input columns were formatted alone."""
    for case in CASES:
        (hf_seen, hf_out), (seen, out) = side_by_side(kind, fmt, new_column, batched=batched, batch_size=3,
                                                      input_columns=columns, **case)
        same(seen, hf_seen, f"{case}: the function's arguments")
        same(out, hf_out, f"{case}: the output")


def _first_values(*args, **kwargs):
    return {"n": args[0]["b"] if isinstance(args[0], dict) else args[0]}


def _every_other(*args, **kwargs):
    n = len(args[0]["a"] if isinstance(args[0], dict) else args[0])
    return [i % 2 == 0 for i in range(n)]


@pytest.mark.parametrize("method", ["map", "filter"])
@pytest.mark.parametrize("columns", [None, ["b", "s"]])
def test_batched_function_after_numpy_format_on_python_rows_gets_hf_batch(method, columns):
    """HF formats the rows of a generator, then the batch it builds of them: float arrays are
    float32 (ours gave the float64 arrays of the Python lists formatted once). A map's output
    keeps them; a filter passes its rows on unformatted (docs/compat.md)."""
    function = _first_values if method == "map" else _every_other
    for case in ([dict(), dict(remove_columns=["a"])] if method == "map" else [dict(), dict(with_indices=True)]):
        (hf_seen, hf_out), (seen, out) = side_by_side("generator", "numpy", function, method, batched=True,
                                                      batch_size=3, input_columns=columns, **case)
        same(seen, hf_seen, f"{method} {case}: the function's arguments")
        if method == "map":
            same(out, hf_out, f"{method} {case}: the output")
        b = seen[0][0]["b"] if columns is None else seen[0][0]
        assert b.dtype == np.float32


@pytest.mark.parametrize("method", ["map", "filter"])
def test_batched_function_after_numpy_format_on_arrow_rows_gets_np_str_cells(method):
    """HF gives a batched function an object array of ``np.str_`` for a string column of Arrow-backed
    rows (its map formats the rows of a formatted batch again); ours gave ``str`` cells."""
    function = (lambda b: {"n": b["s"]}) if method == "map" else (lambda b: [len(x) > 1 for x in b["s"]])
    (hf_seen, hf_out), (seen, out) = side_by_side("arrow", "numpy", function, method, batched=True, batch_size=3)
    assert type(seen[0][0]["s"][0]) is np.str_
    same(seen, hf_seen, "the function's arguments")
    if method == "map":
        same(out, hf_out, "the output")


# ---------------------------------------------------------------------- exactness


def pipeline(fmt="numpy"):
    ds = ri.IterableDataset.from_generator(rows, gen_kwargs={}).shuffle(seed=3, buffer_size=3)
    ds = ds.with_format(fmt)
    ds = ds.map(lambda a, s, i: {"n": a * 2, "t": [x + "!" for x in s]}, input_columns=["a", "s"],
                with_indices=True, batched=True, batch_size=3, remove_columns=["f"])
    ds = ds.filter(lambda b: [x % 4 != 2 for x in b.tolist()], input_columns=["n"], batched=True, batch_size=2)
    return ds.map(lambda a: {"m": a + 1}, input_columns=["a"])


def _shards_rows(shards):
    for shard in shards:
        for i in range(3):
            yield {"a": i + 100 * shard, "b": [float(i), i + 0.5], "s": f"t{i}", "f": i * 1.5}


def sharded_pipeline():
    ds = ri.IterableDataset.from_generator(_shards_rows, gen_kwargs={"shards": [0, 1, 2, 3]})
    ds = ds.with_format("numpy").map(_loader_fn, input_columns=["a", "s"], batched=True, batch_size=3)
    return ds.map(_loader_fn_one, input_columns=["a"])


def _loader_fn(a, s):
    return {"n": a * 2, "t": [x + "!" for x in s]}


def _loader_fn_one(a):
    return {"m": a + 1}


def test_formatted_maps_with_input_columns_resume_exactly_at_every_cut_point():
    full = assert_resumes_exactly(lambda: _Presented(sharded_pipeline()))
    assert full and full[0]["b"][1] == "float32"  # the formatted value the maps kept
    # under a shuffle, batches keep their (formatted) rows in the state: saved through ri.dumps_state
    full = assert_resumes_exactly(lambda: _Presented(pipeline()), roundtrip=codec_roundtrip)
    assert len(full) == 4 and full[0]["b"][1] == "float32"


class _Presented:
    def __init__(self, ds):
        self.ds = ds

    def __iter__(self):
        return (to_py(x) for x in self.ds)

    def state_dict(self):
        return self.ds.state_dict()

    def load_state_dict(self, state):
        self.ds.load_state_dict(state)


@pytest.mark.parametrize("workers", [0, 2])
def test_formatted_maps_with_input_columns_resume_exactly_through_a_loader(workers):
    full = assert_loader_resumes_exactly(sharded_pipeline, workers=workers, batch_size=None, item=to_py,
                                         cuts=lambda n: range(1, n), as_json=True)
    assert len(full) == 12
    assert full[0]["b"] == ("tensor", "torch.float32", [0.0, 0.5])  # the formatted value the maps kept


STRUCTS = hf.Dataset.from_list([{"a": i, "d": {"x": i, "y": [0.5, i], "z": 1.5, "w": [[1.0]], "q": [1, 2]}}
                                for i in range(5)])


@pytest.mark.parametrize("op", ["take", "map", "batched map"])
def test_struct_lists_of_arrow_rows_after_numpy_format_equal_hf(op):
    """A struct's float lists are float32 arrays in HF's numpy rows of Arrow-backed sources (its
    formatter gets them from Arrow as arrays), and the floats of a batched map's structs float32
    (its batch is formatted once more); ours gave float64."""
    out = []
    for ds in (STRUCTS.to_iterable_dataset(), ri.to_iterable_dataset(STRUCTS)):
        seen = []
        if op == "take":
            rows_out = list(ds.take(3).with_format("numpy"))
        else:
            rows_out = list(ds.with_format("numpy").map(lambda x: seen.append(x) or {"n": x["a"]},
                                                       batched=op == "batched map", batch_size=2))
        out.append((seen, rows_out))
    same(out[1], out[0])
    assert out[1][1][0]["d"]["y"].dtype == np.float32


# ---------------------------------------------------------------------- filters after a table format


def _even_scalar(t):  # one row at a time: a pyarrow BooleanScalar, which HF takes
    import pyarrow.compute as pc

    return pc.equal(pc.bit_wise_and(t["a"][0], 1), 0)


def test_unbatched_filter_after_arrow_format_may_answer_a_boolean_scalar_as_hf():
    """HF takes a ``pyarrow.BooleanScalar`` as a table filter's answer; ours raised TypeError
    ('BooleanScalar' object is not iterable)."""
    (hf_seen, hf_out), (seen, out) = side_by_side("arrow", "arrow", _even_scalar, "filter")
    same(seen, hf_seen, "the function's arguments")
    assert [t["a"].to_pylist() for t in out] == [t["a"].to_pylist() for t in hf_out] == [[0], [2], [4], [6]]


def _table_filter_pipeline():
    ds = ri.IterableDataset.from_generator(_shards_rows, gen_kwargs={"shards": [0, 1, 2, 3]})
    return ds.with_format("arrow").filter(_even_scalar)


@pytest.mark.parametrize("workers", [0, 2])
def test_filter_answering_boolean_scalars_resumes_exactly(workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    full = assert_resumes_exactly(lambda: _Presented(_table_filter_pipeline()))
    assert [t[2]["a"] for t in full] == [[0], [2], [100], [102], [200], [202], [300], [302]]  # one-row tables

    def run(state=None, stop=None):
        dl = StatefulDataLoader(_table_filter_pipeline().with_format(None), batch_size=None, num_workers=workers)
        if state is not None:
            dl.load_state_dict(state)
        out = []
        for b in dl:
            out.append(int(b["a"]))
            if len(out) == stop:
                return out, json_roundtrip(dl.state_dict())
        return out, None

    loaded, _ = run()
    assert sorted(loaded) == [0, 2, 100, 102, 200, 202, 300, 302]
    for k in range(1, len(loaded)):
        head, state = run(stop=k)
        tail, _ = run(state=state)
        assert head + tail == loaded, f"cut after {k} ({workers} workers)"


@pytest.mark.parametrize("fmt", ["numpy", "arrow", "pandas"])
def test_batched_filter_after_a_format_answering_no_list_is_a_clear_error(fmt):
    """A formatted batched filter that answers an int raised "'int' object is not iterable"; the
    error now says what is expected, and its note names the function, the shard and the rows."""
    ds = source(ri, "generator").with_format(fmt).filter(_answer_five, batched=True, batch_size=2)
    with pytest.raises(TypeError, match=r"filter function applied to .* must return .*list .* of booleans.*got int") as e:
        list(ds)
    assert e.value.__notes__ == ["in filter(_answer_five) on the batch of examples #0..#1 "
                                 "(source generator shard 0, rows 0..1)"]


def _answer_five(batch):
    return 5


# ---------------------------------------------------------------------- map(features=) and table formats

DECLARED = hf.Features({"a": hf.Value("int64"), "n": hf.Value("int32")})


def _plain_rows():
    for i in range(3):
        yield {"a": i}


@pytest.mark.parametrize("fmt", ["arrow", "pandas"])
@pytest.mark.parametrize("value", ["x", "1"])
def test_map_features_that_the_values_do_not_fit_raise_in_a_table_format_as_hf(fmt, value):
    """HF casts a table format's tables to the features a map declared: values that do not fit
    raise ArrowInvalid, values that do are cast. Ours yielded the uncast strings silently."""
    results = []
    for lib in (hf, ri):
        ds = lib.IterableDataset.from_generator(_plain_rows).map(lambda x: {"n": value}, features=DECLARED)
        try:
            results.append(("ok", [to_py(x) for x in ds.with_format(fmt)]))
        except pa.ArrowInvalid as e:
            results.append(("ArrowInvalid", str(e)))
    assert results[1] == results[0]
    if value == "x":
        ds = ri.IterableDataset.from_generator(_plain_rows).map(lambda x: {"n": value}, features=DECLARED)
        formatted = ds.with_format(fmt)
        it = iter(formatted)
        with pytest.raises(pa.ArrowInvalid) as e:
            next(it)
        assert "(source generator shard 0, row 0)" in e.value.__notes__[-1]
        # the example is not lost: a state taken now yields it again first (a format is presentation only)
        state = json_roundtrip(formatted.state_dict())
        again = ri.IterableDataset.from_generator(_plain_rows).map(lambda x: {"n": value}, features=DECLARED)
        again.load_state_dict(state)
        assert [x["a"] for x in again] == [0, 1, 2]


# ---------------------------------------------------------------------- batched length errors


def _more_rows(batch):
    return {"n": [1, 2, 3]}


def _uneven(batch):
    return {"n": [1, 2, 3], "m": [1]}


@pytest.mark.parametrize("fmt", [None, "numpy", "torch"])
@pytest.mark.parametrize("function", [_more_rows, _uneven])
def test_batched_length_errors_start_with_hf_message(fmt, function):
    """Code matching HF's whole "Column lengths mismatch: columns [...] have length [...] while ..."
    message keeps working: ours starts with it (it only shared the first three words)."""
    messages = []
    for lib in (hf, ri):
        ds = source(lib, "generator")
        ds = (ds.with_format(fmt) if fmt else ds).map(function, batched=True, batch_size=2)
        with pytest.raises(ValueError) as e:
            list(ds)
        messages.append(str(e.value))
    assert messages[1].startswith(messages[0]), messages
    assert messages[0].startswith("Column lengths mismatch: columns [")


# ---------------------------------------------------------------------- async functions after a tensor format


async def _async_double(a):
    return {"n": a * 2}


async def _async_double_batch(batch):
    return {"n": batch["a"] * 2}


async def _async_keep(a):
    return int(a) % 3 != 1


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["generator", "arrow"])
def test_async_functions_after_a_tensor_format_equal_hf(fmt, kind):
    """HF awaits an ``async`` map or filter after ``with_format("numpy" | "torch")``; ours refused
    it (TypeError: takes a plain function)."""
    for method, function, kwargs in [("map", _async_double, dict(input_columns=["a"])),
                                     ("map", _async_double_batch, dict(batched=True, batch_size=3)),
                                     ("filter", _async_keep, dict(input_columns=["a"]))]:
        out = []
        for lib in (hf, ri):
            ds = getattr(source(lib, kind).with_format(fmt), method)(function, **kwargs)
            out.append(list(ds))
        if method == "map":
            same(out[1], out[0], f"{method} {kwargs}")
        else:  # (a filter passes its rows on unformatted: docs/compat.md)
            assert [int(x["a"]) for x in out[1]] == [int(x["a"]) for x in out[0]] == [0, 2, 3, 5, 6]


def async_pipeline():
    ds = ri.IterableDataset.from_generator(_shards_rows, gen_kwargs={"shards": [0, 1, 2, 3]})
    # (calls in flight keep their inputs in the state: Python rows, JSON values, in this order)
    return ds.with_format("numpy").filter(_async_keep, input_columns=["a"]).map(_async_double, input_columns=["a"])


def test_async_functions_after_a_format_resume_exactly():
    full = assert_resumes_exactly(lambda: _Presented(async_pipeline()))
    assert [x["n"] for x in full][:3] == [("np", "int64", 0), ("np", "int64", 4), ("np", "int64", 202)]


@pytest.mark.parametrize("workers", [0, 2])
def test_async_functions_after_a_format_resume_exactly_through_a_loader(workers):
    full = assert_loader_resumes_exactly(async_pipeline, workers=workers, batch_size=None, item=to_py,
                                         cuts=lambda n: range(1, n), as_json=True)
    assert len(full) == 8


# ---------------------------------------------------------------------- a batched map leaving no column


def _nothing(batch):
    return {}


def _numbers(n):
    for i in range(n):
        yield {"a": i, "b": -i}


def test_a_batched_map_leaving_no_column_yields_no_row_as_hf():
    """A batched map returning ``{}`` with every input column removed (a function run for its
    side effects) yielded one empty row per input row; HF's IterableDataset (and its Dataset.map)
    yield none."""
    got = []
    for lib in (hf, ri):
        ds = lib.IterableDataset.from_generator(_numbers, gen_kwargs={"n": 5})
        got.append(list(ds.map(_nothing, batched=True, batch_size=2, remove_columns=["a", "b"])))
    assert got[1] == got[0] == []
    # with a column left, the rows stay; a resume anywhere continues exactly (JSON round trip)
    def build():
        ds = ri.IterableDataset.from_generator(_numbers, gen_kwargs={"n": 7})
        ds = ds.map(_nothing, batched=True, batch_size=2, remove_columns=["a", "b"])
        return ri.concatenate_datasets([ds, ri.IterableDataset.from_generator(_numbers, gen_kwargs={"n": 3})])
    full = assert_resumes_exactly(build)
    assert full == [{"a": 0, "b": 0}, {"a": 1, "b": -1}, {"a": 2, "b": -2}]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batched_map_leaving_no_column_resumes_exactly_through_a_loader(workers):
    def build():
        ds = ri.IterableDataset.from_generator(_shards_rows, gen_kwargs={"shards": [0, 1, 2, 3]})
        empty = ds.map(_nothing, batched=True, batch_size=2, remove_columns=["a", "b", "s", "f"])
        kept = ds.map(_nothing, batched=True, batch_size=2, remove_columns=["b", "s", "f"])
        return ri.concatenate_datasets([empty, kept])

    full = assert_loader_resumes_exactly(build, workers=workers, batch_size=None, item=lambda b: int(b["a"]),
                                         cuts=lambda n: range(1, n), as_json=True)
    assert sorted(full) == sorted(a + 100 * s for s in range(4) for a in range(3))


@pytest.mark.parametrize("fmt", ["arrow", "pandas"])
def test_an_error_of_an_unbatched_table_map_names_its_example(fmt):
    """A map after with_format("arrow" | "pandas") runs one row at a time (a one-row table): its
    error note said "on the batch of examples #2..#2" for a map the user did not batch."""
    def fails_on_2(t):
        if len(t) and int(t["a"][0].as_py() if fmt == "arrow" else t["a"].iloc[0]) == 2:
            raise RuntimeError("boom")
        return t

    ds = source(ri, "generator").with_format(fmt).map(fails_on_2)
    with pytest.raises(RuntimeError) as e:
        list(ds)
    assert e.value.__notes__ == [f"in map({fails_on_2.__qualname__}) on example #2 (source generator shard 0, row 2)"]


# ---------------------------------------------------------------------- declared types given to table functions

TYPED_TABLE = pa.table({"a": pa.array(range(5), pa.int32()), "b": pa.array([[1.0]] * 5, pa.list_(pa.float32())),
                        "s": ["x"] * 5})


def _arguments_of_table_function(lib, fmt, columns, shuffled, batched):
    ds = hf.Dataset(TYPED_TABLE).to_iterable_dataset() if lib is hf else ri.to_iterable_dataset(hf.Dataset(TYPED_TABLE))
    if shuffled:
        ds = ds.shuffle(seed=1, buffer_size=2)
    seen = []

    def function(*args):
        seen.append(args[0].schema if hasattr(args[0], "schema") else
                    [a.type for a in args] if columns else dict(args[0].dtypes))
        return args[0] if columns is None else pa.table({"n": args[0]})

    list(ds.with_format(fmt).map(function, input_columns=columns, batched=batched, batch_size=2))
    return seen


@pytest.mark.parametrize("fmt", ["arrow", "pandas"])
@pytest.mark.parametrize("columns", [None, ["a"], ["a", "b"]])
@pytest.mark.parametrize("shuffled", [False, True])
def test_table_functions_get_the_declared_types_as_hf(fmt, columns, shuffled):
    """HF gives a table-format function the Arrow types of its rows (``int32``, ``list<float>``),
    also as the ``input_columns`` arrays and after a shuffle; ours gave the types inferred from
    Python values there (``int64``, ``list<double>``)."""
    for batched in (False, True):
        theirs = _arguments_of_table_function(hf, fmt, columns, shuffled, batched)
        ours = _arguments_of_table_function(ri, fmt, columns, shuffled, batched)
        assert [str(x) for x in ours] == [str(x) for x in theirs]


# ---------------------------------------------------------------------- tensors a torch map returns


def _half_features(ex):
    return {"h": torch.ones(2, dtype=torch.float16) * ex["a"], "k": torch.tensor(7, dtype=torch.int32)}


def _half_features_batch(batch):
    n = len(batch["a"])
    return {"h": torch.ones((n, 2), dtype=torch.float16), "k": torch.arange(n, dtype=torch.int32)}


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("then", ["torch", None])
def test_tensors_a_torch_map_returns_keep_their_dtype_as_hf(batched, then):
    """HF keeps the tensors a map after with_format("torch") returns (float16, int32), also when the
    format is then removed; ours made numpy arrays of them, formatted again as float32 / int64
    tensors (or yielded as numpy arrays after with_format(None))."""
    function = _half_features_batch if batched else _half_features
    out = []
    for lib in (hf, ri):
        ds = source(lib, "arrow").with_format("torch").map(function, batched=batched, batch_size=3)
        out.append(list(ds.with_format(then) if then is None else ds))
    same(out[1], out[0])
    assert out[1][0]["h"].dtype == torch.float16 and out[1][0]["k"].dtype == torch.int32


def _torch_map_pipeline():
    ds = ri.IterableDataset.from_generator(_shards_rows, gen_kwargs={"shards": [0, 1, 2, 3]})
    return ds.with_format("torch").map(_half_features_batch, batched=True, batch_size=2).map(_half_features)


def test_tensors_a_torch_map_returns_resume_exactly():
    full = assert_resumes_exactly(lambda: _Presented(_torch_map_pipeline()))
    assert full[0]["h"][:2] == ("tensor", "torch.float16")


@pytest.mark.parametrize("workers", [0, 2])
def test_tensors_a_torch_map_returns_resume_exactly_through_a_loader(workers):
    full = assert_loader_resumes_exactly(_torch_map_pipeline, workers=workers, batch_size=None, item=to_py,
                                         cuts=lambda n: range(1, n), as_json=True)
    assert len(full) == 12 and full[0]["k"][:2] == ("tensor", "torch.int32")
