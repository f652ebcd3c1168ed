"""Parquet (row-group seek), Arrow IPC (file and stream), JSON Lines, JSON documents and CSV sources."""

from __future__ import annotations

import json
import os
import pathlib

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import resumable_iterable as ri
from harness import assert_resumes_exactly, take


def _table(i, n=23):
    return pa.table({"id": list(range(i * 100, i * 100 + n)), "text": [f"f{i}-{j}" for j in range(n)]})


@pytest.fixture
def files(tmp_path):
    out = {"parquet": [], "arrow": [], "json": [], "csv": []}
    for i in range(3):
        t = _table(i, n=23 + i)
        p = tmp_path / f"part{i}.parquet"
        pq.write_table(t, p, row_group_size=5)
        out["parquet"].append(str(p))
        a = tmp_path / f"part{i}.arrow"
        with pa.OSFile(str(a), "wb") as sink:
            writer = (pa.ipc.new_file if i % 2 else pa.ipc.new_stream)(sink, t.schema)
            for b in t.to_batches(max_chunksize=7):
                writer.write_batch(b)
            writer.close()
        out["arrow"].append(str(a))
        j = tmp_path / f"part{i}.jsonl"
        j.write_text("".join(json.dumps(r) + "\n" for r in t.to_pylist()))
        out["json"].append(str(j))
        c = tmp_path / f"part{i}.csv"
        pcsv.write_csv(t, c)
        out["csv"].append(str(c))
    return out


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "json", "csv"])
def test_file_sources_resume_exactly(files, fmt):
    build = {"parquet": ri.IterableDataset.from_parquet, "arrow": ri.IterableDataset.from_arrow,
             "json": ri.IterableDataset.from_json, "csv": ri.IterableDataset.from_csv}[fmt]
    full = assert_resumes_exactly(lambda: build(files[fmt]), max_cuts=30)
    assert [e["id"] for e in full] == [i * 100 + j for i in range(3) for j in range(23 + i)]
    assert build(files[fmt]).num_shards == 3
    assert_resumes_exactly(lambda: build(files[fmt]).shuffle(seed=1, buffer_size=4), max_cuts=20)


def test_format_is_inferred(files):
    assert list(ri.IterableDataset.from_files(files["parquet"])) == list(ri.IterableDataset.from_parquet(files["parquet"]))
    with pytest.raises(ValueError, match="cannot tell the format"):
        ri.IterableDataset.from_files(files["parquet"] + files["csv"])


def test_no_data_files_is_a_value_error():
    # used to be an IndexError from reading the features of the first file
    for make in (lambda: ri.IterableDataset.from_parquet([]), lambda: ri.IterableDataset.from_json([]),
                 lambda: ri.load_dataset("parquet", data_files=[], split="train")):
        with pytest.raises(ValueError, match="no data files given"):
            make()


