"""Lists of numbers under ``with_format("numpy" | "torch")`` (token ids, embeddings, waveforms).

* Where Arrow-backed rows stay on HF's Arrow path (shuffle, interleave, take...), large lists of
  numbers are read into numpy arrays (``rows.large_list_arrays``, ``SourceNode.read_lists_as_arrays``)
  and small ones formatted at once: values, dtypes and types equal HF's, for every list type, in
  rows and ``iter`` batches, with format keyword arguments;
* HF's element-by-element tensorizing of Python lists is replaced by one conversion
  (``format_rows.list_tensorize``) that gives the same values, dtypes and types;
* states holding those arrays resume exactly (``save_state`` codec), in the same format, in
  Python format (lists again), after the user edits what was yielded, and through
  ``StatefulDataLoader`` workers;
* the dataset's own pipeline is not changed: the same dataset without the format still yields lists.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from datasets import Dataset, Features, List, Value

import resumable_iterable as ri
from harness import assert_loader_resumes_exactly, assert_resumes_exactly, codec_roundtrip
from resumable_iterable.nodes.format_rows import list_tensorize
from resumable_iterable.nodes.rows import LARGE_LIST_BYTES, large_list_arrays

torch = pytest.importorskip("torch")
from test_format import Presented, same  # noqa: E402  (after torch: its helpers use it)

N = 24
FEATURES = Features({
    "id": Value("int64"),
    "small": List(Value("int32")),  # a few numbers: stays a Python list
    "tok": List(Value("int32")),  # 1.2 KB: read as arrays
    "emb": List(Value("float32")),
    "f64": List(Value("float64")),
    "u16": List(Value("uint16")),
    "i8": List(Value("int8")),
    "fixed": List(Value("float32"), length=300),
    "some_null": List(Value("int64")),  # null rows
    "holes": List(Value("float32")),  # null numbers inside: stays a Python list
    "flags": List(Value("bool")),
    "nested": List(List(Value("int32"))),
})


def _row(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "id": i,
        "small": list(range(i % 4)),
        "tok": rng.integers(-2**31, 2**31, 300 + i).tolist(),
        "emb": rng.standard_normal(512).astype(np.float32).tolist() if i % 7 else [],
        "f64": (rng.standard_normal(200) * 1e10).tolist(),
        "u16": rng.integers(0, 2**16, 600).tolist(),
        "i8": rng.integers(-128, 128, 2048).tolist(),
        "fixed": rng.standard_normal(300).astype(np.float32).tolist(),
        "some_null": None if i % 5 == 2 else rng.integers(0, 10**12, 200).tolist(),
        "holes": [None if j % 97 == 3 else float(j) for j in range(400)],
        "flags": (rng.random(2000) < 0.5).tolist(),
        "nested": [[i, i + 1], [i + 2, i + 3]] if i % 3 else [[i], [i, i]],
    }


DATA = Dataset.from_list([_row(i) for i in range(N)], features=FEATURES)


def both(op):
    import datasets

    ours = op(ri.to_iterable_dataset(DATA, num_shards=3), ri)
    theirs = op(DATA.to_iterable_dataset(num_shards=3), datasets)
    return ours, theirs


OPS = {  # name: (operation, same order in both libraries)
    "take": (lambda d, lib: d.take(17), True),
    "skip": (lambda d, lib: d.skip(5), True),
    "repeat": (lambda d, lib: d.repeat(2), True),
    "interleave": (lambda d, lib: lib.interleave_datasets([d, d.skip(9)]), True),
    "concatenate": (lambda d, lib: lib.concatenate_datasets([d.take(4), d]), True),
    "shuffle": (lambda d, lib: d.shuffle(seed=3, buffer_size=5), False),
}
FORMATS = [("numpy", {}), ("torch", {}), ("numpy", {"dtype": np.float64}), ("torch", {"dtype": torch.float64})]


def by_id(rows: list) -> list:
    return sorted(rows, key=lambda r: int(r["id"]))


@pytest.mark.parametrize("fmt,kwargs", FORMATS, ids=["numpy", "torch", "numpy-f64", "torch-f64"])
@pytest.mark.parametrize("name", list(OPS))
def test_list_columns_on_the_arrow_path_equal_hf(name, fmt, kwargs):
    op, ordered = OPS[name]
    ours, theirs = both(op)
    ours, theirs = ours.with_format(fmt, **kwargs), theirs.with_format(fmt)
    got, want = list(ours), list(theirs)
    if kwargs:  # HF's IterableDataset takes no format arguments: its formatter's rows, with them
        from datasets.formatting import get_formatter

        formatter = get_formatter(fmt, features=FEATURES, **kwargs)
        table = DATA.data.table
        want = [formatter.format_row(table.slice(int(r["id"]), 1)) for r in want]
        ordered = False
    if not ordered:  # our shuffle drains its buffer in another order (docs/compat.md)
        got, want = by_id(got), by_id(want)
    same(got, want, f"{name} rows")
    if ordered:
        same(list(ours.iter(5)), list(theirs.iter(5)), f"{name} iter(5)")
    else:
        assert sum(len(b["id"]) for b in ours.iter(5)) == len(want)


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("name", [n for n, (_, ordered) in OPS.items() if ordered])
def test_dataset_batches_of_list_columns_equal_hf(name, fmt):
    """``batch()`` after ``with_format`` equals HF's (a batched map given formatted batches); before it,
    ours gives the same batches (HF formats its batch()'s Python values there: float64 lists, object
    empty arrays, ``[]`` in torch - docs/compat.md)."""
    op, _ = OPS[name]
    ours, theirs = both(op)
    want = list(theirs.with_format(fmt).batch(5))
    same(list(ours.with_format(fmt).batch(5)), want, f"{name} format, batch")
    same(list(ours.batch(5).with_format(fmt)), want, f"{name} batch, format")


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("kind", ["map", "filter"])
def test_functions_after_with_format_get_list_columns_as_hf_gives_them(kind, batched, fmt):
    """What HF hands a map / filter given after ``with_format`` over Arrow-backed rows: its rows
    formatted from Arrow (typed empty lists, NaN for a null number), in both formats."""
    seen = {"ours": [], "hf": []}

    def spy(name):
        def fn(x):
            seen[name].append(x)
            if kind == "filter":
                return [True] * len(x["id"]) if batched else True
            return {}
        return fn

    for name, d in zip(("ours", "hf"), both(lambda d, lib: d.take(11))):
        d = getattr(d.with_format(fmt), kind)(spy(name), batched=batched, batch_size=4)
        for _ in d:
            pass
    assert len(seen["ours"]) == len(seen["hf"]) > 0
    same(seen["ours"], seen["hf"], f"{kind} inputs")


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_large_lists_travel_as_arrays_only_under_a_tensor_format(fmt):
    ds = ri.to_iterable_dataset(DATA, num_shards=3).shuffle(seed=0, buffer_size=6)
    formatted = ds.with_format(fmt)
    it = iter(formatted)
    next(it)
    state = formatted.state_dict()
    kinds = {type(v).__name__ for ex in _buffered(state) for k, v in ex.items() if k == "tok"}
    assert kinds == {"ndarray"}, kinds
    small = {type(ex["small"]).__name__ for ex in _buffered(state)}
    assert small == {"list"}  # a few numbers stay a list: the state stays plain JSON where it can
    # the dataset the format was set on, and a twin without it, still read lists
    plain = ds.take(30)
    assert all(type(ex["tok"]) is list for ex in plain)
    assert all(type(ex["tok"]) is list for ex in ds)
    again = iter(ds)
    next(again)
    assert {type(ex["tok"]) for ex in _buffered(ds.state_dict())} == {list}


def _buffered(state: dict) -> list[dict]:
    """The examples held in the shuffle buffers of a state (any layout of its chunks)."""
    out = []

    def walk(node):
        if isinstance(node, dict):
            buf = node.get("buffer")
            if isinstance(buf, list):
                for chunk in buf:
                    out.extend(chunk if isinstance(chunk, list) else [chunk])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(state)
    return [ex for ex in out if isinstance(ex, dict) and "tok" in ex]


def arrays_pipeline(fmt="torch", batch=None, source="arrow", shuffle=True, own_batches=0):
    def build():  # (without the NaN of "holes", which == cannot compare)
        if source == "arrow":
            d = ri.to_iterable_dataset(DATA, num_shards=3).remove_columns("holes")
        else:
            d = ri.IterableDataset.from_parquet(source).remove_columns("holes")
        d = ri.interleave_datasets([d, d.skip(7)], seed=1, probabilities=[0.6, 0.4]) if shuffle == "interleave" else d
        if shuffle:
            d = d.shuffle(seed=2, buffer_size=7)
        if own_batches:  # the dataset's own batch(): its node holds the rows of a failed batch
            return Presented(d.with_format(fmt).batch(own_batches))
        return Presented(d.with_format(fmt), batch)

    return build


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("batch", [None, 4])
def test_states_holding_arrays_resume_exactly_at_every_cut(fmt, batch):
    full = assert_resumes_exactly(arrays_pipeline(fmt, batch), roundtrip=codec_roundtrip)
    assert len(full) == (N if batch is None else -(-N // batch))


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_dataset_batches_with_arrays_resume_exactly_at_every_cut(fmt):
    assert_resumes_exactly(arrays_pipeline(fmt, own_batches=5), roundtrip=codec_roundtrip)


def test_interleave_under_shuffle_resumes_exactly_with_arrays_in_its_state():
    assert_resumes_exactly(arrays_pipeline("torch", None, shuffle="interleave"), roundtrip=codec_roundtrip)


def test_parquet_source_reads_large_lists_as_arrays_and_resumes_exactly(tmp_path):
    paths = []
    for k in range(2):
        path = str(tmp_path / f"part{k}.parquet")
        DATA.select(range(k * 12, (k + 1) * 12)).to_parquet(path)
        paths.append(path)
    ours = ri.IterableDataset.from_parquet(paths).shuffle(seed=0, buffer_size=5).with_format("torch")
    want = {int(r["id"]): r for r in DATA.to_iterable_dataset().with_format("torch")}
    got = list(ours)
    assert sorted(int(r["id"]) for r in got) == list(range(N))
    for r in got:
        same({k: r[k] for k in ("tok", "emb", "f64", "u16", "fixed", "some_null")},
             {k: want[int(r["id"])][k] for k in ("tok", "emb", "f64", "u16", "fixed", "some_null")}, f"row {r['id']}")
    assert_resumes_exactly(arrays_pipeline("torch", None, source=paths), roundtrip=codec_roundtrip, max_cuts=9)


def test_a_state_saved_under_a_tensor_format_resumes_in_python_format_with_lists():
    def build(fmt):
        d = ri.to_iterable_dataset(DATA, num_shards=3).remove_columns("holes")
        return d.shuffle(seed=2, buffer_size=7).with_format(fmt)

    full = list(build(None))
    for k in (0, 3, 11, N - 1):
        ds = build("torch")
        it = iter(ds)
        for _ in range(k):
            next(it)
        state = ri.loads_state(ri.dumps_state(ds.state_dict()))
        assert any(type(ex["tok"]) is np.ndarray for ex in _buffered(state)) or k == 0
        for batch in (None, 3):
            resumed = build(None)
            resumed.load_state_dict(state)
            if batch is None:
                tail = list(resumed)
                assert tail == full[k:]
                assert all(type(ex["tok"]) is list for ex in tail)
            else:
                got = list(resumed.iter(batch))
                assert [i for b in got for i in b["id"]] == [ex["id"] for ex in full[k:]]
                assert all(type(t) is list for b in got for t in b["tok"])


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_editing_yielded_values_in_place_does_not_change_a_taken_state(fmt):
    ds = ri.to_iterable_dataset(DATA, num_shards=3).shuffle(seed=2, buffer_size=7).with_format(fmt)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    saved = ri.dumps_state(state)
    for ex in it:
        ex["tok"] += 1  # numpy arrays and tensors alike
        ex["emb"] *= 0
    assert ri.dumps_state(state) == saved
    resumed = ri.to_iterable_dataset(DATA, num_shards=3).shuffle(seed=2, buffer_size=7).with_format(fmt)
    resumed.load_state_dict(ri.loads_state(saved))
    fresh = list(ri.to_iterable_dataset(DATA, num_shards=3).shuffle(seed=2, buffer_size=7).with_format(fmt))[1:]
    same(list(resumed), fresh, "resumed")


def test_global_shuffle_reads_arrays_without_changing_the_dataset_it_was_built_from():
    base = ri.to_iterable_dataset(DATA, num_shards=3).shuffle(seed=4, buffer_size=None)
    want = {int(r["id"]): r for r in DATA.to_iterable_dataset().with_format("torch")}
    got = list(base.with_format("torch"))
    assert sorted(int(r["id"]) for r in got) == list(range(N))
    for r in got:
        same(r, want[int(r["id"])], f"row {r['id']}")
    assert all(type(ex["tok"]) is list for ex in base)  # the template's source was not switched


@pytest.mark.parametrize("workers", [0, 2])
def test_through_the_stateful_dataloader_with_workers(workers):
    pytest.importorskip("torchdata")

    def build():
        d = ri.to_iterable_dataset(DATA, num_shards=4)
        d = ri.interleave_datasets([d, d.skip(6)], seed=1)
        return d.shuffle(seed=3, buffer_size=6).with_format("torch")

    full = assert_loader_resumes_exactly(build, workers=workers, batch_size=None,
                                         item=lambda ex: (int(ex["id"]), ex["tok"].tolist(), ex["emb"].tolist()),
                                         cuts=lambda n: [1, n // 3, n // 2, n - 1])
    want = {(ex["id"], str(ex["tok"])) for ex in build().with_format(None)}
    assert {(i, str(tok)) for i, tok, _ in full} == want and len(full) > N


# ---------------------------------------------------------------------- the pieces


def _py(values: list) -> list:
    return [v.tolist() if isinstance(v, np.ndarray) else v for v in values]


def test_large_list_arrays_of_every_list_layout():
    arr = pa.array([list(range(3000)), None, [], list(range(5, 4000)), [1, 2]], type=pa.list_(pa.int32()))
    got = large_list_arrays(arr)
    assert _py(got) == arr.to_pylist()
    assert [type(g).__name__ for g in got] == ["ndarray", "NoneType", "list", "ndarray", "list"]  # by each row's size
    assert got[0].dtype == np.int32 and got[0].flags.writeable and got[0].base is None  # own copies
    for piece in (arr.slice(2, 2), arr.slice(3), pa.chunked_array([arr.slice(0, 1), arr.slice(3)])):
        assert _py(large_list_arrays(piece)) == piece.to_pylist()
    large = pa.array([[1.5] * 300, [2.5] * 300], type=pa.large_list(pa.float64()))
    assert _py(large_list_arrays(large)) == large.to_pylist()
    fixed = pa.array([[float(i)] * 300 for i in range(4)], type=pa.list_(pa.float32(), 300)).slice(1, 3)
    got = large_list_arrays(fixed)
    assert _py(got) == fixed.to_pylist() and got[0].dtype == np.float32
    fixed_nulls = pa.array([[1.0] * 300, None], type=pa.list_(pa.float32(), 300))
    assert _py(large_list_arrays(fixed_nulls)) == fixed_nulls.to_pylist()
    u64 = pa.array([[2**64 - 1] * 200], type=pa.list_(pa.uint64()))
    assert large_list_arrays(u64)[0].tolist() == u64.to_pylist()[0]
    holes = pa.array([[1.0] * 300 + [None], [2.0] * 300], type=pa.list_(pa.float64()))
    got = large_list_arrays(holes)  # the row holding a null number stays a list, the other is an array
    assert type(got[0]) is list and type(got[1]) is np.ndarray and _py(got) == holes.to_pylist()


def test_a_row_is_read_the_same_way_whatever_rows_are_read_with_it():
    """A resume, a re-read of buffered positions or a worker's shards read rows in other groups:
    each row's representation (array or list) depends on that row only."""
    rng = np.random.default_rng(0)
    rows = [None if i % 11 == 5 else [float(v) for v in rng.standard_normal(int(rng.integers(0, 600)))]
            for i in range(60)]
    rows[7] = [1.0] * 400 + [None]
    arr = pa.array(rows, type=pa.list_(pa.float32()))
    whole = large_list_arrays(arr)
    for size in (1, 2, 7):
        pieces = []
        for k in range(0, len(arr), size):
            got = large_list_arrays(arr.slice(k, size))
            pieces += arr.slice(k, size).to_pylist() if got is None else got
        assert [type(p) for p in pieces] == [type(w) for w in whole], size
        assert _py(pieces) == _py(whole) == arr.to_pylist()


