"""HF ``datasets`` API details: features and column names known where HF knows them (after
``interleave_datasets`` / ``concatenate_datasets`` of datasets whose features are known or resolved
with ``resolve_features()``, missing columns filled with ``None``; ``batch``; the Arrow sources;
``concatenate_datasets(axis=1)`` refuses duplicated columns when called), ``num_shards`` after
``split_dataset_by_node``, ``decode``, ``info``, the format of a concatenation."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import datasets
from datasets import ClassLabel, Dataset, DatasetInfo, Features, List, Value

import resumable_iterable as ri
from harness import assert_resumes_exactly


def gen(n, **extra):
    for i in range(n):
        yield {"id": i, **extra}


def source(n=6, **extra):
    return ri.IterableDataset.from_generator(gen, gen_kwargs={"n": n, **extra})


def resolved(n=6, **extra):
    """A generator source with its features inferred (HF infers them when datasets are combined)."""
    return source(n, **extra).resolve_features()


# ---------------------------------------------------------------------------- map (as HF: the features argument)


def test_map_features_are_the_features_argument():
    ds = source(label="a")
    assert ds.features is None and ds.column_names is None
    mapped = ds.map(lambda x: {"y": x["id"]})
    assert mapped.features is None and mapped.column_names is None  # HF does not infer after map either
    features = Features({"id": Value("int64"), "label": Value("string"), "y": Value("int64")})
    mapped = ds.map(lambda x: {"y": x["id"]}, features=features)
    assert mapped.features == features
    assert mapped.column_names == ["id", "label", "y"]


# ---------------------------------------------------------------------------- resolve_features


def test_resolve_features_infers_from_the_first_examples_without_touching_the_dataset():
    ds = source(label="a")
    it = iter(ds)
    head = [next(it), next(it)]
    state = ds.state_dict()
    resolved = ds.resolve_features()
    assert resolved.features == Features({"id": Value("int64"), "label": Value("string")})
    assert resolved.column_names == ["id", "label"]
    assert ds.features is None  # the dataset itself is unchanged
    assert ds.state_dict() == state
    assert head + list(it) == list(source(label="a"))  # its iteration goes on undisturbed
    assert list(resolved) == list(source(label="a"))


def test_resolve_features_keeps_known_features_and_orders_columns_by_appearance():
    known = source().map(lambda x: x, features=Features({"id": Value("int32")}))
    assert known.resolve_features() is known

    def uneven():
        yield from [{"a": 1}, {"c": 1}, {"b": 1}]

    resolved = ri.IterableDataset.from_generator(uneven).resolve_features()
    assert resolved.column_names == ["a", "c", "b"]


def test_resolve_features_of_an_unreadable_pipeline_leaves_them_unknown():
    def only_in_workers():
        from torch.utils.data import get_worker_info

        yield {"worker": get_worker_info().id}  # AttributeError in the main process

    ds = ri.IterableDataset.from_generator(only_in_workers)
    assert ds.resolve_features() is ds
    assert ri.IterableDataset.from_generator(lambda: iter([])).resolve_features().features is None
    # combining still works: the features stay unknown
    assert ri.concatenate_datasets([ds, source()]).features is None


# ---------------------------------------------------------------------------- interleave / concatenate


def test_concatenate_infers_features_and_fills_missing_columns_with_none():
    cat = ri.concatenate_datasets([resolved(2, label=10), resolved(2)])
    assert cat.features == Features({"id": Value("int64"), "label": Value("int64")})
    assert cat.column_names == ["id", "label"]
    assert list(cat) == [{"id": 0, "label": 10}, {"id": 1, "label": 10}, {"id": 0, "label": None},
                         {"id": 1, "label": None}]


def test_interleave_infers_features_and_fills_missing_columns_with_none():
    features = Features({"id": Value("int64"), "label": ClassLabel(names=["neg", "pos"])})
    with_features = source(3, label=1).map(lambda x: x, features=features)
    mix = ri.interleave_datasets([resolved(3), with_features])
    assert mix.features == features  # the declared type wins over nothing
    assert list(mix) == [{"id": 0, "label": None}, {"id": 0, "label": 1}, {"id": 1, "label": None},
                         {"id": 1, "label": 1}, {"id": 2, "label": None}]


@pytest.mark.parametrize("combine", ["concatenate_datasets", "interleave_datasets"])
def test_features_that_cannot_be_aligned_are_refused_as_hf_refuses_them(combine):
    """A column of two other types was typed as in the first dataset, the other's rows yielded under
    it: a float under int64, which to_list / to_pandas / with_format("arrow") silently truncated
    (1.5 -> 1), a string under int64 that they failed on. HF raises ValueError when combining; a null
    column takes the other's type (HF's alignment), where ours stayed null and failed to export."""
    import datasets

    ints = ri.IterableDataset.from_dict({"a": [1, 2]})
    floats = ri.IterableDataset.from_dict({"a": [1.5]})
    with pytest.raises(ValueError, match=rf"{combine}: the features can't be aligned: column 'a' is "
                                         r"Value\('float64'\) in dataset 1 and Value\('int64'\) in dataset 0"):
        getattr(ri, combine)([ints, floats])
    with pytest.raises(ValueError, match=r"column 's\.x' is Value\('string'\) in dataset 1"):  # inside a struct
        getattr(ri, combine)([ri.IterableDataset.from_dict({"s": [{"x": 1}]}),
                              ri.IterableDataset.from_dict({"s": [{"x": "a", "y": 2}]})])
    nulls = ri.IterableDataset.from_dict({"a": [None]}, features=Features({"a": Value("null")}))
    both = getattr(ri, combine)([nulls, ints])
    hf = getattr(datasets, combine)([datasets.IterableDataset.from_dict({"a": [None]}, features=Features(
        {"a": Value("null")})), datasets.IterableDataset.from_dict({"a": [1, 2]})])
    assert both.features == hf.features == Features({"a": Value("int64")})
    assert both.to_list() == list(both) == list(hf)


def test_filled_columns_do_not_overwrite_values_found_later():
    def late_label():
        yield {"id": 0}
        yield {"id": 1, "label": 7}

    cat = ri.concatenate_datasets([ri.IterableDataset.from_generator(late_label).resolve_features(n=1),
                                   resolved(1, label=3)])
    assert list(cat) == [{"id": 0, "label": None}, {"id": 1, "label": 7}, {"id": 0, "label": 3}]


@pytest.mark.parametrize("kind", ["concatenate", "interleave"])
def test_filled_columns_resume_exactly(kind):
    def build():
        parts = [resolved(5, label=1), source(4, other="x").shuffle(seed=3, buffer_size=2).resolve_features(),
                 resolved(3)]
        if kind == "concatenate":
            return ri.concatenate_datasets(parts)
        return ri.interleave_datasets(parts, probabilities=[0.5, 0.3, 0.2], seed=1, stopping_strategy="all_exhausted")

    full = assert_resumes_exactly(build)
    assert all(set(x) == {"id", "label", "other"} for x in full)


def test_filled_columns_through_dataloader_workers():
    from torch.utils.data import DataLoader

    a = ri.IterableDataset.from_generator(gen, gen_kwargs={"n": 3, "label": [1, 2]})
    b = ri.IterableDataset.from_generator(gen, gen_kwargs={"n": 3, "other": ["x", "y"]})
    cat = ri.concatenate_datasets([a.resolve_features(), b.resolve_features()])
    out = list(DataLoader(cat, batch_size=None, num_workers=2))
    assert sorted(map(str, out)) == sorted(map(str, cat))
    assert all(set(x) == {"id", "label", "other"} for x in out)


def test_concatenate_axis_1_duplicated_columns_raise_when_called():
    with pytest.raises(ValueError, match=r"\['id'\] are duplicated: they are in more than one dataset"):
        ri.concatenate_datasets([resolved(3, a=1), resolved(3, b=2)], axis=1)
    cat = ri.concatenate_datasets([resolved(3, a=1), resolved(3, b=2).remove_columns("id")], axis=1)
    assert sorted(cat.features) == ["a", "b", "id"]
    assert list(cat) == [{"id": i, "a": 1, "b": 2} for i in range(3)]


@pytest.mark.parametrize("combine", ["concatenate", "concatenate_axis_1", "interleave"])
def test_combining_unknown_features_reads_no_example(combine):
    # building a pipeline never runs user code: unknown features stay unknown (resolve_features() infers them)
    read = []

    def spy(tag):
        read.append(tag)
        yield {tag: 0}

    a = ri.IterableDataset.from_generator(spy, gen_kwargs={"tag": "a"})
    b = ri.IterableDataset.from_generator(spy, gen_kwargs={"tag": "b"})
    if combine == "interleave":
        out = ri.interleave_datasets([a, b])
    else:
        out = ri.concatenate_datasets([a, b], axis=1 if combine == "concatenate_axis_1" else 0)
    assert read == [] and out.features is None
    expected = {"concatenate": [{"a": 0}, {"b": 0}], "concatenate_axis_1": [{"a": 0, "b": 0}],
                "interleave": [{"a": 0}]}  # (interleave: "first_exhausted" stops when a is done, as HF)
    assert list(out) == expected[combine]


def test_concatenate_bad_axis_raises_before_reading_anything():
    read = []

    def spy():
        read.append(1)
        yield {"id": 0}

    with pytest.raises(ValueError, match="axis must be 0 or 1"):
        ri.concatenate_datasets([ri.IterableDataset.from_generator(spy)], axis=2)
    assert read == []


# ---------------------------------------------------------------------------- batch


def test_batch_features_are_lists_of_the_features():
    hf = Dataset.from_dict({"id": [0, 1, 2], "label": [0, 1, 0]},
                           features=Features({"id": Value("int32"), "label": ClassLabel(names=["a", "b"])}))
    batched = ri.to_iterable_dataset(hf).batch(2)
    assert batched.features == Features({"id": List(Value("int32")), "label": List(ClassLabel(names=["a", "b"]))})
    assert batched.column_names == ["id", "label"]
    assert list(batched) == [{"id": [0, 1], "label": [0, 1]}, {"id": [2], "label": [0]}]
    assert source().batch(2).features is None


# ---------------------------------------------------------------------------- Arrow sources


def test_arrow_table_and_files_have_features(tmp_path):
    features = Features({"x": Value("int32"), "label": ClassLabel(names=["a", "b"])})
    hf = Dataset.from_dict({"x": [1, 2, 3], "label": [0, 1, 0]}, features=features)
    arrow = str(tmp_path / "data.arrow")
    hf.map(lambda x: x, cache_file_name=arrow)  # an HF Arrow cache file (stream format, HF metadata)
    parquet = str(tmp_path / "data.parquet")
    hf.to_parquet(parquet)
    for ds in (ri.IterableDataset.from_arrow(arrow), ri.IterableDataset.from_parquet(parquet),
               ri.IterableDataset.from_arrow_table(hf.data.table)):
        assert ds.features == features  # the ClassLabel survives through HF's schema metadata
        assert ds.column_names == ["x", "label"]
        assert list(ds) == [{"x": 1, "label": 0}, {"x": 2, "label": 1}, {"x": 3, "label": 0}]
    plain = str(tmp_path / "plain.parquet")
    pq.write_table(pa.table({"s": ["u", "v"]}), plain)
    assert ri.IterableDataset.from_parquet(plain).features == Features({"s": Value("string")})


def test_json_lines_features_are_hfs_and_missing_files_have_none(tmp_path):
    """JSON Lines features: those HF finds in the first chunk of the first file (HF 5.2's ``Json``
    for a column of mixed types); a JSON document's are unknown (HF reads it whole to know them)."""
    import datasets

    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1, "b": 1}\n{"a": 2, "b": "x"}\n')
    hf = datasets.load_dataset("json", data_files=str(path), split="train", streaming=True)
    assert ri.IterableDataset.from_json(str(path)).features == hf.features == Features(
        {"a": Value("int64"), "b": datasets.Json()})
    doc = tmp_path / "d.json"
    doc.write_text('[{"a": 1}]')
    assert ri.IterableDataset.from_json(str(doc)).features is None
    with pytest.raises(FileNotFoundError, match="Unable to find data file"):  # when built, as HF's
        ri.IterableDataset.from_parquet(str(tmp_path / "missing.parquet"))