def test_parquet_resume_reads_only_the_needed_row_groups(files, monkeypatch):
    ds = ri.IterableDataset.from_parquet(files["parquet"])
    take(iter(ds), 40)  # shard 0 done (23), shard 1 at row 17
    state = ds.state_dict()
    seen = []
    orig = pq.ParquetFile.iter_batches

    def spy(self, *a, **k):
        seen.append(k.get("row_groups"))
        return orig(self, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    ds2 = ri.IterableDataset.from_parquet(files["parquet"])
    ds2.load_state_dict(state)
    assert next(iter(ds2))["id"] == 117
    assert seen[0] == [3, 4]  # row 17 lives in row group 3 (rows 15..19)


def test_vanished_or_truncated_file_is_a_clear_error(files, tmp_path):
    ds = ri.IterableDataset.from_parquet(files["parquet"])
    take(iter(ds), 40)
    state = ds.state_dict()
    pq.write_table(_table(1, n=10), files["parquet"][1])  # shard 1 now shorter than the offset 17
    ds2 = ri.IterableDataset.from_parquet(files["parquet"])
    with pytest.raises(ValueError, match="past the end of shard 1"):
        ds2.load_state_dict(state)
    ds = ri.IterableDataset.from_json(files["json"])
    take(iter(ds), 30)
    state = ds.state_dict()
    (tmp_path / "part1.jsonl").write_text('{"id": 1, "text": "x"}\n')
    ds2 = ri.IterableDataset.from_json(files["json"])
    ds2.load_state_dict(state)
    with pytest.raises(ValueError, match="has 1 rows but the state says 7 were already read"):
        list(ds2)
    ds3 = ri.IterableDataset.from_json(files["json"])
    ds3.load_state_dict(state)
    (tmp_path / "part1.jsonl").unlink()  # after the dataset was built
    with pytest.raises(ValueError, match="cannot read data file .*part1.jsonl"):
        list(ds3)
    with pytest.raises(FileNotFoundError, match="Unable to find data file .*part1.jsonl"):  # before: when built
        ri.IterableDataset.from_json(files["json"])


def test_files_in_another_order_or_renamed_are_refused(files, tmp_path, capsys):
    """Positions count files by their place: a state loaded over the same files in another order (as
    glob.glob may list them on another machine) used to re-read some files and skip others silently."""
    paths = files["parquet"]
    ds = ri.IterableDataset.from_parquet(paths)
    head = [e["id"] for e in take(iter(ds), 30)]  # shard 0 done, 7 rows of shard 1
    state = json.loads(json.dumps(ds.state_dict()))
    full = [e["id"] for e in ri.IterableDataset.from_parquet(paths)]
    for other in (paths[::-1], [paths[1], paths[0], paths[2]]):
        with pytest.raises(ValueError, match="data files are not those the state was saved with"):
            ri.IterableDataset.from_parquet(other).load_state_dict(state)
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    for i, p in enumerate(paths):  # same contents and order, other names
        (renamed / f"x{i}.parquet").write_bytes(open(p, "rb").read())
    with pytest.raises(ValueError, match="other names, or another order"):
        ri.load_dataset(str(renamed), split="train").load_state_dict(state)
    # the same names in another folder (another machine, a copied dataset) resume exactly
    moved = tmp_path / "moved" / "deeper"
    moved.mkdir(parents=True)
    for p in paths:
        (moved / p.rsplit("/", 1)[1]).write_bytes(open(p, "rb").read())
    again = ri.load_dataset("parquet", data_files=str(moved / "*.parquet"), split="train")
    again.load_state_dict(state)
    assert head + [e["id"] for e in again] == full
    # a state of an earlier release has no 'files': it loads as before
    old = json.loads(json.dumps(state))
    del old["state"]["files"]
    again = ri.IterableDataset.from_parquet(paths)
    again.load_state_dict(old)
    assert head + [e["id"] for e in again] == full
    # and inspect reads the new field
    ri.save_state(state, tmp_path / "s.json")
    from resumable_iterable.cli import main
    assert main(["inspect", str(tmp_path / "s.json")]) == 0
    assert "1 done" in capsys.readouterr().out


def test_generator_that_changed_is_detected():
    data = {"rows": 20}  # what the generator reads: its input changed between save and resume

    def gen(shard):
        yield from ({"i": i} for i in range(data["rows"]))

    ds = ri.IterableDataset.from_generator(gen, gen_kwargs={"shard": ["a"]})
    take(iter(ds), 15)
    state = ds.state_dict()
    data["rows"] = 10
    ds2 = ri.IterableDataset.from_generator(gen, gen_kwargs={"shard": ["a"]})
    ds2.load_state_dict(state)
    with pytest.raises(ValueError, match="yields only 10"):
        list(ds2)


def test_generator_gen_kwargs_shards():
    def gen(paths, tag):
        for p in paths:
            for i in range(3):
                yield {"p": p, "i": i, "tag": tag}

    ds = ri.IterableDataset.from_generator(gen, gen_kwargs={"paths": ["a", "b", "c", "d"], "tag": "x"})
    assert ds.num_shards == 4
    assert [e["p"] for e in ds.shard(2, 0)] == ["a"] * 3 + ["b"] * 3
    with pytest.raises(ValueError, match="same length"):
        ri.IterableDataset.from_generator(gen, gen_kwargs={"paths": ["a"], "tag": ["x", "y"]})


# ---------------------------------------------------------------------- JSON documents (not JSON Lines)
JSON_DOCUMENTS = {
    "list_of_objects.json": ([{"a": i, "b": f"x{i}", "c": [i, i + 1]} for i in range(17)], {}),
    "field.json": ({"version": "1.1", "data": [{"q": f"q{i}", "n": i} for i in range(11)]}, {"field": "data"}),
    "values.json": (list(range(9)), {}),
}


@pytest.mark.parametrize("name", list(JSON_DOCUMENTS))
def test_json_documents_are_read_as_hf_reads_them_and_resume_exactly(tmp_path, name):
    import datasets

    doc, kwargs = JSON_DOCUMENTS[name]
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    ours = ri.load_dataset("json", data_files=str(path), split="train", **kwargs)
    theirs = datasets.load_dataset("json", data_files=str(path), split="train", streaming=True, **kwargs)
    assert list(ours) == list(theirs)
    assert_resumes_exactly(lambda: ri.IterableDataset.from_files([str(path), str(path)], "json", **kwargs))


def test_a_missing_json_field_is_named(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"version": 1, "data": [{"a": 1}]}))
    ds = ri.load_dataset("json", data_files=str(path), split="train", field="rows")
    with pytest.raises(ValueError, match=r"doc\.json.*field 'rows' is not in the JSON document \(its keys: \['data', "
                                         r"'version'\]\)"):
        list(ds)


