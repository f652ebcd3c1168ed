"""``ri.load_dataset`` takes HF 5.2's ``datasets.load_dataset`` arguments as a script switching one
import passes them: its positional order, the arguments streaming accepts (``keep_in_memory``,
``download_mode``...), ``num_proc`` refused as HF refuses it, ``split`` lists, and ``data_files``
patterns that match nothing. Each checked side by side with HF's ``streaming=True`` on local files."""

from __future__ import annotations

import inspect
import json
import os

import pytest

import datasets
import resumable_iterable as ri
from harness import assert_resumes_exactly


def _rows(ds):
    return [dict(r) for r in ds]


@pytest.fixture
def files(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for s in ("train", "test"):
        with open(d / f"{s}.jsonl", "w") as f:
            for i in range(4):
                f.write(json.dumps({"a": i, "s": s}) + "\n")
    (d / "README.md").write_text("# card\n")
    (d / ".hidden.jsonl").write_text('{"a": 99}\n')
    return d


def _both(*args, **kwargs):
    """HF's streaming load_dataset and ours on the same arguments."""
    return datasets.load_dataset(*args, streaming=True, **kwargs), ri.load_dataset(*args, **kwargs)


def test_positional_order_is_hf_s():
    """HF's arguments, in HF's order, each where HF has it (ours adds keyword-only ``format``)."""
    ours = list(inspect.signature(ri.load_dataset).parameters.values())
    hf = list(inspect.signature(datasets.load_dataset).parameters.values())
    positional = [p.name for p in ours if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == [p.name for p in hf if p.kind == p.POSITIONAL_OR_KEYWORD]


def test_arguments_given_positionally_as_in_hf(files):
    data_files = {"train": str(files / "train.jsonl"), "test": str(files / "test.jsonl")}
    hf, ours = _both("json", None, None, data_files, "test")
    assert ours.split == hf.split == "test"
    assert _rows(ours) == _rows(hf)


@pytest.mark.parametrize("kwargs", [dict(keep_in_memory=True), dict(download_mode="force_redownload"),
                                    dict(verification_mode="no_checks"), dict(save_infos=True),
                                    dict(download_config=datasets.DownloadConfig()), dict(storage_options={}),
                                    dict(storage_options={"s3": {"anon": True}}),
                                    dict(storage_options={"file": {"auto_mkdir": True}}),
                                    dict(storage_options={"hf": {"token": "x"}})])
def test_arguments_streaming_accepts_are_accepted(files, kwargs):
    hf, ours = _both("json", data_files=str(files / "train.jsonl"), split="train", **kwargs)
    assert _rows(ours) == _rows(hf)


@pytest.mark.parametrize("kwargs, error", [(dict(num_proc=2), NotImplementedError),
                                           (dict(num_proc=1), NotImplementedError),
                                           (dict(download_mode="bogus"), ValueError),
                                           (dict(verification_mode="bogus"), ValueError)])
def test_arguments_streaming_refuses_are_refused(files, kwargs, error):
    path = str(files / "train.jsonl")
    with pytest.raises(error):
        datasets.load_dataset("json", data_files=path, split="train", streaming=True, **kwargs)
    with pytest.raises(error, match=next(iter(kwargs))):
        ri.load_dataset("json", data_files=path, split="train", **kwargs)


def test_hub_storage_options_not_used_here_are_refused():
    """HF would read the Hub's files through fsspec with these options; here they would be ignored."""
    with pytest.raises(ValueError, match="block_size"):
        ri.load_dataset("user/repo", storage_options={"hf": {"block_size": 0}})
    with pytest.raises(ValueError, match="anon"):
        ri.load_dataset("json", data_files="hf://datasets/user/repo/x.jsonl", storage_options={"anon": True})


def test_features_positionally(files):
    feats = datasets.Features({"a": datasets.Value("int32"), "s": datasets.Value("string")})
    hf, ours = _both("json", None, None, str(files / "train.jsonl"), "train", None, feats)
    assert ours.features == hf.features == feats


def test_split_list_is_a_list_of_datasets(files):
    """HF's load_dataset gives a list for a list of splits (its streaming mode: 'Bad split'): the
    datasets of each split, each as ``split=name`` gives it."""
    data_files = {"train": str(files / "train.jsonl"), "test": str(files / "test.jsonl")}
    hf = datasets.load_dataset("json", data_files=data_files, split=["test", "train+test"])
    ours = ri.load_dataset("json", data_files=data_files, split=["test", "train+test"])
    assert isinstance(ours, list) and [d.split for d in ours] == ["test", "train+test"]
    assert [_rows(d) for d in ours] == [hf[0].to_list(), hf[1].to_list()]
    (one,) = ri.load_dataset("json", data_files=data_files, split=["train"])
    assert _rows(one) == _rows(ri.load_dataset("json", data_files=data_files, split="train"))
    assert ri.load_dataset("json", data_files=data_files, split=[datasets.Split.TEST])[0].split == "test"
    with pytest.raises(ValueError, match="unknown split 'nope'"):
        ri.load_dataset("json", data_files=data_files, split=["train", "nope"])


@pytest.mark.parametrize("index", [0, 1])
def test_split_list_datasets_resume_exactly(files, index):
    data_files = {"train": str(files / "train.jsonl"), "test": str(files / "test.jsonl")}
    assert_resumes_exactly(lambda: ri.load_dataset("json", data_files=data_files, split=["test", "train+test"])[index])


@pytest.mark.parametrize("split", ["train[:2]", "train[10%:]"])
def test_split_slices_are_refused_as_in_hf_streaming(files, split):
    path = str(files / "train.jsonl")
    with pytest.raises(ValueError, match="Bad split"):
        datasets.load_dataset("json", data_files=path, split=split, streaming=True)
    with pytest.raises(ValueError, match=r"slices of a split .*take"):
        ri.load_dataset("json", data_files=path, split=split)


def test_field_none_is_hf_s_default(files):
    """``field=None`` is HF's default: JSON Lines rows, typed by their first chunk."""
    hf, ours = _both("json", data_files=str(files / "train.jsonl"), split="train", field=None)
    assert ours.features == hf.features
    assert ours.features is not None
    assert _rows(ours) == _rows(hf)


# ----------------------------------------------------------------- data_files patterns that match nothing


def _splits(result):
    return {s: (_rows(d), d.features) for s, d in result.items()}


@pytest.mark.parametrize("data_files", [
    {"train": ["d/train.jsonl", "d/README*"]},       # a glob matching only dataset metadata
    {"train": ["d/train.jsonl", "d/nomatch*"]},      # a glob matching nothing
    {"train": ["d/train.jsonl", "d/*.md"]},
    {"train": ["d/train.jsonl", "d/.h*"]},           # a glob naming hidden files reads them
    {"train": ["d/train.jsonl"], "test": "nomatch*"},  # a split matching nothing: an empty split
    {"train": ["d/train.jsonl"], "test": "d/README*"},
    {"train": ["d/train.jsonl"], "test": []},
])
def test_globs_matching_nothing_add_nothing_as_in_hf(files, data_files, monkeypatch):
    monkeypatch.chdir(files.parent)
    hf, ours = _both("json", data_files=data_files)
    assert _splits(ours) == _splits(hf)


@pytest.mark.parametrize("data_files", [
    {"train": ["train.jsonl", "nomatch*"]},
    {"train": ["train.jsonl", "README*"]},
    {"train": ["train.jsonl", ".h*"]},
    {"train": [".h*"]},
])
def test_globs_in_a_folder_as_in_hf(files, data_files):
    hf, ours = _both(str(files), data_files=data_files)
    assert _splits(ours) == _splits(hf)
    hf, ours = _both("json", data_dir=str(files), data_files=data_files)
    assert _splits(ours) == _splits(hf)


def test_an_empty_split_of_a_folder_needs_its_format(files):
    """HF cannot tell the format of a folder's split whose globs match nothing (ValueError); ours says
    so, and gives the empty split when the format is named."""
    data_files = {"train": "train.jsonl", "test": "nomatch*"}
    with pytest.raises(ValueError):
        datasets.load_dataset(str(files), data_files=data_files, streaming=True)
    with pytest.raises(FileNotFoundError, match="split 'test'.*'nomatch\\*'.*format"):
        ri.load_dataset(str(files), data_files=data_files)
    hf, ours = _both("json", data_dir=str(files), data_files=data_files)
    assert _splits(ours) == _splits(hf)


def test_no_file_at_all_is_an_error(files, monkeypatch):
    monkeypatch.chdir(files.parent)
    with pytest.raises(FileNotFoundError, match="README"):
        ri.load_dataset("json", data_files={"train": "d/README*", "test": "nomatch*"})
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):  # a path without wildcards must exist, as in HF
        ri.load_dataset("json", data_files=["d/train.jsonl", "d/missing.jsonl"])
    for empty in ([], {}, ""):
        with pytest.raises(ValueError, match="empty"):
            ri.load_dataset("json", data_files=empty)


def test_imagefolder_globs_matching_nothing_add_nothing(tmp_path):
    from PIL import Image

    for name in ("a.png", "b.png", ".c.png"):
        Image.new("RGB", (2, 2)).save(tmp_path / name)
    (tmp_path / "README.md").write_text("# card\n")
    for data_files in (["*.png", "nomatch*"], ["*.png", "README*"], ["*.png", ".*.png"]):
        hf = datasets.load_dataset("imagefolder", data_dir=str(tmp_path), data_files=data_files, streaming=True,
                                   split="train").decode(False)
        ours = ri.load_dataset("imagefolder", data_dir=str(tmp_path), data_files=data_files,
                               split="train").decode(False)
        names = lambda ds: [os.path.basename(r["image"]["path"]) for r in ds]  # noqa: E731
        assert names(ours) == names(hf)


def test_an_empty_split_resumes_exactly(files, monkeypatch):
    monkeypatch.chdir(files.parent)
    data_files = {"train": "d/train.jsonl", "test": "nomatch*"}
    assert assert_resumes_exactly(lambda: ri.load_dataset("json", data_files=data_files, split="test")) == []
    assert_resumes_exactly(lambda: ri.load_dataset("json", data_files={"train": ["d/nomatch*", "d/train.jsonl"]},
                                                   split="train"))


# ----------------------------------------------------------------- HF's builder options at their defaults


def _hf_config_defaults(config_class):
    import dataclasses

    base = {f.name for f in dataclasses.fields(datasets.BuilderConfig)} | {"features"}
    for f in dataclasses.fields(config_class):
        if f.name not in base:
            yield f.name, (f.default if f.default is not dataclasses.MISSING else f.default_factory())


@pytest.mark.parametrize("builder", ["json", "csv", "text", "parquet"])
@pytest.mark.filterwarnings("ignore:Falling back to the 'python' engine")  # CSV's sep=None, in HF too
def test_every_hf_builder_option_at_its_default_reads_as_hf(tmp_path, builder):
    """A script that spells out HF's defaults (``verbose=False``, ``chunksize=10_000`` for CSV,
    ``on_mixed_types="use_json"``...) reads the same rows as HF (some were refused as unknown options,
    CSV's ``chunksize`` crashed in pandas)."""
    import importlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"train.{ {'json': 'jsonl', 'text': 'txt'}.get(builder, builder)}"
    if builder == "parquet":
        pq.write_table(pa.table({"a": [1, 2]}), path)
    else:
        path.write_text({"json": '{"a": 1}\n{"a": 2}\n', "csv": "a,b\n1,x\n2,y\n", "text": "x\ny\n"}[builder])
    module = importlib.import_module(f"datasets.packaged_modules.{builder}.{builder}")
    config = next(c for n, c in vars(module).items() if n.lower() == f"{builder}config")
    for option, value in _hf_config_defaults(config):
        hf = list(datasets.load_dataset(builder, data_files=str(path), split="train", streaming=True,
                                        **{option: value}))
        ours = list(ri.load_dataset(builder, data_files=str(path), split="train", **{option: value}))
        assert ours == hf, option
        # the readers too: IterableDataset.from_csv(path, chunksize=...) crashed in pandas,
        # from_json(path, field=None) read JSON Lines untyped (features None)
        reader = getattr(ri.IterableDataset, f"from_{builder}")
        hf_reader = getattr(datasets.IterableDataset, f"from_{builder}")
        ours = reader(str(path), **{option: value})
        assert list(ours) == list(hf_reader(str(path), **{option: value})), option
        theirs = hf_reader(str(path), **{option: value}).features
        assert ours.features == theirs or (builder == "text" and theirs is None), option  # HF's from_text: unknown


def test_csv_chunksize_reads_the_same_rows(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a\n" + "".join(f"{i}\n" for i in range(7)))
    hf = list(datasets.load_dataset("csv", data_files=str(path), split="train", streaming=True, chunksize=3))
    assert list(ri.load_dataset("csv", data_files=str(path), split="train", chunksize=3)) == hf
    assert_resumes_exactly(lambda: ri.load_dataset("csv", data_files=str(path), split="train", chunksize=3))
    with pytest.raises(ValueError, match="chunksize"):
        ri.load_dataset("csv", data_files=str(path), split="train", chunksize=0)


@pytest.mark.parametrize("value", [True, False])
def test_trust_remote_code_is_taken_as_in_hf(files, value, recwarn):
    """HF 5.2 takes ``trust_remote_code`` and runs no script (it logs an error for True); so here."""
    hf, ours = _both("json", data_files=str(files / "train.jsonl"), split="train", trust_remote_code=value)
    assert _rows(ours) == _rows(hf)
    assert any("trust_remote_code" in str(w.message) for w in recwarn) == value


def test_a_config_name_given_to_a_builder_names_the_config(files):
    """``load_dataset("json", "mine", data_files=...)``: HF's info says ``config_name="mine"``."""
    hf, ours = _both("json", "mine", data_files=str(files / "train.jsonl"), split="train")
    assert (ours.info.config_name, ours.info.builder_name) == (hf.info.config_name, hf.info.builder_name) == (
        "mine", "json")
    assert ri.load_dataset("json", data_files=str(files / "train.jsonl"), split="train").info.config_name == "default"


def test_archive_globs_matching_nothing_add_nothing(tmp_path, monkeypatch):
    import zipfile

    monkeypatch.chdir(tmp_path)
    with zipfile.ZipFile("a.zip", "w") as z:
        z.writestr("x.csv", "a\n1\n")
    for data_files in (["zip://*.csv::a.zip", "zip://nomatch*::a.zip"],
                       {"train": "zip://*.csv::a.zip", "test": "zip://nomatch*::a.zip"}):
        hf, ours = _both("csv", data_files=data_files)
        assert _splits(ours) == _splits(hf)
    with pytest.raises(FileNotFoundError, match="nope.csv::a.zip'.*holds"):  # a member name must be in the archive
        ri.load_dataset("csv", data_files=["zip://*.csv::a.zip", "zip://nope.csv::a.zip"])


@pytest.mark.parametrize("kwargs, token", [(dict(download_config=datasets.DownloadConfig(token="t1")), "t1"),
                                           (dict(storage_options={"hf": {"token": "t2"}}), "t2"),
                                           (dict(token="t3", download_config=datasets.DownloadConfig(token="t1")),
                                            "t3"),
                                           (dict(storage_options={"s3": {"anon": True}}), None)])
def test_the_token_hf_would_use_reaches_the_hub(monkeypatch, kwargs, token):
    import importlib

    seen = []

    class Repo:  # stands for the Hub (unreachable in tests): records the token it is opened with
        def __init__(self, repo_id, revision, token, cache_dir):
            seen.append(token)
            raise RuntimeError("no Hub here")

    monkeypatch.setattr(importlib.import_module("resumable_iterable.integrations.hub.load"), "HubRepo", Repo)
    with pytest.raises(RuntimeError, match="no Hub here"):
        ri.load_dataset("user/repo", **kwargs)
    assert seen == [token]


def test_every_imagefolder_option_at_its_default_reads_as_hf(tmp_path):
    """``drop_labels=None``, ``metadata_filenames=None``, ``filters=None``, ``decode_num_threads=32``..."""
    from datasets.packaged_modules.imagefolder.imagefolder import ImageFolderConfig
    from PIL import Image

    Image.new("RGB", (2, 2)).save(tmp_path / "a.png")
    for option, value in _hf_config_defaults(ImageFolderConfig):
        hf = datasets.load_dataset("imagefolder", data_dir=str(tmp_path), split="train", streaming=True,
                                   **{option: value}).decode(False)
        ours = ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train", **{option: value}).decode(False)
        assert [r["image"]["path"] for r in ours] == [r["image"]["path"] for r in hf], option
    with pytest.raises(TypeError, match="filters"):  # other values stay refused
        ri.load_dataset("imagefolder", data_dir=str(tmp_path), split="train", filters=[("a", "=", 1)])
