"""Reader options of data files, as HF's builders take them: Parquet ``columns=`` / ``filters=``,
``features=`` for every format; options a format does not have are refused, never ignored."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from datasets import Features, Value

import resumable_iterable as ri
from harness import assert_resumes_exactly

ROWS = 90


@pytest.fixture
def files(tmp_path):
    paths = []
    for f in range(3):
        ids = np.arange(f * 30, f * 30 + 30)
        table = pa.table({"id": ids, "label": ids % 4, "text": [f"row {i}" for i in ids], "score": ids / 10})
        path = str(tmp_path / f"part-{f}.parquet")
        pq.write_table(table, path, row_group_size=7)
        paths.append(path)
    return paths


def load(files, **kwargs):
    return ri.load_dataset("parquet", data_files=files, split="train", **kwargs)


def hf_load(files, **kwargs):
    import datasets

    return datasets.load_dataset("parquet", data_files=files, split="train", streaming=True, **kwargs)


FILTERS = {
    "tuples": [("label", "==", 1)],
    "dnf": [[("label", "==", 1), ("id", "<", 40)], [("id", ">=", 80)]],
    "expression": pc.field("label") == 1,
}


@pytest.mark.parametrize("kwargs", [
    {"columns": ["text", "id"]},
    {"filters": FILTERS["tuples"]},
    {"filters": FILTERS["dnf"]},
    {"filters": FILTERS["expression"]},
    {"columns": ["id"], "filters": FILTERS["tuples"]},  # filtered on a column not asked for
    {"columns": ["id"], "filters": FILTERS["expression"]},
    {"batch_size": 5, "fragment_scan_options": None, "on_bad_files": "error"},
], ids=["columns", "filters", "filters_dnf", "filters_expression", "columns_and_filters", "columns_and_expression",
        "tuning_options"])
def test_parquet_options_give_hf_rows_and_features(files, kwargs):
    ours, theirs = load(files, **kwargs), hf_load(files, **kwargs)
    assert list(ours) == list(theirs)
    assert ours.features == theirs.features
    assert list(ours.reshard()) == list(theirs)


@pytest.mark.parametrize("build", [
    lambda f: load(f, columns=["id", "label"]),
    lambda f: load(f, filters=FILTERS["dnf"]),
    lambda f: load(f, columns=["id"], filters=FILTERS["tuples"]).shuffle(seed=1, buffer_size=6),
    lambda f: load(f, filters=FILTERS["tuples"]).reshard().shuffle(seed=2, buffer_size=5),
    lambda f: load(f, filters=FILTERS["dnf"]).shuffle(seed=3, buffer_size=6, buffer_state="replay"),
    lambda f: load(f, columns=["id", "text"]).shuffle(seed=3, buffer_size=6, buffer_state="replay"),
    lambda f: load(f, columns=["text", "id"]).shuffle(seed=4, buffer_size=None),
], ids=["columns", "filters", "columns_filters_shuffle", "filters_reshard_shuffle", "filters_replay",
        "columns_replay", "columns_global_shuffle"])
def test_every_cut_point_resumes_exactly(files, build):
    full = assert_resumes_exactly(lambda: build(files), max_cuts=40)
    assert full


def test_a_state_of_other_options_is_refused(files):
    saved = load(files, filters=FILTERS["tuples"])
    it = iter(saved)
    next(it)
    with pytest.raises(ValueError, match="parameter 'filters'"):
        load(files).load_state_dict(saved.state_dict())
    with pytest.raises(ValueError, match="parameter 'filters'"):
        load(files, filters=[("label", "==", 2)]).load_state_dict(saved.state_dict())
    with pytest.raises(ValueError, match="parameter 'columns'"):
        load(files, columns=["id"]).load_state_dict(load(files, columns=["label"]).state_dict())


def test_a_filtered_file_with_fewer_rows_kept_than_the_state_read_is_named(files):
    ds = load(files, filters=FILTERS["tuples"])
    it = iter(ds)
    for _ in range(5):  # 5 of the 8 rows of the first file with label 1
        next(it)
    state = ds.state_dict()
    table = pq.read_table(files[0])
    pq.write_table(table.filter(pc.field("id") < 10), files[0])  # now 3 rows with label 1
    resumed = load(files, filters=FILTERS["tuples"])
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match="has 3 rows but the state says 5 were already read"):
        list(resumed)


def test_options_a_format_does_not_have_are_refused_when_the_dataset_is_built(files, tmp_path):
    with pytest.raises(TypeError, match=r"take no reader option \['colums'\]"):
        load(files, colums=["id"])
    with pytest.raises(ValueError, match="on_bad_files='skip' is not supported"):
        load(files, on_bad_files="skip")
    with pytest.raises(ValueError, match=r"has no column\(s\) \['nope'\]"):
        load(files, columns=["id", "nope"])
    with pytest.raises(ValueError, match="is not a pyarrow expression"):
        load(files, filters=[("label", "~", 1)])
    arrow = str(tmp_path / "t.arrow")
    with pa.OSFile(arrow, "wb") as sink, pa.ipc.new_file(sink, pa.schema({"id": pa.int64()})) as w:
        w.write_table(pa.table({"id": [1, 2]}))
    with pytest.raises(TypeError, match=r"arrow files take no reader option \['columns'\]"):
        ri.load_dataset("arrow", data_files=arrow, split="train", columns=["id"])


def test_a_global_shuffle_over_filtered_files_is_refused_clearly(files):
    with pytest.raises(ValueError, match="filters= have no row count"):
        list(load(files, filters=FILTERS["tuples"]).shuffle(seed=0, buffer_size=None))


def test_features_are_applied_as_hf_applies_them(files, tmp_path):
    import datasets

    parquet_features = Features({"id": Value("int32"), "label": Value("int8"), "text": Value("string"),
                                 "score": Value("float32")})
    assert list(load(files, features=parquet_features)) == list(hf_load(files, features=parquet_features))
    assert load(files, features=parquet_features).features == parquet_features
    csv = tmp_path / "zips.csv"
    csv.write_text("zip,n\n00123,1\n04567,2\n")
    zips = Features({"zip": Value("string"), "n": Value("int16")})
    ours = list(ri.load_dataset("csv", data_files=str(csv), split="train", features=zips))
    theirs = list(datasets.load_dataset("csv", data_files=str(csv), split="train", streaming=True, features=zips))
    assert ours == theirs == [{"zip": "00123", "n": 1}, {"zip": "04567", "n": 2}]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"a": 1, "b": "x"}\n{"a": 2, "b": "y"}\n')
    feats = Features({"a": Value("float32"), "b": Value("string")})
    ours = list(ri.load_dataset("json", data_files=str(jsonl), split="train", features=feats))
    theirs = list(datasets.load_dataset("json", data_files=str(jsonl), split="train", streaming=True, features=feats))
    assert ours == theirs and type(ours[0]["a"]) is float


def test_json_files_with_a_byte_order_mark_read_as_hf_reads_them_with_utf_8_sig(tmp_path):
    """Windows tools write UTF-8 with a byte order mark, which HF reads with encoding='utf-8-sig': it
    was refused as 'not UTF-8, convert the file', and a JSON document read with field= failed on
    the mark whatever the encoding (JSON Lines files skipped it already)."""
    import datasets

    lines, doc = tmp_path / "rows.jsonl", tmp_path / "doc.json"
    lines.write_bytes(b'\xef\xbb\xbf{"a": 1, "t": "caf\xc3\xa9"}\n{"a": 2, "t": "x"}\n')
    doc.write_bytes(b'\xef\xbb\xbf{"data": [{"a": 1}, {"a": 2}]}')
    for path, kw in ((lines, {}), (doc, {"field": "data"})):
        ours = list(ri.load_dataset("json", data_files=str(path), split="train", encoding="utf-8-sig", **kw))
        theirs = list(datasets.load_dataset("json", data_files=str(path), split="train", streaming=True,
                                            encoding="utf-8-sig", **kw))
        assert ours == theirs and ours[0]["a"] == 1


def test_json_and_csv_options_are_checked_when_the_dataset_is_built(tmp_path):
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(f'{{"a": {i}}}\n' for i in range(5)))
    plain = list(ri.load_dataset("json", data_files=str(jsonl), split="train"))
    tuned = ri.load_dataset("json", data_files=str(jsonl), split="train", chunksize=1 << 20, block_size=1 << 16,
                            use_threads=False, newlines_in_values=False, encoding="utf-8")
    assert list(tuned) == plain  # HF's options that only tune reading
    with pytest.raises(TypeError, match=r"json files take no reader option \['colums'\]"):
        ri.load_dataset("json", data_files=str(jsonl), split="train", colums=["a"])
    with pytest.raises(ValueError, match="encoding='latin-42' is not an encoding Python knows"):
        ri.load_dataset("json", data_files=str(jsonl), split="train", encoding="latin-42")
    with pytest.raises(ValueError, match="encoding_errors='lenient' is not an error handler"):
        ri.load_dataset("json", data_files=str(jsonl), split="train", encoding_errors="lenient")
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(TypeError, match=r"csv files take no reader option \['seperator'\]"):
        ri.load_dataset("csv", data_files=str(csv), split="train", seperator=";")
    assert list(ri.load_dataset("csv", data_files=str(csv), split="train", delimiter=",", skipinitialspace=True)) == [
        {"a": 1, "b": 2}]


def test_columns_with_features_of_more_columns_read_as_hf_reads_them(files):
    """HF's Parquet builder narrows ``features`` to ``columns=`` (a column of ``columns`` the features
    lack is refused); ours refused the wider features ("do not match the dataset's columns")."""
    features = load(files).features
    ds = load(files, columns=["text", "id"], features=features)
    hf = hf_load(files, columns=["text", "id"], features=features)
    assert ds.features == hf.features == Features({"text": Value("string"), "id": Value("int64")})
    assert list(ds) == list(hf)
    assert_resumes_exactly(lambda: load(files, columns=["text", "id"], features=features), max_cuts=6)
    with pytest.raises(ValueError, match=r"features have no column\(s\) \['score'\]"):
        load(files, columns=["id", "score"], features=Features({"id": Value("int64"), "text": Value("string")}))


def test_text_files_take_the_column_name_of_their_features(tmp_path):
    """HF's text builder names its column after ``features`` of one column; ours refused them
    ("the features' columns ['line'] do not match the dataset's columns ['text']")."""
    import datasets

    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line {i}\n" for i in range(12)), encoding="utf-8")
    features = Features({"line": Value("string")})

    def build():
        return ri.load_dataset("text", data_files=str(path), split="train", features=features)

    hf = datasets.load_dataset("text", data_files=str(path), split="train", streaming=True, features=features)
    assert build().features == hf.features == features
    assert assert_resumes_exactly(build, max_cuts=6) == list(hf)


def test_a_format_name_with_data_dir_reads_the_folder_as_hf_does(tmp_path):
    """``load_dataset("arrow", data_dir=...)``: HF finds the data files below data_dir and splits them by
    name (``data_files=`` then counts from data_dir); ours asked for ``data_files=``."""
    import datasets

    for split in ("train", "test"):
        pq.write_table(pa.table({"split": [split] * 5, "i": list(range(5))}), tmp_path / f"{split}.parquet")
    ds = ri.load_dataset("parquet", data_dir=str(tmp_path))
    hf = datasets.load_dataset("parquet", data_dir=str(tmp_path), streaming=True)
    assert sorted(ds) == sorted(hf) == ["test", "train"]
    assert all(list(ds[s]) == list(hf[s]) for s in ds)
    only = ri.load_dataset("parquet", data_dir=str(tmp_path), data_files="test.parquet", split="train")
    assert [r["split"] for r in only] == ["test"] * 5


def test_an_archive_given_as_a_data_file_is_read_as_hf_reads_it(tmp_path):
    """HF's streaming readers read the files in a ``.zip`` data file (``test_archives.py``); ours
    once read the archive's bytes as the format (a UTF-8 error for text, pandas' own zip handling
    for CSV), then refused it; a ``.tar`` is refused, as HF's streaming mode refuses it."""
    import tarfile
    import zipfile

    (tmp_path / "a.txt").write_text("0\n1\n")
    with zipfile.ZipFile(tmp_path / "a.text.zip", "w") as z:
        z.write(tmp_path / "a.txt", arcname="a.txt")
    assert list(ri.load_dataset("text", data_files=str(tmp_path / "a.text.zip"), split="train")) == [
        {"text": "0"}, {"text": "1"}]
    with tarfile.open(tmp_path / "a.tar", "w") as t:
        t.add(tmp_path / "a.txt", arcname="a.txt")
    for fmt in ("text", "csv", "json"):
        with pytest.raises(ValueError, match=r"a\.tar' is a tar archive: tar archives are not read in streaming"):
            ri.load_dataset(fmt, data_files=str(tmp_path / "a.tar"), split="train")