# ---------------------------------------------------------------------- CSV as HF reads it
CSV_TEXT = "a,b,c,d\n1,x,2024-01-02,1.5\n2,,2024-01-03,\n3,z,,2.5\n"


@pytest.mark.parametrize("kwargs", [{}, {"sep": ","}, {"column_names": ["w", "x", "y", "z"], "skiprows": 1}],
                         ids=["default", "sep", "column_names"])
def test_csv_is_read_as_hf_reads_it(tmp_path, kwargs):
    """pandas' read_csv as in HF: an empty field is None (not ""), a date stays a string."""
    import datasets

    path = tmp_path / "t.csv"
    path.write_text(CSV_TEXT)
    ours = list(ri.load_dataset("csv", data_files=str(path), split="train", **kwargs))
    assert ours == list(datasets.load_dataset("csv", data_files=str(path), split="train", streaming=True, **kwargs))
    first = list(ours[1].values())
    assert first[1] is None and first[2] == "2024-01-03"


def test_csv_with_pyarrow_options_uses_pyarrow_and_tsv_is_tab_separated(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(CSV_TEXT)
    ds = ri.IterableDataset.from_files([str(path)], "csv", convert_options=pcsv.ConvertOptions(strings_can_be_null=False))
    assert list(ds)[1]["b"] == ""  # pyarrow's reader, as its options ask
    tsv = tmp_path / "t.tsv"
    tsv.write_text("a\tb\n1\tx\n2\t\n")
    assert list(ri.IterableDataset.from_files([str(tsv)])) == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]


# ---------------------------------------------------------------------- JSON Lines as HF reads them
def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("bad, message", [
    ('{"id": 6,}', r"line 5 is not valid JSON \(Expecting property name"),
    ("[1, 2]", r"line 5 is a JSON list, not an object"),
    ('{"id": "six"}', r"line 5: column 'id' holds a string, but a number on line 1"),
])
def test_a_malformed_json_line_is_named_by_file_and_line(tmp_path, bad, message):
    """pyarrow's "row" counts from the start of its block; the error names the line of the file."""
    good = _jsonl(tmp_path / "a.jsonl", [{"id": i} for i in range(3)])
    path = tmp_path / "b.jsonl"
    path.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(3)) + "\n" + bad + "\n" + '{"id": 7}\n')
    ds = ri.IterableDataset.from_json([good, str(path)])
    it = iter(ds)
    assert [ex["id"] for ex in take(it, 2)] == [0, 1]
    state = json.loads(json.dumps(ds.state_dict()))
    with pytest.raises(ValueError, match=r"b\.jsonl' \(shard 1\): " + message):
        list(it)
    resumed = ri.IterableDataset.from_json([good, str(path)])
    resumed.load_state_dict(state)  # a state taken before the error resumes exactly, up to the error
    it = iter(resumed)
    assert next(it) == {"id": 2}
    with pytest.raises(ValueError, match=message):
        next(it)


