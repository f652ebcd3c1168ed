"""``load_dataset("imagefolder", ...)``: the rows, order, features and shards of HF's streaming
imagefolder builder (labels from folder names, metadata files, split folders, data_files), and
exact resumes of what it reads."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")
datasets = pytest.importorskip("datasets")

import resumable_iterable as ri  # noqa: E402
from harness import assert_loader_resumes_exactly, assert_resumes_exactly  # noqa: E402
from resumable_iterable.features import map_feature  # noqa: E402


def img(path, seed: int, size=(5, 4), mode: str = "RGB") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    Image.fromarray(rng.integers(0, 255, size=shape, dtype=np.uint8), mode).save(path)


def pixels(v):
    if isinstance(v, list):
        return [pixels(x) for x in v]
    return (v.mode, v.size, v.tobytes()) if hasattr(v, "tobytes") else v


def rows(ds) -> list[dict]:
    return [{k: pixels(v) for k, v in ex.items()} for ex in ds]


def labelled(root, labels=("dog", "cat", "bird"), per=3) -> str:
    for i, lab in enumerate(labels):
        for j in range(per):
            img(f"{root}/{lab}/{j}.png", i * 10 + j)
    return str(root)


def with_metadata(root, kind: str) -> str:
    for j in range(4):
        img(f"{root}/imgs/{j}.png", j + 50)
    names = [2, 0, 3, 1]
    if kind == "csv":
        (root / "metadata.csv").write_text("file_name,caption,score\n" + "".join(
            f"imgs/{j}.png,cap {j},{j * 0.5}\n" for j in names))
    elif kind == "jsonl":
        (root / "metadata.jsonl").write_text("".join(json.dumps(
            {"id": j, "file_name": f"imgs/{j}.png", "cond_file_name": f"imgs/{(j + 1) % 4}.png", "tags": ["a"] * j})
            + "\n" for j in names))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"file_names": [["imgs/0.png", "imgs/1.png"], ["imgs/2.png"]], "x": [1, 2]}),
                       str(root / "metadata.parquet"))
    return str(root)


def folders(tmp_path):
    """name -> (load_dataset kwargs) of each folder layout compared with HF."""
    t = tmp_path
    labelled(t / "labels")
    img(f"{t}/labels/cat/x.jpg", 99)
    (t / "labels/cat/notes.txt").write_text("not an image")
    labelled(t / "one", labels=("cat",))
    img(f"{t}/depth/a/1.png", 1), img(f"{t}/depth/b/c/2.png", 2), img(f"{t}/depth/3.png", 3)
    for s in ("train", "test", "validation"):
        labelled(t / "splits" / s, labels=("a", "b"), per=2)
    for kind in ("csv", "jsonl", "parquet"):
        with_metadata(t / kind, kind)
    for s in ("train", "test"):
        for j in range(3):
            img(f"{t}/metasplits/{s}/{j}.png", j + (7 if s == "test" else 0))
        (t / "metasplits" / s / "metadata.jsonl").write_text("".join(
            json.dumps({"file_name": f"{j}.png", "v": f"{s}{j}"}) + "\n" for j in (2, 1, 0)))
    img(f"{t}/modes/l/1.png", 1, mode="L"), img(f"{t}/modes/r/2.jpg", 2), img(f"{t}/modes/r/3.bmp", 3)
    img(f"{t}/modes/l/4.gif", 4, mode="L"), img(f"{t}/modes/r/5.webp", 5)
    for s in ("train", "test"):
        for lab in ("cat", "dog"):
            img(f"{t}/metasubdirs/{s}/{lab}/1.png", len(s) + len(lab))
        (t / "metasubdirs" / s / "metadata.csv").write_text("file_name,extra\ndog/1.png,b\ncat/1.png,a\n")
    img(f"{t}/nested/a.png", 1), img(f"{t}/nested/b.png", 2)
    (t / "nested/metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"file_name": "a.png", "obj": {"file_name": "b.png", "k": 1}, "more": [{"x_file_name": "a.png"}]},
        {"file_name": None, "obj": {"file_name": "a.png", "k": 2}, "more": []}]))
    img(f"{t}/odd/a/X.PNG", 1), img(f"{t}/odd/b/y.Jpg", 2), img(f"{t}/odd/.cache/z.png", 3)
    img(f"{t}/odd/a/__pycache__/w.png", 4)
    os.symlink(t / "odd", t / "link")
    img(f"{t}/names/train_1.png", 1), img(f"{t}/names/train_2.png", 2), img(f"{t}/names/test_1.png", 3)
    for j in range(2):
        img(f"{t}/codes/{j}.png", j)
    (t / "codes/metadata.csv").write_text("file_name,code,score\n0.png,007,1\n1.png,010,2\n")
    V = datasets.Value
    return {
        "csv-features": dict(data_dir=f"{t}/codes", split="train", features=datasets.Features(
            {"image": datasets.Image(), "code": V("string"), "score": V("float32")})),
        "labels-features": dict(data_dir=f"{t}/labels", split="train", features=datasets.Features(
            {"image": datasets.Image(), "label": datasets.ClassLabel(names=["dog", "bird", "cat"])})),
        "labels-features-undecoded": dict(data_dir=f"{t}/labels", split="train", features=datasets.Features(
            {"image": datasets.Image(decode=False)})),
        "metadata-subdirs": dict(data_dir=f"{t}/metasubdirs"),
        "metadata-named": dict(data_dir=f"{t}/metasubdirs", data_files={"train": ["train/**/*.png", "train/*.csv"]},
                               split="train"),
        "nested-file-names": dict(data_dir=f"{t}/nested", split="train"),
        "odd-names": dict(data_dir=f"{t}/odd", split="train"),
        "symlinked-dir": dict(data_dir=f"{t}/link", split="train", drop_labels=False),
        "split-by-file-name": dict(data_dir=f"{t}/names"),
        "labels": dict(data_dir=f"{t}/labels", split="train"),
        "labels-dropped": dict(data_dir=f"{t}/labels", split="train", drop_labels=True),
        "one-folder": dict(data_dir=f"{t}/one", split="train"),
        "one-folder-labels": dict(data_dir=f"{t}/one", split="train", drop_labels=False),
        "depths": dict(data_dir=f"{t}/depth", split="train"),
        "depths-labels": dict(data_dir=f"{t}/depth", split="train", drop_labels=False),
        "splits": dict(data_dir=f"{t}/splits"),
        "splits-test": dict(data_dir=f"{t}/splits", split="test"),
        "csv": dict(data_dir=f"{t}/csv", split="train"),
        "csv-dropped": dict(data_dir=f"{t}/csv", split="train", drop_metadata=True),
        "jsonl": dict(data_dir=f"{t}/jsonl", split="train"),
        "parquet-lists": dict(data_dir=f"{t}/parquet", split="train"),
        "metadata-splits": dict(data_dir=f"{t}/metasplits"),
        "data_files": dict(data_dir=f"{t}/labels", data_files={"train": ["dog/*.png", "cat/*"], "test": "bird/*"}),
        "data_files-overlapping": dict(data_dir=f"{t}/labels", data_files=["cat/*.png", "*/0.png"], split="train"),
        "data_files-list": dict(data_files=[f"{t}/labels/cat/x.jpg", f"{t}/labels/bird/1.png"], split="train"),
        "modes": dict(data_dir=f"{t}/modes", split="train"),
    }


CASES = ["csv-features", "labels-features", "labels-features-undecoded", "labels", "labels-dropped", "one-folder", "one-folder-labels", "depths", "depths-labels", "splits",
         "splits-test", "csv", "csv-dropped", "jsonl", "parquet-lists", "metadata-splits", "data_files",
         "data_files-list", "data_files-overlapping", "modes", "metadata-subdirs", "metadata-named", "nested-file-names", "odd-names",
         "symlinked-dir", "split-by-file-name"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("case", CASES)
def test_same_rows_features_and_shards_as_hf(tmp_path, case):
    kwargs = folders(tmp_path)[case]
    hf = datasets.load_dataset("imagefolder", streaming=True, **kwargs)
    ours = ri.load_dataset("imagefolder", **kwargs)
    if kwargs.get("split") is None:
        assert list(ours) == list(hf)
        pairs = [(hf[s], ours[s]) for s in hf]
    else:
        pairs = [(hf, ours)]
    for h, o in pairs:
        assert o.features == h.features
        assert list(o.features) == list(h.features)
        assert o.num_shards == h.num_shards
        expected = rows(h)
        assert expected and rows(o) == expected
        # the same files, as HF names them (the data_dir's links resolved)
        undecoded = datasets.Features(
            {k: map_feature(f, lambda x: datasets.Image(decode=False) if isinstance(x, datasets.Image) else x)
             for k, f in h.features.items()})
        assert list(o.cast(undecoded)) == list(h.cast(undecoded))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("case", ["labels", "splits", "csv", "metadata-splits", "modes"])
def test_a_folder_of_images_is_an_imagefolder_as_in_hf(tmp_path, case):
    """HF's load_dataset(folder) reads a folder whose files are mostly images with its imagefolder
    builder; before, ours said it held no data files."""
    kwargs = folders(tmp_path)[case]
    root = kwargs.pop("data_dir")
    with open(os.path.join(root, "README.md"), "w") as f:
        f.write("# images\n")
    hf = datasets.load_dataset(root, streaming=True, **kwargs)
    ours = ri.load_dataset(root, **kwargs)
    pairs = [(hf[s], ours[s]) for s in hf] if kwargs.get("split") is None else [(hf, ours)]
    assert kwargs.get("split") is not None or list(ours) == list(hf)
    for h, o in pairs:
        assert (o.features, o.num_shards) == (h.features, h.num_shards)
        assert rows(o) == rows(h)


def test_a_folder_of_more_tables_than_images_is_read_as_tables(tmp_path):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    img(f"{tmp_path}/a.png", 1)
    for i in range(2):
        pcsv.write_csv(pa.table({"x": [i]}), str(tmp_path / f"t{i}.csv"))
    assert [ex for ex in ri.load_dataset(str(tmp_path), split="train")] == [{"x": 0}, {"x": 1}]
    ds = datasets.load_dataset(str(tmp_path), split="train", streaming=True)
    assert list(ds) == [{"x": 0}, {"x": 1}]


def test_labels_are_sorted_folder_names(tmp_path):
    ds = ri.load_dataset("imagefolder", data_dir=labelled(tmp_path), split="train")
    assert ds.features["label"].names == ["bird", "cat", "dog"]
    assert [ex["label"] for ex in ds] == [0] * 3 + [1] * 3 + [2] * 3
    assert ds.column_names == ["image", "label"]


def test_labels_are_decided_over_every_split(tmp_path):
    """HF decides to add labels split by split, counting the folders seen so far: with one folder
    in train and two in test, its train rows have label None under a ClassLabel feature. Ours
    decides once, over every split (the feature HF ends up with), and labels every row."""
    img(f"{tmp_path}/train/cat/1.png", 1), img(f"{tmp_path}/test/cat/1.png", 2), img(f"{tmp_path}/test/dog/1.png", 3)
    splits = ri.load_dataset("imagefolder", data_dir=str(tmp_path))
    assert [ex["label"] for ex in splits["train"]] == [0]
    assert [ex["label"] for ex in splits["test"]] == [0, 1]
    assert splits["train"].features["label"].names == ["cat", "dog"]


def key(ex):
    return {k: pixels(v) for k, v in ex.items()}


@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("layout", ["labels", "csv"])
def test_every_cut_point_resumes_exactly(tmp_path, layout, shuffled):
    root = labelled(tmp_path) if layout == "labels" else with_metadata(tmp_path, "csv")

    def build():
        ds = ri.load_dataset("imagefolder", data_dir=root, split="train", num_shards=3)
        if shuffled:
            ds = ds.shuffle(seed=5, buffer_size=4)
        return ds.map(key)

    full = assert_resumes_exactly(build)
    assert len(full) == (9 if layout == "labels" else 4)


def test_num_shards_splits_a_split_in_contiguous_shards(tmp_path):
    root = labelled(tmp_path)
    one = ri.load_dataset("imagefolder", data_dir=root, split="train")
    three = ri.load_dataset("imagefolder", data_dir=root, split="train", num_shards=3)
    assert (one.num_shards, three.num_shards) == (1, 3)
    assert rows(three) == rows(one)
    with pytest.raises(ValueError, match="num_shards=10 is larger than the number of rows of split 'train' "):
        ri.load_dataset("imagefolder", data_dir=root, split="train", num_shards=10)


def two_metadata_files(root) -> str:
    for part in ("b", "c"):
        for j in range(2):
            img(f"{root}/{part}/{j}.png", j + ord(part))
        os.makedirs(f"{root}/{part}", exist_ok=True)
        with open(f"{root}/{part}/metadata.csv", "w") as f:
            f.write("file_name,caption\n" + "".join(f"{j}.png,{part}{j}\n" for j in range(2)))
    return str(root)


@pytest.mark.parametrize("layout", ["labels", "csv"])
def test_a_state_refuses_images_renamed_or_reordered(tmp_path, layout):
    # rows are counted in file order: an image (or a metadata file's folder) renamed so that it
    # sorts elsewhere moves the rows after it, and a resume repeated one and lost another silently
    root = labelled(tmp_path / "a") if layout == "labels" else two_metadata_files(tmp_path / "a")
    ds = ri.load_dataset("imagefolder", data_dir=root, split="train")
    it = iter(ds)
    next(it), next(it)
    state = json.loads(json.dumps(ds.state_dict()))
    moved = str(tmp_path / "b")
    os.rename(root, moved)  # the same files in another folder resume
    same = ri.load_dataset("imagefolder", data_dir=moved, split="train")
    same.load_state_dict(state)
    assert len(list(same)) == (7 if layout == "labels" else 2)
    if layout == "labels":
        os.rename(f"{moved}/dog/0.png", f"{moved}/dog/9.png")
    else:
        os.rename(f"{moved}/c", f"{moved}/a")  # its rows now come first
    other = ri.load_dataset("imagefolder", data_dir=moved, split="train")
    with pytest.raises(ValueError, match="the data files are not those the state was saved with"):
        other.load_state_dict(state)


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")
def test_stateful_dataloader_two_workers_resumes_exactly(tmp_path):
    pytest.importorskip("torchdata")
    root = labelled(tmp_path, labels=("a", "b", "c", "d"), per=3)

    def build():
        ds = ri.load_dataset("imagefolder", data_dir=root, split="train", num_shards=4)
        return ds.shuffle(seed=3, buffer_size=3).map(lambda ex: {"px": ex["image"].tobytes(), "label": ex["label"]})

    full = assert_loader_resumes_exactly(build, workers=2, batch_size=None,
                                         item=lambda ex: (ex["px"], int(ex["label"])),
                                         cuts=lambda n: range(1, n + 1))
    assert len(full) == 12


def test_features_cast(tmp_path):
    root = labelled(tmp_path)
    ds = ri.load_dataset("imagefolder", data_dir=root, split="train",
                         features=datasets.Features({"image": datasets.Image(decode=False),
                                                     "label": datasets.ClassLabel(names=["bird", "cat", "dog"])}))
    first = next(iter(ds))
    assert first["image"]["path"].endswith(os.path.join("bird", "0.png")) and first["label"] == 0


# errors

def test_empty_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file found under data_dir="):
        ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="no image file in split 'train'"):
        ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train")


def test_metadata_without_file_name(tmp_path):
    img(f"{tmp_path}/a.png", 1)
    (tmp_path / "metadata.csv").write_text("name,caption\na.png,x\n")
    with pytest.raises(ValueError, match="metadata file .*metadata.csv' has no 'file_name' column"):
        ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train")


def test_metadata_naming_a_missing_image(tmp_path):
    img(f"{tmp_path}/a.png", 1)
    (tmp_path / "metadata.csv").write_text("file_name,caption\na.png,x\nb.png,y\n")
    with pytest.raises(FileNotFoundError, match="metadata.csv' names 'b.png', but .*b.png' does not exist"):
        ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train")


def test_metadata_may_not_leave_its_folder(tmp_path):
    img(f"{tmp_path}/a.png", 1)
    img(f"{tmp_path}/sub/b.png", 1)
    (tmp_path / "sub/metadata.csv").write_text("file_name\n../a.png\n")
    with pytest.raises(ValueError, match="file_name '../a.png' must be a relative path inside"):
        ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train")


def test_other_errors(tmp_path):
    root = labelled(tmp_path / "x")
    with pytest.raises(ValueError, match="needs data_dir=... or data_files=..."):
        ri.load_dataset("imagefolder")
    with pytest.raises(TypeError, match=r"unexpected option\(s\) \['sep'\]"):
        ri.load_dataset("imagefolder", data_dir=root, sep=",")
    with pytest.raises(ValueError, match=r"unknown split 'test'; available splits: \['train'\]"):
        ri.load_dataset("imagefolder", data_dir=root, split="test")
    (tmp_path / "x" / "more.zip").write_bytes(b"PK")  # images in a zip are read (test_archives.py); not a zip:
    with pytest.raises(ValueError, match=r"more\.zip' is not a valid zip archive"):
        ri.load_dataset("imagefolder", data_dir=root, split="train")
    with pytest.raises(ValueError, match="reads local files; for a Hub repo of images, pass its id"):
        ri.load_dataset("imagefolder", data_files="hf://datasets/user/repo/*.png")
    with pytest.raises(FileNotFoundError, match="is not a local folder"):
        ri.load_dataset("imagefolder", data_dir=str(tmp_path / "nope"))


def test_a_hub_repo_of_images_from_the_cache(tmp_path, monkeypatch):
    """A Hub dataset repo of images (read from the Hugging Face cache, offline) is an imagefolder,
    as HF reads it."""
    import huggingface_hub.constants as constants
    from test_hub import populate_hub_cache

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    src = tmp_path / "src"
    for s in ("train", "test"):
        labelled(src / s, labels=("a", "b"), per=2)
    (src / "README.md").write_text("# images\n")
    files = {os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/"): os.path.join(d, f)
             for d, _, fs in os.walk(src) for f in fs}
    cache = str(tmp_path / "cache")
    populate_hub_cache(cache, "user/images", "b" * 40, "main", files)
    local = ri.load_dataset(str(src))
    hub = ri.load_dataset("user/images", cache_dir=cache)
    assert list(hub) == list(local) == ["train", "test"]
    for s in hub:
        assert hub[s].features == local[s].features and hub[s].features["label"].names == ["a", "b"]
        assert rows(hub[s]) == rows(local[s]) and len(rows(hub[s])) == 4
    assert rows(ri.load_dataset("hf://datasets/user/images/test", split="train", cache_dir=cache)) == rows(local["test"])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_images_are_decoded_one_row_at_a_time(tmp_path):
    """Before, a source decoded its rows 512 at a time: every image of a chunk was loaded before
    the first was yielded (2 GB for 600 images of 1000x1000 where HF holds one), and an image that
    could not be decoded failed the rows before it too. As HF, the rows before it are yielded; the
    state then points at it, so a resume raises there again and loses nothing."""
    for j in range(6):
        img(f"{tmp_path}/{j}.png", j)
    (tmp_path / "3.png").write_bytes(b"not an image")
    hf = iter(datasets.load_dataset("imagefolder", data_dir=str(tmp_path), split="train", streaming=True))
    expected = [pixels(next(hf)["image"]) for _ in range(3)]
    with pytest.raises(Image.UnidentifiedImageError):
        next(hf)
    ds = ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train")
    it, got = iter(ds), []
    with pytest.raises(Image.UnidentifiedImageError, match="3.png"):
        for ex in it:
            got.append(pixels(ex["image"]))
    assert got == expected
    resumed = ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train")
    resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    with pytest.raises(Image.UnidentifiedImageError, match="3.png"):
        next(iter(resumed))


def test_parquet_images_are_decoded_one_row_at_a_time(tmp_path):
    import io

    def png(k):
        buf = io.BytesIO()
        Image.fromarray(np.full((2, 2, 3), k, np.uint8)).save(buf, "PNG")
        return buf.getvalue()

    blobs = [png(k) for k in range(5)]
    blobs[2] = b"not an image"
    path = str(tmp_path / "x.parquet")
    datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in blobs]},
                               features=datasets.Features({"image": datasets.Image()})).to_parquet(path)
    ds = ri.load_dataset("parquet", data_files=path, split="train")
    got = []
    with pytest.raises(Image.UnidentifiedImageError):
        for ex in ds:
            got.append(ex["image"].getpixel((0, 0)))
    assert got == [(0, 0, 0), (1, 1, 1)]


def _kinds(v):
    """What a formatted value is: its type, and dtype / shape for arrays and tensors."""
    if isinstance(v, dict):
        return {k: _kinds(x) for k, x in v.items()}
    if isinstance(v, list) or isinstance(v, np.ndarray) and v.dtype == object:
        return [type(v).__name__] + [_kinds(x) for x in v]
    return (type(v).__name__, str(getattr(v, "dtype", "")), tuple(getattr(v, "shape", ())))


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("with_metadata_file", [False, True])
def test_numpy_and_torch_rows_are_typed_as_hf_python_path(tmp_path, fmt, with_metadata_file):
    """HF's imagefolder builder yields Python examples, so HF formats its rows from Python values:
    under with_format("numpy") a label is a 0-d int64 array. Ours formatted them from Arrow, as a
    Parquet file's (a numpy int64 scalar)."""
    if fmt == "torch":
        pytest.importorskip("torch")
    root = with_metadata(tmp_path, "jsonl") if with_metadata_file else labelled(tmp_path, per=2)
    hf = datasets.load_dataset("imagefolder", data_dir=str(root), split="train", streaming=True)
    ours = ri.load_dataset("imagefolder", data_dir=str(root), split="train")
    for how in (lambda d: d, lambda d: d.take(3), lambda d: d.skip(1)):
        want = [_kinds(ex) for ex in how(hf).with_format(fmt)]
        assert [_kinds(ex) for ex in how(ours).with_format(fmt)] == want and want
    want = [_kinds(b) for b in hf.with_format(fmt).iter(batch_size=2)]
    assert [_kinds(b) for b in ours.with_format(fmt).iter(batch_size=2)] == want