# ---------------------------------------------------------------------------- from_dict / from_list


def test_from_dict_and_from_list():
    features = Features({"a": Value("int32"), "b": Value("string")})
    data = {"a": [1, 2, 3, 4], "b": ["w", "x", "y", "z"]}
    rows = [{"a": a, "b": b} for a, b in zip(data["a"], data["b"])]
    for ds in (ri.IterableDataset.from_dict(data, features=features, num_shards=2),
               ri.IterableDataset.from_list(rows, features=features, num_shards=2)):
        assert ds.features == features
        assert ds.num_shards == 2
        assert list(ds) == rows
    assert_resumes_exactly(lambda: ri.IterableDataset.from_dict(data, num_shards=2).shuffle(seed=0, buffer_size=2))
    assert ri.IterableDataset.from_list(rows).features == Features({"a": Value("int64"), "b": Value("string")})


# ---------------------------------------------------------------------------- num_shards after split_dataset_by_node


def gen_shards(shards):
    for shard in shards:
        for i in range(3):
            yield {"shard": shard, "i": i}


@pytest.mark.parametrize("num_shards, world_size, expected", [(6, 3, 2), (6, 2, 3), (3, 3, 1), (5, 2, 5), (2, 4, 2)])
def test_num_shards_after_split_dataset_by_node_counts_the_ranks_shards(num_shards, world_size, expected):
    # as HF: a rank that takes whole shards has num_shards / world_size of them; one that keeps one
    # example in world_size (shards not divisible) reads every shard
    ds = ri.IterableDataset.from_generator(gen_shards, gen_kwargs={"shards": list(range(num_shards))})
    parts = [ri.split_dataset_by_node(ds, rank, world_size) for rank in range(world_size)]
    assert [p.num_shards for p in parts] == [expected] * world_size
    assert [p.n_shards for p in parts] == [expected] * world_size
    assert f"num_shards: {expected}" in repr(parts[0])
    assert sorted(map(str, (x for p in parts for x in p))) == sorted(map(str, ds))
    assert ds.num_shards == num_shards