def test_long_json_lines_and_empty_json_files_read_as_in_hf(tmp_path):
    """A line longer than pyarrow's 1 MB block is read (HF doubles the block too); an empty file is
    a shard without rows (pyarrow calls it an error, HF yields nothing from it)."""
    import datasets

    long = _jsonl(tmp_path / "long.jsonl", [{"id": i, "text": "w" * ((3 << 20) if i == 1 else 1)} for i in range(3)])
    (tmp_path / "empty.jsonl").write_text("")
    paths = [long, str(tmp_path / "empty.jsonl"), _jsonl(tmp_path / "c.jsonl", [{"id": 3, "text": "c"}])]
    ours = list(ri.load_dataset("json", data_files=paths, split="train"))
    assert ours == list(datasets.load_dataset("json", data_files=paths, split="train", streaming=True))
    assert [(ex["id"], len(ex["text"])) for ex in ours] == [(0, 1), (1, 3 << 20), (2, 1), (3, 1)]
    assert_resumes_exactly(lambda: ri.IterableDataset.from_json(paths[1:]))


COMPRESSED = {"a.jsonl": '{"id": 1, "t": "ü"}\n{"id": 2, "t": "b"}\n', "a.csv": 'id,t\n1,"x\ny"\n2,b\n',
              "a.txt": "one\r\ntwo\n\nthree\n", "a.json": '{"data": [{"id": 1}, {"id": 2}]}'}


def _compressed(path, text, compression):
    if compression == "zst":
        with pa.output_stream(str(path), compression="zstd") as f:
            f.write(text.encode())
        return str(path)
    import bz2
    import gzip
    import lzma

    opener = {"gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}[compression]
    with opener(str(path), "wt", encoding="utf-8") as f:
        f.write(text)
    return str(path)


@pytest.mark.parametrize("compression", ["gz", "bz2", "xz", "zst"])
@pytest.mark.parametrize("name", list(COMPRESSED))
def test_compressed_files_are_read_as_hf_reads_them(tmp_path, name, compression):
    """``.gz`` / ``.bz2`` / ``.xz`` / ``.zst`` files of every text format are decompressed (text files and
    ``.xz`` JSON Lines were read as they are: a decoding error), with HF's rows."""
    import datasets

    fmt, kwargs = {"a.jsonl": ("json", {}), "a.csv": ("csv", {}), "a.txt": ("text", {}),
                   "a.json": ("json", {"field": "data"})}[name]
    path = _compressed(tmp_path / f"{name}.{compression}", COMPRESSED[name], compression)
    plain = tmp_path / name
    plain.write_text(COMPRESSED[name], encoding="utf-8")
    ours = list(ri.load_dataset(fmt, data_files=path, split="train", **kwargs))
    assert ours == list(ri.load_dataset(fmt, data_files=str(plain), split="train", **kwargs)) and ours
    if compression != "zst":  # HF needs the zstandard package for .zst
        assert ours == list(datasets.load_dataset(fmt, data_files=path, split="train", streaming=True, **kwargs))
    assert_resumes_exactly(lambda: ri.load_dataset(fmt, data_files=[path, path], split="train", **kwargs))


def test_every_parquet_and_arrow_file_follows_the_first_files_columns(tmp_path):
    """As HF casts each file to the features of the first: columns in the first file's order, a missing
    column as None, types cast; the declared ``features`` hold for every row, in order, after a
    replay or a global shuffle too. A column the first file lacks, or a cast that loses values, is an
    error naming the file."""
    import datasets

    tables = [pa.table({"id": [0, 1], "x": ["a", "b"], "f": [0.5, 1.5]}),
              pa.table({"id": [2]}),
              pa.table({"f": [2], "x": ["c"], "id": pa.array([3], pa.int32())})]
    for fmt in ("parquet", "arrow"):
        paths = []
        for i, t in enumerate(tables):
            paths.append(str(tmp_path / f"p{i}.{fmt}"))
            if fmt == "parquet":
                pq.write_table(t, paths[-1])
            else:
                with pa.ipc.new_file(paths[-1], t.schema) as w:
                    w.write_table(t)
        build = {"parquet": ri.IterableDataset.from_parquet, "arrow": ri.IterableDataset.from_arrow}[fmt]
        expected = [{"id": 0, "x": "a", "f": 0.5}, {"id": 1, "x": "b", "f": 1.5}, {"id": 2, "x": None, "f": None},
                    {"id": 3, "x": "c", "f": 2.0}]
        rows = list(build(paths))
        assert rows == expected and all(list(r) == ["id", "x", "f"] for r in rows)
        assert all(type(r["f"]) is float for r in rows[3:])
        if fmt == "parquet":
            assert rows == list(datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True))
        assert sorted(build(paths).shuffle(seed=1, buffer_size=None), key=lambda r: r["id"]) == expected
        assert_resumes_exactly(lambda: build(paths).shuffle(seed=1, buffer_size=3, buffer_state="replay"))
        bad = str(tmp_path / f"bad.{fmt}")
        t = pa.table({"id": [4], "y": [1]})
        if fmt == "parquet":
            pq.write_table(t, bad)
        else:
            with pa.ipc.new_file(bad, t.schema) as w:
                w.write_table(t)
        with pytest.raises(ValueError, match=r"bad\.%s' \(shard 1\) has column\(s\) \['y'\] that the first" % fmt):
            list(build([paths[0], bad]))
    pq.write_table(pa.table({"id": [0.5]}), tmp_path / "frac.parquet")
    with pytest.raises(ValueError, match=r"frac\.parquet' \(shard 1\): column 'id' is double, and cannot be cast"):
        list(ri.IterableDataset.from_parquet([paths[0].replace(".arrow", ".parquet"), str(tmp_path / "frac.parquet")]))


