"""JSON files as HF reads them: other encodings than UTF-8 (``encoding=``, ``encoding_errors=``)
and JSON documents (a list of objects, ``field=``) read from their bytes (``nodes/json_documents.py``),
beside HF ``datasets`` and resuming exactly at every cut point (alone and through the loader)."""

from __future__ import annotations

import json

import datasets
import pytest

import resumable_iterable as ri
from harness import assert_loader_resumes_exactly, assert_resumes_exactly

datasets.disable_progress_bars()

ROWS = [{"a": i, "t": f"é€ñ {i}", "l": [i, i + 1], "s": {"x": i, "y": f"y{i}"}} for i in range(23)]


def _lines(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _hf(path, **kw):
    return list(datasets.load_dataset("json", data_files=str(path), split="train", streaming=True, **kw))


def _ours(path, **kw):
    return ri.load_dataset("json", data_files=str(path), split="train", **kw)


# ---------------------------------------------------------------------------------------------- encodings
@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "latin-1", "cp1252"])
def test_json_files_of_another_encoding_are_read_as_hf_reads_them(tmp_path, encoding):
    """``encoding=`` was refused for anything but UTF-8 ("convert the file first"); HF decodes the
    file. JSON Lines, a list document and ``field=`` give HF's rows."""
    rows = ROWS if encoding.startswith("utf") else [{**r, "t": f"café {r['a']}"} for r in ROWS]
    files = {"rows.jsonl": (_lines(rows), {}), "doc.json": (json.dumps(rows, ensure_ascii=False), {}),
             "field.json": (json.dumps({"v": 1, "data": rows}, ensure_ascii=False), {"field": "data"})}
    for name, (text, kw) in files.items():
        path = tmp_path / name
        path.write_text(text, encoding=encoding)
        ours = list(_ours(path, encoding=encoding, **kw))
        assert ours == rows, name
        if not (name == "doc.json" and not encoding.startswith("utf")):  # HF parses its bytes as UTF-8 (below)
            assert ours == _hf(path, encoding=encoding, **kw), name


def test_json_documents_of_another_encoding_that_hf_misreads(tmp_path):
    """HF reads a list document's bytes as UTF-8 before decoding them (``batch.startswith(b"[")``):
    latin-1 gives an error, cp1252 mojibake or an error, UTF-16 without a byte order mark an error.
    Ours decodes first."""
    for encoding in ("latin-1", "cp1252", "utf-16-le"):
        path = tmp_path / f"doc-{encoding}.json"
        path.write_text(json.dumps(ROWS[:3], ensure_ascii=False).replace("é€ñ", "é"), encoding=encoding)
        assert [r["t"] for r in _ours(path, encoding=encoding)] == ["é 0", "é 1", "é 2"]


def test_utf16_json_lines_resume_exactly_across_chunks(tmp_path):
    """Chunks of a few characters (a UTF-16 line break is two bytes: HF's chunks of bytes cut it in
    two) over two files; the offsets count rows, so a resume lands on the next row (0 and 2 loader
    workers)."""
    paths = []
    for k in range(2):
        path = tmp_path / f"rows{k}.jsonl"
        path.write_text(_lines(ROWS[k::2]), encoding="utf-16")
        paths.append(str(path))

    def build():
        return ri.load_dataset("json", data_files=paths, split="train", encoding="utf-16", chunksize=50)

    full = assert_resumes_exactly(build)
    assert sorted(full, key=lambda r: r["a"]) == ROWS
    for workers in (0, 2):
        assert_loader_resumes_exactly(build, workers=workers, batch_size=3, item=lambda b: b["a"].tolist(),
                                      cuts=lambda n: range(1, n))