def test_num_shards_after_two_splits_and_shard_still_checks_the_whole_pipeline():
    ds = ri.IterableDataset.from_generator(gen_shards, gen_kwargs={"shards": list(range(12))})
    part = ri.split_dataset_by_node(ri.split_dataset_by_node(ds, 1, 2), 2, 3)
    assert part.num_shards == 2
    # shard(6) divides the 12 shards below the split (the rank's 4 would refuse 6 groups): 2 shards,
    # which the rank split then reads one example in 3 of
    assert ri.split_dataset_by_node(ds, 0, 3).shard(6, 0).num_shards == 2


# ---------------------------------------------------------------------------- decode


@dataclasses.dataclass
class Decodable:
    """A decodable feature whose ``decode`` is no ``__init__`` field (like upstream's test feature)."""

    def __init__(self):
        self.decode = True

    def decode_example(self, value, token_per_repo_id=None):
        return f"decoded {value}" if self.decode else value

    def __call__(self):
        return pa.string()


def test_decode_false_true_toggles_decoding_of_declared_features():
    rows = [{"i": str(i)} for i in range(4)]
    ds = ri.IterableDataset.from_generator(lambda: iter(rows), features=Features({"i": Decodable()}))
    assert list(ds) == [{"i": f"decoded {i}"} for i in range(4)]
    off = ds.decode(False)
    assert list(off) == rows  # not decoded twice or left decoded: the raw values
    assert off.features["i"].decode is False and ds.features["i"].decode is True  # ds's features untouched
    assert list(off.decode(True)) == [{"i": f"decoded {i}"} for i in range(4)]
    assert list(off.decode(True).decode(False)) == rows
    assert_resumes_exactly(lambda: ri.IterableDataset.from_generator(
        lambda: iter(rows), features=Features({"i": Decodable()})).decode(False).shuffle(seed=1, buffer_size=2))