def test_every_json_lines_file_follows_the_columns_of_the_first_files_first_chunk(tmp_path):
    """HF's json builder takes its features from the first chunk of the first file and casts every
    file to them: the same rows here, in the loader with 2 workers (each reads the first file's head
    itself) and resumed at every cut. An extra column or a lossy cast is an error naming the file;
    a column that is null all through the first file's head takes each file's own type (HF raises)."""
    import datasets

    def write(name, rows):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)

    paths = [write("a.jsonl", [{"id": 0, "x": "a", "v": 1}, {"id": 1, "x": "b", "v": 2}]),
             write("b.jsonl", [{"v": 3.0, "id": 2}]),
             write("c.jsonl", [{"x": "c", "id": 3, "v": 4}])]
    expected = [{"id": 0, "x": "a", "v": 1}, {"id": 1, "x": "b", "v": 2}, {"id": 2, "x": None, "v": 3},
                {"id": 3, "x": "c", "v": 4}]
    rows = list(ri.load_dataset("json", data_files=paths, split="train"))
    assert rows == expected and all(list(r) == ["id", "x", "v"] for r in rows)
    assert all(type(r["v"]) is int for r in rows)
    assert rows == list(datasets.load_dataset("json", data_files=paths, split="train", streaming=True))
    assert_resumes_exactly(lambda: ri.load_dataset("json", data_files=paths, split="train").shuffle(seed=1, buffer_size=2))
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(ri.load_dataset("json", data_files=paths, split="train"), batch_size=None,
                                num_workers=2)
    assert sorted((dict(r) for r in loader), key=lambda r: r["id"]) == expected

    # the head: HF's first chunk, ``chunksize`` bytes (10 MB by default; here 20, the first line) and
    # the rest of the line it ends in; a later line of the first file with another column is an extra
    # column as in any other file (HF: "column names don't match"). 40 bytes reach the third line.
    first = write("first.jsonl", [{"id": 0, "x": "a"}, {"id": 1, "x": "b"}, {"id": 2, "y": 1}])
    with pytest.raises(ValueError, match=r"first\.jsonl' \(shard 0\) has column\(s\) \['y'\] that the first"):
        list(ri.load_dataset("json", data_files=[first], split="train", chunksize=20))
    assert list(ri.load_dataset("json", data_files=[first], split="train", chunksize=40)) == list(
        datasets.load_dataset("json", data_files=[first], split="train", streaming=True, chunksize=40))

    extra = write("extra.jsonl", [{"id": 4, "y": 1}])
    with pytest.raises(ValueError, match=r"extra\.jsonl' \(shard 1\) has column\(s\) \['y'\] that the first"):
        list(ri.load_dataset("json", data_files=[paths[0], extra], split="train"))
    frac = write("frac.jsonl", [{"id": 5, "x": "d", "v": 2.5}])
    ds = ri.load_dataset("json", data_files=[paths[0], frac], split="train")
    it = iter(ds)
    assert [next(it), next(it)] == expected[:2]
    state = json.loads(json.dumps(ds.state_dict()))
    with pytest.raises(ValueError, match=r"frac\.jsonl' \(shard 1\): column 'v' is double, and cannot be cast to int64"):
        next(it)
    again = ri.load_dataset("json", data_files=[paths[0], frac], split="train")
    again.load_state_dict(state)
    with pytest.raises(ValueError, match=r"frac\.jsonl' \(shard 1\)"):
        next(iter(again))

    nulls = [write("n0.jsonl", [{"id": 0, "x": None}]), write("n1.jsonl", [{"id": 1, "x": "s"}])]
    assert list(ri.load_dataset("json", data_files=nulls, split="train")) == [{"id": 0, "x": None}, {"id": 1, "x": "s"}]


