"""The file readers beside HF 5.2's, for the options users pass: CSV (pandas' options, HF's
``delimiter`` / ``column_names``, compression from the extension), text (``sample_by``,
``keep_linebreaks``, encodings, chunks), Parquet (``columns``, ``filters``, ``batch_size``), Arrow,
globs, folders and ``data_dir``: the same rows, of the same Python types. The deliberate
differences (``docs/compat.md``) are pinned at the end."""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_iterable as ri

datasets.disable_progress_bars()


def _typed(rows):
    return [[(k, v, type(v).__name__) for k, v in r.items()] for r in rows]


def _same(*args, **kwargs):
    ours = ri.load_dataset(*args, streaming=True, **kwargs)
    theirs = datasets.load_dataset(*args, streaming=True, **kwargs)
    if isinstance(theirs, datasets.IterableDatasetDict):
        assert sorted(ours) == sorted(theirs)
        for split in theirs:
            assert _typed(ours[split]) == _typed(theirs[split]), split
        return
    assert _typed(ours) == _typed(theirs)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("readers")
    (root / "a.csv").write_text('id;name;val\n1;x;0.5\n2;"y;z";\n3;w;2\n')
    (root / "b.csv").write_text("# comment\nskip me\nid,name\n1,a\n2,b\n")
    for opener, ext in ((gzip.open, "gz"), (bz2.open, "bz2"), (lzma.open, "xz")):
        with opener(root / f"c.csv.{ext}", "wt") as f:
            f.write("a,b\n1,2\n3,4\n")
    (root / "t.txt").write_bytes(b"l1\r\nl2\r\n\r\npara2 line\rmore\n\n\n\nlast\n")
    (root / "u16.txt").write_text("\u00e91\n\u00fc2\n\nx\n", encoding="utf-16")
    (root / "bad.txt").write_bytes(b"caf\xe9\nok\n")
    with gzip.open(root / "g.txt.gz", "wt") as f:
        f.write("g1\ng2\n")
    pq.write_table(pa.table({"a": list(range(10)), "b": [str(i) for i in range(10)]}), root / "p.parquet",
                   row_group_size=3)
    repo = root / "repo" / "data"
    (repo / "sub").mkdir(parents=True)
    for name, rows in (("train-0.jsonl", [{"a": 1}]), ("validation.jsonl", [{"a": 4}]), ("sub/test.jsonl", [{"a": 3}]),
                       (".hidden.jsonl", [{"a": 9}])):
        (repo / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with gzip.open(repo / "train-1.jsonl.gz", "wt") as f:
        f.write('{"a": 2}\n')
    arrows = root / "arrows"
    arrows.mkdir()
    with pa.ipc.new_file(arrows / "train.arrow", pa.schema({"a": pa.int64()})) as w:
        w.write_table(pa.table({"a": [1, 2]}))
    with pa.ipc.new_stream(arrows / "test.arrow", pa.schema({"a": pa.int64()})) as w:
        w.write_table(pa.table({"a": [3]}))
    return root


CSV_CASES = {
    "sep": ("a.csv", {"sep": ";"}),
    "delimiter, header=None": ("a.csv", {"delimiter": ";", "header": None}),
    "names": ("a.csv", {"sep": ";", "names": ["A", "B", "C"], "header": 0}),
    "column_names": ("a.csv", {"sep": ";", "column_names": ["p", "q", "r"], "header": 0}),
    "usecols": ("a.csv", {"sep": ";", "usecols": ["id", "val"]}),
    "skiprows": ("b.csv", {"skiprows": 2}),
    "comment, skiprows list": ("b.csv", {"comment": "#", "skiprows": [1]}),
    "quoting, quotechar": ("a.csv", {"sep": ";", "quoting": csv.QUOTE_MINIMAL, "quotechar": '"'}),
    "nrows": ("a.csv", {"sep": ";", "nrows": 2}),
    "na_values": ("a.csv", {"sep": ";", "na_values": ["x"]}),
    "encoding": ("a.csv", {"sep": ";", "encoding": "latin-1"}),
    "gzip": ("c.csv.gz", {}),
    "bz2": ("c.csv.bz2", {}),
    "xz": ("c.csv.xz", {}),
}


@pytest.mark.parametrize("name", list(CSV_CASES))
def test_csv_options_read_as_hf(folder, name):
    path, kwargs = CSV_CASES[name]
    _same("csv", data_files=str(folder / path), split="train", **kwargs)


TEXT_CASES = {
    **{f"{by}, keep_linebreaks={keep}": ("t.txt", {"sample_by": by, "keep_linebreaks": keep})
       for by in ("line", "paragraph", "document") for keep in (False, True)},
    "utf-16": ("u16.txt", {"encoding": "utf-16"}),
    "utf-16 paragraphs": ("u16.txt", {"encoding": "utf-16", "sample_by": "paragraph"}),
    "encoding_errors": ("bad.txt", {"encoding_errors": "replace"}),
    "latin-1": ("bad.txt", {"encoding": "latin-1"}),
    "gzip": ("g.txt.gz", {}),
    "small chunks": ("t.txt", {"chunksize": 3}),
    "small chunks, paragraphs": ("t.txt", {"chunksize": 3, "sample_by": "paragraph"}),
}


@pytest.mark.parametrize("name", list(TEXT_CASES))
def test_text_options_read_as_hf(folder, name):
    path, kwargs = TEXT_CASES[name]
    _same("text", data_files=str(folder / path), split="train", **kwargs)


@pytest.mark.parametrize("kwargs", [{"columns": ["b", "a"]}, {"filters": [("a", ">", 4)]}, {"batch_size": 2},
                                    {"columns": ["b"], "filters": [("a", "<", 3)]}], ids=str)
def test_parquet_options_read_as_hf(folder, kwargs):
    _same("parquet", data_files=str(folder / "p.parquet"), split="train", **kwargs)


def test_globs_folders_and_data_dir_read_as_hf(folder, monkeypatch):
    monkeypatch.chdir(folder)
    _same("json", data_dir="repo/data")
    _same("json", data_dir="repo")
    _same("repo")
    _same("json", data_files="repo/**/*.jsonl*")
    _same("json", data_files={"train": "repo/data/train-*", "test": ["repo/data/sub/*.jsonl"]})
    _same("json", data_dir="repo", data_files="data/train-*")
    _same("arrows")
    _same("arrow", data_files="arrows/*.arrow")
    _same("arrow", data_dir="arrows")


def test_deliberate_csv_differences(tmp_path):
    """docs/compat.md: a ``.tsv`` file given to the ``csv`` builder is tab-separated (HF splits it on
    commas unless it found the file in a folder), and a CSV file is typed as a whole (HF types each
    ``chunksize`` = 10 000 rows on its own: integers then floats)."""
    tsv = tmp_path / "t.tsv"
    tsv.write_text("a\tb\n1\t2\n")
    assert list(ri.load_dataset("csv", data_files=str(tsv), split="train")) == [{"a": 1, "b": 2}]
    assert list(datasets.load_dataset("csv", data_files=str(tsv), split="train", streaming=True)) == [
        {"a\tb": "1\t2"}]
    big = tmp_path / "big.csv"
    big.write_text("x\n" + "".join(f"{i}\n" for i in range(10_001)) + "1.5\n")
    ours = list(ri.load_dataset("csv", data_files=str(big), split="train"))
    theirs = list(datasets.load_dataset("csv", data_files=str(big), split="train", streaming=True))
    assert ours == theirs  # the same numbers
    assert type(ours[0]["x"]) is float and type(theirs[0]["x"]) is int and type(theirs[-1]["x"]) is float


@pytest.mark.parametrize("workers", [0, 2])
def test_parquet_columns_come_in_the_files_order_and_resume_exactly(folder, workers):
    """``columns=["b", "a"]`` yielded ``b`` first (the order given); HF's Parquet builder yields the
    file's order, in its rows and its features. Every cut point, alone and through the loader."""
    from harness import assert_loader_resumes_exactly, assert_resumes_exactly

    def build():
        return ri.load_dataset("parquet", data_files=[str(folder / "p.parquet")] * 2, split="train",
                               columns=["b", "a"])

    hf = datasets.load_dataset("parquet", data_files=str(folder / "p.parquet"), split="train", streaming=True,
                               columns=["b", "a"])
    assert list(build().features) == list(hf.features) == ["a", "b"]
    assert [list(r) for r in build()] == [["a", "b"]] * 20
    if workers == 0:
        assert_resumes_exactly(build)
    assert_loader_resumes_exactly(build, workers=workers, batch_size=3, item=lambda b: b["a"].tolist(),
                                  cuts=lambda n: range(1, n))


def test_parquet_columns_named_twice_are_refused_as_hf_refuses_them(folder):
    """``columns=["a", "a"]`` yielded ``a`` once; HF's Parquet reader fails on it (pyarrow: 'Field "a"
    exists 2 times in schema'). Refused here when the dataset is built, naming the column."""
    path = str(folder / "p.parquet")
    with pytest.raises(KeyError, match="exists 2 times"):
        list(datasets.load_dataset("parquet", data_files=path, split="train", streaming=True, columns=["a", "a"]))
    with pytest.raises(ValueError, match=r"names \['a'\] more than once"):
        ri.load_dataset("parquet", data_files=path, split="train", columns=["a", "b", "a"])
    with pytest.raises(ValueError, match="more than once"):
        ri.IterableDataset.from_parquet(path, columns=["b", "b"])


def test_rows_without_columns_are_not_yielded_as_in_hf(tmp_path):
    """JSON Lines of ``{}`` only (or a list document of ``{}``) and Parquet's ``columns=[]`` yielded
    empty rows (``{}``, one a line); HF's readers yield no row of a table without columns. A ``{}``
    beside rows with columns is a row of ``None`` values, in both."""
    docs = {"empty.jsonl": "{}\n\n{}\n", "empties.json": "[{}, {}]", "mixed.jsonl": '{}\n{"a": 1}\n{}\n'}
    for name, text in docs.items():
        (tmp_path / name).write_text(text)
        _same("json", data_files=str(tmp_path / name), split="train")
    assert list(ri.load_dataset("json", data_files=str(tmp_path / "mixed.jsonl"), split="train")) == [
        {"a": None}, {"a": 1}, {"a": None}]
    _same("json", data_files=[str(tmp_path / "mixed.jsonl"), str(tmp_path / "empty.jsonl")], split="train")
    pq.write_table(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}), tmp_path / "p.parquet", row_group_size=2)
    _same("parquet", data_files=str(tmp_path / "p.parquet"), split="train", columns=[])
    ds = ri.load_dataset("parquet", data_files=str(tmp_path / "p.parquet"), split="train", columns=[])
    assert list(ds) == [] and list(ds.shuffle(seed=0)) == [] and list(ds.reshard()) == []
    assert list(ds.shuffle(seed=0, buffer_size=None)) == []  # the global shuffle counts no row either