def test_encoding_errors_are_handled_as_asked(tmp_path):
    """``encoding_errors="replace"`` (or ``"ignore"``) reads a UTF-8 file with a stray byte instead of
    failing (HF ignores it for JSON Lines in UTF-8, and fails); without it the error names the file."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": "caf\xe9"}\n{"a": "x"}\n')
    assert list(_ours(path, encoding_errors="replace")) == [{"a": "caf\ufffd"}, {"a": "x"}]
    assert list(_ours(path, encoding="utf-8", encoding_errors="ignore")) == [{"a": "caf"}, {"a": "x"}]
    assert list(_ours(path, encoding="latin-1")) == [{"a": "café"}, {"a": "x"}] == _hf(path, encoding="latin-1")
    with pytest.raises(ValueError, match="rows.jsonl"):
        list(_ours(path))


# ---------------------------------------------------------------------------------------------- documents
DOCUMENTS = {
    "nested": ROWS,
    "pretty": ROWS[:5],  # written with indent=2: line breaks between tokens
    "tricky strings": [{"t": s, "n": i} for i, s in enumerate(
        ['a "quoted" word', "back\\slash", "ends with backslash \\", '\\"', "[{,:}]", "line\nbreak", "tab\t",
         "ünïcödé ✓", "\\\\\"x", ""])],
    "nulls": [{"a": 1, "s": {"x": 1}}, {"a": None, "s": None}, {"a": 3, "s": {"x": None}}],
    "varying keys": [{"c": {"a": 0}}, {"c": {"b": 0}}, {"c": {"a": 1, "b": 2}}],
    "lists of varying dicts": [{"m": [{"role": "user", "content": "hi"}, {"role": "tool", "name": "x"}]},
                               {"m": [{"role": "assistant", "content": "yo"}]}],
    "mixed types": [{"v": 1}, {"v": "one"}, {"v": [1]}],
    "empty object": [{"e": {}}, {"e": {}}],
    "strings": ["First text.", "Second text."],
    "numbers": [1, 2, 3],
    "empty list": [],
    # lists of other values than objects: HF 5.2 makes each item the column "text" (ours gave a
    # column per position, "0", "1"..., or refused the document)
    "lists": [[1, 2], [3]],
    "lists of lists": [[[1]], [[2, 3]], []],
    "values of mixed types": [1, "a", None],
    "lists of mixed values": [[1], ["a"]],
    "a list then a number": [[1], 2],
    "a string then an object": ["x", {"b": 1}],
    "objects without keys": [{}, {}],
}


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_json_documents_read_from_their_bytes_give_hf_rows(tmp_path, name):
    doc = DOCUMENTS[name]
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc, indent=2 if name == "pretty" else None))
    ours = list(_ours(path))
    assert ours == _hf(path)
    if name in ("nested", "pretty", "tricky strings", "nulls"):  # (with Json columns, HF yields a document's
        lines = tmp_path / "doc.jsonl"  # JSON text: its features are unknown) the same objects as JSON Lines
        lines.write_text("".join(json.dumps(r) + "\n" for r in doc))
        assert ours == list(_ours(lines))


def test_json_documents_keep_the_floats_written(tmp_path):
    """HF writes each object of a list document again with pandas' ``ujson_dumps`` before reading it,
    which keeps 10 significant digits: 0.12345678901234 read as 0.123456789. Ours reads the values
    written, as a JSON Lines file of the same objects is read (by HF too)."""
    rows = [{"x": 0.12345678901234, "y": 1 / 3}, {"x": 2.5, "y": 1e-12}]
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(rows))
    assert list(_ours(path)) == rows
    assert _hf(path)[0]["x"] == 0.123456789  # the difference, in docs/compat.md


def test_json_documents_are_read_without_python_objects(tmp_path, monkeypatch):
    """A list of objects, and ``field=``'s value, are cut from the file's bytes: no Python object per
    value is built (HF parses the whole document, then writes it again), so that a document of
    gigabytes is held once, not several times over, and reads several times faster."""
    import datasets.utils.json as hf_json

    rows = [{"a": i, "s": {"x": f"{i}"}, "l": [i]} for i in range(50)]
    doc, field = tmp_path / "doc.json", tmp_path / "field.json"
    doc.write_text(json.dumps(rows))
    field.write_text(json.dumps({"version": "1", "data": rows, "more": {"data": 0}}))

    def refused(*args, **kwargs):
        raise AssertionError("a JSON document was parsed into Python objects")

    monkeypatch.setattr(hf_json, "ujson_loads", refused)
    monkeypatch.setattr(json, "load", refused)
    monkeypatch.setattr(json, "loads", refused)
    assert list(_ours(doc)) == rows
    assert list(_ours(field, field="data")) == rows


FIELD_DOCUMENTS = {
    "nested key of the same name": ({"meta": {"data": [1]}, "data": [{"q": "a"}, {"q": "b"}]}, "data"),
    "key written twice": ('{"data": [{"q": "old"}], "data": [{"q": "new"}]}', "data"),
    "escaped key": ({'da"ta': [{"q": "x"}], "data": [{"q": "y"}]}, 'da"ta'),
    "last key": ({"v": "1", "data": [{"q": "x"}]}, "data"),
    "dict of lists": ({"data": {"q": ["a", "b"], "n": [1, 2]}}, "data"),
    "strings": ({"data": ["a", "b"]}, "data"),
    "pretty": ('{\n  "v": 1,\n  "data": [\n    {"q": "x"},\n    {"q": "y"}\n  ]\n}\n', "data"),
}


@pytest.mark.parametrize("name", list(FIELD_DOCUMENTS))
def test_json_fields_cut_from_their_bytes_give_hf_rows(tmp_path, name):
    doc, field = FIELD_DOCUMENTS[name]
    path = tmp_path / "doc.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    assert list(_ours(path, field=field)) == _hf(path, field=field)


def test_a_missing_field_or_a_broken_document_is_named(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"meta": {"data": [1]}, "rows": []}))
    with pytest.raises(ValueError, match=r"field 'data' is not in the JSON document \(its keys: \['meta', 'rows'\]\)"):
        list(_ours(path, field="data"))
    for broken in ('[{"a": 1},]', '[{"a": 1}] [{"a": 2}]', '[{"a": 1}', '[{"a": 1},,{"a": 2}]'):
        path.write_text(broken)
        with pytest.raises(ValueError, match="doc.json"):
            list(_ours(path))


@pytest.mark.parametrize("workers", [0, 2])
def test_json_documents_resume_exactly(tmp_path, workers):
    """Every cut point, JSON round-trip of the state, over a list document, a ``field=`` document and
    one that needs ``Json`` columns (read by the exact reader), through the loader."""
    doc, field, varying = tmp_path / "doc.json", tmp_path / "field.json", tmp_path / "varying.json"
    doc.write_text(json.dumps(ROWS))
    field.write_text(json.dumps({"v": 1, "data": ROWS}))
    varying.write_text(json.dumps([{"a": i, "c": {f"k{i % 3}": i}} for i in range(13)]))
    for path, kw in ((doc, {}), (field, {"field": "data"}), (varying, {})):
        def build(path=path, kw=kw):
            return ri.IterableDataset.from_files([str(path), str(path)], "json", **kw)

        if workers == 0:
            assert_resumes_exactly(build)
        assert_loader_resumes_exactly(build, workers=workers, batch_size=4, item=lambda b: b["a"].tolist(),
                                      cuts=lambda n: range(1, n))


@pytest.mark.parametrize("step", [1, 2, 3, 7])
def test_the_scan_of_a_document_in_blocks_of_any_size_gives_the_same_rows(tmp_path, monkeypatch, step):
    """The scan reads a document a block at a time (1 MB): strings, escapes (a backslash at the end
    of a block, the quote it escapes in the next) and nesting carried across blocks of a few bytes."""
    from resumable_iterable.nodes import json_documents

    path = tmp_path / "doc.json"
    expected = {}
    for name in ("nested", "pretty", "tricky strings", "nulls", "varying keys"):
        path.write_text(json.dumps(DOCUMENTS[name], indent=2 if name == "pretty" else None))
        expected[name] = list(_ours(path))
    for name, (doc, field) in FIELD_DOCUMENTS.items():
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        expected["field " + name] = list(_ours(path, field=field))
    monkeypatch.setattr(json_documents, "STEP", step)
    for name in ("nested", "pretty", "tricky strings", "nulls", "varying keys"):
        path.write_text(json.dumps(DOCUMENTS[name], indent=2 if name == "pretty" else None))
        assert list(_ours(path)) == expected[name], name
    for name, (doc, field) in FIELD_DOCUMENTS.items():
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        assert list(_ours(path, field=field)) == expected["field " + name], name
    # and the scan itself, not a fallback, gave them: one item a line, the field's value cut exactly
    for name in ("nested", "pretty", "tricky strings", "nulls", "varying keys"):
        path.write_text(json.dumps(DOCUMENTS[name], indent=2 if name == "pretty" else None))
        buf = json_documents.read_bytes(str(path))
        assert json_documents.list_as_lines(buf) == len(DOCUMENTS[name]), name
        assert [json.loads(line) for line in buf.tobytes().decode().splitlines() if line.strip()] == DOCUMENTS[name]
    for name, (doc, field) in FIELD_DOCUMENTS.items():
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        buf = json_documents.read_bytes(str(path))
        start, end = json_documents.field_value(buf, field)
        parsed = json.loads(path.read_text())
        assert json.loads(buf[start:end].tobytes()) == parsed[field], name


def test_json_lines_without_varying_keys_are_typed_without_python_objects(tmp_path, monkeypatch):
    """HF parses the first chunk's lines into Python objects to look for objects of varying keys
    (stored as ``Json``); when pyarrow reads every struct field in every object there are none, and
    the lines are not parsed (3x sooner). Columns that have them are still found (test_json_feature)."""
    import datasets.utils.json as hf_json

    path = tmp_path / "rows.jsonl"
    path.write_text(_lines(ROWS))
    expected = list(_ours(path))

    def refused(*args, **kwargs):
        raise AssertionError("JSON Lines were parsed into Python objects")

    monkeypatch.setattr(hf_json, "ujson_loads", refused)
    assert list(_ours(path)) == expected == ROWS


# ------------------------------------------------------------------------------ lists that start with null
NULL_FIRST = [{"a": i, "l": [None, i] if i % 3 == 0 else [i, None, i + 1], "s": {"m": [None, {"x": i}]},
               "n": [[None], [None, i]]} for i in range(17)]


@pytest.mark.parametrize("kind,kw", [("jsonl", {}), ("jsonl", {"chunksize": 64}), ("json", {})])
def test_lists_whose_first_values_are_null_are_read_as_hf_reads_them(tmp_path, kind, kw):
    """``{"l": [null, 1]}`` gave ``[1, 0]`` (a value made up, the null lost), or later a "not valid
    UTF-8" error: pyarrow's JSON reader, typing such a list by its later values, returns an invalid
    array. The lines are read again with the types it found: HF's ``[None, 1]``."""
    path = tmp_path / f"rows.{kind}"
    path.write_text(_lines(NULL_FIRST) if kind == "jsonl" else json.dumps(NULL_FIRST))
    assert list(_ours(path, **kw)) == _hf(path, **kw) == [
        {**r, "s": {"m": [None, {"x": r["a"]}]}} for r in NULL_FIRST]
    assert_resumes_exactly(lambda: _ours(path, **kw).shuffle(seed=3, buffer_size=4))


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_a_raw_carriage_return_in_a_documents_string_is_kept(tmp_path, suffix):
    """A list document whose strings hold a raw ``\\r`` (sloppy JSON that HF's ujson reads) is read
    by pandas, whose file was opened with universal newlines: ``"x\\ry"`` and ``"p\\r\\nq"`` came out
    as ``"x\\ny"`` and ``"p\\nq"`` (HF keeps them, as did the reader before today's). Line breaks are
    now read as written."""
    import gzip

    rows = [{"a": i, "t": "x\ry" if i % 2 else "p\r\nq"} for i in range(9)]
    text = "[\r\n" + ",\r\n".join(json.dumps(r).replace("\\r", "\r").replace("\\n", "\n") for r in rows) + "\r\n]"
    path = tmp_path / f"doc{suffix}"
    path.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    assert list(_ours(path)) == _hf(path) == rows
    assert_resumes_exactly(lambda: _ours(path).shuffle(seed=2, buffer_size=3))