def test_numpy_rows_resume_exactly(tmp_path):
    root = labelled(tmp_path, per=2)

    def build():
        return ri.load_dataset("imagefolder", data_dir=root, split="train").with_format("numpy")

    assert_resumes_exactly(build)


def test_a_hub_repo_of_zipped_images_is_an_imagefolder(tmp_path, monkeypatch):
    """A Hub repo whose data are zips of images (and their metadata) is read as an imagefolder, as HF
    reads it (its zips are looked into): ours did not look into a repo's zips, so it was read as text
    and refused. Compared with HF reading the same files from a local folder; resumes exactly."""
    import io
    import zipfile

    import huggingface_hub.constants as constants
    from test_hub import populate_hub_cache

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    src = tmp_path / "zips"
    src.mkdir()
    for split, n in (("train", 4), ("test", 2)):
        with zipfile.ZipFile(src / f"{split}.zip", "w") as z:
            for j in range(n):
                img(str(tmp_path / "tmp.png"), j + (10 if split == "test" else 0))
                z.write(tmp_path / "tmp.png", f"imgs/{j}.png")
            z.writestr("metadata.jsonl", "".join(json.dumps({"file_name": f"imgs/{j}.png", "caption": f"{split} {j}"})
                                                 + "\n" for j in range(n)))
    cache = str(tmp_path / "cache")
    populate_hub_cache(cache, "user/zipped", "c" * 40, "main",
                       {f"data/{s}.zip": str(src / f"{s}.zip") for s in ("train", "test")})
    hf = datasets.load_dataset(str(src), streaming=True)
    hub = ri.load_dataset("user/zipped", cache_dir=cache)
    assert list(hub) == list(hf) == ["train", "test"]
    for s in hub:
        assert hub[s].features == hf[s].features and hub[s].builder_name == "imagefolder"
        assert [(ex["caption"], pixels(ex["image"])) for ex in hub[s]] == [
            (ex["caption"], pixels(ex["image"])) for ex in hf[s]]
    full = assert_resumes_exactly(lambda: ri.load_dataset("user/zipped", split="train", cache_dir=cache).map(key))
    assert len(full) == 4