def test_a_damaged_arrow_file_raises_arrow_invalid_naming_it(tmp_path):
    """Offsets of a damaged Arrow file that stay inside its buffer but go backwards made the rows
    read past them (``SystemError: Negative size passed to PyBytes_FromStringAndSize``, or a crash).
    HF checks each record batch (``validate(full=True)``) and raises ``ArrowInvalid``; so do we,
    naming the file."""
    import struct

    path = tmp_path / "invalid-offsets.arrow"
    table = pa.table({"col": pa.array([b"A", b"B"])})
    with open(path, "wb") as f, pa.ipc.new_stream(f, table.schema) as writer:
        writer.write_table(table)
    payload = bytearray(path.read_bytes())
    schema_start = payload.index(b"\xff\xff\xff\xff")
    batch_start = (schema_start + 8 + struct.unpack_from("<I", payload, schema_start + 4)[0] + 7) & ~7
    body_start = (batch_start + 8 + struct.unpack_from("<I", payload, batch_start + 4)[0] + 7) & ~7
    assert struct.unpack_from("<iii", payload, body_start) == (0, 1, 2)
    struct.pack_into("<iii", payload, body_start, 0, 2, 1)
    path.write_bytes(payload)
    ds = ri.load_dataset("arrow", data_files=str(path), split="train")
    for read in (lambda: next(iter(ds)), lambda: next(iter(ds.shuffle(seed=0, buffer_size=None)))):
        with pytest.raises(pa.ArrowInvalid, match=r"invalid-offsets\.arrow.*damaged"):
            read()