def test_decode_false_gives_the_original_image_bytes():
    PIL = pytest.importorskip("PIL.Image")
    import io

    from datasets import Image

    buf = io.BytesIO()
    PIL.new("RGB", (4, 3), (200, 10, 30)).save(buf, format="PNG", compress_level=1)
    raw = buf.getvalue()
    ds = ri.IterableDataset.from_generator(lambda: iter([{"img": {"bytes": raw, "path": None}}]),
                                           features=Features({"img": Image()}))
    assert next(iter(ds))["img"].size == (4, 3)
    assert list(ds.decode(False)) == [{"img": {"bytes": raw, "path": None}}]


def png_bytes(i: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (3 + i % 4, 2), (i % 256, 10, 30)).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def image_source(n: int = 23, shards: int = 3) -> ri.IterableDataset:
    from datasets import Image

    def gen(parts):
        for p in parts:
            for i in range(p * n, p * n + n):
                yield {"id": i, "img": {"bytes": png_bytes(i), "path": None}}

    return ri.IterableDataset.from_generator(gen, gen_kwargs={"parts": list(range(shards))},
                                             features=Features({"id": Value("int64"), "img": Image()}))


@pytest.mark.parametrize("threads", [1, 3])
def test_decode_with_threads_gives_what_decode_gives_and_resumes_exactly(threads):
    pytest.importorskip("PIL")
    from harness import codec_roundtrip

    def pixels(ds):
        return [(e["id"], e["img"].size, e["img"].tobytes()) for e in ds]

    want = pixels(image_source())
    assert pixels(image_source().decode(num_threads=threads)) == want
    # files read undecoded, 2 * threads decoded at a time: a state holds the files being decoded
    assert_resumes_exactly(lambda: image_source(8).decode(num_threads=threads).shuffle(seed=2, buffer_size=5),
                           roundtrip=codec_roundtrip)
    hf = Dataset.from_dict({"id": list(range(30)), "img": [{"bytes": png_bytes(i), "path": None} for i in range(30)]})
    from datasets import Image

    hf = hf.cast_column("img", Image())
    assert pixels(ri.to_iterable_dataset(hf, num_shards=3).decode(num_threads=threads)) == pixels(
        ri.to_iterable_dataset(hf, num_shards=3))
    with pytest.raises(ValueError, match="num_threads"):
        image_source().decode(num_threads=-1)


