"""HF API the facade offers beyond chaining: in-memory constructors, features (cast, cast_column,
decode, from_generator(features=)), add_column, column access ``ds["col"]``, ``batch(by_column=)``
and ``split_dataset_by_node`` on a map-style dataset. Each compared with HF ``datasets`` itself,
and each resumable at every cut point."""

from __future__ import annotations

import io

import datasets
import numpy as np
import pyarrow as pa
import pytest
from datasets import ClassLabel, Dataset, Features, Image, Value
from datasets import IterableDataset as HFIterable
from datasets.distributed import split_dataset_by_node as hf_split

import resumable_iterable as ri
from resumable_iterable.nodes.columns import ColumnsNode
from harness import assert_resumes_exactly, codec_roundtrip

DATA = {"id": list(range(12)), "label": ["pos", "neg", "pos"] * 4, "cat": list("AABBBCBBBBAA")}


def test_from_dict_and_from_list_match_hf():
    ours = ri.IterableDataset.from_dict(DATA, num_shards=3)
    hf = HFIterable.from_dict(DATA, num_shards=3)
    assert list(ours) == list(hf)
    assert ours.column_names == ["id", "label", "cat"] and ours.features == hf.features
    rows = [{"a": i, "b": str(i)} for i in range(5)]
    assert list(ri.IterableDataset.from_list(rows)) == list(HFIterable.from_list(rows)) == rows
    assert ours.num_shards == 3


def test_column_access_matches_hf():
    ours = ri.IterableDataset.from_dict(DATA)
    assert list(ours["label"]) == list(HFIterable.from_dict(DATA)["label"])
    nested = ri.IterableDataset.from_list([{"meta": {"src": f"s{i}"}} for i in range(3)])
    assert list(nested["meta"]["src"]) == ["s0", "s1", "s2"]
    with pytest.raises(KeyError, match="nope"):
        ours["nope"]


@pytest.mark.parametrize("how", ["cast_column", "cast"])
def test_cast_matches_hf(how):
    feats = Features({"id": Value("float32"), "label": ClassLabel(names=["neg", "pos"]), "cat": Value("string")})

    def apply(ds):
        if how == "cast":
            return ds.cast(feats)
        return ds.cast_column("id", Value("float32")).cast_column("label", ClassLabel(names=["neg", "pos"]))

    ours, hf = apply(ri.IterableDataset.from_dict(DATA, num_shards=2)), apply(HFIterable.from_dict(DATA, num_shards=2))
    assert list(ours) == list(hf)
    assert ours.features == hf.features
    assert_resumes_exactly(lambda: apply(ri.IterableDataset.from_dict(DATA, num_shards=2)).shuffle(seed=1, buffer_size=4))


def test_cast_refuses_other_columns():
    with pytest.raises(ValueError, match=r"features lack the dataset's column\(s\) \['id', 'label', 'cat'\]"):
        ri.IterableDataset.from_dict(DATA).cast(Features({"x": Value("int64")}))
    with pytest.raises(ValueError, match="not in the dataset"):
        ri.IterableDataset.from_dict(DATA).cast_column("x", Value("int64"))


def triple(e):
    return {"c": e["id"] * 3}


@pytest.mark.parametrize("features", [{"id": Value("int32")}, {"c": Value("int64"), "id": Value("int32")},
                                      {"id": Value("int32"), "z": Value("string")}], ids=["subset", "order", "extra"])
def test_cast_of_unknown_columns_yields_only_the_features_columns_as_hf(features):
    # after a map the columns are unknown: HF's cast yields the features' columns, in their order
    # (missing ones as None), and drops the others; ours kept every column the map left
    features = Features(features)
    ours = ri.IterableDataset.from_dict(DATA, num_shards=2).map(triple).cast(features)
    hf = HFIterable.from_dict(DATA, num_shards=2).map(triple).cast(features)
    assert list(ours) == list(hf)
    assert [list(ex) for ex in ours] == [list(features)] * len(DATA["id"])
    assert ours.column_names == hf.column_names == list(features)
    gen = ri.IterableDataset.from_generator(gen_rows, gen_kwargs={"n": 6}).cast(Features({"b": Value("string")}))
    assert list(gen) == list(HFIterable.from_generator(gen_rows, gen_kwargs={"n": 6}).cast(Features({"b": Value("string")})))
    assert_resumes_exactly(lambda: ri.IterableDataset.from_dict(DATA, num_shards=2).map(triple).cast(features)
                           .shuffle(seed=1, buffer_size=4))