def test_large_list_arrays_leaves_what_it_cannot_give_exactly():
    small = pa.array([[1, 2, 3]], type=pa.list_(pa.int32()))
    assert large_list_arrays(small) is None  # under LARGE_LIST_BYTES per row
    width = LARGE_LIST_BYTES // 4
    assert large_list_arrays(pa.array([[1] * width], type=pa.list_(pa.int32()))) is not None
    assert large_list_arrays(pa.array([[1] * (width - 1)], type=pa.list_(pa.int32()))) is None
    holes = pa.array([[1.0] * 300 + [None]], type=pa.list_(pa.float64()))
    assert large_list_arrays(holes) is None  # a null number: Python's None, which no array holds
    assert large_list_arrays(pa.array([[True] * 5000])) is None  # bits, not bytes
    assert large_list_arrays(pa.array([["a"] * 5000])) is None
    assert large_list_arrays(pa.array([[1.0] * 5000], type=pa.list_(pa.float16()))) is None
    assert large_list_arrays(pa.array([[[1] * 300]], type=pa.list_(pa.list_(pa.int64())))) is None
    assert large_list_arrays(pa.array([1, 2, 3])) is None
    assert large_list_arrays(pa.chunked_array([], type=pa.list_(pa.int64()))) is None


VALUES = [
    [1, 2, 3], [1.5, -2.0], [True, False], [1, 2.5], [True, 1], [], [[1, 2], [3, 4]], [[1, 2], [3]], [[], []],
    [[1.5], [2.5]], [2**63, 1], [2**63], [2**70], [None, 1], [1, None], ["a", "b"], [np.int32(1), np.int32(2)],
    [[[1, 2]], [[3, 4]]], 5, 2.5, "s", None, np.arange(3), {"a": [1, 2], "b": {"c": [1.5, 2.5]}},
]