@pytest.mark.parametrize("step", [None, 5])
def test_a_list_document_with_raw_line_breaks_in_strings_is_typed_as_hf_types_it(tmp_path, monkeypatch, step):
    """A list document whose strings hold raw line breaks (sloppy JSON that HF's ujson reads) was no
    JSON Lines once its commas were line breaks, so it went to pandas, which HF does not read a list
    with: an int column named 'modified' came out as dates, a column of mixed types (HF's Json)
    raised, objects of varying keys became structs. The breaks are now written escaped, as HF writes
    them again, and the lines read as HF reads them (the scan's blocks may end anywhere)."""
    from resumable_iterable.nodes import json_documents

    if step:
        monkeypatch.setattr(json_documents, "STEP", step)
    rows = [{"a": "x\ny" if i % 3 == 0 else "p\r\nq" if i % 3 == 1 else "z\r", "modified": 1600000000 + i,
             "m": i if i % 2 else f"s{i}", "s": {"p": i} if i % 2 else {"q": i}} for i in range(8)]
    text = "[\n" + ",\n".join(json.dumps(r).replace("\\r", "\r").replace("\\n", "\n") for r in rows) + "\n]"
    path = tmp_path / "doc.json"
    path.write_bytes(text.encode())
    hf = _hf(path)
    assert [r["a"] for r in hf] == [r["a"] for r in rows] and isinstance(hf[0]["modified"], int)
    assert list(_ours(path)) == hf
    assert_resumes_exactly(lambda: _ours(path).shuffle(seed=2, buffer_size=3))