def test_global_shuffle_over_files_in_another_order_is_refused(files, tmp_path):
    """A global shuffle's state counts positions of a permutation of the rows numbered in file order:
    loaded over the same files in another order (same row count) it re-read some rows and skipped
    others silently, since its reader's state held no trace of the files' names."""
    paths = files["parquet"]
    ds = ri.IterableDataset.from_parquet(paths).shuffle(seed=5, buffer_size=None)
    full = [e["id"] for e in ri.IterableDataset.from_parquet(paths).shuffle(seed=5, buffer_size=None)]
    head = [e["id"] for e in take(iter(ds), 17)]
    state = json.loads(json.dumps(ds.state_dict()))
    with pytest.raises(ValueError, match="data files are not those the state was saved with"):
        ri.IterableDataset.from_parquet(paths[::-1]).shuffle(seed=5, buffer_size=None).load_state_dict(state)
    again = ri.IterableDataset.from_parquet(paths).shuffle(seed=5, buffer_size=None)
    again.load_state_dict(state)
    assert head + [e["id"] for e in again] == full
    del state["state"]["children"][0]["files"]  # a state of an earlier release loads as before
    again = ri.IterableDataset.from_parquet(paths).shuffle(seed=5, buffer_size=None)
    again.load_state_dict(state)
    assert head + [e["id"] for e in again] == full


def _lines(files):
    for p in files:
        with open(p) as f:
            for i, line in enumerate(f):
                yield {"file": os.path.basename(p), "line": i, "text": line.rstrip("\n")}