@pytest.mark.parametrize("workers", [0, 2])
def test_files_of_rows_without_columns_resume_exactly(tmp_path, workers):
    """Every cut point (JSON round-trip of the state) of files whose rows have no column, among files
    of rows, under a shuffle buffer; and of Parquet's ``columns=[]``, alone and through the loader."""
    from harness import assert_loader_resumes_exactly, assert_resumes_exactly

    (tmp_path / "empty.jsonl").write_text("{}\n{}\n{}\n")
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"a": {i}}}\n' for i in range(7)))
    (tmp_path / "empties.json").write_text("[{}, {}]")
    # (rows first: a first file of {} rows has no column, so HF, and ours, refuse a later one with columns)
    files = [str(tmp_path / n) for n in ("rows.jsonl", "empty.jsonl", "empties.json", "rows.jsonl", "empty.jsonl")]

    def build():
        return ri.load_dataset("json", data_files=files, split="train").shuffle(seed=3, buffer_size=4)

    rows = list(build())  # the later {} rows get the first file's column, None (HF's cast)
    assert sorted(r["a"] for r in rows if r["a"] is not None) == sorted(list(range(7)) * 2)
    assert [r for r in rows if r["a"] is None] == [{"a": None}] * 8
    if workers == 0:
        assert_resumes_exactly(build)
    assert_loader_resumes_exactly(build, workers=workers, batch_size=None,
                                  item=lambda r: r["a"] if r["a"] is None else int(r["a"]), cuts=lambda n: range(1, n))
    pq.write_table(pa.table({"a": [1, 2, 3]}), tmp_path / "p.parquet")
    assert assert_resumes_exactly(lambda: ri.load_dataset("parquet", data_files=[str(tmp_path / "p.parquet")] * 2,
                                                          split="train", columns=[]).shuffle(seed=1, buffer_size=2),
                                  cuts=[0]) == []