def test_cast_column_of_unknown_columns_keeps_the_others():
    # HF raises TypeError here (no features to update); ours casts the column and keeps the rest
    ours = ri.IterableDataset.from_generator(gen_rows, gen_kwargs={"n": 4}).cast_column("a", Value("float32"))
    assert list(ours) == [{"a": 0.0, "b": "b0"}, {"a": 1.0}, {"a": 2.0, "b": "b2"}, {"a": 3.0}]
    # and so does decode() on top of it (which re-applies the features below that cast)
    assert list(ours.decode(False)) == list(ours.decode(True, num_threads=2)) == list(ours)
    # the columns other than the one cast are still unknown: not reported as the cast column alone
    assert ours.column_names is None and ours.num_columns is None
    assert ours.decode(False).column_names is None


def test_decode_of_unknown_features_raises_as_hf():
    """HF refuses decode() when the features are unknown (after a map); ours returned the dataset
    unchanged, so decode(False) silently left images decoded."""
    ours = ri.IterableDataset.from_generator(gen_rows, gen_kwargs={"n": 2}).map(lambda e: e)
    hf = HFIterable.from_generator(gen_rows, gen_kwargs={"n": 2}).map(lambda e: e)
    for enable in (False, True):
        with pytest.raises(ValueError, match="features"):
            hf.decode(enable)
        with pytest.raises(ValueError, match="features are unknown"):
            ours.decode(enable)


def gen_rows(n):
    for i in range(n):
        yield {"a": i} if i % 2 else {"a": i, "b": f"b{i}"}


def test_from_generator_features_fill_missing_and_cast_like_hf():
    feats = Features({"a": Value("float64"), "b": Value("string")})
    ours = ri.IterableDataset.from_generator(gen_rows, gen_kwargs={"n": 6}, features=feats)
    hf = HFIterable.from_generator(gen_rows, gen_kwargs={"n": 6}, features=feats)
    assert list(ours) == list(hf)
    assert list(ours)[1] == {"a": 1.0, "b": None}
    assert ours.column_names == ["a", "b"]
    assert_resumes_exactly(lambda: ri.IterableDataset.from_generator(gen_rows, gen_kwargs={"n": 6}, features=feats))


def test_add_column_matches_hf_and_resumes():
    col = np.arange(100, 112)
    ours = ri.IterableDataset.from_dict(DATA).add_column("extra", col)
    assert list(ours) == list(HFIterable.from_dict(DATA).add_column("extra", col))
    assert ours.column_names == ["id", "label", "cat", "extra"]
    with pytest.raises(ValueError, match="already in the dataset"):
        list(ri.IterableDataset.from_dict(DATA).add_column("id", col))
    assert_resumes_exactly(lambda: ri.IterableDataset.from_dict(DATA).add_column("extra", list(range(12))),
                           roundtrip=codec_roundtrip)


def test_batch_by_column_matches_hf_runs():
    ours = list(ri.IterableDataset.from_dict(DATA).batch(by_column="cat"))
    assert [b["cat"] for b in ours] == [["A", "A"], ["B", "B", "B"], ["C"], ["B"] * 4, ["A", "A"]]
    assert [b["id"] for b in ours][:2] == [[0, 1], [2, 3, 4]]
    multi = list(ri.IterableDataset.from_dict(DATA).batch(by_column=["cat", "label"]))
    assert sum(len(b["id"]) for b in multi) == 12
    assert all(len(set(zip(b["cat"], b["label"]))) == 1 for b in multi)
    hf = HFIterable.from_dict(DATA).batch(by_column="cat")
    assert ours == list(hf)
    dropped = list(ri.IterableDataset.from_dict(DATA).batch(by_column="cat", drop_last_batch=True))
    assert dropped == ours[:-1]