def test_a_list_document_pyarrow_refuses_but_ujson_reads_is_typed_as_hf_types_it(tmp_path):
    """A list document whose strings hold a raw control character or a lone surrogate escape, which
    HF's ujson reads and pyarrow refuses, went on to pandas (its int column 'modified' as dates).
    Such lines are now parsed and written again with ujson, as HF reads every list document."""
    text = "[" + ",\n".join(f'{{"a": "x{c}y", "modified": {1600000000 + i}, "m": {v}}}' for i, (c, v) in
                            enumerate([("\x01", 1), ("\\ud800", '"s"'), ("\x1f", 2), ("", 3)])) + "]"
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8")
    hf = _hf(path)
    assert isinstance(hf[0]["modified"], int) and hf[0]["a"] == "x\x01y"
    assert list(_ours(path)) == hf
    assert_resumes_exactly(lambda: _ours(path).shuffle(seed=2, buffer_size=3))


@pytest.mark.parametrize("workers", [0, 2])
def test_list_documents_of_other_values_resume_exactly(tmp_path, workers):
    """A list document of lists (``[[1, 2], [3]]``, HF 5.2: rows ``{"text": [1, 2]}``...) and one of
    mixed values (a ``Json`` column ``text``), under a shuffle buffer: every cut point, JSON
    round-trip of the state, alone and through the loader."""
    lists, mixed = tmp_path / "lists.json", tmp_path / "mixed.json"
    lists.write_text(json.dumps([[i, i + 1] if i % 3 else [] for i in range(11)]))
    mixed.write_text(json.dumps([i if i % 2 else f"s{i}" for i in range(9)]))
    assert list(_ours(lists)) == _hf(lists) and list(_ours(mixed)) == _hf(mixed)
    for path in (lists, mixed):
        def build(path=path):
            return ri.IterableDataset.from_files([str(path), str(path)], "json").shuffle(seed=5, buffer_size=4)

        rows = list(build())
        assert len(rows) == 2 * len(json.loads(path.read_text())) and all(list(r) == ["text"] for r in rows)
        if workers == 0:
            assert_resumes_exactly(build)
        assert_loader_resumes_exactly(build, workers=workers, batch_size=None, item=lambda r: str(r["text"]),
                                      cuts=lambda n: range(1, n))