@pytest.mark.parametrize("fmt,kwargs", FORMATS + [("numpy", {"dtype": np.float16}), ("torch", {"dtype": torch.float16})],
                         ids=["numpy", "torch", "numpy-f64", "torch-f64", "numpy-f16", "torch-f16"])
def test_list_tensorize_gives_what_hf_recursive_tensorize_gives(fmt, kwargs):
    from datasets.formatting import get_formatter

    formatter = get_formatter(fmt, **kwargs)
    fast = list_tensorize(formatter)
    for value in VALUES:
        for data in (value, {"x": value, "y": 1}):
            try:
                want = formatter.recursive_tensorize(data)
            except Exception as e:  # noqa: BLE001 - the same error, whatever it is
                with pytest.raises(type(e)):
                    fast(data)
                continue
            same(fast(data), want, f"{fmt} {kwargs} {data!r}")


@pytest.mark.parametrize("saved_workers,new_workers", [(2, 1), (1, 3), (0, 2)])
def test_elastic_resume_onto_another_worker_count_with_arrays_in_the_states(saved_workers, new_workers):
    """Worker states holding the arrays (an interleave's peeked row, shuffle buffers), saved with
    ``save_state``, resumed by ``ri.StatefulDataLoader`` with another worker count: every row once."""
    pytest.importorskip("torchdata")

    def build():
        d = ri.to_iterable_dataset(DATA, num_shards=4).remove_columns("holes")
        e = ri.to_iterable_dataset(DATA.select(range(5, N)), num_shards=4).remove_columns("holes")
        mix = ri.interleave_datasets([d, e], probabilities=[0.5, 0.5], seed=1,
                                     stopping_strategy="all_exhausted_without_replacement")
        return mix.shuffle(seed=3, buffer_size=6).with_format("torch")

    def key(ex):
        return int(ex["id"]), ex["tok"].tolist()

    everything = sorted(key(ex) for ex in build())  # each row of both inputs once, whatever the workers
    assert len(everything) == 2 * N - 5
    for cut in (1, 9):
        dl = ri.StatefulDataLoader(build(), batch_size=None, num_workers=saved_workers)
        head = []
        for ex in dl:
            head.append(key(ex))
            if len(head) == cut:
                state = ri.loads_state(ri.dumps_state(dl.state_dict()))
                break
        resumed = ri.StatefulDataLoader(build(), batch_size=None, num_workers=new_workers)
        resumed.load_state_dict(state)
        tail = [key(ex) for ex in resumed]
        assert sorted(head + tail) == everything, f"{saved_workers} -> {new_workers} workers, cut {cut}"


