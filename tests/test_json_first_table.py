"""Which JSON Lines file gives the columns every file follows, side by side with HF 5.2's
``load_dataset("json", streaming=True)``: HF takes its features from the first table it reads. A
file of ``{}`` rows is such a table (no column: a later file with columns raises ``CastError``); an
empty file gives no table (the next file's columns are the features)."""

from __future__ import annotations

import datasets
import pytest
from datasets.table import CastError

import resumable_iterable as ri
from harness import assert_resumes_exactly, rows_until_error

datasets.disable_progress_bars()

FILES = {"empty.jsonl": "", "braces.jsonl": "{}\n{}\n", "x.jsonl": '{"x": 1}\n{"x": 2}\n',
         "xy.jsonl": '{"x": 1, "y": 2}\n', "some.jsonl": '{}\n{"x": 3}\n{}\n'}


@pytest.fixture
def files(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    return lambda *names: [str(tmp_path / n) for n in names]


def _side_by_side(data_files, split="train"):
    hf = datasets.load_dataset("json", data_files=data_files, split=split, streaming=True)
    ours = ri.load_dataset("json", data_files=data_files, split=split, streaming=True)
    (hf_rows, hf_error), (rows, error) = rows_until_error(hf), rows_until_error(ours)
    assert rows == hf_rows
    assert (type(error) if error is None else CastError) == (type(hf_error) if hf_error is None else CastError)
    assert isinstance(error, type(None) if hf_error is None else CastError), error
    assert ours.features == hf.features
    return rows, error


def test_rows_of_empty_objects_give_a_table_without_columns_that_later_files_follow(files):
    """A JSON Lines file whose rows are all ``{}`` followed by one with columns: HF types its features
    after the first (no column) and raises ``CastError`` at the second; ours yielded its rows."""
    rows, error = _side_by_side(files("braces.jsonl", "x.jsonl"))
    assert rows == [] and "column(s) ['x']" in str(error) and "braces.jsonl" in str(error)
    _side_by_side(files("braces.jsonl", "some.jsonl"))
    assert _side_by_side(files("braces.jsonl", "braces.jsonl")) == ([], None)
    assert _side_by_side(files("some.jsonl", "x.jsonl", "braces.jsonl"))[1] is None  # {} rows later: nulls


def test_an_empty_first_file_leaves_the_columns_to_the_next(files):
    """HF's first table is the first file with a row: an empty first file gives none, and the next
    file's columns are the features every file follows (ours left them unknown and each file typed
    on its own: a file of other columns read without the error HF raises)."""
    rows, error = _side_by_side(files("empty.jsonl", "x.jsonl", "xy.jsonl"))
    assert rows == [{"x": 1}, {"x": 2}] and isinstance(error, CastError)
    _side_by_side(files("empty.jsonl", "braces.jsonl", "x.jsonl"))
    _side_by_side({"train": files("empty.jsonl", "x.jsonl"), "test": files("xy.jsonl")}, split="test")
    _side_by_side({"train": files("empty.jsonl", "x.jsonl"), "test": files("some.jsonl")}, split="test")


def test_the_cast_error_crosses_a_dataloader_worker(files):
    """HF's ``CastError`` needs keywords, so torch makes a ``RuntimeError`` of it in the main process;
    ours is built from its message and stays a ``CastError`` (a ``ValueError``)."""
    ds = ri.load_dataset("json", data_files=files("braces.jsonl", "x.jsonl"), split="train", streaming=True)
    with pytest.raises(CastError, match="column"):
        list(ri.StatefulDataLoader(ds, num_workers=1, batch_size=None))


@pytest.mark.parametrize("names", [("empty.jsonl", "x.jsonl", "some.jsonl", "braces.jsonl", "empty.jsonl", "x.jsonl"),
                                   ("braces.jsonl", "braces.jsonl", "empty.jsonl")])
def test_files_around_empty_ones_resume_exactly(files, names):
    """Every cut point, the state through JSON, over empty files and files of ``{}`` rows."""
    build = lambda: ri.load_dataset("json", data_files=files(*names), split="train", streaming=True)  # noqa: E731
    full = assert_resumes_exactly(build)
    assert full == list(datasets.load_dataset("json", data_files=files(*names), split="train", streaming=True))


@pytest.mark.parametrize("names", [("braces.jsonl", "x.jsonl"), ("some.jsonl", "braces.jsonl", "x.jsonl"),
                                   ("empty.jsonl", "braces.jsonl", "xy.jsonl")])
def test_with_features_given_every_file_follows_them(files, names):
    """With ``features=``, HF infers nothing and casts every table to the features: rows of ``{}``
    first are ``None`` in each column, and a later file of those columns reads. Ours aligned each
    file to the first one's columns: the ``{}`` rows were dropped, and since a file of ``{}`` rows
    gives no column, the next file raised ``CastError``. Every cut point resumes exactly."""
    features = datasets.Features({"x": datasets.Value("int32"), "y": datasets.Value("string")})
    data_files = files(*names)
    hf = list(datasets.load_dataset("json", data_files=data_files, split="train", streaming=True, features=features))
    build = lambda: ri.load_dataset("json", data_files=data_files, split="train", features=features)  # noqa: E731
    assert assert_resumes_exactly(build) == hf
    assert hf[0] == {"x": None, "y": None} and build().features == features


def test_an_empty_first_member_of_a_zip_leaves_the_columns_to_the_next(tmp_path):
    """The same in a zip archive: HF's first table is its first member with a row; ours took the
    empty first member, left the columns unknown and read a member of other columns."""
    import zipfile

    with zipfile.ZipFile(tmp_path / "rows.zip", "w") as z:
        z.writestr("a.jsonl", "")
        z.writestr("b.jsonl", '{"x": 1}\n{"x": 2}\n')
        z.writestr("c.jsonl", '{"y": 1}\n')
    rows, error = _side_by_side(str(tmp_path / "rows.zip"))
    assert rows == [{"x": 1}, {"x": 2}] and "c.jsonl" in str(error)


def test_an_empty_first_file_of_a_folder_leaves_every_splits_columns_to_the_next(tmp_path):
    """A local folder (``load_dataset(folder)``, ``load_dataset("json", data_dir=folder)``) whose
    first train file is empty: HF types every split after the train split's first table, so a test
    file of other columns raises ``CastError``; ours typed the test split on its own."""
    (tmp_path / "train-0.jsonl").write_text("")
    (tmp_path / "train-1.jsonl").write_text('{"x": 1}\n')
    (tmp_path / "test.jsonl").write_text('{"y": 1}\n')
    for args, kwargs in (((str(tmp_path),), {}), (("json",), {"data_dir": str(tmp_path)})):
        hf = datasets.load_dataset(*args, split="test", streaming=True, **kwargs)
        ours = ri.load_dataset(*args, split="test", streaming=True, **kwargs)
        (hf_rows, hf_error), (rows, error) = rows_until_error(hf), rows_until_error(ours)
        assert rows == hf_rows == [] and isinstance(hf_error, CastError) and isinstance(error, CastError)
        assert "train-1.jsonl" in str(error)


def test_an_empty_first_file_of_a_hub_repo_leaves_the_columns_to_the_next(tmp_path, monkeypatch):
    """The same for a Hub repo (its download simulated): the train split's next file is downloaded
    to find its columns when the first is empty, and the test split follows them."""
    import huggingface_hub

    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "train-0.jsonl").write_text("")
    (repo / "data" / "train-1.jsonl").write_text('{"x": 1}\n')
    (repo / "data" / "test-0.jsonl").write_text('{"y": 1}\n')
    commit = "c" * 40
    snapshot = tmp_path / "cache" / "snapshots" / commit
    downloaded = []

    def fake_snapshot_download(repo_id, *, repo_type, revision, allow_patterns, cache_dir, token, local_files_only):
        downloaded.append(sorted(allow_patterns))
        for rel in allow_patterns:
            if (repo / rel).is_file():
                (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
                (snapshot / rel).write_bytes((repo / rel).read_bytes())
        return str(snapshot)

    def fake_list_repo_files(self, repo_id, *, repo_type, revision):
        return [p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()]

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", fake_list_repo_files)
    ds = ri.load_dataset("user/repo", split="test", cache_dir=str(tmp_path / "cache"))
    rows, error = rows_until_error(ds)
    assert rows == [] and isinstance(error, CastError) and "train-1.jsonl" in str(error)
    assert ["data/train-1.jsonl"] in downloaded
