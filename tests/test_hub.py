"""load_dataset over local folders laid out like Hub dataset repos, and over a Hugging Face cache
populated the way huggingface_hub lays it out, used offline (no network in any test: the Hub
endpoint points at a closed loopback port, and HF_HUB_OFFLINE is on)."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from fresh import run_fresh
import resumable_iterable as ri
from harness import assert_resumes_exactly
from resumable_iterable.integrations.hub import infer_splits, match_files, parse_hf_path, resolve_splits

COMMIT_MAIN = "a" * 40
COMMIT_V1 = "b" * 40


# --------------------------------------------------------------------------- writing data files


def table(ids):
    return pa.table({"id": list(ids), "text": [f"t{i}" for i in ids]})


def write(path, ids, fmt=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fmt = fmt or os.path.splitext(path)[1].lstrip(".")
    t = table(ids)
    if fmt == "parquet":
        pq.write_table(t, path, row_group_size=3)
    elif fmt == "arrow":
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
            w.write_table(t)
    elif fmt == "jsonl":
        with open(path, "w") as f:
            for row in t.to_pylist():
                f.write(json.dumps(row) + "\n")
    elif fmt == "csv":
        pcsv.write_csv(t, path)
    else:
        raise AssertionError(fmt)


def ids_of(ds):
    return [ex["id"] for ex in ds]


# --------------------------------------------------------------------------- conventions (pure)


def test_split_conventions():
    assert infer_splits(["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
                         "data/test-00000-of-00001.parquet", "other/x.parquet"]) == {
        "train": ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"],
        "test": ["data/test-00000-of-00001.parquet"]}
    assert infer_splits(["train/a.csv", "train/b.csv", "dev/a.csv", "testing/x.csv"]) == {
        "train": ["train/a.csv", "train/b.csv"], "validation": ["dev/a.csv"], "test": ["testing/x.csv"]}
    assert infer_splits(["train.jsonl", "my_test-0.jsonl", "valid.jsonl"]) == {
        "train": ["train.jsonl"], "test": ["my_test-0.jsonl"], "validation": ["valid.jsonl"]}
    # keywords only count between separators: "interval" is not "val", "devices" not "dev"
    assert infer_splits(["interval.csv", "devices.csv"]) == {"train": ["devices.csv", "interval.csv"]}
    # folders win over file names
    assert infer_splits(["train/test_like.csv", "test/x.csv"]) == {"train": ["train/test_like.csv"],
                                                                  "test": ["test/x.csv"]}


def test_splits_are_in_hf_order(tmp_path):
    """Before, the dict of splits followed the sorted file paths (test, train, validation); HF
    lists train, validation, test, then the other splits by name."""
    assert list(infer_splits(["test/a.csv", "train/a.csv", "val/a.csv"])) == ["train", "validation", "test"]
    assert list(infer_splits(["a_test.csv", "b_dev.csv", "c_train.csv"])) == ["train", "validation", "test"]
    assert list(infer_splits(["data/zeta-00000-of-00001.parquet", "data/test-00000-of-00001.parquet",
                              "data/alpha-00000-of-00001.parquet", "data/train-00000-of-00001.parquet"])) == [
        "train", "test", "alpha", "zeta"]
    for s in ("test", "train", "validation"):
        write(str(tmp_path / s / "x.csv"), range(2))
    assert list(ri.load_dataset(str(tmp_path))) == ["train", "validation", "test"]


def test_glob_patterns():
    files = ["a.parquet", "data/b.parquet", "data/sub/c.parquet", "data/d.csv"]
    assert match_files("*.parquet", files) == ["a.parquet"]
    assert match_files("data/*.parquet", files) == ["data/b.parquet"]
    assert match_files("data/**/*.parquet", files) == ["data/b.parquet", "data/sub/c.parquet"]
    assert match_files("**.parquet", files) == ["a.parquet", "data/b.parquet", "data/sub/c.parquet"]
    assert match_files("data", files) == ["data/b.parquet", "data/d.csv", "data/sub/c.parquet"]
    assert match_files(["data/d.csv", "./a.parquet"], files) == ["data/d.csv", "a.parquet"]
    with pytest.raises(FileNotFoundError, match="no data file matches 'nope/\\*'"):
        match_files("nope/*", files)


def test_resolve_ignores_metadata_and_hidden_files():
    files = ["README.md", ".gitattributes", ".cache/x.parquet", "data/train.parquet", "notes.txt"]
    assert resolve_splits(files) == {"train": ["data/train.parquet"]}
    assert resolve_splits(files, data_files="**") == {"train": ["data/train.parquet", "notes.txt"]}


def test_parse_hf_path():
    assert parse_hf_path("hf://datasets/user/repo") == ("user/repo", None, "")
    assert parse_hf_path("hf://datasets/user/repo@v1/data/*.parquet") == ("user/repo", "v1", "data/*.parquet")
    assert parse_hf_path("hf://datasets/user/repo@refs%2Fconvert%2Fparquet/x") == (
        "user/repo", "refs/convert/parquet", "x")
    with pytest.raises(ValueError, match="only dataset repos"):
        parse_hf_path("hf://user/model/x")


# --------------------------------------------------------------------------- local folders


@pytest.fixture
def repo_dir(tmp_path):
    """A folder laid out like a Hub dataset repo: sharded parquet files for two splits."""
    root = tmp_path / "repo"
    write(str(root / "data/train-00000-of-00002.parquet"), range(0, 10))
    write(str(root / "data/train-00001-of-00002.parquet"), range(10, 17))
    write(str(root / "data/test-00000-of-00001.parquet"), range(100, 104))
    (root / "README.md").write_text("# a dataset\n")
    (root / ".gitattributes").write_text("*.parquet filter=lfs\n")
    return root


def test_local_repo_layout(repo_dir):
    ds = ri.load_dataset(str(repo_dir), split="train")
    assert isinstance(ds, ri.IterableDataset)
    assert ds.num_shards == 2  # one shard per file
    assert ids_of(ds) == list(range(17))
    both = ri.load_dataset(repo_dir)
    assert sorted(both) == ["test", "train"] and ids_of(both["test"]) == [100, 101, 102, 103]
    with pytest.raises(ValueError, match=r"unknown split 'validation'; available splits: \['test', 'train'\]"):
        ri.load_dataset(str(repo_dir), split="validation")
    with pytest.raises(ValueError, match="revision= only applies to Hub repos"):
        ri.load_dataset(str(repo_dir), revision="main")


def test_local_resumes_exactly(repo_dir):
    def build():
        return ri.load_dataset(str(repo_dir), split="train").shuffle(seed=3, buffer_size=4)

    full = assert_resumes_exactly(build, max_cuts=8)
    assert sorted(ex["id"] for ex in full) == list(range(17))


@pytest.mark.parametrize("ext", ["parquet", "arrow", "jsonl", "csv"])
def test_split_folders_in_every_format(tmp_path, ext):
    root = tmp_path / ext
    write(str(root / f"train/part-0.{ext}"), range(5))
    write(str(root / f"train/part-1.{ext}"), range(5, 8))
    write(str(root / f"validation/part-0.{ext}"), range(50, 53))
    splits = ri.load_dataset(str(root))
    assert sorted(splits) == ["train", "validation"]
    assert ids_of(splits["train"]) == list(range(8))
    assert ids_of(splits["validation"]) == [50, 51, 52]
    assert splits["train"].num_shards == 2


def test_data_files_and_data_dir(tmp_path):
    root = tmp_path / "r"
    write(str(root / "a/x1.jsonl"), range(3))
    write(str(root / "a/x2.jsonl"), range(3, 6))
    write(str(root / "b/y.jsonl"), range(10, 12))
    assert ids_of(ri.load_dataset(str(root), data_files="a/*.jsonl", split="train")) == list(range(6))
    got = ri.load_dataset(str(root), data_files={"train": ["b/y.jsonl", "a/x2.jsonl"], "test": "a/x1.jsonl"})
    assert ids_of(got["train"]) == [10, 11, 3, 4, 5] and ids_of(got["test"]) == [0, 1, 2]
    assert ids_of(ri.load_dataset(str(root), data_dir="b", split="train")) == [10, 11]
    assert ids_of(ri.load_dataset(str(root), data_dir="a", data_files="x2.jsonl", split="train")) == [3, 4, 5]
    # a single file, and the HF "packaged builder" form
    assert ids_of(ri.load_dataset(str(root / "b/y.jsonl"), split="train")) == [10, 11]
    got = ri.load_dataset("json", data_files={"train": str(root / "a/*.jsonl")}, split="train")
    assert ids_of(got) == list(range(6))
    with pytest.raises(ValueError, match="needs data_files"):
        ri.load_dataset("csv")
    with pytest.raises(FileNotFoundError, match="no data file matches"):
        ri.load_dataset(str(root), data_files="c/*.jsonl")



def test_data_files_globs_leave_out_metadata_hidden_and_special_files_as_hf(tmp_path):
    """``load_dataset("csv", data_files="folder/*")``: HF's globs leave out ``README.md`` (and the other
    dataset metadata files), hidden files and folders, and ``__pycache__``-like folders, unless the
    pattern asks for them. Ours read them as data (a README.md parsed as CSV rows)."""
    datasets = pytest.importorskip("datasets")
    root = tmp_path / "g"
    for name, value in [("a.csv", 1), ("README.md", 2), (".h.csv", 3), (".hid/x.csv", 4), ("__pycache__/y.csv", 5),
                        ("config.json", 6), ("sub/b.csv", 7)]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"a\n{value}\n")
    for pattern, expected in [("*", [1]), ("**", [1, 7]), ("**/*.csv", [1, 7]), ("README.md", [2]),
                              (".*", [3]), (".hid/*", [4]), ("__pycache__/*", [5]), ("*/*.csv", [7])]:
        data_files = str(root / pattern)

        def build():
            return ri.load_dataset("csv", data_files=data_files, split="train")

        got = [r["a"] for r in build()]
        assert got == expected, pattern
        assert got == [r["a"] for r in datasets.load_dataset("csv", data_files=data_files, split="train",
                                                              streaming=True)], pattern
    assert_resumes_exactly(lambda: ri.load_dataset("csv", data_files=str(root / "**"), split="train"))
    with pytest.raises(FileNotFoundError, match="no data file matches"):
        ri.load_dataset("csv", data_files=str(root / "*.json"), split="train")  # only config.json
    with pytest.raises(FileNotFoundError, match="no data file matches"):
        ri.load_dataset("csv", data_files=str(root / "*.md"), split="train")  # README.md is asked for by name only

def test_mixed_formats_need_a_choice(tmp_path):
    root = tmp_path / "mixed"
    write(str(root / "train-a.csv"), range(2))
    write(str(root / "train-b.jsonl"), range(2, 4))
    with pytest.raises(ValueError, match=r"mixes file formats \['csv', 'json'\]"):
        ri.load_dataset(str(root), split="train")
    assert ids_of(ri.load_dataset(str(root), data_files="*.csv", split="train")) == [0, 1]


CARD = textwrap.dedent("""\
    ---
    configs:
    - config_name: small
      data_files:
      - split: train
        path: small/*.csv
    - config_name: big
      default: true
      data_files:
      - split: train
        path: "big/train-*.csv"
      - split: test
        path: big/test.csv
    ---
    # card
    """)


def test_dataset_card_configs(tmp_path):
    root = tmp_path / "card"
    write(str(root / "small/a.csv"), range(3))
    write(str(root / "big/train-0.csv"), range(10, 14))
    write(str(root / "big/train-1.csv"), range(14, 16))
    write(str(root / "big/test.csv"), range(90, 92))
    (root / "README.md").write_text(CARD)
    assert sorted(ri.load_dataset(str(root))) == ["test", "train"]  # the default config
    assert ids_of(ri.load_dataset(str(root), split="train")) == list(range(10, 16))
    assert ids_of(ri.load_dataset(str(root), "small", split="train")) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"config 'nope' not found; available configs: \['small', 'big'\]"):
        ri.load_dataset(str(root), "nope")


FEATURES_CARD = textwrap.dedent("""\
    ---
    configs:
    - config_name: labelled
      data_files:
      - split: train
        path: data/*.jsonl
    - config_name: other
      data_files: other/*.jsonl
    dataset_info:
    - config_name: labelled
      features:
      - name: text
        dtype: string
      - name: label
        dtype:
          class_label:
            names:
              '0': neg
              '1': pos
      - name: score
        dtype: float32
    ---
    """)


def test_the_features_of_the_dataset_card_are_applied_as_hf_applies_them(tmp_path):
    """HF casts a split to the features its card declares (dataset_info); before, they were ignored."""
    import datasets
    from datasets import ClassLabel, Features, Value

    root = tmp_path / "repo"
    (root / "data").mkdir(parents=True)
    (root / "other").mkdir()
    (root / "data" / "train.jsonl").write_text('{"text": "a", "label": 1, "score": 0.1}\n'
                                               '{"text": "b", "label": 0, "score": 2.5}\n')
    (root / "other" / "x.jsonl").write_text('{"text": "c", "label": 7, "score": 1}\n')
    (root / "README.md").write_text(FEATURES_CARD)
    ours = ri.load_dataset(str(root), "labelled", split="train")
    theirs = datasets.load_dataset(str(root), "labelled", split="train", streaming=True)
    expected = Features({"text": Value("string"), "label": ClassLabel(names=["neg", "pos"]), "score": Value("float32")})
    assert ours.features == theirs.features == expected
    assert list(ours) == list(theirs)
    # a config the card declares no features for keeps the file's types; features= wins over the card
    assert list(ri.load_dataset(str(root), "other", split="train")) == [{"text": "c", "label": 7, "score": 1}]
    mine = Features({"text": Value("string"), "label": Value("int8"), "score": Value("float64")})
    assert ri.load_dataset(str(root), "labelled", split="train", features=mine).features == mine


@pytest.mark.parametrize("builder", ["webdataset", "audiofolder", "pandas"])
def test_hf_builders_we_do_not_have_are_named(tmp_path, builder, monkeypatch):
    """Before, load_dataset("audiofolder", data_dir=...) said no folder 'audiofolder' existed."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=f"HF's '{builder}' builder is not supported here"):
        ri.load_dataset(builder, data_dir=str(tmp_path), split="train")


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a local folder or file nor a Hub dataset repo id"):
        ri.load_dataset(str(tmp_path / "does-not-exist"))


# --------------------------------------------------------------------------- the Hugging Face cache, offline


def populate_hub_cache(cache, repo_id, commit, ref, files, downloaded=None):
    """Lay out ``files`` ({path in repo: local source file}) as huggingface_hub does for a dataset
    repo downloaded at ``commit`` (reached through ``refs/<ref>``): content-addressed blobs,
    snapshot symlinks, the ref, and the tree listing huggingface_hub caches next to them.
    ``downloaded`` limits which files were actually fetched (default: all)."""
    storage = os.path.join(cache, "datasets--" + repo_id.replace("/", "--"))
    for sub in ("blobs", "refs", "trees", os.path.join("snapshots", commit)):
        os.makedirs(os.path.join(storage, sub), exist_ok=True)
    with open(os.path.join(storage, "refs", ref), "w") as f:
        f.write(commit)
    tree = {}
    for path, src in files.items():
        data = open(src, "rb").read()
        blob = hashlib.sha256(data).hexdigest()
        tree[path] = {"size": len(data), "blob_id": hashlib.sha1(data).hexdigest()}
        if downloaded is not None and path not in downloaded:
            continue
        with open(os.path.join(storage, "blobs", blob), "wb") as f:
            f.write(data)
        link = os.path.join(storage, "snapshots", commit, *path.split("/"))
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(os.path.join(storage, "blobs", blob), os.path.dirname(link)), link)
    with open(os.path.join(storage, "trees", f"{commit}.json"), "w") as f:
        json.dump({"format_version": 1, "files": tree}, f)
    return storage


@pytest.fixture
def hub_cache(tmp_path, repo_dir):
    """``user/repo`` at two revisions: ``main`` (the repo_dir files) and tag ``v1`` (an older layout
    with a single jsonl training file); on main the test split was never downloaded."""
    cache = str(tmp_path / "hf-cache")
    main_files = {rel: str(repo_dir / rel) for rel in
                  ["README.md", "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
                   "data/test-00000-of-00001.parquet"]}
    populate_hub_cache(cache, "user/repo", COMMIT_MAIN, "main", main_files,
                       downloaded={k for k in main_files if "test" not in k})
    old = tmp_path / "old"
    write(str(old / "train.jsonl"), range(500, 503))
    (old / "README.md").write_text("old\n")
    populate_hub_cache(cache, "user/repo", COMMIT_V1, "v1",
                       {"train.jsonl": str(old / "train.jsonl"), "README.md": str(old / "README.md")})
    return cache


@pytest.fixture
def offline(monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there


def test_hub_repo_from_the_cache_offline(hub_cache, offline):
    ds = ri.load_dataset("user/repo", split="train", cache_dir=hub_cache)
    assert ds.num_shards == 2 and ids_of(ds) == list(range(17))
    old = ri.load_dataset("user/repo", split="train", revision="v1", cache_dir=hub_cache)
    assert ids_of(old) == [500, 501, 502]
    pinned = ri.load_dataset("user/repo", split="train", revision=COMMIT_V1, cache_dir=hub_cache)
    assert ids_of(pinned) == [500, 501, 502]


def test_hub_split_not_in_the_cache_is_named(hub_cache, offline):
    # the listing cached with the snapshot knows the test split; its file was never downloaded
    with pytest.raises(FileNotFoundError, match="data/test-00000-of-00001.parquet"):
        ri.load_dataset("user/repo", split="test", cache_dir=hub_cache)
    with pytest.raises(FileNotFoundError, match="offline mode is on"):
        ri.load_dataset("user/other", split="train", cache_dir=hub_cache)
    with pytest.raises(FileNotFoundError, match="offline mode is on"):
        ri.load_dataset("user/repo", split="train", revision="v2", cache_dir=hub_cache)


def test_hf_urls_offline(hub_cache, offline):
    ds = ri.load_dataset("hf://datasets/user/repo/data", split="train", cache_dir=hub_cache)
    assert ids_of(ds) == list(range(17))
    ds = ri.load_dataset("hf://datasets/user/repo@v1", split="train", cache_dir=hub_cache)
    assert ids_of(ds) == [500, 501, 502]
    ds = ri.load_dataset("parquet", data_files="hf://datasets/user/repo/data/train-00001-*.parquet",
                         split="train", cache_dir=hub_cache)
    assert ids_of(ds) == list(range(10, 17))
    # a glob over a repo leaves its README.md out, as HF's (ours read it as a data file)
    ds = ri.load_dataset("json", data_files="hf://datasets/user/repo@v1/*", split="train", cache_dir=hub_cache)
    assert ids_of(ds) == [500, 501, 502]


def test_hf_url_globs_matching_nothing_add_nothing_offline(hub_cache, offline):
    """As HF's: an hf:// glob matching no file (or only the README) adds nothing to its split, and a
    split none of whose globs match is empty (they raised FileNotFoundError)."""
    train = "hf://datasets/user/repo/data/train-*.parquet"
    ds = ri.load_dataset("parquet", data_files=[train, "hf://datasets/user/repo/nomatch*",
                                                "hf://datasets/user/repo/README*"], split="train", cache_dir=hub_cache)
    assert ids_of(ds) == list(range(17))
    both = ri.load_dataset("parquet", data_files={"train": train, "test": "hf://datasets/user/repo/nomatch*"},
                           cache_dir=hub_cache)
    assert ids_of(both["test"]) == [] and both["test"].features == both["train"].features
    with pytest.raises(FileNotFoundError, match="no data file matches"):
        ri.load_dataset("parquet", data_files="hf://datasets/user/repo/nomatch*", cache_dir=hub_cache)


def test_hub_dataset_resumes_exactly(hub_cache, offline):
    def build():
        return ri.load_dataset("user/repo", split="train", cache_dir=hub_cache).shuffle(seed=1, buffer_size=5)

    assert_resumes_exactly(build, max_cuts=6)


def test_offline_environment_in_a_fresh_process(hub_cache, tmp_path):
    """The documented way: HF_HUB_OFFLINE=1 and HF_HUB_CACHE set in the environment."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=hub_cache, HF_ENDPOINT="http://127.0.0.1:9",
               HF_HOME=str(tmp_path / "hf-home"))
    code = "import resumable_iterable as ri; print([ex['id'] for ex in ri.load_dataset('user/repo', split='train')])"
    assert run_fresh(code, env=env) == str(list(range(17)))


def test_online_downloads_only_the_split_pinned_to_one_commit(tmp_path, repo_dir, monkeypatch):
    """With the Hub reachable (simulated: huggingface_hub's download and listing calls are replaced
    by fakes serving ``repo_dir``), the card is fetched at the requested revision, then only the
    files of the requested split, at the commit that revision resolved to."""
    import huggingface_hub

    calls = []
    snapshot = tmp_path / "cache" / "snapshots" / COMMIT_MAIN

    def fake_snapshot_download(repo_id, *, repo_type, revision, allow_patterns, cache_dir, token, local_files_only):
        assert repo_type == "dataset" and not local_files_only
        calls.append((revision, sorted(allow_patterns)))
        for rel in allow_patterns:
            src = repo_dir / rel
            if src.is_file():
                dst = snapshot / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(src.read_bytes())
        return str(snapshot)

    def fake_list_repo_files(self, repo_id, *, repo_type, revision):
        assert (repo_id, repo_type, revision) == ("user/repo", "dataset", COMMIT_MAIN)
        return [p.relative_to(repo_dir).as_posix() for p in repo_dir.rglob("*") if p.is_file()]

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", fake_list_repo_files)
    ds = ri.load_dataset("user/repo", split="train", revision="main", cache_dir=str(tmp_path / "cache"))
    assert ids_of(ds) == list(range(17))
    assert calls == [("main", ["README.md"]),
                     (COMMIT_MAIN, ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"])]


def test_load_dataset_is_one_function_under_its_three_names():
    """``ri.load_dataset``, ``integrations.hub.load_dataset`` and the one in ``hub/load.py`` are the same;
    the modules of the package use only each other's public names."""
    import ast
    import pathlib

    import resumable_iterable.integrations.hub as hub
    from resumable_iterable.integrations.hub.load import load_dataset

    assert ri.load_dataset is hub.load_dataset is load_dataset
    found = []
    for path in pathlib.Path(hub.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found += [(path.name, node.module, a.name) for a in node.names if a.name.startswith("_")]
    assert found == []


def test_a_hub_repo_of_zip_archives_from_the_cache_offline(tmp_path, offline):
    """A repo whose data files are zips of CSV files (HF reads the files in them, format guessed from
    the files inside): read from the Hugging Face cache, and through an ``hf://`` URL."""
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    with zipfile.ZipFile(src / "train.zip", "w") as z:
        z.writestr("b.csv", "id\n2\n3\n")
        z.writestr("a.csv", "id\n0\n1\n")
    cache = str(tmp_path / "hf-cache")
    populate_hub_cache(cache, "user/zips", COMMIT_V1, "main", {"data/train.zip": str(src / "train.zip")})
    ds = ri.load_dataset("user/zips", split="train", cache_dir=cache)
    assert ds.num_shards == 1 and ids_of(ds) == [0, 1, 2, 3]
    url = ri.load_dataset("csv", data_files="hf://datasets/user/zips/data/*.zip", split="train", cache_dir=cache)
    assert ids_of(url) == [0, 1, 2, 3]


@pytest.mark.parametrize("split", ["train+test", "test + train", "all"])
def test_a_split_joining_splits_is_read_as_hf_streams_it(tmp_path, split):
    """HF's streaming load_dataset(split="train+test") (or "all") yields the splits one after the
    other, named by that string; ours raised 'unknown split'."""
    import datasets

    for s, n in (("train", 3), ("test", 2), ("validation", 1)):
        (tmp_path / f"{s}.jsonl").write_text("".join(json.dumps({"s": s, "i": i}) + "\n" for i in range(n)))
    for args, kw in (((str(tmp_path),), {}), (("json",), {"data_dir": str(tmp_path)})):
        ours = ri.load_dataset(*args, split=split, **kw)
        theirs = datasets.load_dataset(*args, split=split, streaming=True, **kw)
        assert list(ours) == list(theirs)
        assert ours.split == theirs.split == split and ours.num_shards == theirs.n_shards
        assert_resumes_exactly(lambda: ri.load_dataset(*args, split=split, **kw).shuffle(seed=0, buffer_size=2))
    with pytest.raises(ValueError, match="unknown split 'nope'"):
        ri.load_dataset(str(tmp_path), split="train+nope")


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_every_split_is_typed_as_the_first_splits_first_file_as_hf_types_it(tmp_path, fmt):
    """HF's JSON / Parquet / Arrow builders cast every split to the first split's first file: a train
    column of mixed values (HF 5.2's Json) holding only numbers in the test file is Json there too,
    and split="train+test" joins them. Ours typed each split by its own first file: the test split
    was int64 (HF: Json), and "train+test" concatenated Json with int64 (refused since the features
    must align; before that, yielded the train's strings under int64, which exports failed on)."""
    import datasets

    def put(name, values):
        rows = [{"c": v, "i": k} for k, v in enumerate(values)]
        if fmt == "json":
            (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            return str(tmp_path / f"{name}.jsonl")
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"{name}.parquet")
        return str(tmp_path / f"{name}.parquet")

    first = put("train", [1, "x", {"k": 1}] if fmt == "json" else [1.5, 2.5])
    files = {"train": [first], "test": [put("test", [2, 3])]}
    for split in ("test", "train+test", "test+train", "all"):
        ours = ri.load_dataset(fmt, data_files=files, split=split)
        theirs = datasets.load_dataset(fmt, data_files=files, split=split, streaming=True)
        assert ours.features == theirs.features, split
        assert list(ours) == list(theirs) == ours.to_list(), split
    assert_resumes_exactly(lambda: ri.load_dataset(fmt, data_files=files, split="test+train")
                           .shuffle(seed=1, buffer_size=2))
    folder = tmp_path / "folder"  # a folder's splits by file name: "test" alone too
    folder.mkdir()
    for s, (path,) in files.items():
        os.replace(path, folder / os.path.basename(path))
    ours = ri.load_dataset(str(folder), split="test")
    assert ours.features == datasets.load_dataset(str(folder), split="test", streaming=True).features
    if fmt == "parquet":  # a value the first file's type cannot hold: refused as HF's, naming the file
        bad = ri.load_dataset(fmt, data_files={"train": [str(folder / "train.parquet")], "test": [put("bad", ["s"])]},
                              split="test")
        assert bad.features == ours.features
        with pytest.raises(ValueError, match=r"(?s)bad\.parquet.*'s'"):
            list(bad)
    else:  # a split of fewer columns has the others as None; a value the type cannot hold is refused, naming it
        (tmp_path / "few.jsonl").write_text(json.dumps({"i": 1.5}) + "\n")
        few = ri.load_dataset(fmt, data_files={"train": str(folder / "train.jsonl"), "test": str(tmp_path / "few.jsonl")},
                              split="train+test")
        with pytest.raises(ValueError, match=r"few\.jsonl"):
            list(few)


def test_a_global_shuffle_of_joined_splits_is_refused_naming_the_join(tmp_path):
    """split="train+test" is a concatenation, which a global shuffle cannot read at random positions:
    the error spoke of concatenate_datasets only, a call the user never made."""
    files = {s: str(tmp_path / f"{s}.parquet") for s in ("train", "test")}
    for path in files.values():
        write(path, range(3))
    with pytest.raises(ValueError, match=r"load_dataset\(split='train\+test' \| 'all'\).*shuffle each dataset \(or "
                                         r"split\) with shuffle\(buffer_size=None\) before concatenating"):
        ri.load_dataset("parquet", data_files=files, split="train+test").shuffle(seed=0, buffer_size=None)
    parts = [ri.load_dataset("parquet", data_files=files, split=s).shuffle(seed=0, buffer_size=None) for s in files]
    assert sorted(ex["id"] for ex in ri.concatenate_datasets(parts)) == [0, 0, 1, 1, 2, 2]


def test_an_unknown_split_of_data_files_is_a_value_error(tmp_path):
    """HF raises ValueError('Bad split'); ours raised a bare KeyError for data_files= given directly."""
    write(str(tmp_path / "a.csv"), range(2))
    with pytest.raises(ValueError, match="unknown split 'test'; available splits: \\['train'\\]"):
        ri.load_dataset("csv", data_files=str(tmp_path / "a.csv"), split="test")


def test_a_hub_repo_info_is_hf_builders(hub_cache, repo_dir, offline):
    """A Hub repo's datasets are named as HF's builder names them (``builder_name`` the format,
    ``dataset_name`` the repo's name, ``config_name`` ``"default"``, ``version`` 0.0.0): as HF names
    the same files in a local folder of that name. Ours left them ``None``."""
    import dataclasses

    import datasets

    def fields(ds):
        return {f.name: str(getattr(ds.info, f.name)) for f in dataclasses.fields(ds.info) if f.name != "features"}

    hf = datasets.load_dataset(str(repo_dir), split="train", streaming=True)  # a folder named "repo"
    for ours in (ri.load_dataset("user/repo", split="train", cache_dir=hub_cache),
                 ri.load_dataset("hf://datasets/user/repo/data", split="train", cache_dir=hub_cache)):
        assert fields(ours) == fields(hf)
        assert (ours.builder_name, ours.info.dataset_name, ours.config_name) == ("parquet", "repo", "default")
    url = ri.load_dataset("parquet", data_files="hf://datasets/user/repo/data/train-*.parquet", split="train",
                          cache_dir=hub_cache)
    assert (url.builder_name, url.info.dataset_name, str(url.version)) == ("parquet", "parquet", "0.0.0")


JSON_SPLIT_CASES = {  # (train rows, test rows): HF types every split from the first split's first file
    "int_then_str": ([{"a": i} for i in range(3)], [{"a": str(i)} for i in range(3)]),
    "float_then_int": ([{"a": i + 0.5} for i in range(3)], [{"a": i} for i in range(3)]),
    "missing_column": ([{"a": i, "c": 1} for i in range(3)], [{"a": i} for i in range(3)]),
    "json_then_int": ([{"a": 1}, {"a": "x"}], [{"a": 3}, {"a": 4}]),
    "struct_then_int": ([{"a": {"k": 1}}], [{"a": 2}]),
    "int_then_struct": ([{"a": 1}], [{"a": {"k": 2}}]),  # cannot be cast: both raise
    "int_then_float": ([{"a": 1}], [{"a": 2.5}]),
    "extra_column": ([{"a": 1}], [{"a": 2, "c": 3}]),
}


def write_rows(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def outcome(load):
    try:
        dd = load()
        return {s: (dd[s].features, list(dd[s])) for s in dd}
    except Exception as e:  # noqa: BLE001 - HF's exception types differ from ours (ours name the file)
        return type(e).__name__ != ""  # "it raised"


@pytest.mark.parametrize("case", sorted(JSON_SPLIT_CASES))
def test_json_splits_follow_the_first_split_as_in_hf(tmp_path, case):
    """HF's json builder takes the features of every split from the first split's first file and
    casts the other splits to them (or fails where they cannot be cast); ours typed each split from
    its own first file (a test split of "0", "1" stayed strings where HF reads 0, 1)."""
    import datasets

    train, test = JSON_SPLIT_CASES[case]
    write_rows(str(tmp_path / "d" / "train.jsonl"), train)
    write_rows(str(tmp_path / "d" / "test.jsonl"), test)
    files = {"train": str(tmp_path / "d" / "train.jsonl"), "test": str(tmp_path / "d" / "test.jsonl")}
    want = outcome(lambda: datasets.load_dataset("json", data_files=files, streaming=True))
    assert outcome(lambda: ri.load_dataset("json", data_files=files)) == want
    assert outcome(lambda: ri.load_dataset(str(tmp_path / "d"))) == want  # a folder: train, then test
    if want is not True:
        only = ri.load_dataset("json", data_files=files, split="test")
        assert (only.features, list(only)) == want["test"]
        assert (lambda d: (d.features, list(d)))(ri.load_dataset(str(tmp_path / "d"), split="test")) == want["test"]


def test_json_test_split_of_a_hub_repo_follows_the_train_split(tmp_path, offline):
    """From a Hub repo too, split="test" alone reads the test files with the train split's first
    file's columns (that file is downloaded for them, as HF reads it); and it resumes exactly."""
    src = tmp_path / "src"
    write_rows(str(src / "train.jsonl"), [{"a": 0, "b": None}])
    write_rows(str(src / "test.jsonl"), [{"a": str(i)} for i in range(6)])
    cache = str(tmp_path / "hf-cache")
    populate_hub_cache(cache, "user/json", COMMIT_V1, "main",
                       {"train.jsonl": str(src / "train.jsonl"), "test.jsonl": str(src / "test.jsonl")})
    ds = ri.load_dataset("user/json", split="test", cache_dir=cache)
    assert list(ds) == [{"a": i, "b": None} for i in range(6)]
    assert dict(ds.features) == dict(ri.load_dataset("user/json", split="train", cache_dir=cache).features)
    assert_resumes_exactly(lambda: ri.load_dataset("user/json", split="test", cache_dir=cache))
    assert_resumes_exactly(lambda: ri.load_dataset("json", data_files={"train": str(src / "train.jsonl"),
                                                                       "test": str(src / "test.jsonl")},
                                                   split="test").shuffle(seed=0, buffer_size=3))


def test_json_splits_with_features_given_are_each_cast_to_them(tmp_path):
    """With features given HF infers nothing from the first split: each split is cast to them (a
    test split of "x" read as a string though train holds 1)."""
    import datasets

    write_rows(str(tmp_path / "train.jsonl"), [{"a": 1}])
    write_rows(str(tmp_path / "test.jsonl"), [{"a": "x"}])
    files = {"train": str(tmp_path / "train.jsonl"), "test": str(tmp_path / "test.jsonl")}
    feats = datasets.Features({"a": datasets.Value("string")})
    want = outcome(lambda: datasets.load_dataset("json", data_files=files, streaming=True, features=feats))
    assert outcome(lambda: ri.load_dataset("json", data_files=files, features=feats)) == want
    assert want["test"][1] == [{"a": "x"}]