def test_decode_with_threads_resumes_exactly_through_dataloader_workers():
    pytest.importorskip("PIL")
    pytest.importorskip("torchdata")
    from harness import assert_loader_resumes_exactly

    full = assert_loader_resumes_exactly(lambda: image_source(7).decode(num_threads=2), workers=2, batch_size=None,
                                         item=lambda ex: (int(ex["id"]), ex["img"].size, ex["img"].tobytes()),
                                         cuts=lambda n: range(1, n, 2))
    assert sorted(i for i, _, _ in full) == list(range(21))


def test_decode_with_threads_decodes_on_several_threads_at_once():
    import threading
    import time

    running, peak, lock = [0], [0], threading.Lock()

    class Slow(Decodable):
        def decode_example(self, value, token_per_repo_id=None):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.01)
            with lock:
                running[0] -= 1
            return super().decode_example(value)

    rows = [{"i": str(i)} for i in range(12)]
    ds = ri.IterableDataset.from_generator(lambda: iter(rows), features=Features({"i": Slow()}))
    assert list(ds.decode(num_threads=4)) == [{"i": f"decoded {i}"} for i in range(12)]
    assert peak[0] > 1


# ---------------------------------------------------------------------------- info


def test_info_of_a_hf_dataset_is_kept_by_derived_datasets():
    info = DatasetInfo(description="desc", citation="@article{}", homepage="https://x", license="mit",
                       size_in_bytes=42)
    ds = ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(4))}, info=info))
    assert ds.info == info
    derived = [ds.map(lambda x: x, features=ds.features), ds.shuffle(seed=0, buffer_size=2), ds.with_format("np"),
               ri.split_dataset_by_node(ds, 1, 2), pickle.loads(pickle.dumps(ds))]
    for d in derived:
        assert (d.description, d.citation, d.homepage, d.license, d.size_in_bytes) == (
            "desc", "@article{}", "https://x", "mit", 42)
        assert d.info.features == d.features
    assert ds.map(lambda x: {"y": 1}).info.features is None  # the dataset's own features
    ds.info.description = "changed"  # a copy
    assert ds.description == "desc"


def test_info_of_other_sources_is_empty_with_the_features():
    features = Features({"id": Value("int64")})
    ds = ri.IterableDataset.from_generator(gen, gen_kwargs={"n": 2}, features=features)
    # HF's generator builder names itself there (builder_name, dataset_name "generator"...), as ours
    assert ds.info == datasets.IterableDataset.from_generator(gen, gen_kwargs={"n": 2}, features=features).info
    assert ds.description == "" and ds.size_in_bytes is None
    assert source().info.features is None