def test_a_generator_over_a_list_of_files_in_another_order_is_refused(tmp_path, capsys):
    """``from_generator(read, gen_kwargs={"files": [...]})``, the usual way to read files of one's
    own format: positions count shards by their place in the list, so a state loaded with the list
    in another order (an unsorted glob on another machine) used to re-read one file and skip another
    silently. The state now holds a digest of the lists (``shards``), as a file source's ``files``."""
    paths = []
    for i in range(3):
        p = tmp_path / "data" / f"f{i}.txt"
        p.parent.mkdir(exist_ok=True)
        p.write_text("".join(f"f{i}-{j}\n" for j in range(5)))
        paths.append(str(p))

    def build(files, **extra):
        return ri.IterableDataset.from_generator(_lines, gen_kwargs={"files": files, **extra})

    full = [e["text"] for e in build(paths)]
    ds = build(paths)
    head = [e["text"] for e in take(iter(ds), 7)]  # shard 0 done, 2 rows of shard 1
    state = json.loads(json.dumps(ds.state_dict()))
    for other in (paths[::-1], [paths[1], paths[0], paths[2]], [pathlib.Path(p) for p in paths[::-1]]):
        with pytest.raises(ValueError, match="the generator's shards are not those the state was saved with"):
            build(other).load_state_dict(state)
    # the same names in another folder, as paths or strings, resume exactly
    moved = tmp_path / "moved" / "deeper"
    moved.mkdir(parents=True)
    for p in paths:
        (moved / os.path.basename(p)).write_text(open(p).read())
    again = build([moved / os.path.basename(p) for p in paths])
    again.load_state_dict(state)
    assert head + [e["text"] for e in again] == full
    # lists of other plain values count too; lists of other objects are left out
    ranges = ri.IterableDataset.from_generator(_ranges, gen_kwargs={"bounds": [[0, 3], [10, 14]]})
    it = iter(ranges)
    next(it)
    saved = json.loads(json.dumps(ranges.state_dict()))
    with pytest.raises(ValueError, match="shards are not those"):
        ri.IterableDataset.from_generator(_ranges, gen_kwargs={"bounds": [[10, 14], [0, 3]]}).load_state_dict(saved)
    opaque = ri.IterableDataset.from_generator(_ranges, gen_kwargs={"bounds": [range(0, 3), range(10, 14)]})
    assert "shards" not in opaque.state_dict()["state"]
    # a state of an earlier release has no 'shards': it loads as before
    old = json.loads(json.dumps(state))
    del old["state"]["shards"]
    again = build(paths)
    again.load_state_dict(old)
    assert head + [e["text"] for e in again] == full
    ri.save_state(state, tmp_path / "s.json")
    from resumable_iterable.cli import main
    assert main(["inspect", str(tmp_path / "s.json")]) == 0
    assert "1 done" in capsys.readouterr().out


def test_signed_urls_with_new_tokens_still_resume():
    """A URL's query (where signed URLs carry access tokens that change between runs) does not name
    other data: a state of URLs with old tokens loads; the URLs in another order do not."""
    def urls(token, order=(0, 1, 2)):
        return [f"https://bucket.example/data/shard-{i}.jsonl?X-Amz-Signature={token}{i}" for i in order]

    def build(u):
        return ri.IterableDataset.from_generator(_url_rows, gen_kwargs={"urls": u})

    ds = build(urls("old"))
    head = [e["i"] for e in take(iter(ds), 4)]
    state = json.loads(json.dumps(ds.state_dict()))
    resumed = build(urls("new"))
    resumed.load_state_dict(state)
    assert head + [e["i"] for e in resumed] == [e["i"] for e in build(urls("x"))]
    with pytest.raises(ValueError, match="shards are not those"):
        build(urls("new", order=(1, 0, 2))).load_state_dict(state)


def _url_rows(urls):
    for url in urls:
        shard = int(url.split("shard-")[1].split(".")[0])
        for j in range(3):
            yield {"i": shard * 10 + j}


def _ranges(bounds):
    for lo, hi in bounds:
        for i in range(lo, hi):
            yield {"i": i}


def test_urls_that_differ_by_their_query_are_other_shards():
    """Only a signed URL's token parameters are left out of the 'shards' digest: URLs of one endpoint
    naming their data in the query (?file=A, ?file=B) were all the same name, so a state loaded into
    the list in another order silently re-read A and lost B."""
    def read(urls):
        for u in urls:
            for i in range(5):
                yield {"src": u.split("=")[-1], "i": i}

    a = ["https://host/api/get?file=A", "https://host/api/get?file=B"]
    ds = ri.IterableDataset.from_generator(read, gen_kwargs={"urls": a})
    take(iter(ds), 7)
    state = json.loads(json.dumps(ds.state_dict()))
    with pytest.raises(ValueError, match="shards are not those"):
        ri.IterableDataset.from_generator(read, gen_kwargs={"urls": a[::-1]}).load_state_dict(state)
    signed = [u + "&X-Amz-Signature=new&Expires=9" for u in a]  # new tokens: the same shards
    ri.IterableDataset.from_generator(read, gen_kwargs={"urls": signed}).load_state_dict(state)


@pytest.mark.parametrize("paths", [["/a.txt"], ["/x/a", "/y/b"], ["rel/a", "rel/b/c"], ["../up/a", "./b"],
                                   ["/x//y/../z/a", "/x/z/b/"], ["https://h/x/a", "https://h/x/b"], ["/", "/a"],
                                   ["//net/a", "//net/b"], ["en", "fr"]])
