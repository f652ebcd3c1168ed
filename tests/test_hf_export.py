"""HF ``IterableDataset``'s exports (``to_list`` / ``to_dict`` / ``to_pandas`` / ``to_polars`` /
``to_csv`` / ``to_json`` / ``to_parquet`` / ``to_sql``), its in-memory and text constructors
(``from_pandas`` / ``from_polars`` / ``from_text``) and its info attributes (``split``,
``num_columns``, ``builder_name``...), each compared with HF ``datasets`` itself on the same input.
Exports read a fresh pass: the dataset's own iteration and state stay as they were."""

from __future__ import annotations

import sqlite3

import datasets
import pandas as pd
import pytest
from datasets import ClassLabel, DatasetInfo, Features, Value
from datasets import IterableDataset as HFIterable

import resumable_iterable as ri
from harness import assert_resumes_exactly

N = 2500  # more than one batch of the exports' 1000 rows
DATA = {"id": list(range(N)), "label": ["pos", "neg"] * (N // 2), "x": [[i, i + 1] for i in range(N)]}
FEATURES = Features({"id": Value("int32"), "label": ClassLabel(names=["neg", "pos"]), "x": [Value("float32")]})


def rows(n):
    for i in range(n):
        yield {"a": i, "b": "s" * (i % 4)}


def double(e):
    return {"y": e["id"] * 2}


PIPELINES = {
    "declared": lambda M: M.IterableDataset.from_dict(DATA, features=FEATURES, num_shards=3),
    "map": lambda M: M.IterableDataset.from_dict(DATA, num_shards=3).map(double),
    "take": lambda M: M.IterableDataset.from_dict(DATA, features=FEATURES, num_shards=3).skip(3).take(7),
    "generator": lambda M: M.IterableDataset.from_generator(rows, gen_kwargs={"n": 5}),
}


def same_frame(a, b):
    return a.equals(b) and list(a.dtypes) == list(b.dtypes) and list(a.columns) == list(b.columns)


@pytest.mark.parametrize("name", PIPELINES)
def test_in_memory_exports_match_hf(name):
    build = PIPELINES[name]
    ours, hf = build(ri), build(datasets)
    assert ours.to_list() == hf.to_list()
    assert ours.to_dict() == hf.to_dict()
    assert same_frame(ours.to_pandas(), hf.to_pandas())
    for size in (1000, 700):
        assert list(ours.to_dict(batch_size=size, batched=True)) == list(hf.to_dict(batch_size=size, batched=True))
        got, want = list(ours.to_pandas(size, batched=True)), list(hf.to_pandas(size, batched=True))
        assert len(got) == len(want) and all(same_frame(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.parametrize("kind,kwargs", [("csv", {}), ("csv", {"index": True, "sep": ";"}), ("json", {}),
                                         ("json", {"lines": False, "orient": "records"}), ("parquet", {}),
                                         ("parquet", {"compression": "gzip"})])
def test_file_exports_write_what_hf_writes(tmp_path, name, kind, kwargs):
    build = PIPELINES[name]
    out = {}
    for lib in (ri, datasets):
        path = tmp_path / f"{lib.__name__}.{kind}"
        try:
            written = getattr(build(lib), f"to_{kind}")(str(path), **kwargs)
        except Exception as e:  # noqa: BLE001 - HF refuses some (lines=False on several batches): so do we
            out[lib] = (type(e), str(e))
        else:
            out[lib] = (written, path.read_bytes())
    assert out[ri] == out[datasets]


@pytest.mark.parametrize("name", PIPELINES)
def test_to_sql_writes_what_hf_writes(name):
    build = PIPELINES[name]
    out = {}
    for lib in (ri, datasets):
        ds = build(lib)
        if "x" in (ds.column_names or []):
            ds = ds.remove_columns("x")  # lists: not a SQL type
        con = sqlite3.connect(":memory:")
        written = ds.to_sql("t", con)
        out[lib] = (written, con.execute("select * from t").fetchall())
    assert out[ri] == out[datasets]


def test_to_polars_matches_hf():
    pl = pytest.importorskip("polars")
    ours, hf = PIPELINES["map"](ri), PIPELINES["map"](datasets)
    assert ours.to_polars().equals(hf.to_polars())
    got, want = list(ours.to_polars(batch_size=1000, batched=True)), list(hf.to_polars(batch_size=1000, batched=True))
    assert len(got) == 3 and all(a.equals(b) for a, b in zip(got, want))
    assert ours.to_polars(schema_overrides={"id": pl.Int32}).dtypes[0] == pl.Int32


def test_to_polars_without_polars_raises_as_hf():
    try:
        import polars  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="Polars needs to be installed"):
            ri.IterableDataset.from_dict({"a": [1]}).to_polars()
    else:
        pytest.skip("polars is installed")


def shuffled():
    return ri.IterableDataset.from_dict(DATA, num_shards=5).shuffle(seed=3, buffer_size=50).map(double)


EXPORTS = {
    "to_list": lambda ds, tmp: ds.to_list(),
    "to_dict": lambda ds, tmp: ds.to_dict(),
    "to_dict_batched": lambda ds, tmp: list(ds.to_dict(batch_size=100, batched=True)),
    "to_pandas": lambda ds, tmp: ds.to_pandas().to_dict("records"),
    "to_csv": lambda ds, tmp: ds.to_csv(str(tmp / "out.csv")),
    "to_json": lambda ds, tmp: ds.to_json(str(tmp / "out.jsonl")),
    "to_parquet": lambda ds, tmp: ds.to_parquet(str(tmp / "out.parquet")),
    "to_sql": lambda ds, tmp: ds.to_sql("t", sqlite3.connect(":memory:")),
}


@pytest.mark.parametrize("export", EXPORTS)
def test_exports_leave_the_iteration_and_its_state_alone(tmp_path, export):
    whole = list(shuffled())
    ds = shuffled()
    it = iter(ds)
    first = [next(it) for _ in range(123)]
    state = ds.state_dict()
    EXPORTS[export](ds, tmp_path)
    assert ds.state_dict() == state
    assert first + list(it) == whole  # the iteration goes on where it was
    assert ds.to_list() == whole  # every example, from the start, after the pass ended too


@pytest.mark.parametrize("export", EXPORTS)
def test_exports_read_the_whole_dataset_over_a_loaded_state(tmp_path, export):
    whole = list(shuffled())
    donor = shuffled()
    it = iter(donor)
    for _ in range(77):
        next(it)
    ds = shuffled()
    ds.load_state_dict(donor.state_dict())
    EXPORTS[export](ds, tmp_path)
    assert list(ds) == whole[77:]  # the loaded state is still resumed after the export
    loaded = shuffled()
    loaded.load_state_dict(donor.state_dict())
    assert loaded.to_list() == whole


def test_hf_exports_leave_the_iteration_alone_too():
    hf = HFIterable.from_dict(DATA, num_shards=5)
    it = iter(hf)
    first = [next(it) for _ in range(10)]
    state = hf.state_dict()
    assert len(hf.to_list()) == N and hf.state_dict() == state
    assert first + list(it) == list(HFIterable.from_dict(DATA, num_shards=5))


def test_exports_read_the_current_epoch_and_the_rank():
    ds = shuffled()
    ds.set_epoch(2)
    assert ds.to_list() == list(ds)  # a fresh pass of epoch 2 (HF's copy reads epoch 0)
    assert ds.to_list() != shuffled().to_list()
    rank = ri.split_dataset_by_node(shuffled(), rank=1, world_size=5)
    assert rank.to_list() == list(rank) and len(rank.to_list()) == N // 5
    formatted = shuffled().with_format("torch")
    assert formatted.to_list() == shuffled().to_list()  # exports are of values, whatever the format


def test_an_empty_dataset_exports_empty_typed_results(tmp_path):
    # HF raises ArrowInvalid "Must pass at least one table"
    empty = ri.IterableDataset.from_dict(DATA, features=FEATURES).filter(lambda e: False)
    assert empty.to_list() == []
    assert empty.to_dict() == {"id": [], "label": [], "x": []}
    assert list(empty.to_pandas().columns) == ["id", "label", "x"]
    empty.to_parquet(str(tmp_path / "e.parquet"))
    back = ri.IterableDataset.from_parquet(str(tmp_path / "e.parquet"))
    assert list(back) == [] and back.features == FEATURES
    assert ri.IterableDataset.from_generator(rows, gen_kwargs={"n": 0}).to_dict() == {}


def test_parquet_export_round_trips_features_and_row_groups(tmp_path):
    import pyarrow.parquet as pq

    ds = PIPELINES["declared"](ri)
    ds.to_parquet(str(tmp_path / "a.parquet"), batch_size=1000)
    assert pq.ParquetFile(tmp_path / "a.parquet").num_row_groups == 3
    back = ri.IterableDataset.from_parquet(str(tmp_path / "a.parquet"))
    assert back.features == FEATURES and list(back) == list(ds)


# ------------------------------------------------------------------ constructors and info
FRAME = pd.DataFrame({"a": [1, 2, 3, 4], "b": ["x", None, "z", "w"], "f": [0.5, 1.0, 1.5, 2.0]}, index=[10, 11, 12, 13])


@pytest.mark.parametrize("kwargs", [{}, {"preserve_index": False}, {"preserve_index": True},
                                    {"features": Features({"a": Value("int32"), "b": Value("string"),
                                                           "f": Value("float32")}), "preserve_index": False},
                                    {"num_shards": 2}], ids=["default", "no_index", "index", "features", "shards"])
def test_from_pandas_matches_hf(kwargs):
    ours, hf = ri.IterableDataset.from_pandas(FRAME, **kwargs), HFIterable.from_pandas(FRAME, **kwargs)
    assert list(ours) == list(hf)
    assert ours.features == hf.features and ours.column_names == hf.column_names
    assert ours.num_columns == hf.num_columns and ours.num_shards == hf.num_shards
    assert_resumes_exactly(lambda: ri.IterableDataset.from_pandas(FRAME, **kwargs).shuffle(seed=0, buffer_size=2))


def test_from_polars_matches_hf():
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame({"a": [1, 2, 3], "b": ["x", None, "z"]})
    for source in (frame, frame.lazy()):
        ours, hf = ri.IterableDataset.from_polars(source), HFIterable.from_polars(source)
        assert list(ours) == list(hf) and ours.num_shards == hf.num_shards == 1
    assert_resumes_exactly(lambda: ri.IterableDataset.from_polars(frame))


TEXT = {"a.txt": "hello\nworld\n\npara two\n", "b.txt": "a b\nc\n\n\nd e f"}


@pytest.mark.parametrize("kwargs", [{}, {"sample_by": "paragraph"}, {"sample_by": "document"},
                                    {"keep_linebreaks": True}, {"sample_by": "paragraph", "keep_linebreaks": True},
                                    {"split": "validation"}, {"features": Features({"line": Value("string")})},
                                    {"keep_in_memory": True}])
def test_from_text_matches_hf(tmp_path, kwargs):
    paths = []
    for name, text in TEXT.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    for given in (paths[0], paths):
        ours, hf = ri.IterableDataset.from_text(given, **kwargs), HFIterable.from_text(given, **kwargs)
        assert list(ours) == list(hf)
        assert ours.split == hf.split and ours.num_shards == hf.num_shards
    assert_resumes_exactly(lambda: ri.IterableDataset.from_text(paths, **kwargs))


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("kwargs", [{}, {"split": "test"}, {"keep_in_memory": True}, {"features": "int32"}])
def test_file_constructors_take_hf_arguments(tmp_path, fmt, kwargs):
    # HF's from_csv / from_json / from_parquet take split=, features=, keep_in_memory= (ours refused them)
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    path = str(tmp_path / f"data.{fmt}")
    {"csv": lambda: frame.to_csv(path, index=False), "json": lambda: frame.to_json(path, orient="records", lines=True),
     "parquet": lambda: frame.to_parquet(path, index=False)}[fmt]()
    if kwargs.get("features"):
        kwargs = {"features": Features({"a": Value("int32"), "b": Value("string")})}
    ours = getattr(ri.IterableDataset, f"from_{fmt}")(path, **kwargs)
    hf = getattr(HFIterable, f"from_{fmt}")(path, **kwargs)
    assert list(ours) == list(hf) and ours.split == hf.split
    if "features" in kwargs:
        assert ours.features == hf.features == kwargs["features"]
    assert getattr(ri.IterableDataset, f"from_{fmt}")(path_or_paths=[path, path]).num_shards == 2


INFO_ATTRIBUTES = ["builder_name", "config_name", "version", "dataset_size", "download_size", "download_checksums",
                   "supervised_keys", "description", "citation", "homepage", "license", "size_in_bytes"]


def test_info_attributes_and_split_of_a_hf_dataset_source():
    info = DatasetInfo(description="d", builder_name="b", config_name="c", version="1.2.3", dataset_size=10,
                       download_size=20, download_checksums={"f": {"num_bytes": 1}}, license="mit")
    hf = datasets.Dataset.from_dict({"a": [1, 2]}, info=info, split="test")
    ours = ri.to_iterable_dataset(hf)
    for name in INFO_ATTRIBUTES:
        assert getattr(ours, name) == getattr(hf, name), name
    assert ours.split == "test"  # HF's to_iterable_dataset drops the split; ours keeps the source's
    derived = ours.map(lambda e: e).shuffle(seed=0).take(1)
    assert derived.split == "test" and derived.builder_name == "b" and str(derived.version) == "1.2.3"
    assert ri.IterableDataset.from_dict({"a": [1]}, info=info, split="train").split == "train"


def test_info_attributes_of_a_dataset_without_info_match_hf():
    ours, hf = ri.IterableDataset.from_dict({"a": [1], "b": [2]}), HFIterable.from_dict({"a": [1], "b": [2]})
    for name in INFO_ATTRIBUTES + ["split", "num_columns"]:
        assert getattr(ours, name) == getattr(hf, name), name
    assert ours.num_columns == 2
    assert ours.map(lambda e: {"c": 1}).num_columns is None is hf.map(lambda e: {"c": 1}).num_columns
    assert ours.select_columns("a").num_columns == 1



def test_load_dataset_names_each_split_as_hf(tmp_path):
    """``load_dataset`` of files, a folder of splits or an imagefolder: each split's ``split`` is its
    name, as HF's (ours said ``None``)."""
    from PIL import Image

    for s in ("train", "test"):
        (tmp_path / "files").mkdir(exist_ok=True)
        (tmp_path / "files" / f"{s}.jsonl").write_text('{"a": 1}\n')
        (tmp_path / "img" / s / "cat").mkdir(parents=True)
        Image.new("RGB", (2, 2)).save(tmp_path / "img" / s / "cat" / "x.png")
    jsonl = str(tmp_path / "files" / "train.jsonl")
    cases = [(("json",), {"data_files": jsonl, "split": "train"}),
             (("json",), {"data_files": {"validation": jsonl}, "split": "validation"}),
             ((str(tmp_path / "files"),), {"split": "test"}),
             (("imagefolder",), {"data_dir": str(tmp_path / "img"), "split": "test"}),
             ((str(tmp_path / "files"),), {})]
    for args, kwargs in cases:
        ours = ri.load_dataset(*args, **kwargs)
        hf = datasets.load_dataset(*args, streaming=True, **kwargs)
        if "split" in kwargs:
            ours, hf = {"one": ours}, {"one": hf}
        assert {k: d.split for k, d in ours.items()} == {k: d.split for k, d in hf.items()}, (args, kwargs)
        assert all(d.map(lambda e: e).split == d.split for d in ours.values())

# ------------------------------------------------------------------ push_to_hub, against a Hub mocked in process
class FakeHfApi:
    """Stands for ``huggingface_hub.HfApi`` where ``datasets`` uses it: records the uploaded files."""

    uploads: dict = {}
    commits: list = []

    def __init__(self, *args, **kwargs):
        pass

    def repo_info(self, repo_id, repo_type=None, revision=None, **kwargs):  # an existing, empty repo
        return type("Info", (), {"id": repo_id, "sha": "0" * 40})()

    def create_branch(self, *args, **kwargs):
        pass

    def preupload_lfs_files(self, repo_id, additions, **kwargs):
        for add in additions:
            with open(add.path_or_fileobj, "rb") as f:
                FakeHfApi.uploads[add.path_in_repo] = f.read()

    def create_commit(self, repo_id, operations, **kwargs):
        files = {}
        for op in operations:
            data = op.path_or_fileobj
            files[op.path_in_repo] = data if isinstance(data, bytes) else FakeHfApi.uploads[op.path_in_repo]
        FakeHfApi.commits.append((repo_id, files, kwargs))
        return type("CommitInfo", (), {"oid": "1" * 40})()


@pytest.fixture
def fake_hub(monkeypatch):
    from fsspec.implementations.memory import MemoryFileSystem

    import datasets.arrow_dataset
    import datasets.iterable_dataset

    memory = MemoryFileSystem()  # the repo's files before the push: none

    class FakeHfFileSystem:
        _cache: dict = {}

        def __new__(cls, *args, **kwargs):
            return memory

    FakeHfApi.uploads, FakeHfApi.commits = {}, []
    for module in (datasets.arrow_dataset, datasets.iterable_dataset):
        monkeypatch.setattr(module, "HfApi", FakeHfApi, raising=False)
        monkeypatch.setattr(module, "HfFileSystem", FakeHfFileSystem, raising=False)
    yield FakeHfApi
    memory.store.clear()


def pushed(api, build, **kwargs):
    """What ``build().push_to_hub`` committed: Parquet files as rows, the card without its sizes."""
    import io
    import re

    import pyarrow.parquet as pq

    api.uploads.clear(), api.commits.clear()
    build().push_to_hub("user/repo", **kwargs)
    (repo, files, commit), = api.commits
    out = {}
    for name, data in files.items():
        if name.endswith(".parquet"):
            table = pq.read_table(io.BytesIO(data))
            out[name] = (table.to_pylist(), table.schema.metadata)
        else:  # sizes: HF's iterable counts Parquet's uncompressed bytes, we Arrow's (as HF's map-style
            # push); the download size follows the files, which differ when the rows are split otherwise
            out[name] = re.sub(r"(num_bytes|dataset_size|download_size): \d+", r"\1: N", data.decode())
    return repo, out, commit


PUSHES = {
    "shards": (lambda M: M.IterableDataset.from_dict({"a": list(range(N)), "b": ["x"] * N}, num_shards=3), {}),
    "features_split_config": (PIPELINES["declared"], {"split": "test", "config_name": "c1", "num_shards": 2}),
    "map": (PIPELINES["map"], {"commit_message": "hello", "data_dir": "d"}),
    "max_shard_size": (lambda M: M.IterableDataset.from_dict({"a": list(range(N))}, num_shards=3),
                       {"max_shard_size": "10KB"}),
}


@pytest.mark.parametrize("name", PUSHES)
def test_push_to_hub_uploads_what_hf_uploads(fake_hub, name):
    build, kwargs = PUSHES[name]
    ours = pushed(fake_hub, lambda: build(ri), **kwargs)
    hf = pushed(fake_hub, lambda: build(datasets), **kwargs)
    assert "README.md" in ours[1] and any(f.endswith(".parquet") for f in ours[1])
    if name != "features_split_config":
        assert ours == hf
        return
    # 2 files of 3 shards: HF's iterable writes whole shards per file (2 + 1), we split the rows evenly;
    # the same files, card and rows in the same order
    assert ours[0] == hf[0] and ours[2] == hf[2] and sorted(ours[1]) == sorted(hf[1])
    assert ours[1]["README.md"] == hf[1]["README.md"]
    rows = {lib: [r for f in sorted(files) if f.endswith(".parquet") for r in files[f][0]]
            for lib, files in (("ours", ours[1]), ("hf", hf[1]))}
    assert rows["ours"] == rows["hf"] and len(rows["ours"]) == N


def test_push_to_hub_keeps_the_split_and_leaves_the_iteration_alone(fake_hub):
    ds = ri.IterableDataset.from_dict({"a": list(range(10))}, split="validation", num_shards=2)
    it = iter(ds)
    first = [next(it) for _ in range(3)]
    state = ds.state_dict()
    repo, files, _ = pushed(fake_hub, lambda: ds)
    assert sorted(files) == ["README.md", "data/validation-00000-of-00002.parquet",
                             "data/validation-00001-of-00002.parquet"]
    assert ds.state_dict() == state and first + list(it) == [{"a": i} for i in range(10)]
    with pytest.raises(ValueError, match="either max_shard_size or num_shards"):
        ds.push_to_hub("user/repo", max_shard_size="1MB", num_shards=2)


def _info_fields(ds) -> dict:
    import dataclasses

    return {f.name: str(getattr(ds.info, f.name)) for f in dataclasses.fields(ds.info) if f.name != "features"}


def test_load_dataset_and_file_constructors_fill_the_info_as_hf(tmp_path):
    """HF's builders name what they read: ``builder_name`` (the format), ``dataset_name`` (the format,
    or the folder's name), ``config_name`` (``"default"``, or the card's config, whose
    ``dataset_info`` fills the rest), ``version`` 0.0.0. Ours left them ``None``."""
    from PIL import Image

    files = tmp_path / "MyFiles"
    files.mkdir()
    (files / "train.jsonl").write_text('{"a": 1}\n')
    (files / "t.csv").write_text("a\n1\n")
    (files / "t.txt").write_text("a\n")
    pd.DataFrame({"a": [1]}).to_parquet(files / "t.parquet")
    (tmp_path / "img" / "cat").mkdir(parents=True)
    Image.new("RGB", (2, 2)).save(tmp_path / "img" / "cat" / "x.png")
    carded = tmp_path / "Carded"
    (carded / "sub").mkdir(parents=True)
    (carded / "sub" / "train.jsonl").write_text('{"a": 1}\n')
    (carded / "README.md").write_text(
        "---\nconfigs:\n- config_name: cfg\n  data_files: sub/*.jsonl\ndataset_info:\n  config_name: cfg\n"
        "  description: about it\n  features:\n  - name: a\n    dtype: int64\n  splits:\n  - name: train\n"
        "    num_bytes: 9\n    num_examples: 1\n  dataset_size: 9\n---\n")
    cases = [(("json",), {"data_files": str(files / "train.jsonl")}), (("csv",), {"data_files": str(files / "t.csv")}),
             (("text",), {"data_files": str(files / "t.txt")}), (("parquet",), {"data_files": str(files / "t.parquet")}),
             (("json",), {"data_dir": str(files), "data_files": "*.jsonl"}),
             ((str(files),), {"data_files": "*.jsonl"}), ((str(carded),), {}), ((str(carded),), {"name": "cfg"}),
             (("imagefolder",), {"data_dir": str(tmp_path / "img")}), ((str(tmp_path / "img"),), {})]
    for args, kwargs in cases:
        hf = datasets.load_dataset(*args, split="train", streaming=True, **kwargs)
        ours = ri.load_dataset(*args, split="train", **kwargs)
        assert _info_fields(ours) == _info_fields(hf), (args, kwargs)
        assert ours.builder_name == hf.builder_name and ours.config_name == hf.config_name, (args, kwargs)
        assert _info_fields(ours.map(lambda e: e).take(1))["builder_name"] == hf.builder_name
    assert ri.load_dataset(str(carded), split="train").description == "about it"
    for fmt, path in [("json", "train.jsonl"), ("csv", "t.csv"), ("text", "t.txt"), ("parquet", "t.parquet")]:
        ours = getattr(ri.IterableDataset, f"from_{fmt}")(str(files / path))
        hf = getattr(HFIterable, f"from_{fmt}")(str(files / path))
        assert _info_fields(ours) == _info_fields(hf), fmt


def test_combined_datasets_merge_the_info_as_hf(tmp_path):
    """concatenate_datasets / interleave_datasets (and load_dataset(split="train+test")) merge their
    inputs' info as HF does: equal infos (one builder's splits) are kept, others joined
    (descriptions...); ours had an empty info."""
    for s in ("train", "test"):
        (tmp_path / f"{s}.jsonl").write_text('{"a": 1}\n')
    files = {"train": str(tmp_path / "train.jsonl"), "test": str(tmp_path / "test.jsonl")}
    hf = datasets.load_dataset("json", data_files=files, split="train+test", streaming=True)
    assert _info_fields(ri.load_dataset("json", data_files=files, split="train+test")) == _info_fields(hf)
    (tmp_path / "c.csv").write_text("a\n1\n")
    csv = str(tmp_path / "c.csv")
    for combine in ("concatenate_datasets", "interleave_datasets"):
        for loads in ((("json", files["train"]), ("json", files["test"])), (("json", files["train"]), ("csv", csv))):
            ours = getattr(ri, combine)([ri.load_dataset(f, data_files=p, split="train") for f, p in loads])
            theirs = getattr(datasets, combine)([datasets.load_dataset(f, data_files=p, split="train", streaming=True)
                                                 for f, p in loads])
            assert _info_fields(ours) == _info_fields(theirs), (combine, loads)
    # infos HF's to_iterable_dataset drops (ours keeps them): joined as HF joins them
    one, two = DatasetInfo(description="one", license="mit"), DatasetInfo(description="two", license="mit")
    ours = ri.concatenate_datasets([ri.IterableDataset.from_dict({"a": [1]}, info=i) for i in (one, two)])
    assert (ours.description, ours.license) == ("one\n\ntwo", "mit")