@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "text", "arrow"])
def test_file_readers_take_info_as_hf(tmp_path, fmt):
    """HF's ``IterableDataset.from_<format>`` hands ``info=`` to its builder: the dataset keeps it and
    its features are cast to when no ``features=`` are given (narrowed to ``columns=``). Ours
    refused the option (TypeError)."""
    rows = [{"a": str(i), "b": i} for i in range(4)] if fmt != "text" else [{"text": str(i)} for i in range(4)]
    path = str(tmp_path / f"data.{fmt}")
    if fmt == "csv":
        Dataset.from_list(rows).to_csv(path)
    elif fmt == "json":
        Dataset.from_list(rows).to_json(path)
    elif fmt == "text":
        (tmp_path / "data.text").write_text("".join(r["text"] + "\n" for r in rows))
    elif fmt == "arrow":
        import pyarrow.feather as feather
        feather.write_feather(pa.Table.from_pylist(rows), path, compression="uncompressed")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    features = Features({"a": Value("int32"), "b": Value("string")} if fmt != "text" else {"text": Value("int32")})
    info = DatasetInfo(description="desc", license="mit", features=features)
    read = getattr(ri.IterableDataset, f"from_{fmt}")
    ds = read(path, info=info)
    assert ds.features == features and (ds.description, ds.license) == ("desc", "mit")
    assert list(ds) == [{k: (int(v) if features[k].dtype == "int32" else str(v)) for k, v in r.items()} for r in rows]
    assert info.description == "desc" and ds.info is not info
    declared = Features({k: Value("string") for k in features})
    assert read(path, info=info, features=declared).features == declared  # features= wins, as in HF
    if fmt == "parquet":
        narrowed = read(path, info=info, columns=["b"])
        assert narrowed.features == Features({"b": Value("string")})
        assert list(narrowed) == [{"b": str(r["b"])} for r in rows]
    assert_resumes_exactly(lambda: read(path, info=info))


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "text", "arrow"])
def test_file_readers_take_a_dict_of_splits_as_hf(tmp_path, fmt):
    """HF's ``IterableDataset.from_<format>({split: path(s)})`` gives a dataset per split (an
    ``IterableDatasetDict``), or the one ``split=`` names; ours read the split names as file paths
    ("cannot read data file 'train'")."""
    paths = {}
    for name, values in (("train", ["a", "b"]), ("test", ["c"])):
        path = tmp_path / f"{name}.{fmt}"
        if fmt == "parquet":
            pq.write_table(pa.table({"text": values}), path)
        elif fmt == "arrow":
            import pyarrow.feather as feather
            feather.write_feather(pa.table({"text": values}), str(path), compression="uncompressed")
        else:
            path.write_text({"csv": "text\n", "json": "", "text": ""}[fmt] + "".join(
                (f'{{"text": "{v}"}}' if fmt == "json" else v) + "\n" for v in values))
        paths[name] = str(path)
    read = getattr(ri.IterableDataset, f"from_{fmt}")
    got = read({"train": paths["train"], "test": [paths["test"]]})
    assert isinstance(got, dict) and list(got) == ["train", "test"]
    assert [got["train"].split, got["test"].split] == ["train", "test"]
    assert list(got["train"]) == [{"text": "a"}, {"text": "b"}] and list(got["test"]) == [{"text": "c"}]
    one = read(paths, split="test")
    assert one.split == "test" and list(one) == [{"text": "c"}]
    with pytest.raises(ValueError, match=r"split 'dev' is not one of the splits given: \['train', 'test'\]"):
        read(paths, split="dev")
    assert_resumes_exactly(lambda: read(paths)["train"])

@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "text"])
def test_file_readers_take_cache_dir_as_hf(tmp_path, fmt):
    """HF's ``IterableDataset.from_<format>(..., cache_dir=...)`` takes its reader's cache folder (a
    streamed dataset caches nothing); ours refused it (TypeError), e.g. HF's io tests pass it."""
    path = tmp_path / f"data.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table({"text": ["a", "b"]}), path)
    else:
        path.write_text({"csv": "text\na\nb\n", "json": '{"text": "a"}\n{"text": "b"}\n', "text": "a\nb\n"}[fmt])
    ds = getattr(ri.IterableDataset, f"from_{fmt}")(str(path), cache_dir=str(tmp_path / "cache"))
    assert list(ds) == [{"text": "a"}, {"text": "b"}]
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------- format of a concatenation