@pytest.mark.parametrize("how", ["format_then_batch", "batch_then_format", "shuffle", "take", "map"])
def test_numpy_batches_of_batch_are_typed_as_hf(tmp_path, how):
    """HF's batch() is a batched map: after with_format("numpy") its map gets formatted batches and,
    on HF's Python path (imagefolder rows, or any row after a map), formats each batch it yields once
    more, which makes images int64 arrays; batch().with_format("numpy") and Arrow-path rows (Parquet)
    keep uint8. Ours gave uint8 everywhere."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = labelled(tmp_path / "img", per=2)
    img(str(tmp_path / "odd.png"), 99, size=(7, 2))  # images of two sizes: an object array of them
    pq.write_table(pa.table({"image": [{"bytes": open(p, "rb").read(), "path": None}
                                       for p in (f"{root}/dog/0.png", str(tmp_path / "odd.png"))] * 2}),
                   str(tmp_path / "x.parquet"))
    feats = datasets.Features({"image": datasets.Image()})
    steps = {"format_then_batch": lambda d: d.with_format("numpy").batch(2),
             "batch_then_format": lambda d: d.batch(2).with_format("numpy"),
             "shuffle": lambda d: d.with_format("numpy").shuffle(seed=0, buffer_size=1).batch(3),
             "take": lambda d: d.with_format("numpy").take(3).batch(2),
             "map": lambda d: d.map(lambda e: e).with_format("numpy").batch(2)}[how]
    loads = [(lambda **k: datasets.load_dataset("imagefolder", data_dir=root, split="train", streaming=True),
              lambda: ri.load_dataset("imagefolder", data_dir=root, split="train")),
             (lambda: datasets.load_dataset("parquet", data_files=str(tmp_path / "x.parquet"), split="train",
                                            streaming=True, features=feats),
              lambda: ri.load_dataset("parquet", data_files=str(tmp_path / "x.parquet"), split="train", features=feats))]
    for hf, ours in loads:
        want = [_kinds(b) for b in steps(hf())]
        assert [_kinds(b) for b in steps(ours())] == want and want


def test_numpy_batches_of_batch_resume_exactly(tmp_path):
    root = labelled(tmp_path, per=2)
    assert_resumes_exactly(lambda: ri.load_dataset("imagefolder", data_dir=root, split="train").with_format(
        "numpy").batch(2))


def test_the_builder_of_a_split_of_zips_counts_its_first_ten_as_hf(tmp_path):
    """HF chooses the builder of a split of zip archives from the files in its first 10 archives
    (ARCHIVES_MAX_NUMBER_FOR_MODULE_INFERENCE); ours counted every archive's, so an 11th full of
    CSV files outvoted ten archives of images."""
    import zipfile

    (tmp_path / "data").mkdir()
    for k in range(10):
        img(str(tmp_path / "tmp.png"), k)
        with zipfile.ZipFile(tmp_path / "data" / f"part{k:02d}.zip", "w") as z:
            z.write(tmp_path / "tmp.png", f"{k}.png")
    with zipfile.ZipFile(tmp_path / "data" / "part10.zip", "w") as z:
        for j in range(12):
            z.writestr(f"t{j}.csv", "a\n1\n")
    hf = datasets.load_dataset(str(tmp_path / "data"), split="train", streaming=True)
    ours = ri.load_dataset(str(tmp_path / "data"), split="train")
    assert ours.builder_name == hf.builder_name == "imagefolder"
    assert len(list(ours)) == 10