def test_batch_by_column_resumes_at_every_cut():
    # the example that ends a run has left the source when the batch is yielded: it is in the state
    assert_resumes_exactly(lambda: ri.IterableDataset.from_dict(DATA, num_shards=2).batch(by_column="cat"))
    assert_resumes_exactly(lambda: ri.IterableDataset.from_dict(DATA, num_shards=3)
                           .shuffle(seed=0, buffer_size=3).batch(by_column="label"), roundtrip=codec_roundtrip)


def test_batch_by_column_state_is_not_changed_by_in_place_edits_of_later_batches():
    # the example that ended a run is in a state taken between batches and in the next batch
    def scribble(batch):
        for tags in batch["tags"]:
            tags.append(-1)
        return batch

    def build():
        return ri.IterableDataset.from_list([{"g": i // 3, "tags": [i]} for i in range(9)]).batch(
            by_column="g").map(scribble)

    ds = build()
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    frozen = ri.dumps_state(state)
    rest = list(it)
    assert ri.dumps_state(state) == frozen
    resumed = build()
    resumed.load_state_dict(state)
    assert list(resumed) == rest == list(build())[1:]


def test_batch_needs_a_size_or_a_column():
    with pytest.raises(ValueError, match="batch_size or by_column"):
        ri.IterableDataset.from_dict(DATA).batch()


def _image(color):
    from PIL import Image as PILImage

    return PILImage.new("RGB", (3, 2), color)


def test_decode_false_and_cast_column_image_like_hf():
    hf_ds = Dataset.from_dict({"img": [_image((i, 0, 0)) for i in range(4)]}, features=Features({"img": Image()}))
    ours = ri.to_iterable_dataset(hf_ds, num_shards=2)
    hf = hf_ds.to_iterable_dataset(num_shards=2)
    assert [np.asarray(e["img"]).tolist() for e in ours] == [np.asarray(e["img"]).tolist() for e in hf]
    raw = list(ours.decode(False))
    assert raw == list(hf.decode(False))
    assert isinstance(raw[0]["img"], dict) and set(raw[0]["img"]) == {"bytes", "path"}
    assert list(ours.cast_column("img", Image(decode=False))) == raw
    assert ours.decode(False).features["img"].decode is False
    back = ours.decode(False).decode(True)
    assert [np.asarray(e["img"]).tolist() for e in back] == [np.asarray(e["img"]).tolist() for e in ours]
    assert_resumes_exactly(lambda: ri.to_iterable_dataset(hf_ds, num_shards=2).decode(False))


def test_split_dataset_by_node_accepts_a_map_style_dataset():
    hf_ds = Dataset.from_dict(DATA)
    parts = [ri.split_dataset_by_node(hf_ds, rank=r, world_size=3) for r in range(3)]
    assert [p["id"] for p in parts] == [hf_split(hf_ds, rank=r, world_size=3)["id"] for r in range(3)]
    assert sorted(i for p in parts for i in p["id"]) == DATA["id"]


def _shuffled(k, n_shards=6, buffer_size=5, seed=3):
    return ri.IterableDataset.from_dict(DATA | {"id": list(range(12))}, num_shards=n_shards).shuffle(
        seed=seed, buffer_size=buffer_size, max_buffer_input_shards=k)


def test_max_buffer_input_shards_feeds_the_buffer_from_several_shards():
    one = [e["id"] for e in _shuffled(1, buffer_size=1)]
    three = [e["id"] for e in _shuffled(3, buffer_size=1)]
    assert sorted(one) == sorted(three) == list(range(12))
    # buffer of 1 = the feeding order: one shard at a time vs three shards in turn
    firsts = {i // 2 for i in three[:3]}
    assert len(firsts) == 3 and len({i // 2 for i in one[:2]}) == 1
    with pytest.raises(ValueError, match="max_buffer_input_shards"):
        _shuffled(0)


@pytest.mark.parametrize("k", [2, 4, 10])
def test_max_buffer_input_shards_resumes_at_every_cut(k):
    assert_resumes_exactly(lambda: _shuffled(k), roundtrip=codec_roundtrip)


def test_max_buffer_input_shards_groups_after_the_worker_split():
    pytest.importorskip("torch")
    from torchdata.stateful_dataloader import StatefulDataLoader

    def run(ds, state=None, n=None):
        dl = StatefulDataLoader(ds, batch_size=None, num_workers=2)
        if state is not None:
            dl.load_state_dict(state)
        out, it = [], iter(dl)
        for ex in it:
            out.append(int(ex["id"]))
            if n is not None and len(out) == n:
                return out, dl.state_dict()
        return out, None

    full, _ = run(_shuffled(3))
    assert sorted(full) == list(range(12))  # both workers read their shards: nothing lost or doubled
    head, state = run(_shuffled(3), n=5)
    tail, _ = run(_shuffled(3), state=state)
    assert head + tail == full


def test_max_buffer_input_shards_keeps_take_selection():
    base = ri.IterableDataset.from_dict(DATA, num_shards=4)
    taken = sorted(e["id"] for e in base.take(5))
    assert sorted(e["id"] for e in base.take(5).shuffle(seed=1, buffer_size=3, max_buffer_input_shards=4)) == taken


# ---------------------------------------------------------------------- values that do not fit, names that clash


def test_cast_checks_and_converts_numbers_as_hf_arrow_cast():
    """HF casts Arrow tables (a safe cast): an integer out of the new type's range or a float with a
    fraction for an integer type raises; a narrower float holds the rounded value. Ours too, with
    the column named, instead of yielding values the features say cannot be there."""
    hf = Dataset.from_dict({"big": [1, 300, -200], "x": [0.5, 1.7, -2.2], "w": [1.0, 2.0, 3.0]})
    for column, dtype, message in [("big", "int8", "out of its range"), ("x", "int32", "would be truncated")]:
        ours = ri.to_iterable_dataset(hf).cast_column(column, Value(dtype))
        with pytest.raises(ValueError, match=f"cast: column '{column}' is {dtype}: .*{message}") as err:
            list(ours)
        row = 1 if column == "big" else 0  # which example, as any map error says
        assert f"example #{row} (source arrow shard 0, row {row})" in "".join(err.value.__notes__)
        with pytest.raises(Exception):
            list(hf.to_iterable_dataset().cast_column(column, Value(dtype)))
    ok = Features({"big": Value("int16"), "x": Value("float32"), "w": Value("int64")})
    got = list(ri.to_iterable_dataset(hf).cast(ok))
    assert got == list(hf.to_iterable_dataset().cast(ok))
    assert [type(e["w"]) for e in got] == [int] * 3 and got[0]["x"] == float(np.float32(0.5))
    assert got[1]["x"] == float(np.float32(1.7)) != 1.7


def test_rename_onto_a_column_that_stays_is_refused_not_a_silent_loss():
    hf = Dataset.from_dict({"id": [0, 1, 2], "s": list("abc")})
    ds = ri.to_iterable_dataset(hf)
    for rename in (lambda d: d.rename_column("id", "s"), lambda d: d.rename_columns({"id": "s"})):
        with pytest.raises(ValueError, match=r"cannot rename \['id'\] to \['s'\]: column\(s\) \['s'\] already exist"):
            rename(ds)
        with pytest.raises(ValueError):
            list(rename(hf.to_iterable_dataset()))

    def gen():  # columns unknown when the dataset is built: refused when the first example comes
        yield {"id": 0, "s": "a"}

    with pytest.raises(ValueError, match="already exist"):
        list(ri.IterableDataset.from_generator(gen).rename_column("id", "s"))
    # a swap, or renaming onto a name that is itself renamed away, is fine
    assert list(ds.rename_columns({"id": "s", "s": "id"}))[0] == {"s": 0, "id": "a"}
    assert list(ri.IterableDataset.from_generator(gen).rename_columns({"id": "s", "s": "t"})) == [{"s": 0, "t": "a"}]


@pytest.mark.parametrize("fmt", ["numpy", "arrow", "pandas"])
def test_declared_types_survive_row_operations_in_formatted_output_as_hf(fmt):
    features = Features({"id": Value("int32"), "x": Value("float32"), "v": [Value("float32")]})
    hf = Dataset.from_dict({"id": [1, 2, 3], "x": [0.5, 1.5, 2.5], "v": [[1.0], [2.0], [3.0]]}, features=features)

    def types(item):
        if fmt == "arrow":
            return [(f.name, str(f.type)) for f in item.schema]
        if fmt == "pandas":
            return {k: str(v) for k, v in item.dtypes.items()}
        return {k: str(getattr(v, "dtype", type(v).__name__)) for k, v in item.items()}

    for op in (lambda d: d.take(2), lambda d: d.skip(1), lambda d: d.shuffle(seed=0, buffer_size=2)):
        ours, theirs = (op(d.with_format(fmt)) for d in (ri.to_iterable_dataset(hf), hf.to_iterable_dataset()))
        assert [types(r) for r in ours] == [types(r) for r in theirs]
        assert [types(b) for b in ours.iter(2)] == [types(b) for b in theirs.iter(2)]


def test_a_value_that_does_not_fit_its_new_feature_names_the_column():
    from datasets import Sequence

    ds = ri.to_iterable_dataset(Dataset.from_dict({"id": [1, 2], "t": ["a", "b"]}))
    with pytest.raises(TypeError, match=r"cast: column 'id': value 1 does not fit List\(Value\('int64'\)\)"):
        list(ds.cast_column("id", Sequence(Value("int64"))))
    with pytest.raises(ValueError, match=r"cast: column 't': value 'a' does not fit ClassLabel.*Invalid string class label"):
        list(ds.cast_column("t", ClassLabel(names=["x"])))


def test_cast_checks_numbers_inside_lists_and_structs_and_integer_strings():
    from datasets import List

    cases = [({"x": [[1.5], [2.0]]}, List(Value("int32")), r"column 'x' is int32: float value 1.5 would be truncated"),
             ({"x": [[300]]}, List(Value("int8")), r"column 'x' is int8: value 300 is out of its range"),
             ({"x": [{"a": 300}]}, {"a": Value("int8")}, r"column 'x.a' is int8: value 300 is out of its range"),
             ({"x": ["300"]}, Value("int8"), r"column 'x' is int8: value 300 is out of its range"),
             ({"x": [" 5"]}, Value("int64"), r"column 'x' is int64: string ' 5' is not an integer")]
    for data, feature, message in cases:
        hf = Dataset.from_dict(data)
        with pytest.raises(ValueError, match=message):
            list(ri.to_iterable_dataset(hf).cast_column("x", feature))
        with pytest.raises(Exception):
            list(hf.to_iterable_dataset().cast_column("x", feature))
    ok = Dataset.from_dict({"x": [[1.0, None], [2.0]], "s": ["7", "-8"]})
    got = list(ri.to_iterable_dataset(ok).cast(Features({"x": List(Value("int32")), "s": Value("int8")})))
    assert got == [{"x": [1, None], "s": 7}, {"x": [2], "s": -8}]
    assert got == list(ok.to_iterable_dataset().cast(Features({"x": List(Value("int32")), "s": Value("int8")})))


def optional_meta_rows(n):
    for i in range(n):
        yield {"a": i, "meta": f"m{i}"} if i % 2 else {"a": i}


@pytest.mark.parametrize("where", ["rows", "table"])
def test_remove_columns_leaves_examples_that_lack_the_column_as_hf(where):
    # HF's IterableDataset.remove_columns removes a column where an example has it; rows of a JSON
    # file or a generator need not all have it. It used to raise KeyError at the first row without it.
    if where == "rows":
        def build(m):
            return m.IterableDataset.from_generator(optional_meta_rows, gen_kwargs={"n": 6}).remove_columns("meta")
    else:  # the column-wise path of a formatted Arrow source (column names unknown: refused later, if at all)
        table = pa.table({"a": list(range(6))})

        def build(m):
            node = ColumnsNode(ri.IterableDataset.from_arrow_table(table)._node.clone(), "remove", ["meta"])
            return ri.IterableDataset(node).with_format("numpy")
    ours = build(ri)
    if where == "rows":
        assert list(ours) == list(build(datasets)) == [{"a": i} for i in range(6)]
        assert_resumes_exactly(lambda: build(ri))
    else:
        assert [b["a"].tolist() for b in ours.iter(4)] == [[0, 1, 2, 3], [4, 5]]


def test_a_missing_column_raises_hf_exception_types():
    # unknown columns (after a map): a renamed column that is missing raises ValueError, as HF's
    # rename_column; a selected one KeyError, as HF's select_columns; both name the column
    mapped = ri.IterableDataset.from_dict(DATA).map(lambda ex: {"y": 1})
    with pytest.raises(ValueError, match="'zz' is not in the example"):
        list(mapped.rename_column("zz", "z"))
    with pytest.raises(KeyError, match="'zz' is not in the example"):
        list(mapped.select_columns(["zz"]))
    # known columns: refused when the operation is built
    with pytest.raises(ValueError, match="not in the dataset"):
        ri.IterableDataset.from_dict(DATA).remove_columns(["zz"])


def test_from_arrow_table_decodes_the_media_columns_its_schema_declares():
    """Before, a table whose schema carries HF's Image() feature reported it in `features` but
    yielded the undecoded {"bytes", "path"} dicts; HF's Dataset(table) decodes them, as our
    Parquet source does."""
    import pyarrow as pa
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (2, 3), (1, 2, 3)).save(buf, "PNG")
    features = datasets.Features({"image": datasets.Image(), "y": datasets.Value("int64")})
    table = pa.Table.from_pylist([{"image": {"bytes": buf.getvalue(), "path": None}, "y": 7}],
                                 schema=features.arrow_schema)
    ours = next(iter(ri.IterableDataset.from_arrow_table(table)))
    theirs = datasets.Dataset(table)[0]
    assert isinstance(ours["image"], Image.Image) and isinstance(theirs["image"], Image.Image)
    assert (ours["image"].size, ours["image"].tobytes(), ours["y"]) == (theirs["image"].size,
                                                                        theirs["image"].tobytes(), 7)


# https://github.com/huggingface/datasets/issues/7568 / pull 8191 ("Preserve info.features across
# IterableDataset.map(remove_columns=...)"): a map without a function only removes columns, so the
# features are the dataset's minus those (HF 5.2 forgets them: column_names became None)
@pytest.mark.parametrize("remove", ["cat", ["cat", "label"]])
@pytest.mark.parametrize("batched", [False, True])
def test_map_without_function_keeps_the_features_of_the_columns_left(remove, batched):
    ds = ri.IterableDataset.from_dict(DATA, num_shards=2).map(remove_columns=remove, batched=batched, batch_size=5)
    removed = [remove] if isinstance(remove, str) else remove
    left = [c for c in DATA if c not in removed]
    assert ds.column_names == left
    assert ds.features == Features({c: f for c, f in ri.IterableDataset.from_dict(DATA, num_shards=2).features.items() if c in left})
    assert list(ds) == [{c: DATA[c][i] for c in left} for i in range(12)]
    assert_resumes_exactly(lambda: ri.IterableDataset.from_dict(DATA, num_shards=2).map(remove_columns=remove, batched=batched, batch_size=5))
    # with a function the output columns are unknown, as in HF
    assert ri.IterableDataset.from_dict(DATA, num_shards=2).map(lambda x: x, remove_columns=remove).features is None