@pytest.mark.parametrize("fmt", [None, "arrow", "pandas"])
def test_dataset_batches_resumed_without_the_tensor_format_hold_lists(fmt):
    """A state of ``shuffle().batch()`` taken under torch holds arrays; resumed without a tensor
    format, the batches are those of the uninterrupted run (lists; the tables' list types)."""
    def build(f):
        d = ri.to_iterable_dataset(DATA, num_shards=3).remove_columns("holes")
        return d.shuffle(seed=0, buffer_size=6).batch(4).with_format(f)

    full = list(build(fmt))
    ds = build("torch")
    it = iter(ds)
    next(it)
    state = ri.loads_state(ri.dumps_state(ds.state_dict()))
    assert any(type(ex["tok"]) is np.ndarray for ex in _buffered(state))
    resumed = build(fmt)
    resumed.load_state_dict(state)
    got = list(resumed)
    if fmt is None:
        assert got == full[1:]
        assert {type(t) for b in got for t in b["tok"]} == {list}
    elif fmt == "arrow":
        assert [b.schema for b in got] == [b.schema for b in full[1:]]
        assert [b.to_pydict() for b in got] == [b.to_pydict() for b in full[1:]]
    else:
        assert [b["id"].tolist() for b in got] == [b["id"].tolist() for b in full[1:]]
        assert [type(b["tok"][0]) for b in got] == [type(b["tok"][0]) for b in full[1:]]


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_elastic_resume_formats_rows_as_a_fresh_run(fmt):
    """Rows of an elastic pass (another worker count) are Arrow-backed too: same types as a fresh run."""
    pytest.importorskip("torchdata")

    def build():
        return ri.to_iterable_dataset(DATA, num_shards=4).shuffle(seed=3, buffer_size=3).with_format(fmt)

    fresh = {int(ex["id"]): ex for ex in ri.StatefulDataLoader(build(), batch_size=None, num_workers=0)}
    dl = ri.StatefulDataLoader(build(), batch_size=None, num_workers=2)
    head = []
    for ex in dl:
        head.append(ex)
        if len(head) == 5:
            state = dl.state_dict()
            break
    resumed = ri.StatefulDataLoader(build(), batch_size=None, num_workers=1)
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert sorted(int(ex["id"]) for ex in head + tail) == list(range(N))
    for ex in tail:
        same(ex, fresh[int(ex["id"])], f"resumed row {int(ex['id'])}")


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_uint64_lists_past_int64_read_as_lists_or_arrays_alike(fmt):
    """Whether a chunk's lists are read as arrays depends on its rows' sizes, so a resume may read
    the same rows the other way: both give HF's values (uint64 past int64 wrapped to int64)."""
    features = Features({"id": Value("int64"), "u": List(Value("uint64"))})
    rows = [{"id": i, "u": [2**64 - 1 - j for j in range(1000 if i < 4 else 10)]} for i in range(24)]
    data = Dataset(pa.Table.from_pylist(rows, schema=features.arrow_schema))
    want = {int(r["id"]): r for r in data.to_iterable_dataset().with_format(fmt)}  # HF's Arrow path

    def build():
        return ri.to_iterable_dataset(data).shuffle(seed=0, buffer_size=3).with_format(fmt)

    full = list(build())
    for ex in full:
        same(ex, want[int(ex["id"])], f"row {int(ex['id'])}")
    ds = build()
    it = iter(ds)
    for _ in range(6):
        next(it)
    resumed = build()
    resumed.load_state_dict(ri.loads_state(ri.dumps_state(ds.state_dict())))
    same(list(resumed), full[6:], "resumed")
    small = list(ri.to_iterable_dataset(data.select(range(4, 24))).shuffle(seed=0, buffer_size=3).with_format(fmt))
    for ex in small:
        same(ex, want[int(ex["id"])], f"row {int(ex['id'])} of small lists")