def test_interleave_names_its_split_as_hf():
    """HF's interleave_datasets takes split= (as its concatenate_datasets, which ours took): ours raised
    TypeError: unexpected keyword argument 'split'."""
    import datasets

    mine = [ri.IterableDataset.from_dict({"a": [i]}) for i in range(2)]
    theirs = [datasets.IterableDataset.from_dict({"a": [i]}) for i in range(2)]
    for split in (None, "train", "mix"):
        kw = {} if split is None else {"split": split}
        ours, hf = ri.interleave_datasets(mine, **kw), datasets.interleave_datasets(theirs, **kw)
        assert ours.split == hf.split == split
        assert list(ours) == list(hf)


def test_concatenate_keeps_a_format_every_dataset_has():
    a, b = source(2).with_format("arrow"), source(1, x=1).with_format("arrow")
    cat = ri.concatenate_datasets([a, b])
    assert cat.format["type"] == "arrow"
    assert [t.to_pylist() for t in cat] == [[{"id": 0}], [{"id": 1}], [{"id": 0, "x": 1}]]
    assert ri.concatenate_datasets([a, source(2)]).format["type"] is None  # as HF: mixed formats reset it
    assert ri.concatenate_datasets([a, source(2).with_format("pandas")]).format["type"] is None
    assert ri.interleave_datasets([a, b]).format["type"] is None  # HF's interleave keeps no format either


@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow", "pandas"])
def test_to_iterable_dataset_keeps_the_format_of_a_formatted_hf_dataset(fmt):
    # HF's Dataset.to_iterable_dataset keeps the map-style dataset's format; ours dropped it, so
    # `hf.with_format("torch")` gave Python ints instead of tensors
    hf = Dataset.from_dict({"id": [0, 1, 2, 3], "x": [0.5, 1.5, 2.5, 3.5]}).with_format(fmt)
    ours = ri.to_iterable_dataset(hf, num_shards=2)
    theirs = hf.to_iterable_dataset(num_shards=2)
    assert ours.format["type"] == fmt
    got, expected = list(ours), list(theirs)
    assert [type(x) for x in got] == [type(x) for x in expected]
    if fmt in ("numpy", "torch"):
        assert [{k: (type(v), v.tolist()) for k, v in x.items()} for x in got] == \
               [{k: (type(v), v.tolist()) for k, v in x.items()} for x in expected]
    assert_resumes_exactly(lambda: ri.to_iterable_dataset(hf, num_shards=2).with_format(None))


def test_to_iterable_dataset_refuses_a_format_of_some_columns_as_hf():
    hf = Dataset.from_dict({"id": [0, 1], "s": ["a", "b"]}).with_format("numpy", columns=["id"])
    with pytest.raises(NotImplementedError, match=r"columns \['id'\] only"):
        ri.to_iterable_dataset(hf)
    with pytest.raises(NotImplementedError):
        hf.to_iterable_dataset()


def test_shuffle_generator_is_copied_and_wins_over_the_seed_as_hf():
    # HF deep-copies the generator (two shuffles given one generator shuffle alike) and ignores
    # `seed` when a generator is given; ours advanced the caller's generator and let `seed` win
    ds = ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(40))}), num_shards=4)
    rng = np.random.default_rng(7)
    before = rng.bit_generator.state
    first = list(ds.shuffle(generator=rng, buffer_size=8))
    assert rng.bit_generator.state == before
    assert list(ds.shuffle(generator=rng, buffer_size=8)) == first
    assert list(ds.shuffle(seed=123, generator=np.random.default_rng(7), buffer_size=8)) == first
    hf = Dataset.from_dict({"id": list(range(40))}).to_iterable_dataset(num_shards=4)
    assert list(hf.shuffle(seed=123, generator=np.random.default_rng(7), buffer_size=8)) == \
        list(hf.shuffle(generator=np.random.default_rng(7), buffer_size=8))