def test_names_digest_is_the_digest_of_the_names_relative_to_their_folder(paths):
    """States hold this digest: computing it by slicing (relpath per name cost seconds for 100 000s of
    from_generator / data file names) must give what relpath gives, or saved states would be refused."""
    import os

    from resumable_iterable.nodes.files import names_digest
    from resumable_iterable.state import fingerprint

    full = [os.path.abspath(p) for p in paths]
    root = os.path.commonpath([os.path.dirname(p) for p in full])
    assert names_digest(paths) == fingerprint([os.path.relpath(p, root).replace(os.sep, "/") for p in full])


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_features_whose_struct_lacks_a_field_of_the_file_are_refused_as_hf(tmp_path, fmt):
    """features= whose struct lacks a field the file's objects have: ours cast the rows and dropped
    the field silently ({"a": 0, "c": 1} yielded as {"a": 0, "b": None}); HF refuses the cast."""
    import datasets
    import pyarrow.parquet as pq
    from datasets import Features, Value

    rows = [{"s": {"a": 0}}, {"s": {"b": 1}}, {"s": {"c": 2}}]
    path = tmp_path / f"d.{'jsonl' if fmt == 'json' else 'parquet'}"
    if fmt == "json":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    lacking = Features({"s": {"a": Value("int64"), "b": Value("int64")}})
    with pytest.raises(Exception, match="cast"):
        list(datasets.load_dataset(fmt, data_files=str(path), split="train", streaming=True, features=lacking))
    with pytest.raises(ValueError, match=r"'s\.c'.*would drop it"):
        ri.load_dataset(fmt, data_files=str(path), split="train", features=lacking)
    whole = Features({"s": {"a": Value("int64"), "b": Value("int64"), "c": Value("int64")}})
    assert list(ri.load_dataset(fmt, data_files=str(path), split="train", features=whole)) == list(
        datasets.load_dataset(fmt, data_files=str(path), split="train", streaming=True, features=whole))


@pytest.mark.parametrize("reader", ["from_json", "from_csv", "from_text", "from_parquet"])
def test_glob_patterns_are_resolved_and_a_missing_file_is_named_when_built_as_hf(tmp_path, reader):
    """HF's from_json / from_csv / from_text / from_parquet take glob patterns; ours opened the pattern
    as a file name ("cannot read data file '.../*.jsonl': No such file") when first read, and a missing
    file was a ValueError then, where HF raises FileNotFoundError when the dataset is built."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    ext = {"from_json": "jsonl", "from_csv": "csv", "from_text": "txt", "from_parquet": "parquet"}[reader]
    (tmp_path / "sub").mkdir()
    for name, i in (("b", 1), ("a", 0), ("sub/c", 2), (".hidden", 9)):
        path = tmp_path / f"{name}.{ext}"
        if ext == "parquet":
            pq.write_table(pa.table({"a": [i]}), path)
        else:
            path.write_text(json.dumps({"a": i}) + "\n" if ext == "jsonl" else f"a\n{i}\n")
    for pattern in (f"{tmp_path}/*.{ext}", [f"{tmp_path}/a.{ext}", f"{tmp_path}/[ab].{ext}"], f"{tmp_path}/**/*.{ext}"):
        ours = getattr(ri.IterableDataset, reader)(pattern)
        theirs = getattr(datasets.IterableDataset, reader)(pattern)
        assert ours.num_shards == theirs.num_shards and list(ours) == list(theirs), pattern
    assert_resumes_exactly(lambda: getattr(ri.IterableDataset, reader)(f"{tmp_path}/**/*.{ext}"))
    with pytest.raises(FileNotFoundError, match=r"Unable to find data file '.*nope"):
        getattr(ri.IterableDataset, reader)(str(tmp_path / f"nope.{ext}"))
    with pytest.raises(FileNotFoundError, match=r"Unable to find data files matching '.*\*\.nope'"):
        getattr(ri.IterableDataset, reader)(str(tmp_path / "*.nope"))
